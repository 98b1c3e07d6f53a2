//! The sub-16-bit element types: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float8e8m0,
//! float4e2m1 and the packed integers int4/uint4/int2/uint2 (two or four elements per byte,
//! the first in the low bits). Conversions follow the ONNX reference (ml_dtypes): round to
//! nearest even; without saturation, overflow gives NaN (E4M3FN, FNUZ types) or infinity (E5M2);
//! float4e2m1 always saturates and maps NaN to -0. Casts to the packed integers truncate toward
//! zero and keep the low bits (NaN and infinities give 0).

use onyx_core::{DataType, Error, HostBuffer, Result, Tensor, TensorView};

/// Whether `dtype` is one of the types this module converts.
pub(crate) fn is_small(dtype: DataType) -> bool {
    use DataType::*;
    matches!(
        dtype,
        Float8E4M3FN
            | Float8E4M3FNUZ
            | Float8E5M2
            | Float8E5M2FNUZ
            | Float8E8M0
            | Float4E2M1
            | Int4
            | Uint4
            | Int2
            | Uint2
    )
}

/// How float8e8m0 rounds a value that is not a power of two (Cast's `round_mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RoundMode {
    Up,
    Down,
    Nearest,
}

impl RoundMode {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "up" => RoundMode::Up,
            "down" => RoundMode::Down,
            "nearest" => RoundMode::Nearest,
            _ => return None,
        })
    }
}

/// A small float format: a sign bit, exponent bits and `man` mantissa bits.
#[derive(Clone, Copy, Debug)]
struct Format {
    man: u32,
    bias: i32,
    /// Largest finite positive code.
    max_code: u8,
    /// Code of +infinity, if the format has one.
    inf: Option<u8>,
    /// Code NaN converts to.
    nan: u8,
    /// No negative zero: -0 and tiny negatives become +0 (the FNUZ formats).
    uz: bool,
    /// Sign bit.
    sign: u8,
}

fn format(dtype: DataType) -> Option<Format> {
    let f = |man, bias, max_code, inf, nan, uz, sign| Format { man, bias, max_code, inf, nan, uz, sign };
    Some(match dtype {
        DataType::Float8E4M3FN => f(3, 7, 0x7E, None, 0x7F, false, 0x80),
        DataType::Float8E4M3FNUZ => f(3, 8, 0x7F, None, 0x80, true, 0x80),
        DataType::Float8E5M2 => f(2, 15, 0x7B, Some(0x7C), 0x7E, false, 0x80),
        DataType::Float8E5M2FNUZ => f(2, 16, 0x7F, None, 0x80, true, 0x80),
        DataType::Float4E2M1 => f(1, 1, 0x7, None, 0x8, false, 0x8),
        _ => return None,
    })
}

impl Format {
    /// The value of a non-negative finite code.
    fn value(&self, code: u8) -> f64 {
        let e = i32::from(code >> self.man);
        let m = f64::from(code & ((1u8 << self.man) - 1));
        let scale = f64::from(1u32 << self.man);
        if e == 0 {
            m / scale * 2f64.powi(1 - self.bias)
        } else {
            (1.0 + m / scale) * 2f64.powi(e - self.bias)
        }
    }

    fn decode(&self, code: u8) -> f64 {
        if self.uz && code == 0x80 {
            return f64::NAN;
        }
        let neg = code & self.sign != 0;
        let c = code & (self.sign - 1);
        let v = if Some(c) == self.inf {
            f64::INFINITY
        } else if c > self.max_code && self.sign == 0x80 {
            f64::NAN
        } else {
            self.value(c)
        };
        if neg {
            -v
        } else {
            v
        }
    }

    /// The code of `x`, rounded to nearest even; `values` are the finite non-negative values.
    fn encode(&self, x: f64, saturate: bool, values: &[f64]) -> u8 {
        let sign = if x.is_sign_negative() { self.sign } else { 0 };
        // NaN keeps its sign where the format has signed NaNs.
        let nan = if self.uz || self.sign == 0x8 { self.nan } else { self.nan | sign };
        if x.is_nan() {
            return nan;
        }
        let a = x.abs();
        let max = self.max_code;
        let overflow = || -> u8 {
            match self.inf {
                _ if saturate || self.sign == 0x8 => max | sign,
                Some(inf) => inf | sign,
                None => nan,
            }
        };
        let code = if a.is_infinite() {
            return overflow();
        } else if a > values[max as usize] {
            let top = values[max as usize];
            let next = top + (top - values[max as usize - 1]);
            let mid = (top + next) / 2.0;
            if saturate || a < mid || (a == mid && max % 2 == 0) {
                max
            } else {
                return overflow();
            }
        } else {
            // The last value not above `a`, then the nearer of it and its successor.
            let i = values.partition_point(|&v| v <= a).saturating_sub(1);
            if i + 1 >= values.len() || a == values[i] {
                i as u8
            } else {
                let (lo, hi) = (a - values[i], values[i + 1] - a);
                if lo < hi || (lo == hi && i % 2 == 0) {
                    i as u8
                } else {
                    (i + 1) as u8
                }
            }
        };
        if code == 0 && self.uz {
            0
        } else {
            code | sign
        }
    }

    fn values(&self) -> Vec<f64> {
        (0..=self.max_code).map(|c| self.value(c)).collect()
    }
}

/// Bits per element of the packed integer types, and whether they are signed.
fn packed_int(dtype: DataType) -> Option<(u32, bool)> {
    Some(match dtype {
        DataType::Int4 => (4, true),
        DataType::Uint4 => (4, false),
        DataType::Int2 => (2, true),
        DataType::Uint2 => (2, false),
        _ => return None,
    })
}

/// The raw codes (one per element, unpacked) of a small-type view.
fn codes(v: &TensorView<'_>) -> Result<Vec<u8>> {
    let bytes = v.bytes()?;
    let n = v.len();
    let bits = v.dtype().bit_width();
    if bits == 8 {
        return Ok(bytes[..n].to_vec());
    }
    let mask = ((1u16 << bits) - 1) as u8;
    Ok((0..n).map(|j| (bytes[j * bits / 8] >> ((j * bits) % 8)) & mask).collect())
}

/// A tensor of `dtype` from one code per element (packed for sub-byte types).
fn from_codes(dtype: DataType, shape: Vec<usize>, codes: &[u8]) -> Result<Tensor> {
    let bits = dtype.bit_width();
    let bytes = if bits == 8 {
        codes.to_vec()
    } else {
        let mut out = vec![0u8; (codes.len() * bits).div_ceil(8)];
        let mask = ((1u16 << bits) - 1) as u8;
        for (j, &c) in codes.iter().enumerate() {
            out[j * bits / 8] |= (c & mask) << ((j * bits) % 8);
        }
        out
    };
    Tensor::from_bytes(dtype, shape, HostBuffer::from_vec(bytes))
}

/// The elements of a small-type view as f64 (exact).
pub(crate) fn to_f64s(v: &TensorView<'_>) -> Result<Vec<f64>> {
    let cs = codes(v)?;
    let dtype = v.dtype();
    if let Some((bits, signed)) = packed_int(dtype) {
        return Ok(cs.iter().map(|&c| sign_extend(c, bits, signed) as f64).collect());
    }
    if dtype == DataType::Float8E8M0 {
        return Ok(cs.iter().map(|&c| if c == 0xFF { f64::NAN } else { 2f64.powi(i32::from(c) - 127) }).collect());
    }
    let f = format(dtype).ok_or_else(|| Error::DType { expected: DataType::Float8E4M3FN, found: dtype })?;
    Ok(cs.iter().map(|&c| f.decode(c)).collect())
}

fn sign_extend(c: u8, bits: u32, signed: bool) -> i64 {
    let v = i64::from(c);
    if signed && v >= 1 << (bits - 1) {
        v - (1 << bits)
    } else {
        v
    }
}

/// The range of a packed integer type.
pub(crate) fn int_range(dtype: DataType) -> Option<(i64, i64)> {
    packed_int(dtype)
        .map(|(bits, signed)| if signed { (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) } else { (0, (1 << bits) - 1) })
}

/// A tensor of a packed integer type from integers, keeping their low bits.
pub(crate) fn from_ints(dtype: DataType, shape: Vec<usize>, values: &[i64]) -> Result<Tensor> {
    let cs: Vec<u8> = values.iter().map(|&v| (v & 0xFF) as u8).collect();
    from_codes(dtype, shape, &cs)
}

/// A tensor of a small float type from values (rounded to nearest even; see the module doc
/// for `saturate`), or of a packed integer type (truncated toward zero, low bits kept).
pub(crate) fn from_f64s(
    dtype: DataType,
    shape: Vec<usize>,
    values: &[f64],
    saturate: bool,
    round: RoundMode,
) -> Result<Tensor> {
    if packed_int(dtype).is_some() {
        let ints: Vec<i64> = values.iter().map(|&v| if v.is_finite() { v.trunc() as i64 } else { 0 }).collect();
        return from_ints(dtype, shape, &ints);
    }
    if dtype == DataType::Float8E8M0 {
        let cs: Vec<u8> = values.iter().map(|&v| e8m0(v as f32, saturate, round)).collect();
        return from_codes(dtype, shape, &cs);
    }
    let f = format(dtype).ok_or_else(|| Error::DType { expected: DataType::Float8E4M3FN, found: dtype })?;
    let table = f.values();
    let cs: Vec<u8> = values.iter().map(|&v| f.encode(v, saturate, &table)).collect();
    from_codes(dtype, shape, &cs)
}

/// float8e8m0 (a biased power-of-two exponent) from the bits of an f32, as the ONNX reference
/// computes it.
fn e8m0(x: f32, saturate: bool, round: RoundMode) -> u8 {
    let bits = x.to_bits();
    let exp = (bits >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = match round {
        RoundMode::Down => false,
        RoundMode::Up => bits & 0x7F_FFFF != 0,
        RoundMode::Nearest => {
            let (g, r, s) = (bits & 0x40_0000 != 0, bits & 0x20_0000 != 0, bits & 0x1F_FFFF != 0);
            g && (r || s || exp > 0)
        }
    };
    let up = up && !(saturate && exp == 0xFE);
    (exp + u32::from(up)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(dtype: DataType, xs: &[f32], saturate: bool) -> (Vec<u8>, Vec<f64>) {
        let values: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        let t = from_f64s(dtype, vec![xs.len()], &values, saturate, RoundMode::Up).unwrap();
        let v = t.view().unwrap();
        (codes(&v).unwrap(), to_f64s(&v).unwrap())
    }

    #[test]
    fn float8_matches_ml_dtypes() {
        // np.array(x, float32).astype(ml_dtypes.float8_*).view(uint8)
        let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 500.0, 464.0, 463.0, -0.0, 0.3, -1e-9, 1.0625, 0.0019];
        let (c, _) = round_trip(DataType::Float8E4M3FN, &x, false);
        assert_eq!(c, vec![127, 127, 255, 127, 126, 126, 128, 42, 128, 56, 1]);
        let (c, _) = round_trip(DataType::Float8E4M3FN, &x, true);
        assert_eq!(&c[..6], &[127, 126, 254, 126, 126, 126]);
        let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 70000.0, 61440.0, 61439.0, -0.0, 0.3, 1.125];
        let (c, v) = round_trip(DataType::Float8E5M2, &x, false);
        assert_eq!(c, vec![126, 124, 252, 124, 124, 123, 128, 53, 60]);
        assert!(v[1].is_infinite() && v[5] == 57344.0);
        let x = [f32::NAN, f32::INFINITY, 300.0, -0.0, -1e-9, -0.3, 240.0];
        let (c, v) = round_trip(DataType::Float8E4M3FNUZ, &x, false);
        assert_eq!(c, vec![128, 128, 128, 0, 0, 178, 127]);
        assert!(v[0].is_nan() && v[6] == 240.0 && v[5] == -0.3125);
        let (c, _) = round_trip(DataType::Float8E5M2FNUZ, &[f32::NAN, 1e6, 0.3, -2.5], false);
        assert_eq!(c, vec![128, 128, 57, 197]);
    }

    #[test]
    fn float4_e8m0_and_packed_ints() {
        // float4_e2m1fn: [nan, inf, -inf, 7, 6.5, 5, -0.0, 0.25, 0.2, 100, -3.1] -> codes
        let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 7.0, 6.5, 5.0, -0.0, 0.25, 0.2, 100.0, -3.1];
        let (c, v) = round_trip(DataType::Float4E2M1, &x, false);
        assert_eq!(c, vec![8, 7, 15, 7, 7, 6, 8, 0, 0, 7, 13]);
        assert_eq!(v[10], -3.0);
        let t = from_f64s(DataType::Float4E2M1, vec![3], &[1.0, -6.0, 0.5], false, RoundMode::Up).unwrap();
        assert_eq!(t.view().unwrap().bytes().unwrap(), &[0xF2, 0x01]);
        // to_float8e8m0 of [1, 3, 0.7, 2^127 * 1.5, nan] for each round mode
        let x = [1.0f32, 3.0, 0.7, 1.5 * 2f32.powi(127), f32::NAN];
        for (mode, want) in [
            (RoundMode::Up, [127, 129, 127, 254, 255]),
            (RoundMode::Down, [127, 128, 126, 254, 255]),
            (RoundMode::Nearest, [127, 129, 126, 254, 255]),
        ] {
            let cs: Vec<u8> = x.iter().map(|&v| e8m0(v, true, mode)).collect();
            assert_eq!(cs, want, "{mode:?}");
        }
        assert_eq!(e8m0(1.5 * 2f32.powi(127), false, RoundMode::Up), 255);
        // ml_dtypes: [0.5,1.5,2.5,-2.5,7.9,8,9,-9,17,nan,inf,-1.7] as int4 / uint4
        let x = [0.5, 1.5, 2.5, -2.5, 7.9, 8.0, 9.0, -9.0, 17.0, f32::NAN, f32::INFINITY, -1.7];
        let (_, v) = round_trip(DataType::Int4, &x, false);
        assert_eq!(v, vec![0., 1., 2., -2., 7., -8., -7., 7., 1., 0., 0., -1.]);
        let (_, v) = round_trip(DataType::Uint4, &x, false);
        assert_eq!(v, vec![0., 1., 2., 14., 7., 8., 9., 7., 1., 0., 0., 15.]);
        let (c, v) = round_trip(DataType::Int2, &x[..5], false);
        assert_eq!((c, v), (vec![0, 1, 2, 2, 3], vec![0., 1., -2., -2., -1.]));
        assert_eq!(int_range(DataType::Int2), Some((-2, 1)));
        assert_eq!(int_range(DataType::Uint4), Some((0, 15)));
    }
}
