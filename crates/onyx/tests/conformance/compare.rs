//! Comparing a run's outputs with ONNX's expected values as ONNX's backend runner does: same
//! kind, dtype and shape; floating-point elements within `atol + rtol * |want|` (NaN matches NaN,
//! infinities must be equal); strings exactly. Integers and booleans are compared exactly, which
//! is stricter than NumPy's `assert_allclose` on large integers.

use onyx::{DataType, Tensor, Value};

/// Relative and absolute tolerance of a comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance, scaled by the expected element.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// The elements of a tensor in a form that can be compared.
enum Elements {
    /// Floating-point and complex types (complex as interleaved real, imaginary).
    Float(Vec<f64>),
    /// Integer and boolean types.
    Int(Vec<i128>),
    /// Strings.
    Str(Vec<String>),
}

/// `Ok` when `got` matches `want` within `tol`; otherwise what differs.
pub fn compare_values(got: &Value, want: &Value, tol: Tolerance) -> Result<(), String> {
    match (got, want) {
        (Value::Tensor(g), Value::Tensor(w)) => compare_tensors(g, w, tol),
        (Value::Sequence(g), Value::Sequence(w)) => compare_items(&g.items, &w.items, tol),
        (Value::Map(g), Value::Map(w)) => {
            compare_tensors(&g.keys, &w.keys, tol).map_err(|e| format!("map keys: {e}"))?;
            compare_items(&g.values.items, &w.values.items, tol).map_err(|e| format!("map values: {e}"))
        }
        (Value::Optional(g), Value::Optional(w)) => match (&g.value, &w.value) {
            (Some(g), Some(w)) => compare_values(g, w, tol),
            (None, None) => Ok(()),
            (g, w) => Err(format!("optional is {}, want {}", presence(g.is_some()), presence(w.is_some()))),
        },
        (g, w) => Err(format!("got a {}, want a {}", g.describe(), w.describe())),
    }
}

/// "present" or "empty".
fn presence(present: bool) -> &'static str {
    if present {
        "present"
    } else {
        "empty"
    }
}

/// Compares sequences item by item.
fn compare_items(got: &[Value], want: &[Value], tol: Tolerance) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("got {} items, want {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        compare_values(g, w, tol).map_err(|e| format!("item {i}: {e}"))?;
    }
    Ok(())
}

/// Compares dtype, shape and elements.
pub fn compare_tensors(got: &Tensor, want: &Tensor, tol: Tolerance) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {}{:?}, want {}{:?}", got.dtype(), got.shape(), want.dtype(), want.shape()));
    }
    match (elements(got)?, elements(want)?) {
        (Elements::Float(g), Elements::Float(w)) => compare_floats(&g, &w, tol),
        (Elements::Int(g), Elements::Int(w)) => compare_exact(&g, &w),
        (Elements::Str(g), Elements::Str(w)) => compare_exact(&g, &w),
        _ => unreachable!("tensors of one dtype decode to one kind of elements"),
    }
}

/// Whether `g` is close enough to `w` (infinities only match themselves).
fn close(g: f64, w: f64, tol: Tolerance) -> bool {
    let finite = g.is_finite() && w.is_finite();
    (g.is_nan() && w.is_nan()) || g == w || (finite && (g - w).abs() <= tol.atol + tol.rtol * w.abs())
}

/// Element-wise closeness; the error gives the count, the largest errors and the first mismatch.
fn compare_floats(got: &[f64], want: &[f64], tol: Tolerance) -> Result<(), String> {
    let bad: Vec<usize> = (0..want.len()).filter(|&i| !close(got[i], want[i], tol)).collect();
    let Some(&first) = bad.first() else { return Ok(()) };
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for &i in &bad {
        let abs = (got[i] - want[i]).abs();
        max_abs = max_abs.max(if abs.is_nan() { f64::INFINITY } else { abs });
        max_rel = max_rel.max(if want[i] == 0.0 || abs.is_nan() { f64::INFINITY } else { abs / want[i].abs() });
    }
    Err(format!(
        "{} of {} elements differ (max abs err {max_abs:.3e}, max rel err {max_rel:.3e}); first at {first}: got {}, want {}",
        bad.len(),
        want.len(),
        got[first],
        want[first]
    ))
}

/// Exact equality; the error gives the count and the first mismatch.
fn compare_exact<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T]) -> Result<(), String> {
    let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    let Some(&first) = bad.first() else { return Ok(()) };
    Err(format!(
        "{} of {} elements differ; first at {first}: got {:?}, want {:?}",
        bad.len(),
        want.len(),
        got[first],
        want[first]
    ))
}

/// Decodes a host tensor's elements.
fn elements(t: &Tensor) -> Result<Elements, String> {
    use DataType::*;
    let view = t.view().map_err(|e| e.to_string())?;
    if t.dtype() == String {
        return Ok(Elements::Str(view.strings().map_err(|e| e.to_string())?.to_vec()));
    }
    let b = view.bytes().map_err(|e| e.to_string())?;
    let n = t.len();
    Ok(match t.dtype() {
        Float => Elements::Float(chunks(b, |c: [u8; 4]| f32::from_le_bytes(c) as f64)),
        Double => Elements::Float(chunks(b, f64::from_le_bytes)),
        Float16 => Elements::Float(chunks(b, |c| half::f16::from_le_bytes(c).to_f64())),
        BFloat16 => Elements::Float(chunks(b, |c| half::bf16::from_le_bytes(c).to_f64())),
        Complex64 => Elements::Float(chunks(b, |c: [u8; 4]| f32::from_le_bytes(c) as f64)),
        Complex128 => Elements::Float(chunks(b, f64::from_le_bytes)),
        Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ | Float8E8M0 => {
            Elements::Float(b.iter().map(|&x| minifloat(t.dtype(), x)).collect())
        }
        Float4E2M1 => Elements::Float(packed(b, n, 4).map(|x| minifloat(Float4E2M1, x)).collect()),
        Bool | Uint8 => Elements::Int(b.iter().map(|&x| x as i128).collect()),
        Int8 => Elements::Int(b.iter().map(|&x| x as i8 as i128).collect()),
        Uint16 => Elements::Int(chunks(b, |c| u16::from_le_bytes(c) as i128)),
        Int16 => Elements::Int(chunks(b, |c| i16::from_le_bytes(c) as i128)),
        Uint32 => Elements::Int(chunks(b, |c| u32::from_le_bytes(c) as i128)),
        Int32 => Elements::Int(chunks(b, |c| i32::from_le_bytes(c) as i128)),
        Uint64 => Elements::Int(chunks(b, |c| u64::from_le_bytes(c) as i128)),
        Int64 => Elements::Int(chunks(b, |c| i64::from_le_bytes(c) as i128)),
        Uint4 => Elements::Int(packed(b, n, 4).map(|x| x as i128).collect()),
        Uint2 => Elements::Int(packed(b, n, 2).map(|x| x as i128).collect()),
        Int4 => Elements::Int(packed(b, n, 4).map(|x| sign_extend(x, 4)).collect()),
        Int2 => Elements::Int(packed(b, n, 2).map(|x| sign_extend(x, 2)).collect()),
        String => unreachable!("strings are handled above"),
    })
}

/// Little-endian elements of `N` bytes each.
fn chunks<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks_exact gives N bytes"))).collect()
}

/// The first `n` elements of `bits` bits each, packed from the low bits of each byte up.
fn packed(bytes: &[u8], n: usize, bits: usize) -> impl Iterator<Item = u8> + '_ {
    let per_byte = 8 / bits;
    let mask = (1u8 << bits) - 1;
    (0..n).map(move |i| (bytes[i / per_byte] >> ((i % per_byte) * bits)) & mask)
}

/// A two's-complement value of `bits` bits.
fn sign_extend(x: u8, bits: u32) -> i128 {
    let shift = 8 - bits;
    (((x << shift) as i8) >> shift) as i128
}

/// Decodes the 8-bit and 4-bit float formats of ONNX (onnx.proto's FLOAT8* and FLOAT4E2M1).
fn minifloat(dtype: DataType, x: u8) -> f64 {
    use DataType::*;
    // (exponent bits, mantissa bits, bias)
    let (e_bits, m_bits, bias) = match dtype {
        Float8E4M3FN => (4, 3, 7),
        Float8E4M3FNUZ => (4, 3, 8),
        Float8E5M2 => (5, 2, 15),
        Float8E5M2FNUZ => (5, 2, 16),
        Float4E2M1 => (2, 1, 1),
        Float8E8M0 => return if x == 0xFF { f64::NAN } else { 2f64.powi(x as i32 - 127) },
        other => unreachable!("{other} is not a small float"),
    };
    let total = 1 + e_bits + m_bits;
    let sign = if (x >> (total - 1)) & 1 == 1 { -1.0 } else { 1.0 };
    let e = ((x >> m_bits) & ((1 << e_bits) - 1)) as i32;
    let m = (x & ((1 << m_bits) - 1)) as i32;
    let all_ones_e = e == (1 << e_bits) - 1;
    match dtype {
        Float8E4M3FNUZ | Float8E5M2FNUZ if x == 0x80 => return f64::NAN,
        Float8E4M3FN if all_ones_e && m == 7 => return f64::NAN,
        Float8E5M2 if all_ones_e => return if m == 0 { sign * f64::INFINITY } else { f64::NAN },
        _ => {}
    }
    let scale = 2f64.powi(-(m_bits as i32));
    let value =
        if e == 0 { m as f64 * scale * 2f64.powi(1 - bias) } else { (1.0 + m as f64 * scale) * 2f64.powi(e - bias) };
    sign * value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_floats_decode() {
        assert_eq!(minifloat(DataType::Float8E4M3FN, 0x7E), 448.0);
        assert!(minifloat(DataType::Float8E4M3FN, 0xFF).is_nan());
        assert_eq!(minifloat(DataType::Float8E5M2, 0x7C), f64::INFINITY);
        assert_eq!(minifloat(DataType::Float8E5M2FNUZ, 0x01), 2f64.powi(-17));
        assert_eq!(minifloat(DataType::Float4E2M1, 0x7), 6.0);
        assert_eq!(minifloat(DataType::Float4E2M1, 0xF), -6.0);
        assert_eq!(sign_extend(0xF, 4), -1);
        assert_eq!(packed(&[0x21], 2, 4).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn nan_matches_nan_and_tolerances_hold() {
        let tol = Tolerance { rtol: 1e-3, atol: 1e-7 };
        assert!(compare_floats(&[f64::NAN, 1.0005, f64::INFINITY], &[f64::NAN, 1.0, f64::INFINITY], tol).is_ok());
        let err = compare_floats(&[1.0, 2.1], &[1.0, 2.0], tol).unwrap_err();
        assert!(err.starts_with("1 of 2 elements differ"), "{err}");
        assert!(compare_floats(&[f64::NEG_INFINITY], &[f64::INFINITY], tol).is_err());
    }
}
