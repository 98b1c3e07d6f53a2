//! Elementwise kernels: unary math and activations, binary arithmetic and comparisons with
//! broadcasting, variadic Sum/Mean/Max/Min, and Where.
//!
//! The math is generic over [`num::Real`] (f32, f64) and [`num::Num`] (those and the integer
//! types); f16 and bf16 are computed in f32 (widened chunk by chunk for unary ops). Large
//! tensors are processed in parallel chunks (see [`super::broadcast`]).

mod binary;
mod in_place;
mod math;
pub mod num;
#[cfg(test)]
pub(crate) mod testing;
mod unary;
mod variadic;

use half::{bf16, f16};
use onyx_core::{host_pool, DataType, Error, Location, Result, TensorView, Value};

use self::num::{Half, Real};
use super::broadcast::{par_chunks_in_place, par_zip_chunks};
use super::util;
use crate::Registry;

pub use self::math::{erf_f32, erf_f64, exp_f32, tanh_f32};
pub(crate) use self::unary::INT_TYPES;

/// Runs `$body` with `$T` bound to the Rust type of an integer `$dtype`; `$else` otherwise.
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:expr, _ => $else:expr) => {
        match $dtype {
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
pub(crate) use dispatch_int;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    unary::register(r);
    binary::register(r);
    variadic::register(r);
}

/// The float element types: what float-only ops accept.
pub(crate) const FLOAT_TYPES: &[DataType] = &[DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16];

/// A computation over contiguous chunks of floats, instantiated for f32 and f64 (f16 and bf16
/// are computed in f32).
pub(crate) trait FloatChunks: Sync {
    /// Computes `dst` (the same length as `src`) from `src`.
    fn apply<T: Real>(&self, src: &[T], dst: &mut [T]);
}

/// Applies `m` to every element of a float tensor, in parallel chunks for large tensors.
/// An error naming input `index` of the node at `at` for non-float tensors.
pub(crate) fn map_float(x: &TensorView<'_>, m: &impl FloatChunks, at: &Location, index: usize) -> Result<Value> {
    let shape = x.shape().to_vec();
    match x.dtype() {
        DataType::Float => {
            util::out(shape, map_chunks(x.as_slice::<f32>()?, |s, d| util::simd_body(Apply { m, s, d })))
        }
        DataType::Double => {
            util::out(shape, map_chunks(x.as_slice::<f64>()?, |s, d| util::simd_body(Apply { m, s, d })))
        }
        DataType::Float16 => util::out(shape, map_chunks(x.as_slice::<f16>()?, |s, d| half_chunk(s, d, m))),
        DataType::BFloat16 => util::out(shape, map_chunks(x.as_slice::<bf16>()?, |s, d| half_chunk(s, d, m))),
        other => Err(dtype_error(at, index, FLOAT_TYPES, other)),
    }
}

/// [`map_float`] over the elements of `x` itself, when `x` is an f32 or f64 tensor the run
/// handed over and nothing else holds (see `onyx_core::host_pool::reclaim`): `Ok` with the
/// output, else `Err` with `x` unchanged.
pub(crate) fn map_float_in_place(x: Value, m: &impl FloatChunks) -> std::result::Result<Result<Value>, Value> {
    fn go<T: Real>(x: Value, m: &impl FloatChunks) -> std::result::Result<Result<Value>, Value> {
        let (shape, mut v) = host_pool::reclaim::<T>(x)?;
        par_chunks_in_place(&mut v, |d| util::simd_body(ApplyInPlace { m, d }));
        Ok(util::out(shape, v))
    }
    match x.as_tensor().map(|t| t.dtype()) {
        Ok(DataType::Float) => go::<f32>(x, m),
        Ok(DataType::Double) => go::<f64>(x, m),
        _ => Err(x),
    }
}

/// One chunk of [`map_float_in_place`]: `m` applied through a small buffer on the stack (the
/// computation reads its input and writes its output as separate slices).
struct ApplyInPlace<'a, M, T> {
    m: &'a M,
    d: &'a mut [T],
}

impl<M: FloatChunks, T: Real> util::SimdBody for ApplyInPlace<'_, M, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        const BLOCK: usize = 256;
        let mut tmp = [T::ZERO; BLOCK];
        for chunk in self.d.chunks_mut(BLOCK) {
            let src = &mut tmp[..chunk.len()];
            src.copy_from_slice(chunk);
            self.m.apply(src, chunk);
        }
    }
}

/// One chunk of [`map_float`], run through [`util::simd_body`].
struct Apply<'a, M, T> {
    m: &'a M,
    s: &'a [T],
    d: &'a mut [T],
}

impl<M: FloatChunks, T: Real> util::SimdBody for Apply<'_, M, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        self.m.apply(self.s, self.d)
    }
}

/// Widens a chunk of halves to f32, applies `m` and narrows the result.
fn half_chunk<H: Half>(src: &[H], dst: &mut [H], m: &impl FloatChunks) {
    let mut wide = vec![0f32; src.len()];
    H::widen(src, &mut wide);
    let mut res = vec![0f32; src.len()];
    m.apply(&wide, &mut res);
    H::narrow(&res, dst);
}

/// The elements of a float view as f32 (f16 and bf16 widened, f64 rounded).
pub(crate) fn widen(v: &TensorView<'_>) -> Result<Vec<f32>> {
    fn wide<H: Half>(src: &[H]) -> Vec<f32> {
        let mut out = vec![0f32; src.len()];
        H::widen(src, &mut out);
        out
    }
    match v.dtype() {
        DataType::Float16 => Ok(wide(v.as_slice::<f16>()?)),
        DataType::BFloat16 => Ok(wide(v.as_slice::<bf16>()?)),
        _ => util::to_f32(v),
    }
}

/// A tensor of float type `dtype` from f32 results (the inverse of [`widen`]).
pub(crate) fn narrow(dtype: DataType, shape: Vec<usize>, data: Vec<f32>) -> Result<Value> {
    fn small<H: Half>(shape: Vec<usize>, src: &[f32]) -> Result<Value> {
        let mut out = host_pool::take::<H>(src.len());
        H::narrow(src, &mut out);
        util::out(shape, out)
    }
    match dtype {
        DataType::Float16 => small::<f16>(shape, &data),
        DataType::BFloat16 => small::<bf16>(shape, &data),
        _ => util::from_f32(dtype, shape, data),
    }
}

/// The elements of any numeric view as f64 (large 64-bit integers round).
pub(crate) fn to_f64_vec(v: &TensorView<'_>) -> Result<Vec<f64>> {
    use self::num::Num;
    match v.dtype() {
        DataType::Double => Ok(v.as_slice::<f64>()?.to_vec()),
        DataType::Float | DataType::Float16 | DataType::BFloat16 => Ok(widen(v)?.into_iter().map(f64::from).collect()),
        other => dispatch_int!(other, T => Ok(v.as_slice::<T>()?.iter().map(|x| x.to_f64()).collect()),
            _ => Err(Error::DType { expected: DataType::Double, found: other })),
    }
}

/// A new vector computed from `src` chunk by chunk by `f` (in parallel for large inputs).
pub(crate) fn map_chunks<A: Sync, O: bytemuck::Pod + Send>(src: &[A], f: impl Fn(&[A], &mut [O]) + Sync) -> Vec<O> {
    let mut out = host_pool::take::<O>(src.len());
    par_zip_chunks(src, &mut out, f);
    out
}

/// Writes `f(x)` for each `x` of `src` into `dst`: the loop every unary op is made of.
#[inline]
pub(crate) fn each<A: Copy, O>(src: &[A], dst: &mut [O], f: impl Fn(A) -> O) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = f(x);
    }
}

/// The error for an input whose element type is not among `expected`.
pub(crate) fn dtype_error(at: &Location, index: usize, expected: &[DataType], found: DataType) -> Error {
    let names: Vec<&str> = expected.iter().map(|d| d.name()).collect();
    Error::input(at, index, format!("a tensor of {}", names.join("/")), format!("a {found} tensor"))
}

/// The error for input `index` whose element type differs from input 0's.
pub(crate) fn same_dtype_error(at: &Location, index: usize, want: DataType, found: DataType) -> Error {
    Error::input(at, index, format!("a {want} tensor (the type of input 0)"), format!("a {found} tensor"))
}

/// A boolean tensor from bytes that are 0 or 1.
pub(crate) fn bool_out(shape: Vec<usize>, data: Vec<u8>) -> Result<Value> {
    host_pool::tensor_of(DataType::Bool, shape, data).map(Value::Tensor)
}

/// A tensor of `dtype` from elements of a plain type of the same size (for ops that only move
/// or compare elements).
pub(crate) fn sized_out<T: bytemuck::Pod + Send + Sync>(
    dtype: DataType,
    shape: Vec<usize>,
    data: Vec<T>,
) -> Result<Value> {
    host_pool::tensor_of(dtype, shape, data).map(Value::Tensor)
}

/// The elements of a view reinterpreted as a plain type of the same size.
pub(crate) fn sized_slice<'a, T: bytemuck::Pod>(v: &TensorView<'a>) -> Result<&'a [T]> {
    bytemuck::try_cast_slice(v.bytes()?)
        .map_err(|e| Error::InvalidArgument(format!("{} data cannot be read in place: {e:?}", v.dtype())))
}
