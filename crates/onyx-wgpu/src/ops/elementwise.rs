//! Elementwise operators: unary activations and math, and binary arithmetic with numpy
//! broadcasting. One shader template per arity; the op is a WGSL expression in `v` (unary) or
//! `a`, `b` (binary), computed in f32 whatever the storage type.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, Tensor, Value};

use super::{float_inputs, input_dtype, integer, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, u32_of, wgsl_type, Broadcast, GpuOp, GpuTensor, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Unary ops: name, WGSL expression of `v` (and attributes `a`, `b`), attribute defaults.
pub(crate) const UNARY: &[(&str, &str)] = &[
    ("Relu", "max(v, 0.0)"),
    ("Sigmoid", "1.0 / (1.0 + exp(-v))"),
    ("Tanh", "tanh_precise(v)"),
    ("Exp", "exp(v)"),
    ("Log", "log(v)"),
    ("Sqrt", "sqrt(v)"),
    ("Abs", "abs(v)"),
    ("Neg", "-v"),
    ("Reciprocal", "1.0 / v"),
    ("Floor", "floor(v)"),
    ("Ceil", "ceil(v)"),
    ("Round", "round(v)"),
    ("Sign", "sign(v)"),
    ("Sin", "sin(v)"),
    ("Cos", "cos(v)"),
    ("Tan", "tan(v)"),
    ("Asin", "atan2(v, sqrt(max(1.0 - v * v, 0.0)))"),
    ("Acos", "atan2(sqrt(max(1.0 - v * v, 0.0)), v)"),
    ("Atan", "atan(v)"),
    ("Sinh", "sinh(v)"),
    ("Cosh", "cosh(v)"),
    ("Asinh", "asinh(v)"),
    ("Acosh", "acosh(v)"),
    ("Atanh", "0.5 * log((1.0 + v) / (1.0 - v))"),
    ("Erf", "erf(v)"),
    ("Softplus", "softplus(v)"),
    ("Softsign", "v / (1.0 + abs(v))"),
    // tanh(softplus(v)) = n (n + 2) / (n (n + 2) + 2) with n = e^v: no cancellation for v << 0.
    ("Mish", "v * select(exp(v) * (exp(v) + 2.0) / (exp(v) * (exp(v) + 2.0) + 2.0), 1.0, v > 20.0)"),
    ("HardSwish", "v * clamp(v / 6.0 + 0.5, 0.0, 1.0)"),
    ("LeakyRelu", "select(a * v, v, v >= 0.0)"),
    ("Elu", "select(a * (exp(v) - 1.0), v, v > 0.0)"),
    ("Selu", "b * select(a * (exp(v) - 1.0), v, v > 0.0)"),
    ("Celu", "max(v, 0.0) + min(0.0, a * (exp(v / a) - 1.0))"),
    ("ThresholdedRelu", "select(0.0, v, v > a)"),
    ("HardSigmoid", "clamp(a * v + b, 0.0, 1.0)"),
    ("Gelu", "0.5 * v * (1.0 + erf(v * 0.70710678118654752))"),
    ("GeluTanh", "0.5 * v * (1.0 + tanh(clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0)))"),
    ("Clip", "clamp(v, a, b)"),
    // Not an ONNX op: Mean's final division by the input count `a`.
    ("DivideBy", "v / a"),
];

/// Binary ops: name and WGSL expression of `a` and `b`.
const BINARY: &[(&str, &str)] = &[
    ("Add", "a + b"),
    ("Sub", "a - b"),
    ("Mul", "a * b"),
    ("Div", "a / b"),
    ("Pow", "pow_onnx(a, b)"),
    ("Max", "max(a, b)"),
    ("Min", "min(a, b)"),
    ("PRelu", "select(b * a, a, a >= 0.0)"),
    ("Mod", "a - b * trunc(a / b)"),
    ("Sum", "a + b"),
    ("Mean", "a + b"),
];

/// Binary ops that fold any number of inputs (at least one).
const VARIADIC: &[&str] = &["Max", "Min", "Sum", "Mean"];

/// WGSL helpers the expressions use, by name.
const MATH: &[(&str, &str)] = &[
    (
        "softplus",
        r#"fn softplus(x: f32) -> f32 {
    // max(x, 0) + log1p(e^-|x|), with log1p(z) = log(u) z / (u - 1) for u = 1 + z (exact
    // where log(1 + z) alone would lose the small z to rounding).
    let z = exp(-abs(x));
    let u = 1.0 + z;
    return max(x, 0.0) + select(log(u) * z / (u - 1.0), z, u == 1.0);
}
"#,
    ),
    (
        "tanh_precise",
        r#"fn tanh_precise(x: f32) -> f32 {
    // Near 0 a Taylor series: builtin tanh may be e^2x based, whose cancellation costs relative
    // precision there (the next term, 17x^7/315, is below f32 rounding for |x| < 1/16).
    let x2 = x * x;
    return select(tanh(clamp(x, -15.0, 15.0)), x * (1.0 - x2 * (1.0 / 3.0 - x2 * (2.0 / 15.0))), abs(x) < 0.0625);
}
"#,
    ),
    (
        "erf",
        r#"fn erf(x: f32) -> f32 {
    // Abramowitz and Stegun 7.1.26, |error| < 1.5e-7.
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
    return sign(x) * y;
}
"#,
    ),
    (
        "pow_onnx",
        r#"fn pow_onnx(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    let r = pow(abs(a), b);
    if (a < 0.0 && b == floor(b)) {
        return select(r, -r, (abs(b) % 2.0) == 1.0);
    }
    return select(r, pow(a, b), a < 0.0);
}
"#,
    ),
];

/// The helpers of [`MATH`] that `expr` calls: only those, since a cold NVIDIA driver spends
/// milliseconds compiling even helpers no entry point reaches.
pub(crate) fn math_for(expr: &str) -> String {
    MATH.iter().filter(|(name, _)| expr.contains(&format!("{name}("))).map(|(_, src)| *src).collect()
}

pub(crate) fn register(r: &mut Registry) {
    for (name, _) in UNARY {
        if *name == "GeluTanh" || *name == "DivideBy" {
            continue;
        }
        if *name == "Clip" {
            r.add_with_host_inputs(name, supports_clip, build_unary, &[1, 2]);
        } else {
            r.add(name, supports_unary, build_unary);
        }
    }
    for (name, _) in BINARY {
        r.add(name, supports_binary, build_binary);
    }
}

fn supports_unary(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let gelu_ok = ctx.node.op_type != "Gelu"
        || ctx.node.string_or("approximate", "none").is_ok_and(|s| s == "none" || s == "tanh");
    gelu_ok && ctx.node.inputs.len() == 1 && float_inputs(ctx, gpu, 0..1)
}

fn supports_clip(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    float_inputs(ctx, gpu, 0..1) || super::clip_int::supports(ctx)
}

/// Whether a node goes to the integer kernels: integer inputs, or Pow of mixed types.
fn integer_node(ctx: &NodeContext<'_>) -> bool {
    let (a, b) = (input_dtype(ctx, 0), input_dtype(ctx, 1));
    a.is_some_and(integer::is_int) || (ctx.node.op_type == "Pow" && b.is_some() && a != b)
}

fn supports_binary(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    if integer_node(ctx) {
        return integer::supports(ctx, gpu);
    }
    let op = ctx.node.op_type.as_str();
    let n = ctx.node.inputs.len();
    let arity_ok = if VARIADIC.contains(&op) { n >= 1 } else { n == 2 };
    let fmod_ok = op != "Mod" || ctx.node.int_or("fmod", 0).is_ok_and(|f| f == 1);
    let same = (1..n).all(|i| input_dtype(ctx, i) == input_dtype(ctx, 0));
    fmod_ok && same && arity_ok && float_inputs(ctx, gpu, 0..n)
}

/// The expression of an op in `table`.
pub(crate) fn expression(table: &[(&'static str, &'static str)], op: &str) -> Result<&'static str> {
    table
        .iter()
        .find(|(n, _)| *n == op)
        .map(|(_, e)| *e)
        .ok_or_else(|| Error::Unsupported(format!("wgpu: no {op} kernel")))
}

/// Attribute defaults of the unary ops that take `a` (alpha) and `b` (beta or gamma).
fn unary_attributes(ctx: &NodeContext<'_>) -> Result<(f32, f32)> {
    let n = ctx.node;
    Ok(match n.op_type.as_str() {
        "LeakyRelu" => (n.float_or("alpha", 0.01)?, 0.0),
        "Elu" | "Celu" | "ThresholdedRelu" => (n.float_or("alpha", 1.0)?, 0.0),
        "Selu" => (n.float_or("alpha", 1.673_263_2)?, n.float_or("gamma", 1.050_701)?),
        "HardSigmoid" => (n.float_or("alpha", 0.2)?, n.float_or("beta", 0.5)?),
        "Clip" if ctx.since_version < 11 => (n.float_or("min", f32::MIN)?, n.float_or("max", f32::MAX)?),
        _ => (0.0, 0.0),
    })
}

struct Unary {
    pipeline: Arc<Pipeline>,
    a: f32,
    b: f32,
    /// Clip-11+: min and max come from host inputs 1 and 2.
    clip_inputs: bool,
    at: Location,
}

fn build_unary(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    if ctx.node.op_type == "Clip" && super::clip_int::supports(ctx) {
        return super::clip_int::build(ctx, gpu);
    }
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported("wgpu: untyped input".into()))?;
    let ty = wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {dtype:?}")))?;
    let mut op = ctx.node.op_type.as_str();
    if op == "Gelu" && ctx.node.get_string("approximate")?.as_deref() == Some("tanh") {
        op = "GeluTanh";
    }
    let expr = expression(UNARY, op)?;
    let key = format!("unary/{op}/{ty}");
    let pipeline = gpu.pipeline(&key, || unary_shader(ty, enables(dtype), expr))?;
    let (a, b) = unary_attributes(ctx)?;
    let clip_inputs = op == "Clip" && ctx.since_version >= 11;
    Ok(Box::new(Unary { pipeline, a, b, clip_inputs, at: ctx.node.location() }))
}

fn unary_shader(ty: &str, enable: &str, expr: &str) -> String {
    let math = math_for(expr);
    format!(
        "{enable}{FLAT_INDEX}{math}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read_write> y: array<{ty}>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {{ return; }}
    let a = bitcast<f32>(p[1]);
    let b = bitcast<f32>(p[2]);
    let v = f32(x[i]);
    y[i] = {ty}({expr});
}}
"
    )
}

/// A scalar host input of Clip read as f32 (`default` when omitted).
fn clip_bound(inputs: &[Option<ValueRef<'_>>], i: usize, default: f32, at: &Location) -> Result<f32> {
    match inputs.get(i).copied().flatten() {
        None => Ok(default),
        Some(v) => {
            let t = v.tensor()?;
            let value = match t.dtype() {
                onyx_core::DataType::Float => t.as_slice::<f32>()?.first().copied(),
                onyx_core::DataType::Float16 => t.as_slice::<half::f16>()?.first().map(|h| h.to_f32()),
                d => return Err(Error::input(at, i, "a float scalar", format!("{d:?}"))),
            };
            value.ok_or_else(|| Error::input(at, i, "a scalar", "an empty tensor"))
        }
    }
}

impl GpuOp for Unary {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let (a, b) = if self.clip_inputs {
            (clip_bound(inputs, 1, f32::MIN, &self.at)?, clip_bound(inputs, 2, f32::MAX, &self.at)?)
        } else {
            (self.a, self.b)
        };
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        let n = u32_of(x.len(), &self.at)?;
        run.dispatch(&self.pipeline, &[n, a.to_bits(), b.to_bits()], &[x.buffer, y.gpu()?], grid(x.len()))?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// A broadcasting binary op on floats, folded over its inputs for the variadic ops.
struct Binary {
    pipeline: Arc<Pipeline>,
    /// Folds any number of inputs (Max, Min, Sum, Mean).
    variadic: bool,
    /// Mean: the unary division of the sum by the input count.
    divide: Option<Arc<Pipeline>>,
    at: Location,
}

fn build_binary(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    if integer_node(ctx) {
        return integer::build(ctx, gpu);
    }
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported("wgpu: untyped input".into()))?;
    let ty = wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {dtype:?}")))?;
    let op = ctx.node.op_type.as_str();
    let expr = expression(BINARY, op)?;
    let pipeline = gpu.pipeline(&format!("binary/{op}/{ty}"), || binary_shader(ty, enables(dtype), expr))?;
    let divide = if op == "Mean" {
        let expr = expression(UNARY, "DivideBy")?;
        Some(gpu.pipeline(&format!("unary/DivideBy/{ty}"), || unary_shader(ty, enables(dtype), expr))?)
    } else {
        None
    };
    Ok(Box::new(Binary { pipeline, variadic: VARIADIC.contains(&op), divide, at: ctx.node.location() }))
}

fn binary_shader(ty: &str, enable: &str, expr: &str) -> String {
    let math = math_for(expr);
    format!(
        "{enable}{FLAT_INDEX}{math}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> xa: array<{ty}>;
@group(0) @binding(2) var<storage, read> xb: array<{ty}>;
@group(0) @binding(3) var<storage, read_write> y: array<{ty}>;
// p: n, rank, out dims[rank], a strides[rank], b strides[rank]
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {{ return; }}
    let rank = p[1];
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = rank; d > 0u; d--) {{
        let k = d - 1u;
        let c = rem % p[2u + k];
        rem = rem / p[2u + k];
        ia += c * p[2u + rank + k];
        ib += c * p[2u + 2u * rank + k];
    }}
    let a = f32(xa[ia]);
    let b = f32(xb[ib]);
    y[i] = {ty}({expr});
}}
"
    )
}

impl Binary {
    /// `a op b` into a new tensor.
    fn apply(&self, run: &mut GpuRun, a: GpuTensor<'_>, b: GpuTensor<'_>) -> Result<Tensor> {
        let dims = Broadcast::new(&[a.shape(), b.shape()], &self.at)?;
        let y = run.alloc(a.dtype(), dims.out.clone())?;
        let params = dims.params(&self.at)?;
        run.dispatch(&self.pipeline, &params, &[a.buffer, b.buffer, y.gpu()?], grid(dims.count()))?;
        Ok(y)
    }

    /// The variadic fold of every input (a copy-free view of a single input), then Mean's
    /// division.
    fn fold(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Tensor> {
        let first = gpu_input(run, inputs, 0, &self.at)?;
        let mut acc: Option<Tensor> = None;
        for i in 1..inputs.len() {
            let next = gpu_input(run, inputs, i, &self.at)?;
            let y = match &acc {
                None => self.apply(run, first, next)?,
                Some(t) => self.apply(run, GpuTensor { tensor: t, buffer: t.gpu()? }, next)?,
            };
            if let Some(old) = acc.replace(y) {
                run.release_tensor(old);
            }
        }
        let Some(divide) = &self.divide else {
            return Ok(acc.unwrap_or_else(|| first.tensor.clone()));
        };
        let sum = acc.as_ref().unwrap_or(first.tensor);
        let y = run.alloc(sum.dtype(), sum.shape().to_vec())?;
        let count = inputs.len() as f32;
        let n = u32_of(sum.len(), &self.at)?;
        run.dispatch(divide, &[n, count.to_bits(), 0], &[sum.gpu()?, y.gpu()?], grid(sum.len()))?;
        if let Some(old) = acc {
            run.release_tensor(old);
        }
        Ok(y)
    }
}

impl GpuOp for Binary {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        if self.variadic {
            return Ok(vec![Value::Tensor(self.fold(run, inputs)?)]);
        }
        let a = gpu_input(run, inputs, 0, &self.at)?;
        let b = gpu_input(run, inputs, 1, &self.at)?;
        Ok(vec![Value::Tensor(self.apply(run, a, b)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::{expression, math_for, BINARY, UNARY};
    use crate::testkit::{float, rand, Case};

    #[test]
    fn shaders_carry_only_the_helpers_their_expression_calls() {
        assert_eq!(math_for(expression(BINARY, "Add").unwrap()), "");
        let gelu = math_for(expression(UNARY, "Gelu").unwrap());
        assert!(gelu.starts_with("fn erf(") && gelu.matches("fn ").count() == 1, "{gelu}");
        let pow = math_for(expression(BINARY, "Pow").unwrap());
        assert!(pow.starts_with("fn pow_onnx(") && pow.matches("fn ").count() == 1, "{pow}");
    }

    #[test]
    fn unary_ops_match_the_cpu() {
        let x = rand(&[3, 5, 67], -4.0, 4.0, 1);
        let positive = rand(&[1000], 0.1, 9.0, 2);
        let unit = rand(&[7, 11], -0.99, 0.99, 3);
        for op in [
            "Relu",
            "Sigmoid",
            "Tanh",
            "Exp",
            "Abs",
            "Neg",
            "Floor",
            "Ceil",
            "Round",
            "Sign",
            "Sin",
            "Cos",
            "Atan",
            "Sinh",
            "Cosh",
            "Asinh",
            "Erf",
            "Softplus",
            "Softsign",
            "Mish",
            "HardSwish",
            "LeakyRelu",
            "Elu",
            "Selu",
            "Celu",
            "ThresholdedRelu",
            "HardSigmoid",
            "Gelu",
        ] {
            Case::new(op, vec![x.clone()]).check(1e-5, 1e-5);
        }
        for op in ["Log", "Sqrt", "Reciprocal", "Acosh"] {
            Case::new(op, vec![positive.clone()]).check(1e-5, 1e-6);
        }
        for op in ["Asin", "Acos", "Atanh", "Tan"] {
            Case::new(op, vec![unit.clone()]).check(1e-5, 1e-6);
        }
        Case::new("LeakyRelu", vec![x.clone()]).attrs(vec![float("alpha", 0.3)]).check(1e-6, 0.0);
        Case::new("HardSigmoid", vec![x.clone()])
            .attrs(vec![float("alpha", 0.4), float("beta", 0.3)])
            .check(1e-6, 1e-7);
        Case::new("Gelu", vec![x.clone()]).attrs(vec![crate::testkit::string("approximate", "tanh")]).check(1e-5, 1e-5);
    }

    #[test]
    fn clip_reads_its_bounds_from_host_inputs() {
        let x = rand(&[2, 333], -5.0, 5.0, 4);
        let lo = crate::testkit::t(&[], vec![-1.5f32]);
        let hi = crate::testkit::t(&[], vec![2.25f32]);
        Case::new("Clip", vec![x.clone(), lo.clone(), hi]).constants(&[1, 2]).check(0.0, 0.0);
        let mut only_min = Case::new("Clip", vec![x.clone(), lo]);
        only_min.inputs.push(None);
        only_min.check(0.0, 0.0);
        Case::new("Clip", vec![x]).opset(6).attrs(vec![float("min", -0.5), float("max", 0.5)]).check(0.0, 0.0);
    }

    #[test]
    fn binary_ops_broadcast_like_the_cpu() {
        let shapes: &[(&[usize], &[usize])] = &[
            (&[3, 5, 67], &[3, 5, 67]),
            (&[3, 5, 67], &[67]),
            (&[3, 1, 67], &[1, 5, 1]),
            (&[2, 3, 4, 5], &[3, 1, 5]),
            (&[], &[7, 3]),
            (&[1], &[1]),
            (&[4, 0, 3], &[3]),
        ];
        for (i, (sa, sb)) in shapes.iter().enumerate() {
            let a = rand(sa, -3.0, 3.0, 10 + i as u64);
            let b = rand(sb, 0.5, 3.0, 20 + i as u64);
            for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"] {
                let a_is_output =
                    sa.len() >= sb.len() && sb.iter().rev().zip(sa.iter().rev()).all(|(b, a)| b == a || *b == 1);
                if op == "PRelu" && !a_is_output {
                    continue;
                }
                Case::new(op, vec![a.clone(), b.clone()]).check(1e-5, 1e-6);
            }
            Case::new("Mod", vec![a.clone(), b.clone()]).attrs(vec![crate::testkit::int("fmod", 1)]).check(1e-5, 1e-5);
        }
    }

    #[test]
    fn variadic_ops_fold_any_number_of_inputs_like_the_cpu() {
        let xs = [
            rand(&[3, 1, 37], -3.0, 3.0, 30),
            rand(&[5, 1], -3.0, 3.0, 31),
            rand(&[37], -3.0, 3.0, 32),
            rand(&[1], -3.0, 3.0, 33),
        ];
        for op in ["Max", "Min", "Sum", "Mean"] {
            for n in 1..=4 {
                Case::new(op, xs[..n].to_vec()).check(1e-6, 1e-6);
            }
        }
    }

    #[test]
    fn pow_of_negative_bases_with_integer_exponents() {
        let a = crate::testkit::t(&[6], vec![-2.0f32, -1.5, 0.0, 3.0, -3.0, 2.0]);
        let b = crate::testkit::t(&[6], vec![2.0f32, 3.0, 0.0, 0.5, 1.0, -1.0]);
        Case::new("Pow", vec![a, b]).check(1e-6, 1e-7);
    }

    #[test]
    fn mismatched_shapes_are_a_named_error() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let a = rand(&[3, 4], 0.0, 1.0, 1);
        let b = rand(&[5], 0.0, 1.0, 2);
        let e = Case::new("Add", vec![a, b]).try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("Add") && e.contains("[3,4]") && e.contains("[5]"), "{e}");
    }
}
