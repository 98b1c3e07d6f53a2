//! QuantizeLinear and DequantizeLinear on the GPU, per tensor, per axis or blocked, one
//! dispatch per node.
//!
//! QuantizeLinear takes f32 data and scales and writes int8, uint8, int16 or uint16:
//! `saturate(round_half_even(x / scale) + zero_point)`, the quotient rounded to f32 as the CPU
//! EP computes it. DequantizeLinear reads int8/uint8/int16/uint16/int32 or packed
//! int4/uint4/int2/uint2 data, or float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and float4e2m1 data,
//! with f32 scales and writes f32: `(x - zero_point) * scale`. QuantizeLinear also writes packed
//! int4/uint4/int2/uint2. Float8/float4 outputs of QuantizeLinear, f16 scales, `precision` and
//! int32 input to QuantizeLinear go to the CPU.
//!
//! A float zero point of DequantizeLinear is not read: ONNX requires it to be 0 and the CPU EP
//! fails the run otherwise (float4e2m1's is ignored there too).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, normalize_axis, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, opt_gpu_input, u32_of, GpuOp, GpuTensor, OnGpu};
use crate::run::GpuRun;

/// Registers QuantizeLinear and DequantizeLinear.
pub(crate) fn register(r: &mut Registry) {
    r.add("QuantizeLinear", supports_quantize, build_quantize);
    r.add("DequantizeLinear", supports_dequantize, build_dequantize);
}

/// Bits per element and signedness of the integer types the kernels read.
fn int_format(dtype: DataType) -> Option<(u32, bool)> {
    Some(match dtype {
        DataType::Int2 => (2, true),
        DataType::Uint2 => (2, false),
        DataType::Int4 => (4, true),
        DataType::Uint4 => (4, false),
        DataType::Int8 => (8, true),
        DataType::Uint8 => (8, false),
        DataType::Int16 => (16, true),
        DataType::Uint16 => (16, false),
        DataType::Int32 => (32, true),
        _ => return None,
    })
}

/// The value range of the types QuantizeLinear writes here.
fn out_range(dtype: DataType) -> Option<(i32, i32)> {
    Some(match dtype {
        DataType::Int2 => (-2, 1),
        DataType::Uint2 => (0, 3),
        DataType::Int4 => (-8, 7),
        DataType::Uint4 => (0, 15),
        DataType::Int8 => (-128, 127),
        DataType::Uint8 => (0, 255),
        DataType::Int16 => (-32768, 32767),
        DataType::Uint16 => (0, 65535),
        _ => return None,
    })
}

/// A dtype attribute (`output_dtype`, `precision`): `None` when absent or 0, `Err(())` when not
/// a known type code.
fn dtype_attr(ctx: &NodeContext<'_>, name: &str) -> std::result::Result<Option<DataType>, ()> {
    match ctx.node.int_or(name, 0).map_err(|_| ())? {
        0 => Ok(None),
        code => i32::try_from(code).ok().and_then(DataType::from_onnx).map(Some).ok_or(()),
    }
}

/// QuantizeLinear's output dtype: the zero point's, else `output_dtype`, else uint8.
fn quantize_output(ctx: &NodeContext<'_>) -> Option<DataType> {
    let attr = if ctx.since_version >= 21 { dtype_attr(ctx, "output_dtype").ok()? } else { None };
    let zp = ctx.node.input(2).map(|_| input_dtype(ctx, 2));
    match (zp, attr) {
        (Some(z), Some(a)) => z.filter(|&z| z == a),
        (Some(z), None) => z,
        (None, a) => Some(a.unwrap_or(DataType::Uint8)),
    }
}

/// f32 data and scales, an 8/16-bit integer output, no `precision` other than f32.
fn supports_quantize(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let precision_ok =
        ctx.since_version < 23 || matches!(dtype_attr(ctx, "precision"), Ok(None | Some(DataType::Float)));
    input_dtype(ctx, 0) == Some(DataType::Float)
        && input_dtype(ctx, 1) == Some(DataType::Float)
        && quantize_output(ctx).is_some_and(|d| out_range(d).is_some())
        && precision_ok
}

/// Integer or float8/float4 data (a zero point of the same type), f32 scales, f32 output.
fn supports_dequantize(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let x = input_dtype(ctx, 0);
    let zp_ok = ctx.node.input(2).is_none() || input_dtype(ctx, 2) == x;
    let out_ok = ctx.since_version < 23 || matches!(dtype_attr(ctx, "output_dtype"), Ok(None | Some(DataType::Float)));
    let data_ok = x.is_some_and(|d| int_format(d).is_some() || float_format(d).is_some());
    data_ok && input_dtype(ctx, 1) == Some(DataType::Float) && zp_ok && out_ok
}

// ---------------------------------------------------------------------------------------------
// Shared: which scale / zero point each element uses.
// ---------------------------------------------------------------------------------------------

/// How the scale and zero point spread over the data.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Spread {
    /// One value for the whole tensor.
    Tensor,
    /// One value per index of an axis of `dim` values with `inner` elements after it.
    Axis { dim: usize, inner: usize },
    /// One value per block of `block` indices along the axis, per position of the other dims.
    Block { dim: usize, inner: usize, block: usize, blocks: usize },
}

impl Spread {
    /// The spread of a scale of shape `s` over data of shape `x`, checked as ONNX says.
    fn new(x: &[usize], s: &[usize], axis: i64, block: i64, at: &Location) -> Result<Spread> {
        if block == 0 && s.iter().product::<usize>() == 1 && s.len() <= 1 {
            return Ok(Spread::Tensor);
        }
        if x.is_empty() {
            return Err(Error::input(at, 1, "one scale for a scalar input", format!("shape {s:?}")));
        }
        let a = normalize_axis(axis, x.len(), at)?;
        let (dim, inner) = (x[a], x[a + 1..].iter().product::<usize>());
        if block == 0 {
            if s != [dim] {
                return Err(Error::input(
                    at,
                    1,
                    format!("one scale or {dim} (axis {a} of {x:?})"),
                    format!("shape {s:?}"),
                ));
            }
            return Ok(Spread::Axis { dim, inner });
        }
        let b = usize::try_from(block)
            .map_err(|_| Error::attribute(at, "block_size", "a non-negative size", block.to_string()))?;
        let blocks = dim.div_ceil(b);
        let ok = s.len() == x.len() && (0..x.len()).all(|d| s[d] == if d == a { blocks } else { x[d] });
        if !ok {
            let want = format!("the shape of X {x:?} with {blocks} blocks of {b} along axis {a}");
            return Err(Error::input(at, 1, want, format!("shape {s:?}")));
        }
        Ok(Spread::Block { dim, inner, block: b, blocks })
    }

    /// Shader parameters p[3..8] (p[8] is the element count): mode, dim, inner, block, blocks.
    fn params(&self, at: &Location) -> Result<[u32; 5]> {
        let (mode, dim, inner, block, blocks) = match *self {
            Spread::Tensor => (0, 1, 1, 1, 1),
            Spread::Axis { dim, inner } => (1, dim, inner, 1, dim),
            Spread::Block { dim, inner, block, blocks } => (2, dim, inner, block, blocks),
        };
        u32_of(dim.saturating_mul(inner), at)?;
        Ok([mode, u32_of(dim, at)?, u32_of(inner, at)?, u32_of(block, at)?, u32_of(blocks, at)?])
    }
}

/// WGSL `param(e)`: the scale index of element `e` (see [`Spread::params`]).
const PARAM: &str = "
fn param(e: u32) -> u32 {
    let mode = p[3];
    if (mode == 0u) { return 0u; }
    let dim = p[4];
    let inner = p[5];
    let c = (e / inner) % dim;
    if (mode == 1u) { return c; }
    let o = e / (dim * inner);
    return (o * p[7] + c / p[6]) * inner + e % inner;
}
";

/// WGSL `elem_<name>(e) -> i32`: element `e` of buffer `<name>` (bound as words) holding
/// integers of `bits` bits, sign- or zero-extended.
fn int_reader(name: &str, bits: u32, signed: bool) -> String {
    let per_word = 32 / bits;
    let ext = if signed {
        format!("bitcast<i32>(v << {s}u) >> {s}u", s = 32 - bits)
    } else if bits == 32 {
        "bitcast<i32>(v)".to_string()
    } else {
        format!("i32(v & {}u)", (1u32 << bits) - 1)
    };
    format!(
        "fn elem_{name}(e: u32) -> i32 {{
    let v = load_{name}(e / {per_word}u) >> ((e % {per_word}u) * {bits}u);
    return {ext};
}}
"
    )
}

/// The float8/float4 formats DequantizeLinear decodes: (bits, mantissa bits, exponent bias,
/// NaN/inf encoding).
fn float_format(dtype: DataType) -> Option<(u32, u32, i32, Special)> {
    Some(match dtype {
        DataType::Float8E4M3FN => (8, 3, 7, Special::AllOnesNan),
        DataType::Float8E4M3FNUZ => (8, 3, 8, Special::NegZeroNan),
        DataType::Float8E5M2 => (8, 2, 15, Special::Ieee),
        DataType::Float8E5M2FNUZ => (8, 2, 16, Special::NegZeroNan),
        DataType::Float4E2M1 => (4, 1, 1, Special::None),
        _ => return None,
    })
}

/// How a small float format encodes NaN and infinity.
#[derive(Clone, Copy)]
enum Special {
    /// Exponent and mantissa all ones is NaN (e4m3fn); no infinity.
    AllOnesNan,
    /// The negative-zero code is NaN (the `fnuz` formats); no infinity, no -0.
    NegZeroNan,
    /// Exponent all ones: infinity with a zero mantissa, else NaN (e5m2).
    Ieee,
    /// Every code is finite (float4e2m1).
    None,
}

/// WGSL `elem_<name>(e) -> f32`: element `e` of buffer `<name>` (bound as words) holding a small
/// float format (see [`float_format`]), decoded exactly.
fn float_reader(name: &str, bits: u32, man: u32, bias: i32, special: Special) -> String {
    let per_word = 32 / bits;
    let body_mask = (1u32 << (bits - 1)) - 1;
    let exp_max = (1u32 << (bits - 1 - man)) - 1;
    let special = match special {
        Special::AllOnesNan => format!("if ((c & {body_mask}u) == {body_mask}u) {{ return bitcast<f32>(0x7fc00000u); }}"),
        Special::NegZeroNan => format!("if (c == {}u) {{ return bitcast<f32>(0x7fc00000u); }}", 1u32 << (bits - 1)),
        Special::Ieee => format!(
            "if (ex == {exp_max}u) {{ return select(bitcast<f32>(0x7fc00000u), select(1.0, -1.0, neg) * bitcast<f32>(0x7f800000u), m == 0u); }}"
        ),
        Special::None => String::new(),
    };
    format!(
        "fn elem_{name}(e: u32) -> f32 {{
    let c = (load_{name}(e / {per_word}u) >> ((e % {per_word}u) * {bits}u)) & {all}u;
    let neg = (c >> {sign}u) != 0u;
    let ex = (c >> {man}u) & {exp_max}u;
    let m = c & {man_mask}u;
    {special}
    var v = ldexp(f32(m), {sub});
    if (ex != 0u) {{ v = ldexp(f32(m + {implicit}u), i32(ex) - {shift}); }}
    return select(v, -v, neg);
}}
",
        all = (1u64 << bits) - 1,
        sign = bits - 1,
        man_mask = (1u32 << man) - 1,
        implicit = 1u32 << man,
        sub = 1 - bias - man as i32,
        shift = bias + man as i32,
    )
}

/// Validates the zero point's shape against the scale's.
fn check_zero_point(s: &GpuTensor<'_>, z: Option<&GpuTensor<'_>>, at: &Location) -> Result<()> {
    match z {
        Some(z) if z.shape() != s.shape() && !(z.len() == 1 && s.len() == 1) => Err(Error::input(
            at,
            2,
            format!("the shape of the scale {:?}", s.shape()),
            format!("shape {:?}", z.shape()),
        )),
        _ => Ok(()),
    }
}

/// Attributes both ops read: axis and block size.
fn axis_block(ctx: &NodeContext<'_>) -> Result<(i64, i64)> {
    let block = if ctx.since_version >= 21 { ctx.node.int_or("block_size", 0)? } else { 0 };
    Ok((ctx.node.int_or("axis", 1)?, block))
}

/// A pipeline with and without a zero point buffer.
struct Pipelines {
    plain: Arc<Pipeline>,
    with_zero: Arc<Pipeline>,
}

impl Pipelines {
    fn pick(&self, zero: bool) -> &Pipeline {
        if zero {
            &self.with_zero
        } else {
            &self.plain
        }
    }
}

/// Records one quantize/dequantize dispatch writing `y` (`out` units of `out_size` bytes; for
/// packed types, bytes) from x, the scale and the zero point.
#[allow(clippy::too_many_arguments)]
fn record_linear(
    run: &mut GpuRun,
    pipes: &Pipelines,
    out: Elements,
    y: &onyx_core::Tensor,
    x: &GpuTensor<'_>,
    s: &GpuTensor<'_>,
    z: Option<&GpuTensor<'_>>,
    spread: Spread,
    at: &Location,
) -> Result<()> {
    if y.is_empty() {
        return Ok(());
    }
    let mut params = spread.params(at)?.to_vec();
    params.push(u32_of(y.len(), at)?);
    let mut buffers = vec![x.buffer, s.buffer];
    if let Some(z) = z {
        buffers.push(z.buffer);
    }
    buffers.push(y.gpu()?);
    dispatch_elements(run, pipes.pick(z.is_some()), out, &params, &buffers, at)
}

// ---------------------------------------------------------------------------------------------
// QuantizeLinear
// ---------------------------------------------------------------------------------------------

/// QuantizeLinear's `fetch`: the quotient (refined by one residual step, so that it is the
/// correctly rounded f32 quotient even where the device's division is not), rounded half to
/// even (NaN to 0), plus the zero point, clamped to [LO, HI].
const QUANTIZE: &str = "
fn quant(e: u32) -> i32 {
    let k = param(e);
    let x = bitcast<f32>(load_x(e));
    let s = bitcast<f32>(load_s(k));
    var q = x / s;
    if (s != 0.0 && abs(q) < 1e30) { q = q + fma(-q, s, x) / s; }
    var r = round(q);
    if ((bitcast<u32>(r) & 0x7fffffffu) > 0x7f800000u) { r = 0.0; }
    r = clamp(r, -1e6, 1e6);
    return clamp(i32(r) + zero(k), LO, HI);
}
";

/// WGSL `fetch` of QuantizeLinear writing byte `b` of a packed type of `bits` bits (8/bits
/// elements a byte, of the p[8] elements in all), or element `b` of an 8/16-bit type.
fn quantize_fetch(bits: u32) -> String {
    if bits >= 8 {
        return "fn fetch(e: u32) -> E { return bitcast<u32>(quant(e)); }\n".to_string();
    }
    let (per, mask) = (8 / bits, (1u32 << bits) - 1);
    format!(
        "fn fetch(b: u32) -> E {{
    var r = 0u;
    for (var k = 0u; k < {per}u; k++) {{
        let e = b * {per}u + k;
        if (e < p[8]) {{ r |= (bitcast<u32>(quant(e)) & {mask}u) << (k * {bits}u); }}
    }}
    return r;
}}
"
    )
}

/// QuantizeLinear to an 8- or 16-bit integer type.
struct Quantize {
    out: DataType,
    axis: i64,
    block: i64,
    pipes: Pipelines,
    at: Location,
}

fn build_quantize(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let unsupported = || Error::Unsupported(format!("wgpu: {at} (quantized type)"));
    let out = quantize_output(ctx).ok_or_else(unsupported)?;
    let (lo, hi) = out_range(out).ok_or_else(unsupported)?;
    let (bits, signed) = int_format(out).ok_or_else(unsupported)?;
    let size = bits.div_ceil(8);
    let head = format!("const LO: i32 = {lo};\nconst HI: i32 = {hi};\n{PARAM}");
    let tail = format!("{QUANTIZE}{}", quantize_fetch(bits));
    let plain_code = format!("{head}fn zero(k: u32) -> i32 {{ return 0; }}\n{tail}");
    let zero_code =
        format!("{head}{}fn zero(k: u32) -> i32 {{ return elem_z(k); }}\n{tail}", int_reader("z", bits, signed));
    let plain = gpu.pipeline(&format!("quantize/q/{}/0", out.name()), || {
        element_shader("", size, &[("x", 4), ("s", 4)], &plain_code)
    })?;
    let with_zero = gpu.pipeline(&format!("quantize/q/{}/1", out.name()), || {
        element_shader("", size, &[("x", 4), ("s", 4), ("z", 4)], &zero_code)
    })?;
    let (axis, block) = axis_block(ctx)?;
    Ok(Box::new(Quantize { out, axis, block, pipes: Pipelines { plain, with_zero }, at }))
}

impl GpuOp for Quantize {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let s = gpu_input(run, inputs, 1, at)?;
        let z = opt_gpu_input(run, inputs, 2, at)?;
        for (i, t) in [(0, &x), (1, &s)] {
            if t.dtype() != DataType::Float {
                return Err(Error::input(at, i, "float", t.dtype().name()));
            }
        }
        if let Some(z) = &z {
            if z.dtype() != self.out {
                return Err(Error::input(at, 2, format!("a {} zero point", self.out), z.dtype().name()));
            }
        }
        check_zero_point(&s, z.as_ref(), at)?;
        let spread = Spread::new(x.shape(), s.shape(), self.axis, self.block, at)?;
        let y = run.alloc(self.out, x.shape().to_vec())?;
        let bits = int_format(self.out).map_or(8, |(b, _)| b);
        let out = if bits < 8 {
            Elements::new(1, y.len().div_ceil((8 / bits) as usize))
        } else {
            Elements::new(bits / 8, y.len())
        };
        record_linear(run, &self.pipes, out, &y, &x, &s, z.as_ref(), spread, at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// DequantizeLinear
// ---------------------------------------------------------------------------------------------

/// DequantizeLinear's `fetch`: `(x - zero_point) * scale` in f32.
const DEQUANTIZE: &str = "
fn fetch(e: u32) -> E {
    let k = param(e);
    let v = f32(elem_x(e)) - zero(k);
    return bitcast<u32>(v * bitcast<f32>(load_s(k)));
}
";

/// DequantizeLinear from an integer type to f32.
struct Dequantize {
    dtype: DataType,
    axis: i64,
    block: i64,
    /// Whether the zero point is read (integer data).
    zero: bool,
    pipes: Pipelines,
    at: Location,
}

fn build_dequantize(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} with untyped data")))?;
    let reader = |name: &str| match (int_format(dtype), float_format(dtype)) {
        (Some((bits, signed)), _) => Ok(int_reader(name, bits, signed)),
        (None, Some((bits, man, bias, special))) => Ok(float_reader(name, bits, man, bias, special)),
        _ => Err(Error::Unsupported(format!("wgpu: {at} on {dtype} data"))),
    };
    let head = format!("{PARAM}{}", reader("x")?);
    let plain_code = format!("{head}fn zero(k: u32) -> f32 {{ return 0.0; }}\n{DEQUANTIZE}");
    let plain = gpu.pipeline(&format!("quantize/dq/{}/0", dtype.name()), || {
        element_shader("", 4, &[("x", 4), ("s", 4)], &plain_code)
    })?;
    let (axis, block) = axis_block(ctx)?;
    if !dtype.is_integer() {
        // A float zero point must be 0 (the CPU EP checks it); it is not read here.
        let pipes = Pipelines { plain: plain.clone(), with_zero: plain };
        return Ok(Box::new(Dequantize { dtype, axis, block, zero: false, pipes, at }));
    }
    let zero_code = format!("{head}{}fn zero(k: u32) -> f32 {{ return f32(elem_z(k)); }}\n{DEQUANTIZE}", reader("z")?);
    let with_zero = gpu.pipeline(&format!("quantize/dq/{}/1", dtype.name()), || {
        element_shader("", 4, &[("x", 4), ("s", 4), ("z", 4)], &zero_code)
    })?;
    Ok(Box::new(Dequantize { dtype, axis, block, zero: true, pipes: Pipelines { plain, with_zero }, at }))
}

impl GpuOp for Dequantize {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let s = gpu_input(run, inputs, 1, at)?;
        let z = opt_gpu_input(run, inputs, 2, at)?;
        if x.dtype() != self.dtype {
            return Err(Error::input(at, 0, self.dtype.name(), x.dtype().name()));
        }
        if s.dtype() != DataType::Float {
            return Err(Error::input(at, 1, "float scales", s.dtype().name()));
        }
        if let Some(z) = &z {
            if z.dtype() != self.dtype {
                return Err(Error::input(
                    at,
                    2,
                    format!("a {} zero point (the type of x)", self.dtype),
                    z.dtype().name(),
                ));
            }
        }
        check_zero_point(&s, z.as_ref(), at)?;
        let spread = Spread::new(x.shape(), s.shape(), self.axis, self.block, at)?;
        let y = run.alloc(DataType::Float, x.shape().to_vec())?;
        let z = z.filter(|_| self.zero);
        record_linear(run, &self.pipes, Elements::new(4, y.len()), &y, &x, &s, z.as_ref(), spread, at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::DataType;

    use super::super::layout::tests::check_exact;
    use crate::testkit::{int, rand, t, Case};

    /// (x shape, scale shape, axis, block size) layouts covering per-tensor, per-axis
    /// (negative axes too) and blocked parameters, with odd sizes.
    fn layouts() -> Vec<(Vec<usize>, Vec<usize>, i64, i64)> {
        vec![
            (vec![3, 37, 5], vec![], 1, 0),
            (vec![3, 37, 5], vec![1], 1, 0),
            (vec![3, 37, 5], vec![37], 1, 0),
            (vec![3, 37, 5], vec![5], -1, 0),
            (vec![7, 9], vec![7], 0, 0),
            (vec![3, 37, 5], vec![3, 37, 2], 2, 3),
            (vec![6, 11, 3], vec![6, 3, 3], 1, 4),
            (vec![1027], vec![], 0, 0),
            (vec![2, 0, 3], vec![], 1, 0),
        ]
    }

    /// A tensor of `dtype` (packed sub-byte types too) with random bits.
    fn random_bits(dtype: DataType, shape: &[usize], seed: u64) -> onyx_core::Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let len = dtype.byte_len(n).unwrap();
        let mut words = vec![0u64; len.div_ceil(8)];
        rng.fill(&mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len]);
        let buf = onyx_core::HostBuffer::new(std::sync::Arc::new(words), 0, len).unwrap();
        onyx_core::Tensor::from_bytes(dtype, shape.to_vec(), buf).unwrap()
    }

    /// Random scales of `shape` in [0.05, 2) with both signs.
    fn scales(shape: &[usize], seed: u64) -> onyx_core::Tensor {
        let s = rand(shape, 0.05, 2.0, seed);
        let v: Vec<f32> = s
            .view()
            .unwrap()
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, &x)| if i % 5 == 3 { -x } else { x })
            .collect();
        t(shape, v)
    }

    #[test]
    fn quantize_matches_the_cpu() {
        for (l, (xs, ss, axis, block)) in layouts().into_iter().enumerate() {
            let seed = 10 + l as u64;
            let x = rand(&xs, -300.0, 300.0, seed);
            let s = scales(&ss, seed + 100);
            let attrs = vec![int("axis", axis), int("block_size", block)];
            check_exact(&Case::new("QuantizeLinear", vec![x.clone(), s.clone()]).attrs(attrs.clone()).opset(21));
            for dtype in [
                DataType::Int8,
                DataType::Uint8,
                DataType::Int16,
                DataType::Uint16,
                DataType::Int4,
                DataType::Uint4,
                DataType::Int2,
                DataType::Uint2,
            ] {
                let z = random_bits(dtype, &ss, seed + 200);
                let case = Case::new("QuantizeLinear", vec![x.clone(), s.clone(), z]).attrs(attrs.clone()).opset(21);
                check_exact(&case);
                let attrs = vec![int("axis", axis), int("block_size", block), int("output_dtype", dtype as i64)];
                check_exact(&Case::new("QuantizeLinear", vec![x.clone(), s.clone()]).attrs(attrs).opset(21));
            }
        }
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        let x = t(&[12], vec![0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 1e9, -1e9, f32::INFINITY, f32::NAN, 254.0, 255.0]);
        let s = t(&[], vec![1.0f32]);
        check_exact(
            &Case::new("QuantizeLinear", vec![x.clone(), s.clone()])
                .attrs(vec![int("output_dtype", DataType::Int4 as i64)])
                .opset(21),
        );
        check_exact(&Case::new("QuantizeLinear", vec![x.clone(), s.clone()]).opset(13));
        check_exact(&Case::new("QuantizeLinear", vec![x.clone(), s.clone(), t(&[], vec![-3i8])]).opset(13));
        let halves = t(&[6], vec![1.0f32, 3.0, 5.0, -1.0, -3.0, 7.0]);
        check_exact(&Case::new("QuantizeLinear", vec![halves, t(&[], vec![2.0f32]), t(&[], vec![1u8])]).opset(10));
    }

    #[test]
    fn dequantize_matches_the_cpu() {
        let dtypes = [
            DataType::Int8,
            DataType::Uint8,
            DataType::Int16,
            DataType::Uint16,
            DataType::Int32,
            DataType::Int4,
            DataType::Uint4,
            DataType::Int2,
            DataType::Uint2,
            DataType::Float8E4M3FN,
            DataType::Float8E4M3FNUZ,
            DataType::Float8E5M2,
            DataType::Float8E5M2FNUZ,
            DataType::Float4E2M1,
        ];
        for (l, (xs, ss, axis, block)) in layouts().into_iter().enumerate() {
            let seed = 50 + l as u64;
            for dtype in dtypes {
                let x = random_bits(dtype, &xs, seed);
                let z = random_bits(dtype, &ss, seed + 1);
                let s = scales(&ss, seed + 2);
                let attrs = vec![int("axis", axis), int("block_size", block)];
                let case = Case::new("DequantizeLinear", vec![x.clone(), s.clone()]).attrs(attrs.clone()).opset(21);
                case.check(1e-6, 0.0);
                if dtype.is_integer() {
                    let case = Case::new("DequantizeLinear", vec![x, s, z]).attrs(attrs).opset(21);
                    case.check(1e-6, 0.0);
                }
            }
        }
    }
}
