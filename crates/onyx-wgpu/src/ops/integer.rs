//! Integer elementwise ops with numpy broadcasting: Add, Sub, Mul, Div, Mod, Max, Min (any
//! number of inputs for the last two), Pow (integer bases, and float bases with integer
//! exponents), BitShift, BitwiseAnd/Or/Xor/Not, on int8..int64 and uint8..uint64.
//!
//! The kernels follow the CPU EP: wrapping arithmetic, division truncating toward zero, Mod
//! with the divisor's sign (`fmod` 0) or the dividend's (`fmod` 1), shifts by the bit width or
//! more giving 0, and Pow exact where the result fits (the CPU computes it in f64). Elements
//! narrower than 32 bits are computed sign- or zero-extended in an `i32`/`u32` and stored
//! truncated; 64-bit elements are `vec2<u32>` (low, high) with the arithmetic written out on
//! 32-bit words, since WGSL has no 64-bit integers. Unlike the CPU EP, a 0 divisor is not
//! reported (the GPU cannot fail a dispatch): its quotient and remainder are 0.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use super::cast::CAST_LIB;
use super::compare::broadcast_walk;
use super::layout::{dispatch_elements, elem_size, element_shader, known_dtype, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, Broadcast, GpuOp, GpuTensor, OnGpu};
use crate::run::GpuRun;

/// Registers the ops that exist only for integers. The arithmetic ops shared with floats are
/// registered by `elementwise`, which hands integer nodes to [`supports`] and [`build`].
pub(crate) fn register(r: &mut Registry) {
    for op in ["BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"] {
        r.add(op, supports, build);
    }
}

/// Bit width and signedness of an integer dtype.
fn int_info(dtype: DataType) -> Option<(u32, bool)> {
    use DataType::*;
    Some(match dtype {
        Int8 => (8, true),
        Int16 => (16, true),
        Int32 => (32, true),
        Int64 => (64, true),
        Uint8 => (8, false),
        Uint16 => (16, false),
        Uint32 => (32, false),
        Uint64 => (64, false),
        _ => return None,
    })
}

/// Whether `dtype` is one of the integer types these kernels compute in.
pub(crate) fn is_int(dtype: DataType) -> bool {
    int_info(dtype).is_some()
}

/// The op a node computes, decoded from its type and attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum IntOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `floor`: the remainder takes the divisor's sign (`fmod` 0).
    Mod {
        floor: bool,
    },
    Max,
    Min,
    And,
    Or,
    Xor,
    Not,
    Shift {
        left: bool,
    },
    Pow,
}

impl IntOp {
    fn of(ctx: &NodeContext<'_>) -> Result<IntOp> {
        let node = ctx.node;
        let at = node.location();
        Ok(match node.op_type.as_str() {
            "Add" => IntOp::Add,
            "Sub" => IntOp::Sub,
            "Mul" => IntOp::Mul,
            "Div" => IntOp::Div,
            "Mod" => match node.int_or("fmod", 0)? {
                0 => IntOp::Mod { floor: true },
                1 => IntOp::Mod { floor: false },
                other => return Err(Error::attribute(&at, "fmod", "0 or 1", other.to_string())),
            },
            "Max" => IntOp::Max,
            "Min" => IntOp::Min,
            "BitwiseAnd" => IntOp::And,
            "BitwiseOr" => IntOp::Or,
            "BitwiseXor" => IntOp::Xor,
            "BitwiseNot" => IntOp::Not,
            "BitShift" => match node.get_string("direction")?.as_deref() {
                Some("LEFT") => IntOp::Shift { left: true },
                Some("RIGHT") => IntOp::Shift { left: false },
                other => {
                    return Err(Error::attribute(&at, "direction", "\"LEFT\" or \"RIGHT\"", format!("{other:?}")));
                }
            },
            "Pow" => IntOp::Pow,
            other => return Err(Error::Unsupported(format!("wgpu: no integer kernel for {other}"))),
        })
    }

    /// Whether the op folds any number of inputs (at least one).
    fn variadic(self) -> bool {
        matches!(self, IntOp::Max | IntOp::Min)
    }
}

/// Whether the node is an integer op these kernels take: its inputs integers of one type
/// (Pow: an int32/int64 base with an int32/int64/float exponent, or a float base with an
/// integer exponent).
pub(crate) fn supports(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let Ok(op) = IntOp::of(ctx) else { return false };
    let n = ctx.node.inputs.len();
    let t = input_dtype(ctx, 0);
    let arity_ok = match op {
        IntOp::Not => n == 1,
        _ if op.variadic() => n >= 1,
        _ => n == 2,
    };
    if !arity_ok || ctx.node.inputs.iter().any(String::is_empty) {
        return false;
    }
    if op == IntOp::Pow {
        let e = input_dtype(ctx, 1);
        return match t {
            Some(DataType::Int32 | DataType::Int64) => {
                matches!(e, Some(DataType::Int32 | DataType::Int64 | DataType::Float))
            }
            Some(DataType::Float) => {
                matches!(e, Some(DataType::Int32 | DataType::Int64 | DataType::Uint32 | DataType::Uint64))
            }
            _ => false,
        };
    }
    let Some((_, signed)) = t.and_then(int_info) else { return false };
    if matches!(op, IntOp::Shift { .. }) && signed {
        return false;
    }
    (1..n).all(|i| input_dtype(ctx, i) == t)
}

/// WGSL 64-bit integer arithmetic on `vec2<u32>` (low, high), after [`CAST_LIB`] (which has
/// `shl64`, `shr64`, `neg64` and the float conversions).
const INT64_LIB: &str = "
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}
// The full 64-bit product of two u32.
fn mul32(x: u32, y: u32) -> vec2<u32> {
    let x0 = x & 0xffffu; let x1 = x >> 16u;
    let y0 = y & 0xffffu; let y1 = y >> 16u;
    let p00 = x0 * y0; let p01 = x0 * y1; let p10 = x1 * y0; let p11 = x1 * y1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return vec2<u32>((p00 & 0xffffu) | (mid << 16u), p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let w = mul32(a.x, b.x);
    return vec2<u32>(w.x, w.y + a.x * b.y + a.y * b.x);
}
fn ltu64(a: vec2<u32>, b: vec2<u32>) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }
fn lts64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return ltu64(vec2<u32>(a.x, a.y ^ 0x80000000u), vec2<u32>(b.x, b.y ^ 0x80000000u));
}
fn neg_s64(a: vec2<u32>) -> bool { return (a.y >> 31u) == 1u; }
fn zero64(a: vec2<u32>) -> bool { return (a.x | a.y) == 0u; }
// Unsigned quotient (.xy) and remainder (.zw); 0 and 0 for a 0 divisor.
fn udivmod64(n: vec2<u32>, d: vec2<u32>) -> vec4<u32> {
    if (zero64(d)) { return vec4<u32>(0u); }
    var q = vec2<u32>(0u);
    var r = vec2<u32>(0u);
    for (var i = 63i; i >= 0i; i--) {
        let bit = select((n.x >> u32(i)) & 1u, (n.y >> u32(i - 32)) & 1u, i >= 32);
        r = vec2<u32>((r.x << 1u) | bit, (r.y << 1u) | (r.x >> 31u));
        if (!ltu64(r, d)) {
            r = sub64(r, d);
            if (i >= 32) { q.y |= 1u << u32(i - 32); } else { q.x |= 1u << u32(i); }
        }
    }
    return vec4<u32>(q, r);
}
fn abs64(a: vec2<u32>) -> vec2<u32> { return select(a, neg64(a), neg_s64(a)); }
fn sdiv64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let q = udivmod64(abs64(a), abs64(b)).xy;
    return select(q, neg64(q), neg_s64(a) != neg_s64(b));
}
fn srem64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let r = udivmod64(abs64(a), abs64(b)).zw;
    return select(r, neg64(r), neg_s64(a));
}
fn smod64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let r = srem64(a, b);
    if (!zero64(r) && neg_s64(r) != neg_s64(b)) { return add64(r, b); }
    return r;
}
// base^e for an exponent e >= 0 (wrapping), by squaring.
fn upow64(base: vec2<u32>, e: vec2<u32>) -> vec2<u32> {
    var r = vec2<u32>(1u, 0u);
    var b = base;
    var k = e;
    for (var i = 0u; i < 64u && !zero64(k); i++) {
        if ((k.x & 1u) == 1u) { r = mul64(r, b); }
        b = mul64(b, b);
        k = shr64(k.x, k.y, 1u);
    }
    return r;
}
// base^e for signed e: a negative exponent truncates 1 / base^|e| toward zero.
fn spow64(base: vec2<u32>, e: vec2<u32>) -> vec2<u32> {
    if (!neg_s64(e)) { return upow64(base, e); }
    if (base.x == 1u && base.y == 0u) { return base; }
    if (base.x == 0xffffffffu && base.y == 0xffffffffu) {
        return select(vec2<u32>(1u, 0u), base, (e.x & 1u) == 1u);
    }
    return vec2<u32>(0u);
}
";

/// The error for Pow reaching the same-type shaders (it has its own, [`pow_code`]).
fn pow_elsewhere() -> Error {
    Error::Unsupported("wgpu: integer Pow is built by pow_code".into())
}

/// WGSL of an op on values `a` and `b` of a narrow (at most 32-bit) type held in `ty`
/// (`i32` or `u32`), `bits` wide.
fn narrow_expr(op: IntOp, ty: &str, bits: u32, signed: bool) -> Result<String> {
    let zero = format!("{ty}(0)");
    Ok(match op {
        IntOp::Add => "a + b".into(),
        IntOp::Sub => "a - b".into(),
        IntOp::Mul => "a * b".into(),
        IntOp::Div => format!("select(a / b, {zero}, b == {zero})"),
        IntOp::Mod { floor } => {
            let r = format!("select(a % b, {zero}, b == {zero})");
            if floor && signed {
                format!("mod_floor({r}, b)")
            } else {
                r
            }
        }
        IntOp::Max => "max(a, b)".into(),
        IntOp::Min => "min(a, b)".into(),
        IntOp::And => "a & b".into(),
        IntOp::Or => "a | b".into(),
        IntOp::Xor => "a ^ b".into(),
        IntOp::Not => "~a".into(),
        IntOp::Shift { left } => {
            let sh = if left { "<<" } else { ">>" };
            format!("select({zero}, a {sh} u32(b), u32(b) < {bits}u)")
        }
        IntOp::Pow => return Err(pow_elsewhere()),
    })
}

/// WGSL of an op on 64-bit values `a` and `b`.
fn wide_expr(op: IntOp, signed: bool) -> Result<String> {
    Ok(match op {
        IntOp::Add => "add64(a, b)".into(),
        IntOp::Sub => "sub64(a, b)".into(),
        IntOp::Mul => "mul64(a, b)".into(),
        IntOp::Div if signed => "sdiv64(a, b)".into(),
        IntOp::Div => "udivmod64(a, b).xy".into(),
        IntOp::Mod { floor: true } if signed => "smod64(a, b)".into(),
        IntOp::Mod { .. } if signed => "srem64(a, b)".into(),
        IntOp::Mod { .. } => "udivmod64(a, b).zw".into(),
        IntOp::Max if signed => "select(a, b, lts64(a, b))".into(),
        IntOp::Max => "select(a, b, ltu64(a, b))".into(),
        IntOp::Min if signed => "select(a, b, lts64(b, a))".into(),
        IntOp::Min => "select(a, b, ltu64(b, a))".into(),
        IntOp::And => "a & b".into(),
        IntOp::Or => "a | b".into(),
        IntOp::Xor => "a ^ b".into(),
        IntOp::Not => "~a".into(),
        IntOp::Shift { left } => {
            let f = if left { "shl64" } else { "shr64" };
            format!("select(vec2<u32>(0u), {f}(a.x, a.y, b.x), b.y == 0u && b.x < 64u)")
        }
        IntOp::Pow => return Err(pow_elsewhere()),
    })
}

/// The `fetch` of `op` on `inputs` (1 or 2) of `dtype`.
fn int_code(op: IntOp, dtype: DataType, inputs: usize) -> Result<String> {
    let (bits, signed) = int_info(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: integer op on {dtype}")))?;
    let walk = broadcast_walk(inputs);
    let b_load = if inputs == 2 { "    let b = ext(load_b(i1));\n" } else { "" };
    if bits == 64 {
        return Ok(format!(
            "{CAST_LIB}{INT64_LIB}
fn ext(v: vec2<u32>) -> vec2<u32> {{ return v; }}
fn fetch(e: u32) -> E {{
{walk}    let a = ext(load_a(i0));
{b_load}    return {};
}}
",
            wide_expr(op, signed)?
        ));
    }
    let (ty, get) = match (signed, bits) {
        (true, 32) => ("i32", "bitcast<i32>(v)".to_string()),
        (true, _) => ("i32", format!("bitcast<i32>(v << {s}u) >> {s}u", s = 32 - bits)),
        (false, _) => ("u32", "v".to_string()),
    };
    let mod_floor = if signed {
        "fn mod_floor(r: i32, b: i32) -> i32 { return select(r, r + b, r != 0 && ((r < 0) != (b < 0))); }\n"
    } else {
        ""
    };
    Ok(format!(
        "{mod_floor}fn ext(v: u32) -> {ty} {{ return {get}; }}
fn fetch(e: u32) -> E {{
{walk}    let a = ext(load_a(i0));
{b_load}    return bitcast<u32>({});
}}
",
        narrow_expr(op, ty, bits, signed)?
    ))
}

/// The `fetch` of Pow with a `base` and an `exp` dtype (see [`supports`]).
fn pow_code(base: DataType, exp: DataType) -> Result<String> {
    let walk = broadcast_walk(2);
    // The exponent as f32 bits (`ef`) and, for integer exponents, as an i64 (`ei`).
    let exponent = match exp {
        DataType::Float => "let ef = load_b(i1);",
        DataType::Int32 => "let vb = load_b(i1); let ei = vec2<u32>(vb, select(0u, 0xffffffffu, (vb >> 31u) == 1u)); let ef = i64_to_float(ei, 24u, 64u);",
        DataType::Uint32 => "let ei = vec2<u32>(load_b(i1), 0u); let ef = u64_to_float(ei.x, 0u, 24u, 64u);",
        DataType::Int64 => "let ei = load_b(i1); let ef = i64_to_float(ei, 24u, 64u);",
        DataType::Uint64 => "let ei = load_b(i1); let ef = u64_to_float(ei.x, ei.y, 24u, 64u);",
        other => return Err(Error::Unsupported(format!("wgpu: Pow exponent of {other}"))),
    };
    let body = match base {
        DataType::Float => format!(
            "    {exponent}
    return bitcast<u32>(pow_onnx(bitcast<f32>(load_a(i0)), bitcast<f32>(ef)));"
        ),
        DataType::Int32 | DataType::Int64 => {
            let a = if base == DataType::Int32 {
                "let va = load_a(i0); let a = vec2<u32>(va, select(0u, 0xffffffffu, (va >> 31u) == 1u));"
            } else {
                "let a = load_a(i0);"
            };
            let integer_exp = if exp == DataType::Float {
                // An integral float exponent takes the exact integer path.
                "let f = bitcast<f32>(ef);
    if (f != floor(f) || abs(f) >= 9.0e15) {
        let r = f32_to_i64(bitcast<u32>(pow_onnx(bitcast<f32>(i64_to_float(a, 24u, 64u)), f)));
        return OUT(r);
    }
    let ei = f32_to_i64(ef);"
            } else {
                ""
            };
            let out = if base == DataType::Int32 { "r.x" } else { "r" };
            format!(
                "    {a}
    {exponent}
    {integer_exp}
    let r = spow64(a, ei);
    return {out};"
            )
            .replace("OUT(r)", out)
        }
        other => return Err(Error::Unsupported(format!("wgpu: Pow of {other}"))),
    };
    Ok(format!(
        "{CAST_LIB}{INT64_LIB}{POW_F32}
fn fetch(e: u32) -> E {{
{walk}{body}
}}
"
    ))
}

/// ONNX's Pow on f32 (as the float kernels compute it).
const POW_F32: &str = "
fn pow_onnx(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    let r = pow(abs(a), b);
    if (a < 0.0 && b == floor(b)) {
        return select(r, -r, (abs(b) % 2.0) == 1.0);
    }
    return select(r, pow(a, b), a < 0.0);
}
";

/// An integer elementwise node: one pipeline applied to its two inputs, or folded over any
/// number of them (Max, Min).
struct IntElementwise {
    pipeline: Arc<Pipeline>,
    /// Output dtype and element size.
    dtype: DataType,
    size: u32,
    inputs: usize,
    variadic: bool,
    at: Location,
}

/// Builds an integer op (see [`supports`]).
pub(crate) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = IntOp::of(ctx)?;
    let at = ctx.node.location();
    let dtype = known_dtype(ctx, 0)?;
    let size = elem_size(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype}")))?;
    let (code, inputs, sizes, key) = if op == IntOp::Pow {
        let exp = known_dtype(ctx, 1)?;
        let es = elem_size(exp).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} exponent {exp}")))?;
        (pow_code(dtype, exp)?, 2, vec![size, es], format!("integer/Pow/{}/{}", dtype.name(), exp.name()))
    } else {
        let n = if op == IntOp::Not { 1 } else { 2 };
        (int_code(op, dtype, n)?, n, vec![size; n], format!("integer/{op:?}/{}", dtype.name()))
    };
    let names = ["a", "b"];
    let bound: Vec<(&str, u32)> = names.iter().copied().zip(sizes).collect();
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &bound, &code))?;
    Ok(Box::new(IntElementwise { pipeline, dtype, size, inputs, variadic: op.variadic(), at }))
}

impl IntElementwise {
    /// One dispatch over `args` (1 or 2 tensors) into a new tensor.
    fn apply(&self, run: &mut GpuRun, args: &[GpuTensor<'_>]) -> Result<Tensor> {
        let shapes: Vec<&[usize]> = args.iter().map(|t| t.shape()).collect();
        let dims = Broadcast::new(&shapes, &self.at)?;
        let params = dims.params(&self.at)?;
        let y = run.alloc(self.dtype, dims.out.clone())?;
        let mut buffers: Vec<&crate::buffer::GpuBuffer> = args.iter().map(|t| t.buffer).collect();
        buffers.push(y.gpu()?);
        dispatch_elements(run, &self.pipeline, Elements::new(self.size, dims.count()), &params, &buffers, &self.at)?;
        Ok(y)
    }
}

impl GpuOp for IntElementwise {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        if !self.variadic {
            let args = (0..self.inputs).map(|i| gpu_input(run, inputs, i, &self.at)).collect::<Result<Vec<_>>>()?;
            return Ok(vec![Value::Tensor(self.apply(run, &args)?)]);
        }
        let first = gpu_input(run, inputs, 0, &self.at)?;
        let mut acc: Option<Tensor> = None;
        for i in 1..inputs.len() {
            let next = gpu_input(run, inputs, i, &self.at)?;
            let y = match &acc {
                None => self.apply(run, &[first, next])?,
                Some(t) => {
                    let a = GpuTensor { tensor: t, buffer: t.gpu()? };
                    self.apply(run, &[a, next])?
                }
            };
            if let Some(old) = acc.replace(y) {
                run.release_tensor(old);
            }
        }
        Ok(vec![Value::Tensor(acc.unwrap_or_else(|| first.tensor.clone()))])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::{DataType, HostBuffer, Tensor};

    use super::super::layout::tests::check_exact;
    use crate::testkit::{string, t, Case};

    /// Random integers of `dtype` in `lo..hi` (`nonzero`: 0 replaced by 1).
    fn ints(dtype: DataType, shape: &[usize], lo: i64, hi: i64, nonzero: bool, seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let size = dtype.byte_len(1).unwrap();
        let mut bytes = Vec::with_capacity(n * size);
        for _ in 0..n {
            let mut v = rng.i64(lo..hi);
            if nonzero && v == 0 {
                v = 1;
            }
            bytes.extend_from_slice(&v.to_le_bytes()[..size]);
        }
        Tensor::from_bytes(dtype, shape.to_vec(), HostBuffer::from_vec(bytes)).unwrap()
    }

    /// The full range of a dtype, as the random data's bounds.
    fn range(dtype: DataType) -> (i64, i64) {
        match dtype {
            DataType::Int8 => (-128, 128),
            DataType::Int16 => (-32768, 32768),
            DataType::Int32 => (i32::MIN as i64, i32::MAX as i64 + 1),
            DataType::Int64 => (i64::MIN, i64::MAX),
            DataType::Uint8 => (0, 256),
            DataType::Uint16 => (0, 65536),
            DataType::Uint32 => (0, u32::MAX as i64 + 1),
            // Every bit pattern: the high half reads as large uint64 values.
            _ => (i64::MIN, i64::MAX),
        }
    }

    const INTS: [DataType; 8] = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
    ];

    #[test]
    fn arithmetic_matches_the_cpu_on_every_integer_type() {
        let shapes: &[(&[usize], &[usize])] = &[(&[3, 5, 67], &[3, 5, 67]), (&[3, 1, 67], &[1, 5, 1]), (&[], &[7, 3])];
        for (k, dtype) in INTS.into_iter().enumerate() {
            let (lo, hi) = range(dtype);
            for (j, (sa, sb)) in shapes.iter().enumerate() {
                let seed = (k * 10 + j) as u64;
                let a = ints(dtype, sa, lo, hi, false, seed);
                let b = ints(dtype, sb, lo, hi, true, seed + 100);
                for op in ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "BitwiseAnd", "BitwiseOr", "BitwiseXor"] {
                    check_exact(&Case::new(op, vec![a.clone(), b.clone()]));
                }
                check_exact(&Case::new("Mod", vec![a.clone(), b.clone()]).attrs(vec![crate::testkit::int("fmod", 1)]));
                // Small divisors exercise the remainders' signs.
                let signed = matches!(dtype, DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64);
                let small = ints(dtype, sb, if signed { -9 } else { 1 }, 9, true, seed + 200);
                for fmod in [0, 1] {
                    let attrs = vec![crate::testkit::int("fmod", fmod)];
                    check_exact(&Case::new("Mod", vec![a.clone(), small.clone()]).attrs(attrs));
                }
                check_exact(&Case::new("Div", vec![a.clone(), small.clone()]));
            }
            check_exact(&Case::new("BitwiseNot", vec![ints(dtype, &[4, 33], lo, hi, false, k as u64)]));
        }
    }

    #[test]
    fn shifts_and_variadic_max_min_match_the_cpu() {
        for (k, dtype) in INTS[4..].iter().copied().enumerate() {
            let (lo, hi) = range(dtype);
            let a = ints(dtype, &[5, 37], lo, hi, false, k as u64);
            let s = ints(dtype, &[37], 0, 70, false, k as u64 + 1);
            for dir in ["LEFT", "RIGHT"] {
                check_exact(&Case::new("BitShift", vec![a.clone(), s.clone()]).attrs(vec![string("direction", dir)]));
            }
        }
        for (k, dtype) in INTS.into_iter().enumerate() {
            let (lo, hi) = range(dtype);
            let xs: Vec<Tensor> = (0..3)
                .map(|i| ints(dtype, &[[1, 7], [4, 1], [4, 7]][i], lo, hi, false, k as u64 * 3 + i as u64))
                .collect();
            for op in ["Max", "Min"] {
                check_exact(&Case::new(op, xs.clone()));
                check_exact(&Case::new(op, xs[..1].to_vec()));
            }
        }
    }

    #[test]
    fn constant_operands_and_the_causal_mask_chain_match_the_cpu() {
        // Attention's causal mask: row indices plus the past length, compared to columns.
        let rows = t(&[4, 1], vec![0i64, 1, 2, 3]);
        let past = crate::testkit::i64s(&[3]);
        check_exact(&Case::new("Add", vec![rows.clone(), past.clone()]).constants(&[0, 1]));
        check_exact(&Case::new("Add", vec![rows.clone(), past.clone()]).constants(&[1]));
        check_exact(&Case::new("Add", vec![rows, past]));
    }

    #[test]
    fn pow_with_mixed_types_matches_the_cpu() {
        let base_i = |dtype, seed| ints(dtype, &[3, 41], -6, 7, false, seed);
        for base in [DataType::Int32, DataType::Int64] {
            for exp in [DataType::Int32, DataType::Int64] {
                check_exact(&Case::new("Pow", vec![base_i(base, 1), ints(exp, &[41], 0, 9, false, 2)]));
            }
            let e = t(&[4], vec![2.0f32, 3.0, 0.0, 1.0]);
            check_exact(&Case::new("Pow", vec![ints(base, &[5, 4], -6, 7, false, 3), e]));
        }
        let x = crate::testkit::rand(&[3, 41], -3.0, 3.0, 4);
        for exp in [DataType::Int32, DataType::Int64, DataType::Uint32, DataType::Uint64] {
            Case::new("Pow", vec![x.clone(), ints(exp, &[41], 0, 6, false, 5)]).check(1e-5, 1e-6);
        }
    }
}
