//! CumProd (opset 26): running products along an axis given as input 1, inclusive or
//! exclusive (the first product is 1), forwards or reversed. Integers wrap on overflow;
//! f16/bf16 are computed in f32.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::elementwise::num::Num;
use super::elementwise::{dtype_error, narrow, widen};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("CumProd", build_cumprod);
}

/// The element types CumProd accepts.
const TYPES: &[DataType] = &[
    DataType::Float,
    DataType::Double,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint32,
    DataType::Uint64,
];

/// A CumProd node with its attributes decoded.
struct CumProd {
    exclusive: bool,
    reverse: bool,
    at: Location,
}

fn flag(ctx: &NodeContext<'_>, name: &str) -> Result<bool> {
    match ctx.node.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::attribute(&ctx.node.location(), name, "0 or 1", v.to_string())),
    }
}

fn build_cumprod(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(CumProd {
        exclusive: flag(ctx, "exclusive")?,
        reverse: flag(ctx, "reverse")?,
        at: ctx.node.location(),
    }))
}

/// Running products along the middle axis of `[outer, n, inner]`.
fn cumprod<T: Num>(x: &[T], (outer, n, inner): (usize, usize, usize), exclusive: bool, reverse: bool) -> Vec<T> {
    let mut out = vec![T::ONE; x.len()];
    for o in 0..outer {
        let base = o * n * inner;
        let mut acc = vec![T::ONE; inner];
        for step in 0..n {
            let k = if reverse { n - 1 - step } else { step };
            let at = base + k * inner;
            for (i, a) in acc.iter_mut().enumerate() {
                let v = x[at + i];
                if exclusive {
                    out[at + i] = *a;
                    *a = a.mul(v);
                } else {
                    *a = a.mul(v);
                    out[at + i] = *a;
                }
            }
        }
    }
    out
}

impl CumProd {
    fn axis(&self, a: &TensorView<'_>, rank: usize) -> Result<usize> {
        if a.len() != 1 || a.rank() > 1 || !matches!(a.dtype(), DataType::Int32 | DataType::Int64) {
            return Err(Error::input(
                &self.at,
                1,
                "a scalar int32/int64 axis",
                format!("{}{:?}", a.dtype(), a.shape()),
            ));
        }
        if rank == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        util::normalize_axis(util::to_i64(a)?[0], rank, &self.at)
    }

    fn compute(&self, x: &TensorView<'_>, axis: usize) -> Result<Value> {
        let s = x.shape();
        let dims = (s[..axis].iter().product(), s[axis], s[axis + 1..].iter().product());
        let shape = s.to_vec();
        let (ex, rev) = (self.exclusive, self.reverse);
        match x.dtype() {
            DataType::Float => util::out(shape, cumprod(x.as_slice::<f32>()?, dims, ex, rev)),
            DataType::Double => util::out(shape, cumprod(x.as_slice::<f64>()?, dims, ex, rev)),
            DataType::Float16 | DataType::BFloat16 => narrow(x.dtype(), shape, cumprod(&widen(x)?, dims, ex, rev)),
            DataType::Int32 => util::out(shape, cumprod(x.as_slice::<i32>()?, dims, ex, rev)),
            DataType::Int64 => util::out(shape, cumprod(x.as_slice::<i64>()?, dims, ex, rev)),
            DataType::Uint32 => util::out(shape, cumprod(x.as_slice::<u32>()?, dims, ex, rev)),
            DataType::Uint64 => util::out(shape, cumprod(x.as_slice::<u64>()?, dims, ex, rev)),
            other => Err(dtype_error(&self.at, 0, TYPES, other)),
        }
    }
}

impl Kernel for CumProd {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let axis = self.axis(&util::input(inputs, 1, &self.at)?, x.rank())?;
        Ok(vec![self.compute(&x, axis).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{assert_close, floats, ints, random_f32, tensor, unravel};
    use crate::ops::matmul::test_support::{build, node, run};
    use onyx_core::ir::AttrValue;
    use onyx_core::Tensor;

    fn kernel(exclusive: i64, reverse: i64) -> Box<dyn Kernel> {
        let attrs = vec![("exclusive", AttrValue::Int(exclusive)), ("reverse", AttrValue::Int(reverse))];
        build(build_cumprod, &node("CumProd", &["x", "a"], 1, attrs), 26).unwrap()
    }

    /// Each output element as the product over the index range it covers.
    fn naive(x: &[f64], shape: &[usize], axis: usize, exclusive: bool, reverse: bool) -> Vec<f64> {
        let st = util::strides(shape);
        (0..x.len())
            .map(|flat| {
                let k = unravel(flat, shape)[axis];
                let range: Vec<usize> = match (exclusive, reverse) {
                    (false, false) => (0..=k).collect(),
                    (true, false) => (0..k).collect(),
                    (false, true) => (k..shape[axis]).collect(),
                    (true, true) => (k + 1..shape[axis]).collect(),
                };
                range.into_iter().map(|j| x[flat - k * st[axis] + j * st[axis]]).product()
            })
            .collect()
    }

    #[test]
    fn cumprod_matches_products_over_ranges() {
        let mut rng = fastrand::Rng::with_seed(9);
        let shape = [3, 5, 4];
        let x = random_f32(&mut rng, 60, 0.5, 1.5);
        let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for axis in [0i64, 1, -1] {
            let a = util::normalize_axis(axis, 3, &Location::default()).unwrap();
            for (ex, rev) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let want = naive(&xf, &shape, a, ex == 1, rev == 1);
                let y =
                    run(kernel(ex, rev).as_ref(), &[Some(tensor(&shape, x.clone())), Some(Tensor::scalar(axis))], 1)
                        .unwrap();
                assert_close(
                    &floats(y[0].as_tensor().unwrap()),
                    &want,
                    1e-5,
                    0.0,
                    &format!("axis={axis} ex={ex} rev={rev}"),
                );
                let xi: Vec<i32> = (0..60).map(|i: i32| i % 5 - 2).collect();
                let wi = naive(&xi.iter().map(|&v| v as f64).collect::<Vec<_>>(), &shape, a, ex == 1, rev == 1);
                let y = run(
                    kernel(ex, rev).as_ref(),
                    &[Some(tensor(&shape, xi)), Some(tensor(&[1], vec![axis as i32]))],
                    1,
                )
                .unwrap();
                assert_eq!(ints(y[0].as_tensor().unwrap()), wi.iter().map(|&v| v as i64).collect::<Vec<_>>());
            }
        }
        let h: Vec<half::f16> = [1.5f32, 2.0, -0.5].iter().map(|&v| half::f16::from_f32(v)).collect();
        let y = run(kernel(0, 0).as_ref(), &[Some(tensor(&[3], h)), Some(Tensor::scalar(0i64))], 1).unwrap();
        assert_eq!(floats(y[0].as_tensor().unwrap()), vec![1.5, 3.0, -1.5]);
    }

    #[test]
    fn invalid_cumprod_inputs_are_errors() {
        let x = tensor(&[2, 2], vec![1f32; 4]);
        let e = run(kernel(0, 0).as_ref(), &[Some(x.clone()), Some(Tensor::scalar(2i64))], 1).unwrap_err().to_string();
        assert!(e.contains("axis 2"), "{e}");
        let e = run(kernel(0, 0).as_ref(), &[Some(x), Some(tensor(&[2], vec![0i64, 1]))], 1).unwrap_err().to_string();
        assert!(e.contains("input 1"), "{e}");
        let e = run(kernel(0, 0).as_ref(), &[Some(tensor(&[2], vec![1i8, 2])), Some(Tensor::scalar(0i64))], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("int8"), "{e}");
        assert!(
            build(build_cumprod, &node("CumProd", &["x", "a"], 1, vec![("reverse", AttrValue::Int(3))]), 26).is_err()
        );
    }
}
