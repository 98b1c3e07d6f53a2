//! ArgMax, ArgMin and CumSum: reductions and scans along one axis.

use crate::parallel;
use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::super::broadcast::PAR_CHUNK;
use super::super::elementwise::num::Num;
use super::super::elementwise::{dispatch_int, dtype_error, narrow, widen, FLOAT_TYPES, INT_TYPES};
use super::super::util;
use super::reduced_shape;
use crate::Registry;

/// Registers ArgMax, ArgMin and CumSum.
pub(super) fn register(r: &mut Registry) {
    r.add("ArgMax", build_arg);
    r.add("ArgMin", build_arg);
    r.add("CumSum", build_cumsum);
}

/// `[outer, n, inner]` sizes around `axis`.
fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// ArgMax or ArgMin along one axis.
struct Arg {
    max: bool,
    axis: i64,
    keepdims: bool,
    select_last: bool,
    at: Location,
}

fn build_arg(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(Arg {
        max: node.op_type == "ArgMax",
        axis: node.int_or("axis", 0)?,
        keepdims: node.int_or("keepdims", 1)? != 0,
        select_last: node.int_or("select_last_index", 0)? != 0,
        at: node.location(),
    }))
}

/// Index of the first (or last) largest (or smallest) element of every `[outer, n, inner]`
/// column. NaN never wins a comparison (as in ONNX Runtime), so it is only chosen when first.
fn arg_index<T: PartialOrd + Copy + Send + Sync>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    max: bool,
    last: bool,
) -> Vec<i64> {
    let better = move |v: T, best: T| match (max, last) {
        (true, false) => v > best,
        (true, true) => v >= best,
        (false, false) => v < best,
        (false, true) => v <= best,
    };
    let mut out = vec![0i64; outer * inner];
    let column_block = |o: usize, idx: &mut [i64]| {
        let base = o * n * inner;
        let mut best: Vec<T> = x[base..base + inner].to_vec();
        for k in 1..n {
            let row = &x[base + k * inner..base + (k + 1) * inner];
            for ((b, i), &v) in best.iter_mut().zip(idx.iter_mut()).zip(row) {
                if better(v, *b) {
                    *b = v;
                    *i = k as i64;
                }
            }
        }
    };
    if outer * n * inner < 2 * PAR_CHUNK {
        out.chunks_mut(inner.max(1)).enumerate().for_each(|(o, idx)| column_block(o, idx));
    } else {
        parallel::for_each_chunk_mut(&mut out, inner.max(1), &|o, idx| column_block(o, idx));
    }
    out
}

impl Arg {
    fn compute(&self, x: &TensorView<'_>) -> Result<Value> {
        let shape = x.shape();
        let axis = util::normalize_axis(self.axis, shape.len(), &self.at)?;
        if shape.is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let dims = split_at_axis(shape, axis);
        if dims.1 == 0 {
            return Err(Error::input(&self.at, 0, format!("a non-empty axis {axis}"), format!("shape {shape:?}")));
        }
        let mask: Vec<bool> = (0..shape.len()).map(|d| d == axis).collect();
        let out_shape = reduced_shape(shape, &mask, self.keepdims);
        let (max, last) = (self.max, self.select_last);
        let idx = crate::dispatch_numeric!(x.dtype(), T => arg_index(x.as_slice::<T>()?, dims, max, last),
            _ => return Err(dtype_error(&self.at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), x.dtype())));
        util::out(out_shape, idx)
    }
}

impl Kernel for Arg {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        Ok(vec![self.compute(&x).map_err(|e| e.at(&self.at))?])
    }
}

/// CumSum along an axis given as input 1.
struct CumSum {
    exclusive: bool,
    reverse: bool,
    at: Location,
}

fn build_cumsum(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(CumSum {
        exclusive: node.int_or("exclusive", 0)? != 0,
        reverse: node.int_or("reverse", 0)? != 0,
        at: node.location(),
    }))
}

/// Running sums along the middle axis of `[outer, n, inner]` (wrapping for integers).
fn cumsum<T: Num>(x: &[T], (outer, n, inner): (usize, usize, usize), exclusive: bool, reverse: bool) -> Vec<T> {
    let mut out = vec![T::ZERO; x.len()];
    let block = n * inner;
    if block == 0 {
        return out;
    }
    let scan = |o: usize, dst: &mut [T]| {
        let src = &x[o * block..(o + 1) * block];
        let mut acc = vec![T::ZERO; inner];
        for step in 0..n {
            let k = if reverse { n - 1 - step } else { step };
            let (row, res) = (&src[k * inner..(k + 1) * inner], &mut dst[k * inner..(k + 1) * inner]);
            if exclusive {
                res.copy_from_slice(&acc);
                acc.iter_mut().zip(row).for_each(|(a, &v)| *a = a.add(v));
            } else {
                acc.iter_mut().zip(row).for_each(|(a, &v)| *a = a.add(v));
                res.copy_from_slice(&acc);
            }
        }
    };
    if x.len() < 2 * PAR_CHUNK || outer < 2 {
        out.chunks_mut(block).enumerate().for_each(|(o, d)| scan(o, d));
    } else {
        parallel::for_each_chunk_mut(&mut out, block, &|o, d| scan(o, d));
    }
    out
}

impl CumSum {
    fn axis(&self, a: &TensorView<'_>, rank: usize) -> Result<usize> {
        let value = match (a.dtype(), a.len()) {
            (DataType::Int64, 1) if a.rank() <= 1 => a.as_slice::<i64>()?[0],
            (DataType::Int32, 1) if a.rank() <= 1 => i64::from(a.as_slice::<i32>()?[0]),
            _ => {
                return Err(Error::input(
                    &self.at,
                    1,
                    "a scalar int32/int64 axis",
                    format!("{}{:?}", a.dtype(), a.shape()),
                ));
            }
        };
        if rank == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        util::normalize_axis(value, rank, &self.at)
    }

    fn compute(&self, x: &TensorView<'_>, axis: usize) -> Result<Value> {
        let dims = split_at_axis(x.shape(), axis);
        let shape = x.shape().to_vec();
        let (ex, rev) = (self.exclusive, self.reverse);
        match x.dtype() {
            DataType::Float => util::out(shape, cumsum(x.as_slice::<f32>()?, dims, ex, rev)),
            DataType::Double => util::out(shape, cumsum(x.as_slice::<f64>()?, dims, ex, rev)),
            DataType::Float16 | DataType::BFloat16 => narrow(x.dtype(), shape, cumsum(&widen(x)?, dims, ex, rev)),
            other => dispatch_int!(other, T => util::out(shape, cumsum(x.as_slice::<T>()?, dims, ex, rev)),
                _ => Err(dtype_error(&self.at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), other))),
        }
    }
}

impl Kernel for CumSum {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let axis = self.axis(&util::input(inputs, 1, &self.at)?, x.rank())?;
        Ok(vec![self.compute(&x, axis).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::elementwise::testing::*;
    use super::*;
    use onyx_core::Tensor;

    /// Naive arg-reduction: (outer, inner) loop over the axis.
    fn naive_arg(x: &[f64], shape: &[usize], axis: usize, max: bool, last: bool) -> Vec<i64> {
        let (outer, n, inner) = split_at_axis(shape, axis);
        let mut out = Vec::new();
        for o in 0..outer {
            for i in 0..inner {
                let vals: Vec<f64> = (0..n).map(|k| x[(o * n + k) * inner + i]).collect();
                let mut best = 0;
                for k in 1..n {
                    let better = if max { vals[k] > vals[best] } else { vals[k] < vals[best] };
                    if better || (last && vals[k] == vals[best]) {
                        best = k;
                    }
                }
                out.push(best as i64);
            }
        }
        out
    }

    #[test]
    fn arg_max_and_min_match_naive_loops() {
        let mut rng = fastrand::Rng::with_seed(4);
        let cases: &[(&[usize], i64)] =
            &[(&[3, 4, 5], 1), (&[3, 4, 5], -1), (&[3, 4, 5], 0), (&[9], 0), (&[70, 1_000], 0), (&[2, 40_000, 3], 1)];
        for &(shape, axis) in cases {
            // Few distinct values, so that ties exercise select_last_index.
            let x: Vec<f32> =
                random_i64(&mut rng, shape.iter().product(), -4, 4).into_iter().map(|v| v as f32 * 0.5).collect();
            let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let d = util::normalize_axis(axis, shape.len(), &Location::default()).unwrap();
            for (op, max) in [("ArgMax", true), ("ArgMin", false)] {
                for last in [0, 1] {
                    for keepdims in [0, 1] {
                        let attrs =
                            vec![attr_i("axis", axis), attr_i("select_last_index", last), attr_i("keepdims", keepdims)];
                        let y = run(op, 13, attrs, &[&tensor(shape, x.clone())]).unwrap();
                        let mask: Vec<bool> = (0..shape.len()).map(|k| k == d).collect();
                        assert_eq!(y.shape(), reduced_shape(shape, &mask, keepdims == 1));
                        assert_eq!(
                            ints(&y),
                            naive_arg(&xf, shape, d, max, last == 1),
                            "{op} {shape:?} axis={axis} last={last}"
                        );
                    }
                }
            }
        }
        let i = tensor(&[2, 3], vec![5u16, 9, 9, 0, 0, 1]);
        assert_eq!(ints(&run("ArgMax", 13, vec![attr_i("axis", 1)], &[&i]).unwrap()), vec![1, 2]);
        let h = tensor(&[3], vec![half::f16::from_f32(1.0), half::f16::from_f32(-2.0), half::f16::from_f32(0.5)]);
        assert_eq!(ints(&run("ArgMin", 13, vec![], &[&h]).unwrap()), vec![1]);
        // As ONNX Runtime: NaN never wins.
        let n = tensor(&[4], vec![1f32, f32::NAN, 5.0, f32::NAN]);
        assert_eq!(ints(&run("ArgMax", 13, vec![], &[&n]).unwrap()), vec![2]);
    }

    #[test]
    fn arg_errors() {
        let x = tensor(&[2, 3], vec![1f32; 6]);
        let err = run("ArgMax", 13, vec![attr_i("axis", 2)], &[&x]).unwrap_err().to_string();
        assert!(err.contains("ArgMax node 'n'") && err.contains("axis 2"), "{err}");
        let empty = Tensor::zeros(DataType::Float, vec![0, 3]).unwrap();
        assert!(run("ArgMin", 13, vec![], &[&empty]).unwrap_err().to_string().contains("non-empty"));
        assert!(run("ArgMin", 13, vec![], &[&Tensor::scalar(1f32)]).is_err());
        assert!(run("ArgMax", 13, vec![], &[&bools(&[1], &[true])]).unwrap_err().to_string().contains("input 0"));
    }

    fn naive_cumsum(x: &[f64], shape: &[usize], axis: usize, exclusive: bool, reverse: bool) -> Vec<f64> {
        let (outer, n, inner) = split_at_axis(shape, axis);
        let mut out = vec![0.0; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                for k in 0..n {
                    let range: Vec<usize> = match (exclusive, reverse) {
                        (false, false) => (0..=k).collect(),
                        (true, false) => (0..k).collect(),
                        (false, true) => (k..n).collect(),
                        (true, true) => (k + 1..n).collect(),
                    };
                    out[(o * n + k) * inner + i] = range.iter().map(|&j| x[(o * n + j) * inner + i]).sum();
                }
            }
        }
        out
    }

    #[test]
    fn cumsum_matches_naive_sums() {
        let mut rng = fastrand::Rng::with_seed(8);
        let cases: &[(&[usize], i64)] =
            &[(&[3, 4, 5], 1), (&[3, 4, 5], -1), (&[3, 4, 5], 0), (&[11], 0), (&[64, 1_031], 1), (&[3, 2, 20_000], 1)];
        for &(shape, axis) in cases {
            let x = random_f32(&mut rng, shape.iter().product(), -2.0, 2.0);
            let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let d = util::normalize_axis(axis, shape.len(), &Location::default()).unwrap();
            for exclusive in [0, 1] {
                for reverse in [0, 1] {
                    let attrs = vec![attr_i("exclusive", exclusive), attr_i("reverse", reverse)];
                    let want = naive_cumsum(&xf, shape, d, exclusive == 1, reverse == 1);
                    let y =
                        run("CumSum", 14, attrs.clone(), &[&tensor(shape, xf.clone()), &Tensor::scalar(axis)]).unwrap();
                    assert_close(&floats(&y), &want, 1e-12, 1e-12, &format!("{shape:?} {axis} {exclusive} {reverse}"));
                    let y = run("CumSum", 14, attrs, &[&tensor(shape, x.clone()), &tensor(&[1], vec![axis as i32])])
                        .unwrap();
                    assert_close(
                        &floats(&y),
                        &want,
                        1e-5,
                        1e-4,
                        &format!("f32 {shape:?} {axis} {exclusive} {reverse}"),
                    );
                }
            }
        }
        let i = tensor(&[5], vec![1u32, 2, 3, 4, u32::MAX]);
        let y = run("CumSum", 14, vec![attr_i("exclusive", 1)], &[&i, &Tensor::scalar(0i64)]).unwrap();
        assert_eq!(ints(&y), vec![0, 1, 3, 6, 10]);
        let h = tensor(&[3], vec![half::bf16::from_f32(1.0), half::bf16::from_f32(2.0), half::bf16::from_f32(4.0)]);
        let y = run("CumSum", 14, vec![attr_i("reverse", 1)], &[&h, &Tensor::scalar(0i64)]).unwrap();
        assert_eq!((y.dtype(), floats(&y)), (DataType::BFloat16, vec![7.0, 6.0, 4.0]));
    }

    #[test]
    fn cumsum_errors() {
        let x = tensor(&[2, 3], vec![1f32; 6]);
        let err = run("CumSum", 14, vec![], &[&x, &Tensor::scalar(2i64)]).unwrap_err().to_string();
        assert!(err.contains("CumSum node 'n'") && err.contains("axis 2"), "{err}");
        let err = run("CumSum", 14, vec![], &[&x, &tensor(&[2], vec![0i64, 1])]).unwrap_err().to_string();
        assert!(err.contains("input 1"), "{err}");
        assert!(run("CumSum", 14, vec![], &[&x, &Tensor::scalar(0f32)]).is_err());
        assert!(run("CumSum", 14, vec![], &[&bools(&[2], &[true, false]), &Tensor::scalar(0i64)]).is_err());
        assert!(run_opt("CumSum", 14, vec![], &[Some(&x), None]).unwrap_err().to_string().contains("input 1"));
    }
}
