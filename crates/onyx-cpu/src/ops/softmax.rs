//! Softmax, LogSoftmax and Hardmax.
//!
//! Before opset 13 the input is coerced to 2-D at `axis` (default 1) and each row is
//! normalized; from opset 13 the op works along `axis` (default −1) only. Both become
//! `[outer, n, inner]`: with `inner == 1` (the common last-axis case) rows are independent and
//! run in parallel; otherwise the maximum and sum are kept per column. Numerically stable:
//! the maximum is subtracted before exponentiating. f16/bf16 are computed in f32.

use half::{bf16, f16};
use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};
use rayon::prelude::*;

use super::broadcast::PAR_CHUNK;
use super::elementwise::num::Real;
use super::elementwise::{dtype_error, narrow, widen, FLOAT_TYPES};
use super::reduce::fold_lanes;
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Softmax", build_softmax);
    r.add("LogSoftmax", build_softmax);
    r.add("Hardmax", build_softmax);
}

/// Which normalization.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// Softmax, LogSoftmax or Hardmax with its axis semantics decoded.
struct SoftmaxOp {
    kind: Kind,
    axis: i64,
    /// Before opset 13: everything from `axis` on is one row.
    coerce_2d: bool,
    at: Location,
}

fn build_softmax(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let kind = match node.op_type.as_str() {
        "Softmax" => Kind::Softmax,
        "LogSoftmax" => Kind::LogSoftmax,
        _ => Kind::Hardmax,
    };
    let coerce_2d = ctx.since_version < 13;
    let axis = node.int_or("axis", if coerce_2d { 1 } else { -1 })?;
    Ok(Box::new(SoftmaxOp { kind, axis, coerce_2d, at: node.location() }))
}

/// The input seen as `[outer, n, inner]`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Dims {
    outer: usize,
    n: usize,
    inner: usize,
}

impl SoftmaxOp {
    fn dims(&self, shape: &[usize]) -> Result<Dims> {
        if shape.is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, shape.len(), &self.at)?;
        let outer = shape[..axis].iter().product();
        Ok(if self.coerce_2d {
            Dims { outer, n: shape[axis..].iter().product(), inner: 1 }
        } else {
            Dims { outer, n: shape[axis], inner: shape[axis + 1..].iter().product() }
        })
    }

    fn compute(&self, x: &TensorView<'_>) -> Result<Value> {
        let d = self.dims(x.shape())?;
        let shape = x.shape().to_vec();
        let kind = self.kind;
        match x.dtype() {
            DataType::Float => util::out(shape, normalize(kind, x.as_slice::<f32>()?, d)),
            DataType::Double => util::out(shape, normalize(kind, x.as_slice::<f64>()?, d)),
            DataType::Float16 if kind == Kind::Hardmax => util::out(shape, hardmax(x.as_slice::<f16>()?, d, f16::ONE)),
            DataType::BFloat16 if kind == Kind::Hardmax => {
                util::out(shape, hardmax(x.as_slice::<bf16>()?, d, bf16::ONE))
            }
            DataType::Float16 | DataType::BFloat16 => narrow(x.dtype(), shape, normalize(kind, &widen(x)?, d)),
            other => Err(dtype_error(&self.at, 0, FLOAT_TYPES, other)),
        }
    }
}

impl Kernel for SoftmaxOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        Ok(vec![self.compute(&x).map_err(|e| e.at(&self.at))?])
    }
}

/// Softmax, LogSoftmax or Hardmax of f32/f64 data.
fn normalize<T: Real>(kind: Kind, x: &[T], d: Dims) -> Vec<T> {
    match kind {
        Kind::Hardmax => hardmax(x, d, T::ONE),
        _ if d.inner == 1 => rows(x, d.n, |src, dst| util::simd(|| softmax_row(kind == Kind::LogSoftmax, src, dst))),
        _ => columns(kind == Kind::LogSoftmax, x, d),
    }
}

/// The larger of two values, NaN when either is.
#[inline]
fn max_nan<T: Real>(a: T, v: T) -> T {
    if v > a || v.is_nan() {
        v
    } else {
        a
    }
}

/// Applies `row(src, dst)` to every row of `n` elements, in parallel when large.
fn rows<T: Real>(x: &[T], n: usize, row: impl Fn(&[T], &mut [T]) + Sync) -> Vec<T> {
    let mut out = onyx_core::host_pool::take::<T>(x.len()); // every row is written
    if n == 0 {
        return out;
    }
    if x.len() < 2 * PAR_CHUNK || x.len() / n < 2 {
        out.chunks_mut(n).zip(x.chunks(n)).for_each(|(d, s)| row(s, d));
    } else {
        let per_task = n * (PAR_CHUNK / n).max(1);
        crate::parallel::for_each_chunk_pair(x, per_task, &mut out, per_task, &|_, s, d| {
            d.chunks_mut(n).zip(s.chunks(n)).for_each(|(dr, sr)| row(sr, dr));
        });
    }
    out
}

/// Softmax (or LogSoftmax) of one contiguous row. Each pass is a separate loop (the maxima and
/// sums folded in lanes) so that all of them vectorize.
#[inline(always)]
fn softmax_row<T: Real>(log: bool, src: &[T], dst: &mut [T]) {
    let m = fold_lanes(src, T::LOWEST, &|v| v, &max_nan);
    dst.iter_mut().zip(src).for_each(|(o, &v)| *o = (v - m).exp());
    let sum = fold_lanes(dst, T::ZERO, &|v| v, &|a, b| a + b);
    if log {
        // (x − m) − ln Σ: subtracting m first keeps the result exact for large inputs.
        let ls = sum.ln();
        dst.iter_mut().zip(src).for_each(|(o, &v)| *o = (v - m) - ls);
    } else {
        let scale = T::ONE / sum;
        dst.iter_mut().for_each(|o| *o = *o * scale);
    }
}

/// Softmax (or LogSoftmax) along the middle axis of `[outer, n, inner]` with `inner > 1`:
/// column maxima and sums first (in parallel over column blocks), then the output rows (in
/// parallel over rows).
fn columns<T: Real>(log: bool, x: &[T], d: Dims) -> Vec<T> {
    let Dims { outer, n, inner } = d;
    let block = n * inner;
    let mut out = onyx_core::host_pool::take_zeroed::<T>(x.len());
    if block == 0 {
        return out;
    }
    let big = x.len() >= 2 * PAR_CHUNK;
    let one = |src: &[T], dst: &mut [T], parallel: bool| {
        let (m, s) = column_stats(src, n, inner, parallel);
        let write = |k: usize, row: &mut [T]| {
            let xs = &src[k * inner..(k + 1) * inner];
            let stats = m.iter().zip(&s);
            if log {
                row.iter_mut().zip(xs).zip(stats).for_each(|((o, &v), (&mx, &sm))| *o = v - mx - sm.ln());
            } else {
                row.iter_mut().zip(xs).zip(stats).for_each(|((o, &v), (&mx, &sm))| *o = (v - mx).exp() / sm);
            }
        };
        if parallel {
            dst.par_chunks_mut(inner).enumerate().for_each(|(k, row)| write(k, row));
        } else {
            dst.chunks_mut(inner).enumerate().for_each(|(k, row)| write(k, row));
        }
    };
    if big && outer >= rayon::current_num_threads() {
        crate::parallel::for_each_chunk_pair(x, block, &mut out, block, &|_, src, dst| one(src, dst, false));
    } else {
        out.chunks_mut(block).zip(x.chunks(block)).for_each(|(dst, src)| one(src, dst, big));
    }
    out
}

/// Per column of an `[n, inner]` block: the maximum and Σ e^(x − max), in parallel over column
/// blocks when asked.
fn column_stats<T: Real>(src: &[T], n: usize, inner: usize, parallel: bool) -> (Vec<T>, Vec<T>) {
    let mut m = vec![T::LOWEST; inner];
    let mut s = vec![T::ZERO; inner];
    let stats = |i0: usize, m: &mut [T], s: &mut [T]| {
        let w = m.len();
        for k in 0..n {
            m.iter_mut().zip(&src[k * inner + i0..][..w]).for_each(|(a, &v)| *a = max_nan(*a, v));
        }
        for k in 0..n {
            s.iter_mut().zip(&src[k * inner + i0..][..w]).zip(&*m).for_each(|((a, &v), &mx)| *a = *a + (v - mx).exp());
        }
    };
    if parallel {
        let w = (PAR_CHUNK / n).clamp(64, inner.max(64));
        m.par_chunks_mut(w).zip(s.par_chunks_mut(w)).enumerate().for_each(|(b, (mc, sc))| stats(b * w, mc, sc));
    } else {
        stats(0, &mut m, &mut s);
    }
    (m, s)
}

/// One-hot of the first maximum along the middle axis (NaN never wins a comparison).
fn hardmax<T: Copy + PartialOrd + Default + Send + Sync>(x: &[T], d: Dims, one: T) -> Vec<T> {
    let Dims { n, inner, .. } = d;
    let block = n * inner;
    let mut out = vec![T::default(); x.len()];
    if block == 0 {
        return out;
    }
    let one_block = |src: &[T], dst: &mut [T]| {
        for i in 0..inner {
            let mut best = 0;
            for k in 1..n {
                if src[k * inner + i] > src[best * inner + i] {
                    best = k;
                }
            }
            dst[best * inner + i] = one;
        }
    };
    if x.len() < 2 * PAR_CHUNK {
        out.chunks_mut(block).zip(x.chunks(block)).for_each(|(dst, src)| one_block(src, dst));
    } else {
        out.par_chunks_mut(block).zip(x.par_chunks(block)).for_each(|(dst, src)| one_block(src, dst));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::elementwise::testing::*;
    use super::*;
    use onyx_core::Tensor;

    /// Naive softmax, log-softmax or hardmax of every `[outer, n, inner]` column, in f64.
    fn naive(kind: Kind, x: &[f64], d: Dims) -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for o in 0..d.outer {
            for i in 0..d.inner {
                let at = |k: usize| (o * d.n + k) * d.inner + i;
                let vals: Vec<f64> = (0..d.n).map(|k| x[at(k)]).collect();
                let m = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = vals.iter().map(|v| (v - m).exp()).sum();
                let first_max = vals.iter().position(|&v| v == m).unwrap_or(0);
                for (k, v) in vals.iter().enumerate() {
                    out[at(k)] = match kind {
                        Kind::Softmax => (v - m).exp() / sum,
                        Kind::LogSoftmax => v - m - sum.ln(),
                        Kind::Hardmax => f64::from(u8::from(k == first_max)),
                    };
                }
            }
        }
        out
    }

    #[test]
    fn softmax_family_matches_naive_references() {
        let mut rng = fastrand::Rng::with_seed(13);
        // (shape, axis, opset): last axis, middle axes, 2-D coercion, big rows and columns.
        let cases: &[(&[usize], i64, i64)] = &[
            (&[3, 7], -1, 13),
            (&[2, 5, 3], 1, 13),
            (&[2, 5, 3], 0, 13),
            (&[2, 5, 3], 1, 11),
            (&[2, 5, 3], 0, 1),
            (&[4, 3, 5], -2, 11),
            (&[9], 0, 13),
            (&[301, 257], 1, 13),
            (&[2, 211, 331], 1, 13),
            (&[1, 37, 2_003], 1, 13),
            (&[70_001, 1], 0, 13),
        ];
        for (op, kind) in [("Softmax", Kind::Softmax), ("LogSoftmax", Kind::LogSoftmax), ("Hardmax", Kind::Hardmax)] {
            for &(shape, axis, opset) in cases {
                let x = random_f32(&mut rng, shape.iter().product(), -20.0, 20.0);
                let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                let probe = SoftmaxOp { kind, axis, coerce_2d: opset < 13, at: Location::default() };
                let want = naive(kind, &xf, probe.dims(shape).unwrap());
                let attrs = vec![attr_i("axis", axis)];
                let y = run(op, opset, attrs.clone(), &[&tensor(shape, x.clone())]).unwrap();
                assert_eq!(y.shape(), shape);
                assert_close(&floats(&y), &want, 1e-5, 1e-6, &format!("{op} {shape:?} axis={axis} opset={opset}"));
                let y = run(op, opset, attrs.clone(), &[&tensor(shape, xf.clone())]).unwrap();
                assert_close(&floats(&y), &want, 1e-12, 1e-14, &format!("{op} f64 {shape:?} axis={axis}"));
                let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
                let hf: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
                let y = run(op, opset, attrs, &[&tensor(shape, h)]).unwrap();
                assert_eq!(y.dtype(), DataType::Float16);
                let want = naive(kind, &hf, probe.dims(shape).unwrap());
                assert_close(&floats(&y), &want, 2e-3, 2e-3, &format!("{op} f16 {shape:?} axis={axis}"));
            }
        }
    }

    #[test]
    fn defaults_and_stability() {
        // Default axis: 1 with 2-D coercion before opset 13, -1 after.
        let x = tensor(&[2, 2, 2], vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let old = floats(&run("Softmax", 11, vec![], &[&x]).unwrap());
        let e: Vec<f64> = (0..4).map(|k| (k as f64 - 3.0).exp()).collect();
        let s: f64 = e.iter().sum();
        assert_close(&old[..4], &e.iter().map(|v| v / s).collect::<Vec<_>>(), 1e-6, 0.0, "Softmax-11");
        let new = floats(&run("Softmax", 13, vec![], &[&x]).unwrap());
        let pair = 1.0 / (1.0 + 1f64.exp());
        assert_close(&new, &[pair, 1.0 - pair].repeat(4), 1e-6, 0.0, "Softmax-13");
        // Huge inputs do not overflow.
        let big = tensor(&[3], vec![1000f32, 1000.0, -1000.0]);
        assert_close(&floats(&run("Softmax", 13, vec![], &[&big]).unwrap()), &[0.5, 0.5, 0.0], 1e-6, 0.0, "big");
        let lg = floats(&run("LogSoftmax", 13, vec![], &[&big]).unwrap());
        assert_close(
            &lg,
            &[-std::f64::consts::LN_2, -std::f64::consts::LN_2, -2000.0 - std::f64::consts::LN_2],
            1e-6,
            0.0,
            "log big",
        );
        // Hardmax picks the first maximum.
        let ties = tensor(&[2, 3], vec![1f32, 3.0, 3.0, -1.0, -1.0, -1.0]);
        assert_eq!(floats(&run("Hardmax", 13, vec![], &[&ties]).unwrap()), vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
        let empty = Tensor::zeros(DataType::Float, vec![0, 4]).unwrap();
        assert_eq!(run("Softmax", 13, vec![], &[&empty]).unwrap().shape(), &[0, 4]);
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let x = tensor(&[2, 3], vec![1f32; 6]);
        let err = run("Softmax", 13, vec![attr_i("axis", 2)], &[&x]).unwrap_err().to_string();
        assert!(err.contains("Softmax node 'n'") && err.contains("axis 2"), "{err}");
        assert!(run("LogSoftmax", 13, vec![attr_i("axis", -3)], &[&x]).is_err());
        let i = tensor(&[2], vec![1i32, 2]);
        let err = run("Hardmax", 13, vec![], &[&i]).unwrap_err().to_string();
        assert!(err.contains("input 0") && err.contains("int32"), "{err}");
        assert!(run("Softmax", 13, vec![], &[&Tensor::scalar(1f32)]).unwrap_err().to_string().contains("scalar"));
        assert!(build("Softmax", 13, vec![attr_s("axis", "x")]).is_err());
    }
}
