//! TensorProto to `Tensor`, for every element type and every encoding: `raw_data`, the typed
//! `*_data` fields, `string_data` and external data.

use std::sync::Arc;

use onyx_core::{element_count, DataType, Error, HostBuffer, Result, Tensor};

use crate::external::ExternalData;
use crate::proto::tensor_proto::DataLocation;
use crate::proto::TensorProto;
use crate::types::data_type;

/// Converts a TensorProto, moving (not copying) its data where the layout allows.
/// `ext` resolves external data.
pub(crate) fn tensor_from_proto(mut proto: TensorProto, ext: &mut ExternalData) -> Result<Tensor> {
    let name = tensor_name(&proto);
    let dtype = data_type(proto.data_type.unwrap_or(0), &name)?;
    let shape = shape_from_dims(&proto.dims, &name)?;
    let what = format!("{name} ({dtype} {shape:?})");
    if proto.segment.is_some() {
        return Err(Error::InvalidModel(format!("{what}: segmented tensors are not supported")));
    }
    let count = element_count(&shape).map_err(|e| crate::in_context(e, &what))?;
    let tensor = if is_external(&proto, &what)? {
        let bytes = ext.tensor_bytes(&what, dtype, count, &proto.external_data)?;
        Tensor::from_bytes(dtype, shape, bytes)
    } else if dtype == DataType::String {
        strings(&mut proto, shape, count, &what)
    } else {
        let bytes = match proto.raw_data.take() {
            Some(raw) if !raw.is_empty() || !has_typed_data(&proto) => raw_bytes(raw, dtype, count, &what)?,
            _ => typed_bytes(&mut proto, dtype, count, &what)?,
        };
        Tensor::from_bytes(dtype, shape, bytes)
    };
    tensor.map_err(|e| crate::in_context(e, &what))
}

/// `tensor 'name'`, or `an unnamed tensor`, for messages.
pub(crate) fn tensor_name(proto: &TensorProto) -> String {
    match proto.name.as_deref() {
        Some(n) if !n.is_empty() => format!("tensor '{n}'"),
        _ => "an unnamed tensor".to_string(),
    }
}

/// Dimensions as sizes; negative dimensions are an error naming `what`.
pub(crate) fn shape_from_dims(dims: &[i64], what: &str) -> Result<Vec<usize>> {
    dims.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| Error::InvalidModel(format!("{what}: dimension {d} of {dims:?} is negative")))
        })
        .collect()
}

fn is_external(proto: &TensorProto, what: &str) -> Result<bool> {
    match proto.data_location.unwrap_or(0) {
        l if l == DataLocation::Default as i32 => Ok(false),
        l if l == DataLocation::External as i32 => Ok(true),
        l => Err(Error::InvalidModel(format!("{what}: data_location {l} is neither DEFAULT (0) nor EXTERNAL (1)"))),
    }
}

fn has_typed_data(p: &TensorProto) -> bool {
    !(p.float_data.is_empty()
        && p.int32_data.is_empty()
        && p.int64_data.is_empty()
        && p.double_data.is_empty()
        && p.uint64_data.is_empty()
        && p.string_data.is_empty())
}

fn strings(proto: &mut TensorProto, shape: Vec<usize>, count: usize, what: &str) -> Result<Tensor> {
    if proto.raw_data.as_ref().is_some_and(|r| !r.is_empty()) {
        return Err(Error::InvalidModel(format!("{what}: string tensors must use string_data, not raw_data")));
    }
    check_count(proto.string_data.len(), count, "string_data", what)?;
    let data = std::mem::take(&mut proto.string_data)
        .into_iter()
        .map(|s| String::from_utf8(s).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
        .collect();
    Tensor::from_strings(shape, data)
}

fn check_count(found: usize, expected: usize, field: &str, what: &str) -> Result<()> {
    if found != expected {
        return Err(Error::InvalidModel(format!(
            "{what}: the shape needs {expected} values, found {found} in {field}"
        )));
    }
    Ok(())
}

/// The alignment a buffer of `dtype` needs to be viewed as its Rust element type.
pub(crate) fn element_align(dtype: DataType) -> usize {
    match dtype {
        DataType::Complex64 => 4,
        DataType::Complex128 => 8,
        d => (d.bit_width() / 8).max(1),
    }
}

/// Little-endian `raw_data`: checked for length, bools normalized to 0/1, moved into the
/// tensor unless misaligned.
fn raw_bytes(mut raw: Vec<u8>, dtype: DataType, count: usize, what: &str) -> Result<HostBuffer> {
    let expected = dtype
        .byte_len(count)
        .ok_or_else(|| Error::InvalidModel(format!("{what}: {count} elements do not fit in memory")))?;
    if raw.len() != expected {
        return Err(Error::InvalidModel(format!(
            "{what}: the shape needs {count} elements ({expected} bytes), found {} bytes in raw_data",
            raw.len()
        )));
    }
    if dtype == DataType::Bool {
        normalize_bools(&mut raw);
    }
    aligned(raw, element_align(dtype))
}

/// Makes every nonzero byte 1, as booleans are stored.
pub(crate) fn normalize_bools(bytes: &mut [u8]) {
    for b in bytes.iter_mut().filter(|b| **b > 1) {
        *b = 1;
    }
}

/// The bytes as a buffer, moved when they are aligned for `align`, else copied into u64 words.
pub(crate) fn aligned(bytes: Vec<u8>, align: usize) -> Result<HostBuffer> {
    if bytes.as_ptr().align_offset(align) == 0 {
        return Ok(HostBuffer::from_vec(bytes));
    }
    copy_aligned(&bytes)
}

/// A copy of `bytes` in u64 words (aligned for every element type).
pub(crate) fn copy_aligned(bytes: &[u8]) -> Result<HostBuffer> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    HostBuffer::new(Arc::new(words), 0, bytes.len())
}

/// The typed field that holds `dtype`'s elements, checked for length and converted.
fn typed_bytes(p: &mut TensorProto, dtype: DataType, count: usize, what: &str) -> Result<HostBuffer> {
    use DataType::*;
    let pairs = count.saturating_mul(2);
    match dtype {
        Float | Complex64 => {
            check_count(p.float_data.len(), if dtype == Float { count } else { pairs }, "float_data", what)?;
            Ok(HostBuffer::from_vec(std::mem::take(&mut p.float_data)))
        }
        Double | Complex128 => {
            check_count(p.double_data.len(), if dtype == Double { count } else { pairs }, "double_data", what)?;
            Ok(HostBuffer::from_vec(std::mem::take(&mut p.double_data)))
        }
        Int64 => {
            check_count(p.int64_data.len(), count, "int64_data", what)?;
            Ok(HostBuffer::from_vec(std::mem::take(&mut p.int64_data)))
        }
        Uint64 => {
            check_count(p.uint64_data.len(), count, "uint64_data", what)?;
            Ok(HostBuffer::from_vec(std::mem::take(&mut p.uint64_data)))
        }
        Uint32 => {
            check_count(p.uint64_data.len(), count, "uint64_data", what)?;
            let v = p.uint64_data.iter().map(|&x| u32::try_from(x).map_err(|_| out_of_range(x, dtype, what)));
            Ok(HostBuffer::from_vec(v.collect::<Result<Vec<u32>>>()?))
        }
        Int32 => {
            check_count(p.int32_data.len(), count, "int32_data", what)?;
            Ok(HostBuffer::from_vec(std::mem::take(&mut p.int32_data)))
        }
        Int16 | Uint16 | Float16 | BFloat16 => {
            check_count(p.int32_data.len(), count, "int32_data", what)?;
            Ok(HostBuffer::from_vec(narrow::<u16>(&p.int32_data, -0x8000, 0xFFFF, dtype, what)?))
        }
        Bool => {
            check_count(p.int32_data.len(), count, "int32_data", what)?;
            Ok(HostBuffer::from_vec(p.int32_data.iter().map(|&x| u8::from(x != 0)).collect::<Vec<u8>>()))
        }
        String => Err(Error::InvalidModel(format!("{what}: string tensors use string_data"))),
        _ => packed_bytes(p, dtype, count, what),
    }
}

/// Types of at most 8 bits: `int32_data` holds one byte each, packing 2 (4-bit) or 4 (2-bit)
/// elements per byte, first element in the low bits.
fn packed_bytes(p: &TensorProto, dtype: DataType, count: usize, what: &str) -> Result<HostBuffer> {
    let per_byte = 8 / dtype.bit_width().max(1);
    let field = if per_byte > 1 { format!("int32_data (packed {per_byte} per value)") } else { "int32_data".into() };
    check_count(p.int32_data.len(), count.div_ceil(per_byte), &field, what)?;
    Ok(HostBuffer::from_vec(narrow::<u8>(&p.int32_data, -0x80, 0xFF, dtype, what)?))
}

/// Truncates each value to the width of `T` after checking it fits that width's signed or
/// unsigned range (`min..=max`).
fn narrow<T: bytemuck::Pod + TryFrom<u32>>(
    values: &[i32],
    min: i32,
    max: i32,
    dtype: DataType,
    what: &str,
) -> Result<Vec<T>> {
    values
        .iter()
        .map(|&x| {
            if x < min || x > max {
                return Err(out_of_range(x, dtype, what));
            }
            let bits = u32::from_ne_bytes(x.to_ne_bytes()) & (max as u32);
            T::try_from(bits).map_err(|_| out_of_range(x, dtype, what))
        })
        .collect()
}

fn out_of_range(x: impl std::fmt::Display, dtype: DataType, what: &str) -> Error {
    Error::InvalidModel(format!("{what}: value {x} does not fit a {dtype} element"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn proto(dtype: DataType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: Some("t".into()),
            data_type: Some(dtype.onnx_code()),
            dims: dims.to_vec(),
            ..Default::default()
        }
    }

    fn convert(p: TensorProto) -> Result<Tensor> {
        tensor_from_proto(p, &mut ExternalData::new(None))
    }

    fn bytes_of(t: &Tensor) -> Vec<u8> {
        t.view().unwrap().bytes().unwrap().to_vec()
    }

    /// One case: a proto filled by `fill`, and the little-endian bytes written by hand.
    struct Case {
        dtype: DataType,
        dims: &'static [i64],
        fill: fn(&mut TensorProto),
        want: Vec<u8>,
    }

    fn le<T: bytemuck::Pod>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn typed_fields_of_every_type() {
        use DataType::*;
        let cases = vec![
            Case {
                dtype: Float,
                dims: &[3],
                fill: |p| p.float_data = vec![1.5, -2.0, 3.25],
                want: le(&[1.5f32, -2.0, 3.25]),
            },
            Case {
                dtype: Complex64,
                dims: &[2],
                fill: |p| p.float_data = vec![1.0, 2.0, 3.0, 4.0],
                want: le(&[1.0f32, 2.0, 3.0, 4.0]),
            },
            Case {
                dtype: Double,
                dims: &[1, 3],
                fill: |p| p.double_data = vec![0.5, -7.0, 1e300],
                want: le(&[0.5f64, -7.0, 1e300]),
            },
            Case {
                dtype: Complex128,
                dims: &[1],
                fill: |p| p.double_data = vec![1.0, -1.0],
                want: le(&[1.0f64, -1.0]),
            },
            Case {
                dtype: Int64,
                dims: &[3],
                fill: |p| p.int64_data = vec![-1, i64::MAX, 7],
                want: le(&[-1i64, i64::MAX, 7]),
            },
            Case { dtype: Uint64, dims: &[2], fill: |p| p.uint64_data = vec![u64::MAX, 3], want: le(&[u64::MAX, 3]) },
            Case {
                dtype: Uint32,
                dims: &[3],
                fill: |p| p.uint64_data = vec![u32::MAX as u64, 0, 9],
                want: le(&[u32::MAX, 0, 9]),
            },
            Case {
                dtype: Int32,
                dims: &[3],
                fill: |p| p.int32_data = vec![-5, 6, i32::MIN],
                want: le(&[-5i32, 6, i32::MIN]),
            },
            Case {
                dtype: Int16,
                dims: &[3],
                fill: |p| p.int32_data = vec![-2, 300, -32768],
                want: le(&[-2i16, 300, -32768]),
            },
            Case { dtype: Uint16, dims: &[2], fill: |p| p.int32_data = vec![65535, 1], want: le(&[65535u16, 1]) },
            Case { dtype: Int8, dims: &[3], fill: |p| p.int32_data = vec![-3, 4, -128], want: le(&[-3i8, 4, -128]) },
            Case { dtype: Uint8, dims: &[3], fill: |p| p.int32_data = vec![255, 0, 17], want: vec![255, 0, 17] },
            Case { dtype: Bool, dims: &[3], fill: |p| p.int32_data = vec![1, 0, 5], want: vec![1, 0, 1] },
            // float16 1.0 = 0x3C00, -2.0 = 0xC000 (what onnx.helper.make_tensor writes).
            Case {
                dtype: Float16,
                dims: &[2],
                fill: |p| p.int32_data = vec![15360, 49152],
                want: le(&[f16::from_f32(1.0), f16::from_f32(-2.0)]),
            },
            Case {
                dtype: BFloat16,
                dims: &[2],
                fill: |p| p.int32_data = vec![0x3FC0, 0xC040],
                want: le(&[bf16::from_f32(1.5), bf16::from_f32(-3.0)]),
            },
            Case { dtype: Float8E4M3FN, dims: &[2], fill: |p| p.int32_data = vec![0x38, 0xC0], want: vec![0x38, 0xC0] },
            Case { dtype: Float8E4M3FNUZ, dims: &[1], fill: |p| p.int32_data = vec![0x40], want: vec![0x40] },
            Case { dtype: Float8E5M2, dims: &[1], fill: |p| p.int32_data = vec![0x3C], want: vec![0x3C] },
            Case { dtype: Float8E5M2FNUZ, dims: &[1], fill: |p| p.int32_data = vec![0x41], want: vec![0x41] },
            Case { dtype: Float8E8M0, dims: &[2], fill: |p| p.int32_data = vec![127, 128], want: vec![127, 128] },
            // int4 [1,-2,3,-8,7] packs to 0xE1, 0x83, 0x07 (onnx.helper.make_tensor gives 225,131,7).
            Case { dtype: Int4, dims: &[5], fill: |p| p.int32_data = vec![225, 131, 7], want: vec![0xE1, 0x83, 0x07] },
            Case { dtype: Uint4, dims: &[3], fill: |p| p.int32_data = vec![0x5F, 0x0A], want: vec![0x5F, 0x0A] },
            Case { dtype: Float4E2M1, dims: &[2], fill: |p| p.int32_data = vec![0x2A], want: vec![0x2A] },
            // uint2 [1,2,3,0,3] packs to 0b00_11_10_01 = 57, then 3.
            Case { dtype: Uint2, dims: &[5], fill: |p| p.int32_data = vec![57, 3], want: vec![57, 3] },
            Case { dtype: Int2, dims: &[4], fill: |p| p.int32_data = vec![-0x80 + 0x1B], want: vec![0x9B] },
        ];
        for c in cases {
            let mut p = proto(c.dtype, c.dims);
            (c.fill)(&mut p);
            let t = convert(p).unwrap_or_else(|e| panic!("{}: {e}", c.dtype));
            assert_eq!(t.dtype(), c.dtype);
            let shape: Vec<usize> = c.dims.iter().map(|&d| d as usize).collect();
            assert_eq!(t.shape(), &shape[..]);
            assert_eq!(bytes_of(&t), c.want, "{}", c.dtype);
        }
    }

    #[test]
    fn raw_data_of_every_type() {
        let mut rng = fastrand::Rng::with_seed(7);
        for dtype in DataType::ALL.into_iter().filter(|&d| d != DataType::String) {
            let dims = [3i64, 7];
            let n = dtype.byte_len(21).unwrap();
            let mut bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
            let mut p = proto(dtype, &dims);
            p.raw_data = Some(bytes.clone());
            let t = convert(p).unwrap();
            if dtype == DataType::Bool {
                bytes.iter_mut().for_each(|b| *b = u8::from(*b != 0));
            }
            assert_eq!(bytes_of(&t), bytes, "{dtype}");
        }
    }

    #[test]
    fn raw_data_is_moved_not_copied() {
        let values: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let raw = bytemuck::cast_slice::<f32, u8>(&values).to_vec();
        let ptr = raw.as_ptr();
        let mut p = proto(DataType::Float, &[37]);
        p.raw_data = Some(raw);
        let t = convert(p).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &values[..]);
        if ptr.align_offset(4) == 0 {
            assert_eq!(t.as_slice::<f32>().unwrap().as_ptr().cast::<u8>(), ptr, "aligned raw_data must not be copied");
        }
    }

    #[test]
    fn misaligned_bytes_are_copied_into_aligned_words() {
        let backing: Vec<u8> = (0..41u8).collect();
        let start = (0..8).find(|&i| backing[i..].as_ptr().align_offset(8) != 0).unwrap();
        let bytes = backing[start..start + 32].to_vec();
        let buf = copy_aligned(&bytes).unwrap();
        assert_eq!(buf.bytes(), &bytes[..]);
        assert_eq!(buf.bytes().as_ptr().align_offset(8), 0);
        let t = Tensor::from_bytes(DataType::Double, vec![4], buf).unwrap();
        let want: Vec<f64> = bytes.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(t.as_slice::<f64>().unwrap(), &want[..]);
    }

    #[test]
    fn strings_are_decoded_lossily() {
        let mut p = proto(DataType::String, &[3]);
        p.string_data = vec![b"abc".to_vec(), vec![0xFF, b'x'], vec![]];
        let t = convert(p).unwrap();
        let v = t.view().unwrap();
        assert_eq!(v.strings().unwrap(), &["abc".to_string(), "\u{FFFD}x".to_string(), String::new()]);
    }

    #[test]
    fn empty_and_scalar_tensors() {
        let t = convert(proto(DataType::Float, &[0, 3])).unwrap();
        assert_eq!(t.shape(), &[0, 3]);
        let mut p = proto(DataType::Int64, &[]);
        p.int64_data = vec![42];
        assert_eq!(convert(p).unwrap().as_slice::<i64>().unwrap(), &[42]);
    }

    #[test]
    fn invalid_tensors_are_errors() {
        struct Bad {
            fill: fn(&mut TensorProto),
            needle: &'static str,
        }
        let cases = [
            Bad { fill: |p| p.float_data = vec![1.0; 5], needle: "needs 6 values, found 5 in float_data" },
            Bad { fill: |p| p.raw_data = Some(vec![0; 20]), needle: "found 20 bytes in raw_data" },
            Bad { fill: |p| p.dims = vec![2, -3], needle: "dimension -3" },
            Bad { fill: |p| p.data_type = Some(0), needle: "element type code 0" },
            Bad { fill: |p| p.data_type = Some(42), needle: "element type code 42" },
            Bad { fill: |p| p.segment = Some(Default::default()), needle: "segmented" },
            Bad { fill: |p| p.data_location = Some(3), needle: "data_location 3" },
            Bad {
                fill: |p| {
                    p.data_type = Some(DataType::Int8.onnx_code());
                    p.int32_data = vec![1, 2, 3, 4, 5, 300]
                },
                needle: "value 300 does not fit a int8",
            },
            Bad {
                fill: |p| {
                    p.data_type = Some(DataType::Uint32.onnx_code());
                    p.uint64_data = vec![1 << 40; 6]
                },
                needle: "does not fit a uint32",
            },
            Bad {
                fill: |p| {
                    p.data_type = Some(DataType::Int4.onnx_code());
                    p.int32_data = vec![1; 6]
                },
                needle: "needs 3 values, found 6 in int32_data (packed 2 per value)",
            },
            Bad {
                fill: |p| {
                    p.data_type = Some(DataType::String.onnx_code());
                    p.raw_data = Some(vec![1])
                },
                needle: "string_data, not raw_data",
            },
            Bad {
                fill: |p| {
                    p.data_type = Some(DataType::String.onnx_code());
                    p.string_data = vec![vec![]]
                },
                needle: "needs 6 values, found 1 in string_data",
            },
            Bad { fill: |p| p.data_location = Some(1), needle: "external data" },
        ];
        for c in cases {
            let mut p = proto(DataType::Float, &[2, 3]);
            (c.fill)(&mut p);
            let err = convert(p).unwrap_err().to_string();
            assert!(err.contains("tensor 't'") && err.contains(c.needle), "{err} (want {})", c.needle);
        }
    }
}
