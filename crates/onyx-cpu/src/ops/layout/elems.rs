//! Element access shared by the kernels that only move elements around (shape, layout, gather,
//! resize): every fixed-size type is handled as the unsigned integer of its width, strings as
//! `String`, so one generic function serves every ONNX type.

use std::borrow::Cow;

use onyx_core::ep::ValueRef;
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

/// An element type that kernels move without looking at: `u8`/`u16`/`u32`/`u64` stand for
/// every type of that width (bool, float8, f16, f32, complex64, ...), `String` for strings.
pub(crate) trait Elem: Clone + Default + Send + Sync + 'static {
    /// The elements of `view` (borrowed when aligned, copied otherwise).
    fn read<'a>(view: &TensorView<'a>) -> Result<Cow<'a, [Self]>>;
    /// A tensor of `dtype` holding `data`.
    fn tensor(dtype: DataType, shape: Vec<usize>, data: Vec<Self>) -> Result<Tensor>;
}

macro_rules! fixed_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn read<'a>(view: &TensorView<'a>) -> Result<Cow<'a, [Self]>> {
                Ok(typed::<$t>(view.bytes()?))
            }
            fn tensor(dtype: DataType, shape: Vec<usize>, data: Vec<Self>) -> Result<Tensor> {
                onyx_core::host_pool::tensor_of(dtype, shape, data)
            }
        }
    )*};
}
fixed_elem!(u8, u16, u32, u64);

impl Elem for String {
    fn read<'a>(view: &TensorView<'a>) -> Result<Cow<'a, [Self]>> {
        Ok(Cow::Borrowed(view.strings()?))
    }
    fn tensor(_dtype: DataType, shape: Vec<usize>, data: Vec<Self>) -> Result<Tensor> {
        Tensor::from_strings(shape, data)
    }
}

/// Little-endian bytes viewed as `T`: borrowed when aligned, copied otherwise.
pub(crate) fn typed<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// A value holding `data` as a tensor of `dtype`.
pub(crate) fn value<T: Elem>(dtype: DataType, shape: Vec<usize>, data: Vec<T>) -> Result<Value> {
    T::tensor(dtype, shape, data).map(Value::Tensor)
}

/// The error for a dtype that element-moving kernels cannot handle (packed sub-byte types,
/// complex128).
pub(crate) fn unsupported_dtype(at: &Location, dtype: DataType) -> Error {
    Error::Unsupported(format!("{at} on {dtype} tensors"))
}

/// A vector of `n` default elements, or an error (instead of an abort) when it cannot be
/// allocated.
pub(crate) fn alloc<T: Clone + Default>(n: usize, at: &Location) -> Result<Vec<T>> {
    check_limit::<T>(n, at)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::node(at, format!("cannot allocate an output of {n} elements")))?;
    v.resize(n, T::default());
    Ok(v)
}

/// An empty vector with room for `n` elements, or an error when it cannot be allocated.
pub(crate) fn with_capacity<T>(n: usize, at: &Location) -> Result<Vec<T>> {
    check_limit::<T>(n, at)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::node(at, format!("cannot allocate an output of {n} elements")))?;
    Ok(v)
}

/// Checks an output of `n` elements of `T` against the session's limits (before allocating).
fn check_limit<T>(n: usize, at: &Location) -> Result<()> {
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    onyx_core::session::limits::check_alloc(bytes, || format!("{at}: an output of {n} elements"))
}

/// Checks an output of `dtype` with `dims` (whose count may overflow `usize`) against the
/// session's limits, before the index maps and the output of an Expand or Tile are allocated.
/// The per-axis index maps (one entry per output index of each axis) are checked too: they
/// exist even when another dim makes the output empty.
pub(crate) fn check_output(dtype: DataType, dims: impl IntoIterator<Item = u128>, at: &Location) -> Result<()> {
    use onyx_core::session::limits::{bytes_of, check_alloc};
    let dims: Vec<u128> = dims.into_iter().collect();
    let count = dims.iter().fold(1u128, |n, &d| n.saturating_mul(d));
    check_alloc(bytes_of(dtype, count), || format!("{at}: an output of {count} {dtype} elements"))?;
    let entries = dims.iter().fold(0u128, |n, &d| n.saturating_add(d));
    let map_bytes = entries.saturating_mul(std::mem::size_of::<Option<usize>>() as u128);
    check_alloc(u64::try_from(map_bytes).unwrap_or(u64::MAX), || format!("{at}: index maps of {entries} entries"))
}

/// Runs `$body` with `$T` bound to the [`Elem`] type that moves elements of `$dtype`; an
/// `Unsupported` error for packed and 128-bit types.
macro_rules! with_elem {
    ($dtype:expr, $at:expr, $T:ident => $body:expr) => {{
        let dtype__: onyx_core::DataType = $dtype;
        if dtype__ == onyx_core::DataType::String {
            type $T = String;
            $body
        } else {
            $crate::dispatch_by_size!(dtype__, $T => $body,
                _ => Err($crate::ops::layout::elems::unsupported_dtype($at, dtype__)))
        }
    }};
}
pub(crate) use with_elem;

/// Input `i` as it was given (view or value), or an error when it is missing.
pub(crate) fn input_ref<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, at: &Location) -> Result<ValueRef<'r>> {
    inputs.get(i).copied().flatten().ok_or_else(|| Error::input(at, i, "a value", "no input"))
}

/// The tensor of `input` with a new shape of equal element count: shares the elements of an
/// owned value, copies a borrowed view.
pub(crate) fn reshaped(input: ValueRef<'_>, shape: Vec<usize>, at: &Location) -> Result<Value> {
    let tensor = match input {
        ValueRef::Value(v) => v.as_tensor().map_err(|e| e.at(at))?.reshaped(shape),
        ValueRef::View(v) => v.to_tensor().reshaped(shape),
    };
    tensor.map(Value::Tensor).map_err(|e| e.at(at))
}

/// An integer input (of one of `allowed` types) read as i64 values.
pub(crate) fn int_values(view: &TensorView<'_>, i: usize, allowed: &[DataType], at: &Location) -> Result<Vec<i64>> {
    crate::ops::util::expect_dtype(view, allowed, i, at)?;
    crate::ops::util::to_i64(view).map_err(|e| e.at(at))
}

/// A scalar tensor of numeric or bool `dtype` holding `v` (converted as a cast would).
pub(crate) fn scalar(dtype: DataType, v: f64, at: &Location) -> Result<Tensor> {
    use half::{bf16, f16};
    Ok(match dtype {
        DataType::Float => Tensor::scalar(v as f32),
        DataType::Double => Tensor::scalar(v),
        DataType::Float16 => Tensor::scalar(f16::from_f64(v)),
        DataType::BFloat16 => Tensor::scalar(bf16::from_f64(v)),
        DataType::Int8 => Tensor::scalar(v as i8),
        DataType::Int16 => Tensor::scalar(v as i16),
        DataType::Int32 => Tensor::scalar(v as i32),
        DataType::Int64 => Tensor::scalar(v as i64),
        DataType::Uint8 => Tensor::scalar(v as u8),
        DataType::Uint16 => Tensor::scalar(v as u16),
        DataType::Uint32 => Tensor::scalar(v as u32),
        DataType::Uint64 => Tensor::scalar(v as u64),
        DataType::Bool => Tensor::from_bools(vec![], vec![v != 0.0])?,
        other => return Err(unsupported_dtype(at, other)),
    })
}

/// Any numeric tensor read as f64 values (how OneHot and Range read their scalars).
pub(crate) fn numeric_f64(view: &TensorView<'_>, i: usize, at: &Location) -> Result<Vec<f64>> {
    use half::{bf16, f16};
    let b = view.bytes()?;
    Ok(match view.dtype() {
        DataType::Float => typed::<f32>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Double => typed::<f64>(b).into_owned(),
        DataType::Float16 => typed::<f16>(b).iter().map(|x| x.to_f64()).collect(),
        DataType::BFloat16 => typed::<bf16>(b).iter().map(|x| x.to_f64()).collect(),
        DataType::Int8 => typed::<i8>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Int16 => typed::<i16>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Int32 => typed::<i32>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Int64 => typed::<i64>(b).iter().map(|&x| x as f64).collect(),
        DataType::Uint8 => typed::<u8>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Uint16 => typed::<u16>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Uint32 => typed::<u32>(b).iter().map(|&x| f64::from(x)).collect(),
        DataType::Uint64 => typed::<u64>(b).iter().map(|&x| x as f64).collect(),
        other => return Err(Error::input(at, i, "a numeric tensor", other.name())),
    })
}

/// Row-major strides of `shape` (in elements), or an error when they overflow (possible only
/// for shapes with a zero dim and huge others).
pub(crate) fn strides(shape: &[usize], at: &Location) -> Result<Vec<usize>> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1]
            .checked_mul(shape[i + 1])
            .ok_or_else(|| Error::node(at, format!("shape {shape:?} is too large")))?;
    }
    Ok(s)
}

/// Row-major element count of `shape`, or an error naming the node.
pub(crate) fn count(shape: &[usize], at: &Location) -> Result<usize> {
    onyx_core::element_count(shape).map_err(|e| e.at(at))
}

/// Whether a loop over `n` elements is worth splitting across threads.
pub(crate) fn parallel(n: usize) -> bool {
    n >= 1 << 15
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_bytes_are_copied() {
        let words = [0x0102_0304u32, 0x0506_0708, 0x090a_0b0c];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        assert!(matches!(typed::<u32>(bytes), Cow::Borrowed(_)));
        let shifted = &bytes[1..9];
        let got = typed::<u32>(shifted);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], u32::from_le_bytes([shifted[0], shifted[1], shifted[2], shifted[3]]));
    }

    #[test]
    fn packed_types_are_unsupported() {
        let at = Location::default();
        let r: Result<usize> = with_elem!(DataType::Int4, &at, T => Ok(std::mem::size_of::<T>()));
        assert!(matches!(r, Err(Error::Unsupported(_))));
        let r: Result<usize> = with_elem!(DataType::Float16, &at, T => Ok(std::mem::size_of::<T>()));
        assert_eq!(r.unwrap(), 2);
        assert!(alloc::<u64>(usize::MAX / 4, &at).is_err());
    }
}
