//! Comparisons (Equal, Less, LessOrEqual, Greater, GreaterOrEqual), logic (Not, And, Or,
//! Xor), Where, IsNaN and IsInf, with numpy broadcasting, on the elements' bits.
//!
//! Values are compared through an order-preserving integer key (floats: sign-magnitude
//! turned into two's complement order, -0 equal to +0; NaN handled apart, comparing false),
//! so results do not depend on a GPU's float compare or on shader compilers assuming no NaN.
//! Every numeric type works this way, f16 and bf16 included without `SHADER_F16`; bool outputs
//! are packed four to a word (see [`super::layout::element_shader`]).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, elem_size, element_shader, known_dtype, known_size, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, Broadcast, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Comparison ops and their WGSL result from keys `ka`, `kb` and NaN flags `na`, `nb`.
const COMPARE: &[(&str, &str)] = &[
    ("Equal", "!na && !nb && all(ka == kb)"),
    ("Less", "!na && !nb && less(ka, kb)"),
    ("Greater", "!na && !nb && less(kb, ka)"),
    ("LessOrEqual", "!na && !nb && !less(kb, ka)"),
    ("GreaterOrEqual", "!na && !nb && !less(ka, kb)"),
];

/// Logical ops on bools and their WGSL result from `a`, `b`.
const LOGIC: &[(&str, &str)] =
    &[("And", "a != 0u && b != 0u"), ("Or", "a != 0u || b != 0u"), ("Xor", "(a != 0u) != (b != 0u)")];

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    for (op, _) in COMPARE {
        r.add(op, supports_compare, build_binary);
    }
    for (op, _) in LOGIC {
        r.add(op, supports_logic, build_binary);
    }
    r.add("Not", supports_not, build_unary);
    r.add("IsNaN", supports_float_test, build_unary);
    r.add("IsInf", supports_float_test, build_unary);
    r.add("Where", supports_where, build_where);
}

/// The types the comparisons order.
fn comparable(t: DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Float | Float16 | BFloat16 | Double | Int8 | Int16 | Int32 | Int64 | Uint8 | Uint16 | Uint32 | Uint64 | Bool
    )
}

/// WGSL `key(v)` (an order-preserving `vec2<u32>`: high word, low word) and `is_nan(v)` for
/// elements of `dtype` (`v` as the loaders return it).
fn key_code(dtype: DataType) -> String {
    use DataType::*;
    let (ty, nan, key) = match dtype {
        Float => (
            "u32",
            "(v & 0x7fffffffu) > 0x7f800000u",
            "var b = v; if ((b & 0x7fffffffu) == 0u) { b = 0u; } return vec2<u32>(0u, select(b ^ 0x80000000u, ~b, (b >> 31u) == 1u));",
        ),
        Float16 | BFloat16 => {
            let nan = if dtype == Float16 { "(v & 0x7fffu) > 0x7c00u" } else { "(v & 0x7fffu) > 0x7f80u" };
            ("u32", nan, "var b = v; if ((b & 0x7fffu) == 0u) { b = 0u; } return vec2<u32>(0u, select(b ^ 0x8000u, (~b) & 0xffffu, (b >> 15u) == 1u));")
        }
        Double => (
            "vec2<u32>",
            "(v.y & 0x7fffffffu) > 0x7ff00000u || ((v.y & 0x7fffffffu) == 0x7ff00000u && v.x != 0u)",
            "if (((v.y & 0x7fffffffu) | v.x) == 0u) { return vec2<u32>(0x80000000u, 0u); }
    if ((v.y >> 31u) == 1u) { return vec2<u32>(~v.y, ~v.x); }
    return vec2<u32>(v.y ^ 0x80000000u, v.x);",
        ),
        Int8 => ("u32", "false", "return vec2<u32>(0u, bitcast<u32>(bitcast<i32>(v << 24u) >> 24u) ^ 0x80000000u);"),
        Int16 => ("u32", "false", "return vec2<u32>(0u, bitcast<u32>(bitcast<i32>(v << 16u) >> 16u) ^ 0x80000000u);"),
        Int32 => ("u32", "false", "return vec2<u32>(0u, v ^ 0x80000000u);"),
        Int64 => ("vec2<u32>", "false", "return vec2<u32>(v.y ^ 0x80000000u, v.x);"),
        Uint64 => ("vec2<u32>", "false", "return vec2<u32>(v.y, v.x);"),
        _ => ("u32", "false", "return vec2<u32>(0u, v);"),
    };
    format!(
        "fn is_nan(v: {ty}) -> bool {{ return {nan}; }}
fn key(v: {ty}) -> vec2<u32> {{
    {key}
}}
fn less(a: vec2<u32>, b: vec2<u32>) -> bool {{ return a.x < b.x || (a.x == b.x && a.y < b.y); }}
"
    )
}

/// WGSL that walks broadcast output index `e` into input indices `i0`, `i1`, ...
/// (parameters from [`Broadcast::params`] at `p[3]`: count, rank, dims, strides per input).
pub(crate) fn broadcast_walk(inputs: usize) -> String {
    let mut s = String::from("    let rank = p[4];\n    var rem = e;\n");
    for k in 0..inputs {
        s += &format!("    var i{k} = 0u;\n");
    }
    s += "    for (var k = rank - 1u; k > 0u && k < rank; k--) {\n        let q = rem / p[5u + k];\n        let c = rem - q * p[5u + k];\n        rem = q;\n";
    for k in 0..inputs {
        s += &format!("        i{k} += c * p[5u + {}u * rank + k];\n", k + 1);
    }
    s += "    }\n    if (rank > 0u) {\n";
    for k in 0..inputs {
        s += &format!("        i{k} += rem * p[5u + {}u * rank];\n", k + 1);
    }
    s + "    }\n"
}

// ---------------------------------------------------------------------------------------------
// Binary comparisons and logic.
// ---------------------------------------------------------------------------------------------

fn supports_compare(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let t = input_dtype(ctx, 0);
    ctx.node.inputs.len() == 2 && t.is_some_and(comparable) && input_dtype(ctx, 1) == t
}

fn supports_logic(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    ctx.node.inputs.len() == 2 && (0..2).all(|i| input_dtype(ctx, i) == Some(DataType::Bool))
}

/// The `fetch` of a binary op producing bools.
fn binary_code(op: &str, dtype: DataType) -> Result<String> {
    let walk = broadcast_walk(2);
    if let Some((_, expr)) = COMPARE.iter().find(|(n, _)| *n == op) {
        return Ok(format!(
            "{}
fn fetch(e: u32) -> E {{
{walk}    let a = load_a(i0);
    let b = load_b(i1);
    let na = is_nan(a);
    let nb = is_nan(b);
    let ka = key(a);
    let kb = key(b);
    return select(0u, 1u, {expr});
}}
",
            key_code(dtype)
        ));
    }
    let (_, expr) =
        LOGIC.iter().find(|(n, _)| *n == op).ok_or_else(|| Error::Unsupported(format!("wgpu: no {op} kernel")))?;
    Ok(format!(
        "fn fetch(e: u32) -> E {{
{walk}    let a = load_a(i0);
    let b = load_b(i1);
    return select(0u, 1u, {expr});
}}
"
    ))
}

/// A broadcasting binary op with a bool output.
struct BinaryBool {
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_binary(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = ctx.node.op_type.as_str();
    let dtype = known_dtype(ctx, 0)?;
    let size = known_size(ctx, 0)?;
    let code = binary_code(op, dtype)?;
    let key = format!("compare/{op}/{}", dtype.name());
    let pipeline = gpu.pipeline(&key, || element_shader("", 1, &[("a", size), ("b", size)], &code))?;
    Ok(Box::new(BinaryBool { pipeline, at: ctx.node.location() }))
}

impl GpuOp for BinaryBool {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let a = gpu_input(run, inputs, 0, &self.at)?;
        let b = gpu_input(run, inputs, 1, &self.at)?;
        if a.dtype() != b.dtype() {
            return Err(Error::input(
                &self.at,
                1,
                format!("a {} tensor (the type of input 0)", a.dtype()),
                b.dtype().name(),
            ));
        }
        let dims = Broadcast::new(&[a.shape(), b.shape()], &self.at)?;
        let params = dims.params(&self.at)?;
        let y = run.alloc(DataType::Bool, dims.out.clone())?;
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(1, dims.count()),
            &params,
            &[a.buffer, b.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// Not, IsNaN, IsInf.
// ---------------------------------------------------------------------------------------------

fn supports_not(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Bool)
}

fn supports_float_test(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    matches!(input_dtype(ctx, 0), Some(DataType::Float | DataType::Float16 | DataType::BFloat16 | DataType::Double))
}

/// WGSL test of `v` for IsInf of `dtype`: which infinities count.
fn inf_test(dtype: DataType, negative: bool, positive: bool) -> String {
    let (inf, sign) = match dtype {
        DataType::Float => ("(v & 0x7fffffffu) == 0x7f800000u", "(v >> 31u) == 1u"),
        DataType::Float16 => ("(v & 0x7fffu) == 0x7c00u", "(v >> 15u) == 1u"),
        DataType::BFloat16 => ("(v & 0x7fffu) == 0x7f80u", "(v >> 15u) == 1u"),
        _ => ("(v.y & 0x7fffffffu) == 0x7ff00000u && v.x == 0u", "(v.y >> 31u) == 1u"),
    };
    match (negative, positive) {
        (true, true) => inf.to_string(),
        (true, false) => format!("({inf}) && {sign}"),
        (false, true) => format!("({inf}) && !({sign})"),
        (false, false) => "false".to_string(),
    }
}

/// A unary op with a bool output.
struct UnaryBool {
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_unary(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let dtype = known_dtype(ctx, 0)?;
    let size = known_size(ctx, 0)?;
    let (key, test) = match node.op_type.as_str() {
        "Not" => ("compare/Not".to_string(), "v == 0u".to_string()),
        "IsNaN" => (format!("compare/IsNaN/{}", dtype.name()), "is_nan(v)".to_string()),
        _ => {
            let (neg, pos) = (node.int_or("detect_negative", 1)? != 0, node.int_or("detect_positive", 1)? != 0);
            (format!("compare/IsInf/{}/{neg}/{pos}", dtype.name()), inf_test(dtype, neg, pos))
        }
    };
    let lib = if node.op_type == "IsNaN" { key_code(dtype) } else { String::new() };
    let code =
        format!("{lib}fn fetch(e: u32) -> E {{\n    let v = load_x(e);\n    return select(0u, 1u, {test});\n}}\n");
    let pipeline = gpu.pipeline(&key, || element_shader("", 1, &[("x", size)], &code))?;
    Ok(Box::new(UnaryBool { pipeline, at: node.location() }))
}

impl GpuOp for UnaryBool {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let y = run.alloc(DataType::Bool, x.shape().to_vec())?;
        dispatch_elements(run, &self.pipeline, Elements::new(1, x.len()), &[], &[x.buffer, y.gpu()?], &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// Where.
// ---------------------------------------------------------------------------------------------

fn supports_where(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let t = input_dtype(ctx, 1);
    input_dtype(ctx, 0) == Some(DataType::Bool) && t.and_then(elem_size).is_some() && input_dtype(ctx, 2) == t
}

/// Where: `cond ? x : y` with all three broadcast, for every element size.
struct Where {
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_where(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 1)?;
    let code = format!(
        "fn fetch(e: u32) -> E {{
{}    if (load_c(i0) != 0u) {{ return load_x(i1); }}
    return load_y(i2);
}}
",
        broadcast_walk(3)
    );
    let pipeline = gpu.pipeline(&format!("compare/Where/{size}"), || {
        element_shader("", size, &[("c", 1), ("x", size), ("y", size)], &code)
    })?;
    Ok(Box::new(Where { size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for Where {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let c = gpu_input(run, inputs, 0, &self.at)?;
        let x = gpu_input(run, inputs, 1, &self.at)?;
        let y = gpu_input(run, inputs, 2, &self.at)?;
        if c.dtype() != DataType::Bool {
            return Err(Error::input(&self.at, 0, "a bool tensor", c.dtype().name()));
        }
        if y.dtype() != x.dtype() {
            return Err(Error::input(
                &self.at,
                2,
                format!("a {} tensor (the type of input 1)", x.dtype()),
                y.dtype().name(),
            ));
        }
        let dims = Broadcast::new(&[c.shape(), x.shape(), y.shape()], &self.at)?;
        let params = dims.params(&self.at)?;
        let out = run.alloc(x.dtype(), dims.out.clone())?;
        let buffers = [c.buffer, x.buffer, y.buffer, out.gpu()?];
        dispatch_elements(run, &self.pipeline, Elements::new(self.size, dims.count()), &params, &buffers, &self.at)?;
        Ok(vec![Value::Tensor(out)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::{DataType, Tensor};

    use super::super::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{int, t, Case};

    /// Shape pairs that broadcast in every way: equal, trailing, both sides, scalar, empty.
    const SHAPES: &[(&[usize], &[usize])] = &[
        (&[3, 5, 67], &[3, 5, 67]),
        (&[3, 5, 67], &[67]),
        (&[3, 1, 7], &[1, 5, 1]),
        (&[], &[7, 3]),
        (&[4, 0, 3], &[3]),
    ];

    /// A tensor of `dtype` whose values repeat often (so that Equal finds equal pairs), with
    /// signed zeros, infinities and NaNs for floats.
    fn values(dtype: DataType, shape: &[usize], seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let pool = [0.0f32, -0.0, 1.0, -1.0, 2.5, -2.5, 1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 7.0, -100.0];
        let f: Vec<f32> = (0..n).map(|_| pool[rng.usize(..pool.len())]).collect();
        let x = t(shape, f);
        if dtype == DataType::Float {
            return x;
        }
        let ints = !dtype.is_float();
        let x = if ints { t(shape, (0..n).map(|_| rng.i64(-3..4) << rng.u32(0..3)).collect::<Vec<i64>>()) } else { x };
        if dtype == x.dtype() {
            return x;
        }
        Case::new("Cast", vec![x]).attrs(vec![int("to", dtype.onnx_code() as i64)]).run_cpu().remove(0)
    }

    #[test]
    fn comparisons_match_the_cpu() {
        let types = [
            DataType::Float,
            DataType::Float16,
            DataType::BFloat16,
            DataType::Double,
            DataType::Int8,
            DataType::Int32,
            DataType::Int64,
            DataType::Uint8,
            DataType::Uint32,
            DataType::Uint64,
        ];
        for (k, dtype) in types.into_iter().enumerate() {
            for (j, (sa, sb)) in SHAPES.iter().enumerate() {
                let (a, b) = (values(dtype, sa, (k * 10 + j) as u64), values(dtype, sb, (k * 10 + j + 5) as u64));
                for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"] {
                    check_exact(&Case::new(op, vec![a.clone(), b.clone()]));
                }
            }
        }
        let a = Tensor::from_bools(vec![4], vec![true, false, true, false]).unwrap();
        let b = Tensor::from_bools(vec![4], vec![true, true, false, false]).unwrap();
        check_exact(&Case::new("Equal", vec![a, b]));
    }

    #[test]
    fn logic_matches_the_cpu() {
        for (j, (sa, sb)) in SHAPES.iter().enumerate() {
            let (a, b) = (random(DataType::Bool, sa, j as u64), random(DataType::Bool, sb, j as u64 + 9));
            for op in ["And", "Or", "Xor"] {
                check_exact(&Case::new(op, vec![a.clone(), b.clone()]));
            }
            check_exact(&Case::new("Not", vec![a]));
        }
    }

    #[test]
    fn float_tests_match_the_cpu() {
        for dtype in [DataType::Float, DataType::Float16, DataType::BFloat16, DataType::Double] {
            let x = values(dtype, &[5, 13], 3);
            check_exact(&Case::new("IsNaN", vec![x.clone()]));
            for (neg, pos) in [(1, 1), (1, 0), (0, 1), (0, 0)] {
                let attrs = vec![int("detect_negative", neg), int("detect_positive", pos)];
                check_exact(&Case::new("IsInf", vec![x.clone()]).attrs(attrs));
            }
        }
    }

    #[test]
    fn where_broadcasts_every_dtype() {
        let shapes: &[[&[usize]; 3]] = &[
            [&[3, 5, 7], &[3, 5, 7], &[3, 5, 7]],
            [&[5, 1], &[3, 1, 7], &[7]],
            [&[], &[2, 3], &[1]],
            [&[1, 0], &[2, 1], &[1]],
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            for (j, [sc, sx, sy]) in shapes.iter().enumerate() {
                let s = (k * 10 + j) as u64;
                let (c, x, y) = (random(DataType::Bool, sc, s), random(dtype, sx, s + 1), random(dtype, sy, s + 2));
                check_exact(&Case::new("Where", vec![c, x, y]));
            }
        }
    }
}
