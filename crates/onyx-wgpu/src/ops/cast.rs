//! Cast and CastLike between f32, f16, bf16, int8/16/32/64, uint8/16/32 and bool.
//!
//! Conversions run on the elements' bits with integer arithmetic only, so they give exactly
//! what the CPU EP gives (which follows ONNX Runtime on x86-64) whatever the GPU's float
//! rounding modes or its assumptions about NaN: float to integer truncates toward zero, NaN
//! and out-of-range values give the "integer indefinite" value (`i32::MIN`, or `i64::MIN` for
//! int64 and uint32 targets) truncated to the target's bits; integers narrow by keeping their
//! low bits; integers and floats round to nearest-even into floats, once; anything to bool is
//! "not zero" (NaN is true). f16 needs no `SHADER_F16`: it is converted bitwise.

mod minifloat;
mod packed;

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, elem_size, element_shader, known_dtype, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    r.add("Cast", supports_cast, build_cast);
    r.add("CastLike", supports_cast, build_cast);
}

/// The types Cast converts between on the GPU.
fn castable(t: DataType) -> bool {
    use DataType::*;
    matches!(t, Float | Float16 | BFloat16 | Int8 | Int16 | Int32 | Int64 | Uint8 | Uint16 | Uint32 | Bool)
}

/// WGSL conversions on bits, shared by every Cast shader.
pub(crate) const CAST_LIB: &str = "
fn f16_to_f32(h: u32) -> u32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        if (m == 0u) { return s; }
        let msb = 31u - countLeadingZeros(m);
        return s | ((msb + 103u) << 23u) | ((m << (23u - msb)) & 0x7fffffu);
    }
    if (e == 31u) {
        if (m == 0u) { return s | 0x7f800000u; }
        return s | 0x7fc00000u | (m << 13u);
    }
    return s | ((e + 112u) << 23u) | (m << 13u);
}
fn f32_to_f16(x: u32) -> u32 {
    let sign = (x & 0x80000000u) >> 16u;
    let exp = x & 0x7f800000u;
    let man = x & 0x007fffffu;
    if (exp == 0x7f800000u) {
        return sign | 0x7c00u | select(0u, 0x0200u, man != 0u) | (man >> 13u);
    }
    let half_exp = i32(exp >> 23u) - 127 + 15;
    if (half_exp >= 31) { return sign | 0x7c00u; }
    if (half_exp <= 0) {
        if (14 - half_exp > 24) { return sign; }
        let m = man | 0x00800000u;
        var half_man = m >> u32(14 - half_exp);
        let round_bit = 1u << u32(13 - half_exp);
        if ((m & round_bit) != 0u && (m & (3u * round_bit - 1u)) != 0u) { half_man += 1u; }
        return sign | half_man;
    }
    let r = sign | (u32(half_exp) << 10u) | (man >> 13u);
    if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) { return r + 1u; }
    return r;
}
fn f32_to_bf16(x: u32) -> u32 {
    if ((x & 0x7fffffffu) > 0x7f800000u) { return (x >> 16u) | 0x0040u; }
    if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) { return (x >> 16u) + 1u; }
    return x >> 16u;
}
fn shr64(lo: u32, hi: u32, s: u32) -> vec2<u32> {
    if (s == 0u) { return vec2<u32>(lo, hi); }
    if (s >= 32u) { return vec2<u32>(hi >> (s - 32u), 0u); }
    return vec2<u32>((lo >> s) | (hi << (32u - s)), hi >> s);
}
fn shl64(lo: u32, hi: u32, s: u32) -> vec2<u32> {
    if (s == 0u) { return vec2<u32>(lo, hi); }
    if (s >= 32u) { return vec2<u32>(0u, lo << (s - 32u)); }
    return vec2<u32>(lo << s, (hi << s) | (lo >> (32u - s)));
}
fn neg64(v: vec2<u32>) -> vec2<u32> {
    let lo = ~v.x + 1u;
    return vec2<u32>(lo, ~v.y + select(0u, 1u, lo == 0u));
}
// Whether any of bits 0..b-1 of (lo, hi) is set.
fn low_bits(lo: u32, hi: u32, b: u32) -> bool {
    if (b == 0u) { return false; }
    if (b >= 32u) {
        let hb = b - 32u;
        return lo != 0u || (hb > 0u && (hi & ((1u << hb) - 1u)) != 0u);
    }
    return (lo & ((1u << b) - 1u)) != 0u;
}
// The magnitude (lo, hi) rounded to `bits` significant bits (ties to even), as f32 bits.
// Only the top `keep` significant bits take part in rounding (the CPU EP's f64-to-bf16
// conversion, from the `half` crate, looks at 21 of them).
fn u64_to_float(lo: u32, hi: u32, bits: u32, keep: u32) -> u32 {
    if (hi == 0u && lo == 0u) { return 0u; }
    var msb = 31u - countLeadingZeros(lo);
    if (hi != 0u) { msb = 63u - countLeadingZeros(hi); }
    if (msb < bits) { return ((msb + 127u) << 23u) | ((lo << (23u - msb)) & 0x7fffffu); }
    let shift = msb + 1u - bits;
    var m = shr64(lo, hi, shift).x;
    let half = shr64(lo, hi, shift - 1u).x & 1u;
    var t = vec2<u32>(lo, hi);
    if (msb + 1u > keep) { let fl = msb + 1u - keep; let c = shr64(lo, hi, fl); t = shl64(c.x, c.y, fl); }
    if (half == 1u && (low_bits(t.x, t.y, shift - 1u) || (m & 1u) == 1u)) { m += 1u; }
    var e = msb;
    if (m == (1u << bits)) { m = m >> 1u; e += 1u; }
    return ((e + 127u) << 23u) | ((m << (24u - bits)) & 0x7fffffu);
}
fn i64_to_float(v: vec2<u32>, bits: u32, keep: u32) -> u32 {
    if ((v.y >> 31u) == 1u) {
        let m = neg64(v);
        return 0x80000000u | u64_to_float(m.x, m.y, bits, keep);
    }
    return u64_to_float(v.x, v.y, bits, keep);
}
fn f32_to_i64(b: u32) -> vec2<u32> {
    let e = (b >> 23u) & 0xffu;
    if (e >= 190u) { return vec2<u32>(0u, 0x80000000u); }
    if (e < 127u) { return vec2<u32>(0u, 0u); }
    let m = (b & 0x7fffffu) | 0x800000u;
    let x = e - 127u;
    var mag = vec2<u32>(0u, 0u);
    if (x <= 23u) { mag = vec2<u32>(m >> (23u - x), 0u); } else { mag = shl64(m, 0u, x - 23u); }
    if ((b >> 31u) == 1u) { return neg64(mag); }
    return mag;
}
fn f32_to_i32(b: u32) -> u32 {
    let e = (b >> 23u) & 0xffu;
    if (e >= 158u) { return 0x80000000u; }
    if (e < 127u) { return 0u; }
    let m = (b & 0x7fffffu) | 0x800000u;
    let x = e - 127u;
    var mag = 0u;
    if (x <= 23u) { mag = m >> (23u - x); } else { mag = m << (x - 23u); }
    if ((b >> 31u) == 1u) { return 0u - mag; }
    return mag;
}
";

/// How a source type's bits are read: as f32 bits (`f`) or as an i64 (`i`, a `vec2<u32>`).
fn read_source(from: DataType) -> &'static str {
    use DataType::*;
    match from {
        Float => "let f = v;",
        Float16 => "let f = f16_to_f32(v);",
        BFloat16 => "let f = select(v << 16u, (v | 0x40u) << 16u, (v & 0x7fffu) > 0x7f80u);",
        Int8 => "let i = vec2<u32>(bitcast<u32>(bitcast<i32>(v << 24u) >> 24u), select(0u, 0xffffffffu, (v & 0x80u) != 0u));",
        Int16 => "let i = vec2<u32>(bitcast<u32>(bitcast<i32>(v << 16u) >> 16u), select(0u, 0xffffffffu, (v & 0x8000u) != 0u));",
        Int32 => "let i = vec2<u32>(v, select(0u, 0xffffffffu, (v >> 31u) == 1u));",
        Int64 => "let i = v;",
        Bool => "let i = vec2<u32>(select(0u, 1u, v != 0u), 0u);",
        _ => "let i = vec2<u32>(v, 0u);",
    }
}

/// The target's bits from `f` (a float source) or `i` (an integer or bool source).
fn write_target(float_source: bool, to: DataType) -> &'static str {
    use DataType::*;
    if float_source {
        match to {
            Float => "return f;",
            Float16 => "return f32_to_f16(f);",
            BFloat16 => "return f32_to_bf16(f);",
            Bool => "return select(0u, 1u, (f & 0x7fffffffu) != 0u);",
            Int8 | Uint8 => "return f32_to_i32(f) & 0xffu;",
            Int16 | Uint16 => "return f32_to_i32(f) & 0xffffu;",
            Int32 => "return f32_to_i32(f);",
            Uint32 => "return f32_to_i64(f).x;",
            _ => "return f32_to_i64(f);",
        }
    } else {
        match to {
            Float => "return i64_to_float(i, 24u, 64u);",
            Float16 => "return f32_to_f16(i64_to_float(i, 11u, 64u));",
            BFloat16 => "return f32_to_bf16(i64_to_float(i, 8u, 21u));",
            Bool => "return select(0u, 1u, (i.x | i.y) != 0u);",
            Int8 | Uint8 => "return i.x & 0xffu;",
            Int16 | Uint16 => "return i.x & 0xffffu;",
            Int32 | Uint32 => "return i.x;",
            _ => "return i;",
        }
    }
}

/// The `fetch` of a cast from `from` to `to`.
fn cast_code(from: DataType, to: DataType) -> String {
    let float_source = matches!(from, DataType::Float | DataType::Float16 | DataType::BFloat16);
    format!(
        "{CAST_LIB}
fn fetch(e: u32) -> E {{
    let v = load_x(e);
    {}
    {}
}}
",
        read_source(from),
        write_target(float_source, to)
    )
}

/// The target dtype: Cast's `to` attribute or CastLike's input 1.
fn target(ctx: &NodeContext<'_>) -> Option<DataType> {
    if ctx.node.op_type == "CastLike" {
        input_dtype(ctx, 1)
    } else {
        ctx.node.get_int("to").ok().flatten().and_then(|c| i32::try_from(c).ok()).and_then(DataType::from_onnx)
    }
}

/// Cast takes conversions between [`castable`] types, and same-type casts of any movable type.
fn supports_cast(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    match (input_dtype(ctx, 0), target(ctx)) {
        (Some(from), Some(to)) if from == to => elem_size(from).is_some(),
        (Some(from), Some(to)) => {
            (castable(from) && castable(to))
                || (minifloat::converts(from, to) && small_options(ctx).is_ok())
                || packed::converts(from, to, castable)
        }
        _ => false,
    }
}

/// Cast's `saturate` (float8 targets) and `round_mode` (float8e8m0 targets) attributes.
fn small_options(ctx: &NodeContext<'_>) -> Result<(bool, minifloat::RoundMode)> {
    let at = ctx.node.location();
    let saturate = match ctx.node.int_or("saturate", 1)? {
        0 => false,
        1 => true,
        other => return Err(Error::attribute(&at, "saturate", "0 or 1", other.to_string())),
    };
    let mode = ctx.node.string_or("round_mode", "up")?;
    let round = minifloat::RoundMode::parse(&mode)
        .ok_or_else(|| Error::attribute(&at, "round_mode", "up, down or nearest", mode.clone()))?;
    Ok((saturate, round))
}

/// Cast or CastLike: one conversion pass (a view of the input when the types are equal).
struct Cast {
    to: DataType,
    size: u32,
    /// Elements per output word when the target is a packed sub-byte type.
    pack: Option<u32>,
    /// `None` when nothing is converted.
    pipeline: Option<Arc<Pipeline>>,
    at: Location,
}

fn build_cast(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let from = known_dtype(ctx, 0)?;
    let to =
        target(ctx).ok_or_else(|| Error::attribute(&at, "to", "an ONNX data type code", "none the GPU casts to"))?;
    if packed::converts(from, to, castable) {
        return build_packed(gpu, from, to, at);
    }
    let size = elem_size(to).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} to {to}")))?;
    let pipeline = if from == to {
        None
    } else {
        let in_size = elem_size(from).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} from {from}")))?;
        let code = if minifloat::converts(from, to) {
            let (saturate, round) = small_options(ctx)?;
            let code = minifloat::code(from, to, saturate, round)?;
            (format!("cast/{}/{}/{saturate}/{round:?}", from.name(), to.name()), code)
        } else {
            (format!("cast/{}/{}", from.name(), to.name()), cast_code(from, to))
        };
        Some(gpu.pipeline(&code.0, || element_shader("", size, &[("x", in_size)], &code.1))?)
    };
    Ok(Box::new(Cast { to, size, pack: None, pipeline, at }))
}

/// A cast with a packed sub-byte type on one side (see [`packed`]).
fn build_packed(gpu: &Arc<GpuContext>, from: DataType, to: DataType, at: Location) -> Result<Box<dyn GpuOp>> {
    let unsupported = || Error::Unsupported(format!("wgpu: {at} from {from} to {to}"));
    let pack = packed::per_word(to);
    // Packed buffers are read and written as whole words.
    let size = if pack.is_some() { 4 } else { elem_size(to).ok_or_else(unsupported)? };
    let in_size = if packed::is_packed(from) { 4 } else { elem_size(from).ok_or_else(unsupported)? };
    let key = format!("cast/packed/{}/{}", from.name(), to.name());
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("x", in_size)], &packed::code(from, to)))?;
    Ok(Box::new(Cast { to, size, pack, pipeline: Some(pipeline), at }))
}

impl GpuOp for Cast {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let Some(pipeline) = &self.pipeline else {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        };
        let y = run.alloc(self.to, x.shape().to_vec())?;
        let (units, params) = match self.pack {
            Some(per) => (y.len().div_ceil(per as usize), vec![crate::kernel::u32_of(y.len(), &self.at)?]),
            None => (y.len(), vec![]),
        };
        dispatch_elements(run, pipeline, Elements::new(self.size, units), &params, &[x.buffer, y.gpu()?], &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
#[cfg(test)]
mod tests {
    use onyx_core::{DataType, Tensor};

    use super::super::layout::tests::{check_exact, random};
    use crate::testkit::{int, t, Case};

    const TYPES: [DataType; 11] = [
        DataType::Float,
        DataType::Float16,
        DataType::BFloat16,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Bool,
    ];

    /// Awkward values of every kind: exact and inexact in the narrower types, ties, huge,
    /// tiny, negative, infinite and NaN.
    fn special_floats() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            255.9,
            256.0,
            -128.7,
            300.2,
            65504.0,
            65519.0,
            65520.0,
            1e6,
            -1e6,
            2147483520.0,
            2147483648.0,
            -2147483648.0,
            -2147483904.0,
            4294967296.0,
            9.2233715e18,
            -9.223372e18,
            9.223373e18,
            1e-8,
            -6e-8,
            3e-5,
            6.1e-5,
            16777217.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0 + 1.0 / 2048.0,
            1.0 + 2.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            2049.0,
            2051.0,
            257.0,
            259.0,
        ];
        let mut rng = fastrand::Rng::with_seed(9);
        v.extend((0..200).map(|_| f32::from_bits(rng.u32(..))).filter(|x| !x.is_nan()));
        v.extend((0..200).map(|_| (rng.f32() - 0.5) * 1000.0));
        v
    }

    /// Awkward int64 values: near every narrower type's bounds and around f32/f16 ties.
    fn special_ints() -> Vec<i64> {
        let mut v = vec![
            0,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            256,
            32767,
            32768,
            -32769,
            65504,
            65519,
            65520,
            65535,
            65536,
            i32::MAX as i64,
            i32::MIN as i64,
            u32::MAX as i64,
            1 << 32,
            (1 << 24) + 1,
            (1 << 24) + 3,
            (1 << 25) + 6,
            0x1008001,
            0x1010001,
            0x1018000,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
            (1 << 53) + 1,
            -(1 << 40) - 12345,
            0x7fff_ff80_0000_0000,
            2049,
            2051,
            4097,
            257,
            259,
        ];
        let mut rng = fastrand::Rng::with_seed(3);
        v.extend((0..200).map(|_| rng.i64(..) >> rng.u32(0..63)));
        v
    }

    /// `values` (as i64 or f32) converted on the host to a tensor of `dtype` by the CPU EP.
    fn source(dtype: DataType, floats: bool) -> Tensor {
        let x = if floats {
            t(&[special_floats().len()], special_floats())
        } else {
            t(&[special_ints().len()], special_ints())
        };
        if dtype == x.dtype() {
            return x;
        }
        Case::new("Cast", vec![x]).attrs(vec![int("to", dtype.onnx_code() as i64)]).run_cpu().remove(0)
    }

    #[test]
    fn cast_matches_the_cpu_between_every_pair() {
        for from in TYPES {
            let sources = [source(from, true), source(from, false), random(from, &[3, 37], 4)];
            for to in TYPES {
                for x in &sources {
                    check_exact(&Case::new("Cast", vec![x.clone()]).attrs(vec![int("to", to.onnx_code() as i64)]));
                }
            }
        }
    }

    /// Awkward f64 values: f32 and f16 ties and near-ties, overflow, subnormal results, and
    /// random bit patterns of every magnitude.
    fn special_doubles() -> Vec<f64> {
        let mut v = vec![
            0.0,
            -0.0,
            1.0 + f64::EPSILON,
            1.0 + 2f64.powi(-24),
            1.0 + 2f64.powi(-24) + 2f64.powi(-50),
            1.0 + 3.0 * 2f64.powi(-24),
            1.0 + 2f64.powi(-11),
            1.0 + 3.0 * 2f64.powi(-11),
            65519.99,
            65520.0,
            3.4028235677973366e38,
            3.5e38,
            1e-40,
            1.4e-45,
            7e-46,
            6e-8,
            2.9e-8,
            1e300,
            -1e-300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let mut rng = fastrand::Rng::with_seed(11);
        v.extend((0..300).map(|_| f64::from_bits(rng.u64(..))).filter(|x| !x.is_nan()));
        v.extend(
            (0..300).map(|_| f64::from_bits((rng.u64(..) & 0x800f_ffff_ffff_ffff) | (rng.u64(0x360..0x420) << 52))),
        );
        v
    }

    #[test]
    fn float8_and_double_casts_match_the_cpu() {
        const SMALL: [DataType; 6] = [
            DataType::Float8E4M3FN,
            DataType::Float8E4M3FNUZ,
            DataType::Float8E5M2,
            DataType::Float8E5M2FNUZ,
            DataType::Float8E8M0,
            DataType::Double,
        ];
        let doubles = t(&[special_doubles().len()], special_doubles());
        for base in [DataType::Float, DataType::Float16] {
            let x = source(base, true);
            for to in SMALL {
                for saturate in [0, 1] {
                    for mode in ["up", "down", "nearest"] {
                        let attrs = vec![
                            int("to", to.onnx_code() as i64),
                            int("saturate", saturate),
                            crate::testkit::string("round_mode", mode),
                        ];
                        // round_mode is Cast's attribute since opset 24.
                        check_exact(&Case::new("Cast", vec![x.clone()]).attrs(attrs).opset(24));
                    }
                }
                let from = if to == DataType::Double { doubles.clone() } else { random(to, &[5, 53], 7) };
                check_exact(&Case::new("Cast", vec![from]).attrs(vec![int("to", base.onnx_code() as i64)]));
            }
        }
    }

    /// A tensor of a packed sub-byte type with random bits (odd lengths leave a spare nibble).
    fn random_packed(dtype: DataType, n: usize, seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let bytes: Vec<u8> = (0..dtype.byte_len(n).unwrap()).map(|_| rng.u8(..)).collect();
        Tensor::from_bytes(dtype, vec![n], onyx_core::HostBuffer::from_vec(bytes)).unwrap()
    }

    #[test]
    fn packed_sub_byte_casts_match_the_cpu() {
        const PACKED: [DataType; 5] =
            [DataType::Int4, DataType::Uint4, DataType::Int2, DataType::Uint2, DataType::Float4E2M1];
        for (i, p) in PACKED.into_iter().enumerate() {
            for to in TYPES {
                for n in [1, 7, 37, 1001] {
                    let x = random_packed(p, n, 40 + i as u64 + n as u64);
                    check_exact(&Case::new("Cast", vec![x]).attrs(vec![int("to", to.onnx_code() as i64)]));
                }
            }
            for from in TYPES {
                for x in [source(from, true), source(from, false), random(from, &[3, 37], 4)] {
                    check_exact(&Case::new("Cast", vec![x]).attrs(vec![int("to", p.onnx_code() as i64)]));
                }
            }
        }
        let like = random_packed(DataType::Int4, 3, 1);
        check_exact(&Case::new("CastLike", vec![source(DataType::Float, true), like]));
    }

    #[test]
    fn cast_like_takes_the_type_of_its_second_input() {
        let x = source(DataType::Float, true);
        for to in [DataType::Float16, DataType::Int64, DataType::Bool, DataType::Float] {
            let like = random(to, &[2], 1);
            check_exact(&Case::new("CastLike", vec![x.clone(), like]));
        }
    }
}
