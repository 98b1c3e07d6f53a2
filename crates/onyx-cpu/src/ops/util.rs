//! Small helpers shared by the kernel families.

use onyx_core::ep::ValueRef;
use onyx_core::host_pool;
use onyx_core::{DataType, Element, Error, Location, Result, Tensor, TensorView, Value};

/// Required input `i` as a host tensor view, or an error naming the node and input.
pub fn input<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, at: &Location) -> Result<TensorView<'r>> {
    match inputs.get(i).copied().flatten() {
        Some(v) => v.tensor().map_err(|e| Error::input(at, i, "a host tensor", e.to_string())),
        None => Err(Error::input(at, i, "a tensor", "no input")),
    }
}

/// Optional input `i`: `None` when omitted.
pub fn opt_input<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, at: &Location) -> Result<Option<TensorView<'r>>> {
    match inputs.get(i).copied().flatten() {
        Some(_) => input(inputs, i, at).map(Some),
        None => Ok(None),
    }
}

/// Maps a possibly negative `axis` into `0..rank`.
pub fn normalize_axis(axis: i64, rank: usize, at: &Location) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) && !(rank == 0 && axis == 0) {
        return Err(Error::node(at, format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Runs `f` inside a function compiled for the best SIMD level this CPU has (AVX-512 or
/// AVX2+FMA on x86-64, NEON on aarch64; detected once), so that the loops inlined into `f`
/// (mark their helpers `#[inline(always)]`) are vectorized for that level rather than for the
/// baseline the crate is built for.
/// A closure with a large body may stay a separate function compiled for the baseline: use
/// [`simd_body`] for those.
#[inline(always)]
pub(crate) fn simd<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// A loop body for [`simd_body`]: its `run` must be `#[inline(always)]` (and so must what it
/// calls) so that it is compiled inside the SIMD-level function.
pub(crate) trait SimdBody {
    /// What the body returns.
    type Output;
    /// Runs the body.
    fn run(self) -> Self::Output;
}

struct WithBody<B>(B);

impl<B: SimdBody> pulp::WithSimd for WithBody<B> {
    type Output = B::Output;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> B::Output {
        self.0.run()
    }
}

/// Runs `body` compiled for the best SIMD level this CPU has, like [`simd`], with the body
/// forced inline whatever its size.
#[inline(always)]
pub(crate) fn simd_body<B: SimdBody>(body: B) -> B::Output {
    pulp::Arch::new().dispatch(WithBody(body))
}

/// Row-major strides of a shape (in elements).
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A tensor value from a shape and its elements (whose buffer goes back to the run's pool when
/// the value is dropped: see `onyx_core::host_pool`).
pub fn out<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Value> {
    host_pool::tensor(shape, data).map(Value::Tensor)
}

/// Checks that a view has element type `expected`.
pub fn expect_dtype(v: &TensorView<'_>, expected: &[DataType], i: usize, at: &Location) -> Result<()> {
    if expected.contains(&v.dtype()) {
        Ok(())
    } else {
        let names: Vec<&str> = expected.iter().map(|d| d.name()).collect();
        Err(Error::input(at, i, format!("one of {}", names.join("/")), v.dtype().name()))
    }
}

/// Reads any float tensor (f32, f64, f16, bf16) as f32 values: how half types are computed.
pub fn to_f32(v: &TensorView<'_>) -> Result<Vec<f32>> {
    Ok(match v.dtype() {
        DataType::Float => v.as_slice::<f32>()?.to_vec(),
        DataType::Double => v.as_slice::<f64>()?.iter().map(|&x| x as f32).collect(),
        DataType::Float16 => v.as_slice::<half::f16>()?.iter().map(|x| x.to_f32()).collect(),
        DataType::BFloat16 => v.as_slice::<half::bf16>()?.iter().map(|x| x.to_f32()).collect(),
        other => return Err(Error::DType { expected: DataType::Float, found: other }),
    })
}

/// A float tensor's values as f32: borrowed when it is f32, converted otherwise.
pub fn f32s<'a>(v: &TensorView<'a>) -> Result<std::borrow::Cow<'a, [f32]>> {
    match v.dtype() {
        DataType::Float => Ok(std::borrow::Cow::Borrowed(v.as_slice::<f32>()?)),
        _ => to_f32(v).map(std::borrow::Cow::Owned),
    }
}

/// A constant float tensor's values as f32, for kernels that keep them: the tensor itself
/// (shared, no copy) when it is f32 and aligned, else a widened copy.
pub(crate) enum ConstF32 {
    Shared(Tensor),
    Widened(Vec<f32>),
}

impl ConstF32 {
    /// Keeps `tensor` when it can be read as f32 in place, else widens `view` (`tensor`'s
    /// view, or the run's input when there is no constant).
    pub(crate) fn new(tensor: Option<&Tensor>, view: &TensorView<'_>) -> Result<Self> {
        match tensor {
            Some(t) if t.as_slice::<f32>().is_ok() => Ok(ConstF32::Shared(t.clone())),
            _ => to_f32(view).map(ConstF32::Widened),
        }
    }

    /// The values.
    pub(crate) fn as_slice(&self) -> &[f32] {
        match self {
            // `new` kept the tensor only after reading it as f32.
            ConstF32::Shared(t) => t.as_slice::<f32>().unwrap_or(&[]),
            ConstF32::Widened(v) => v,
        }
    }
}

/// Writes f32 results as a tensor of float type `dtype` (the inverse of [`to_f32`]).
pub fn from_f32(dtype: DataType, shape: Vec<usize>, data: Vec<f32>) -> Result<Value> {
    match dtype {
        DataType::Float => out(shape, data),
        DataType::Double => out(shape, data.into_iter().map(f64::from).collect()),
        DataType::Float16 => out(shape, data.into_iter().map(half::f16::from_f32).collect()),
        DataType::BFloat16 => out(shape, data.into_iter().map(half::bf16::from_f32).collect()),
        other => Err(Error::DType { expected: DataType::Float, found: other }),
    }
}

/// Reads an integer tensor (int32/int64, and other integer types) as i64.
pub fn to_i64(v: &TensorView<'_>) -> Result<Vec<i64>> {
    Ok(match v.dtype() {
        DataType::Int64 => v.as_slice::<i64>()?.to_vec(),
        DataType::Int32 => v.as_slice::<i32>()?.iter().map(|&x| x as i64).collect(),
        DataType::Int16 => v.as_slice::<i16>()?.iter().map(|&x| x as i64).collect(),
        DataType::Int8 => v.as_slice::<i8>()?.iter().map(|&x| x as i64).collect(),
        DataType::Uint8 => v.as_slice::<u8>()?.iter().map(|&x| x as i64).collect(),
        DataType::Uint16 => v.as_slice::<u16>()?.iter().map(|&x| x as i64).collect(),
        DataType::Uint32 => v.as_slice::<u32>()?.iter().map(|&x| x as i64).collect(),
        DataType::Uint64 => v.as_slice::<u64>()?.iter().map(|&x| x as i64).collect(),
        other => return Err(Error::DType { expected: DataType::Int64, found: other }),
    })
}

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`, for every plain numeric type
/// (not bool, string or packed types); `$else` otherwise.
#[macro_export]
macro_rules! dispatch_numeric {
    ($dtype:expr, $T:ident => $body:expr, _ => $else:expr) => {
        match $dtype {
            onyx_core::DataType::Float => {
                type $T = f32;
                $body
            }
            onyx_core::DataType::Double => {
                type $T = f64;
                $body
            }
            onyx_core::DataType::Float16 => {
                type $T = half::f16;
                $body
            }
            onyx_core::DataType::BFloat16 => {
                type $T = half::bf16;
                $body
            }
            onyx_core::DataType::Int8 => {
                type $T = i8;
                $body
            }
            onyx_core::DataType::Int16 => {
                type $T = i16;
                $body
            }
            onyx_core::DataType::Int32 => {
                type $T = i32;
                $body
            }
            onyx_core::DataType::Int64 => {
                type $T = i64;
                $body
            }
            onyx_core::DataType::Uint8 => {
                type $T = u8;
                $body
            }
            onyx_core::DataType::Uint16 => {
                type $T = u16;
                $body
            }
            onyx_core::DataType::Uint32 => {
                type $T = u32;
                $body
            }
            onyx_core::DataType::Uint64 => {
                type $T = u64;
                $body
            }
            _ => $else,
        }
    };
}

/// Runs `$body` with `$T` bound to the Rust type of any type with a fixed byte size
/// (numeric types plus bool as u8): for ops that only move elements around.
#[macro_export]
macro_rules! dispatch_by_size {
    ($dtype:expr, $T:ident => $body:expr, _ => $else:expr) => {
        match $dtype.bit_width() {
            8 => {
                type $T = u8;
                $body
            }
            16 => {
                type $T = u16;
                $body
            }
            32 => {
                type $T = u32;
                $body
            }
            64 => {
                type $T = u64;
                $body
            }
            _ => $else,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_strides() {
        let at = Location::default();
        assert_eq!(normalize_axis(-1, 4, &at).unwrap(), 3);
        assert_eq!(normalize_axis(2, 4, &at).unwrap(), 2);
        assert!(normalize_axis(4, 4, &at).is_err());
        assert!(normalize_axis(-5, 4, &at).is_err());
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}
