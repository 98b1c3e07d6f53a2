//! The float element types the matmul, conv, pool and norm kernels compute in (f32 and f64;
//! f16 and bf16 are computed in f32), and the conversions between tensors and those types.

use std::borrow::Cow;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

use onyx_core::{DataType, Element, Error, Result, TensorView, Value};

use crate::ops::util;

/// A float type kernels compute in: f32 or f64.
pub(crate) trait Real:
    Element
    + Copy
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + std::iter::Sum
{
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Converts from f64 (rounding for f32).
    fn from_f64(x: f64) -> Self;
    /// Converts to f64.
    fn to_f64(self) -> f64;
    /// Converts from f32.
    fn from_f32(x: f32) -> Self;
    /// Converts to f32 (rounding for f64).
    fn to_f32(self) -> f32;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// `self` raised to `p`.
    fn powf(self, p: Self) -> Self;
    /// Converts a count (window sizes, divisors) to this type.
    fn from_usize(n: usize) -> Self {
        Self::from_f64(n as f64)
    }
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f32(x: f32) -> Self {
                x as $t
            }
            fn to_f32(self) -> f32 {
                self as f32
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn powf(self, p: Self) -> Self {
                <$t>::powf(self, p)
            }
        }
    };
}
real!(f32);
real!(f64);

/// A vector of `n` copies of `value`, or an error (not an abort) when it cannot be allocated.
pub(crate) fn filled<T: Clone>(n: usize, value: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::InvalidArgument(format!("cannot allocate an output of {n} elements")))?;
    v.resize(n, value);
    Ok(v)
}

/// A vector of `n` zeros, or an error (not an abort) when it cannot be allocated: a buffer of the
/// run's pool cleared, else memory that comes zeroed from the allocator (fresh pages need no
/// clearing pass), unlike [`filled`].
pub(crate) fn zeroed<T: bytemuck::Pod>(n: usize) -> Result<Vec<T>> {
    if let Some(mut v) = onyx_core::host_pool::reuse::<T>(n) {
        v.fill(T::zeroed());
        return Ok(v);
    }
    fresh_zeroed(n)
}

/// `n` zeros from the allocator (tracked by the run's pool).
fn fresh_zeroed<T: bytemuck::Pod>(n: usize) -> Result<Vec<T>> {
    bytemuck::allocation::try_zeroed_slice_box(n)
        .map(|b| b.into_vec())
        .inspect(|v| onyx_core::host_pool::track(v))
        .map_err(|_| Error::InvalidArgument(format!("cannot allocate an output of {n} elements")))
}

/// A vector of `n` elements the caller overwrites every one of: a buffer of the run's pool as
/// it comes (no clearing pass), else zeroed memory; an error (not an abort) when it cannot be
/// allocated.
pub(crate) fn overwritten<T: bytemuck::Pod>(n: usize) -> Result<Vec<T>> {
    match onyx_core::host_pool::reuse::<T>(n) {
        Some(v) => Ok(v),
        None => fresh_zeroed(n),
    }
}

/// The type a float tensor of `dtype` is computed in: f64 for double, f32 for float, float16
/// and bfloat16; `None` for other types.
pub(crate) fn compute_type(dtype: DataType) -> Option<DataType> {
    match dtype {
        DataType::Double => Some(DataType::Double),
        DataType::Float | DataType::Float16 | DataType::BFloat16 => Some(DataType::Float),
        _ => None,
    }
}

/// Reads a float tensor as `T`: borrowed when it already is `T`, converted otherwise.
pub(crate) fn float_slice<'a, T: Real>(v: &TensorView<'a>) -> Result<Cow<'a, [T]>> {
    if v.dtype() == T::DTYPE {
        return Ok(Cow::Borrowed(v.as_slice::<T>()?));
    }
    Ok(match v.dtype() {
        DataType::Double => Cow::Owned(v.as_slice::<f64>()?.iter().map(|&x| T::from_f64(x)).collect()),
        DataType::Float | DataType::Float16 | DataType::BFloat16 => {
            Cow::Owned(util::to_f32(v)?.into_iter().map(T::from_f32).collect())
        }
        other => return Err(Error::DType { expected: T::DTYPE, found: other }),
    })
}

/// Builds a tensor of float type `dtype` from values computed in `T`.
pub(crate) fn float_output<T: Real>(dtype: DataType, shape: Vec<usize>, data: Vec<T>) -> Result<Value> {
    if dtype == T::DTYPE {
        return util::out(shape, data);
    }
    match dtype {
        DataType::Double => util::out(shape, data.into_iter().map(T::to_f64).collect::<Vec<f64>>()),
        _ => util::from_f32(dtype, shape, data.into_iter().map(T::to_f32).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_types_round_trip_through_f32() {
        let data = [half::f16::from_f32(1.5), half::f16::from_f32(-2.25), half::f16::from_f32(3.0)];
        let shape = [3];
        let v = TensorView::from_slice(&shape, &data).unwrap();
        let xs = float_slice::<f32>(&v).unwrap();
        assert_eq!(&xs[..], &[1.5, -2.25, 3.0]);
        let out = float_output(DataType::Float16, vec![3], xs.into_owned()).unwrap();
        assert_eq!(out.as_tensor().unwrap().as_slice::<half::f16>().unwrap(), &data);
    }

    #[test]
    fn same_type_is_borrowed_and_others_are_errors() {
        let data = [1.0f64, 2.0];
        let shape = [2];
        let v = TensorView::from_slice(&shape, &data).unwrap();
        assert!(matches!(float_slice::<f64>(&v).unwrap(), Cow::Borrowed(_)));
        assert_eq!(&float_slice::<f32>(&v).unwrap()[..], &[1.0f32, 2.0]);
        let ints = [1i32, 2];
        let v = TensorView::from_slice(&shape, &ints).unwrap();
        assert!(matches!(float_slice::<f32>(&v), Err(Error::DType { .. })));
        assert_eq!(compute_type(DataType::BFloat16), Some(DataType::Float));
        assert_eq!(compute_type(DataType::Int8), None);
    }
}
