//! TopK: the `k` largest (or smallest) elements along an axis and their indices.

use rayon::prelude::*;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::total_cmp;
use crate::ops::elementwise::{dtype_error, FLOAT_TYPES, INT_TYPES};
use crate::ops::layout::elems;
use crate::ops::util;

/// TopK along `axis`; `k` is an attribute before opset 10 and input 1 from opset 10.
struct TopK {
    k_attr: Option<i64>,
    axis: i64,
    largest: bool,
    at: Location,
}

pub(super) fn build_topk(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let k_attr = if ctx.since_version < 10 {
        Some(node.get_int("k")?.ok_or_else(|| Error::attribute(&at, "k", "an int", "nothing"))?)
    } else {
        None
    };
    Ok(Box::new(TopK {
        k_attr,
        axis: node.int_or("axis", -1)?,
        // `sorted = 0` leaves the order unspecified: the sorted order is one valid answer.
        largest: ctx.since_version < 11 || node.int_or("largest", 1)? != 0,
        at,
    }))
}

/// The first `k` elements of every `[outer, n, inner]` column in the order "largest (or
/// smallest) first, lower index first among equals", as values and indices of shape
/// `[outer, k, inner]`.
pub(crate) fn top_k<T: PartialOrd + Copy + Default + Send + Sync>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    k: usize,
    largest: bool,
) -> (Vec<T>, Vec<i64>) {
    let mut vals = vec![T::default(); outer * k * inner];
    let mut idx = vec![0i64; outer * k * inner];
    if vals.is_empty() {
        return (vals, idx);
    }
    let order = |a: &(T, usize), b: &(T, usize)| {
        let c = total_cmp(&a.0, &b.0);
        if largest { c.reverse() } else { c }.then(a.1.cmp(&b.1))
    };
    let block = |o: usize, vs: &mut [T], is: &mut [i64]| {
        let mut col: Vec<(T, usize)> = Vec::with_capacity(n);
        for i in 0..inner {
            col.clear();
            col.extend((0..n).map(|j| (x[(o * n + j) * inner + i], j)));
            if k < n {
                col.select_nth_unstable_by(k - 1, order);
                col.truncate(k);
            }
            col.sort_unstable_by(order);
            for (j, &(v, p)) in col.iter().enumerate() {
                vs[j * inner + i] = v;
                is[j * inner + i] = p as i64;
            }
        }
    };
    let chunk = k * inner;
    if elems::parallel(outer * n * inner) && outer > 1 {
        vals.par_chunks_mut(chunk).zip(idx.par_chunks_mut(chunk)).enumerate().for_each(|(o, (v, i))| block(o, v, i));
    } else {
        vals.chunks_mut(chunk).zip(idx.chunks_mut(chunk)).enumerate().for_each(|(o, (v, i))| block(o, v, i));
    }
    (vals, idx)
}

impl TopK {
    fn k(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<i64> {
        if let Some(k) = self.k_attr {
            return Ok(k);
        }
        let kv = util::input(inputs, 1, &self.at)?;
        match elems::int_values(&kv, 1, &[DataType::Int64], &self.at)?.as_slice() {
            &[k] => Ok(k),
            _ => Err(Error::input(&self.at, 1, "a 1-element int64 tensor k", format!("shape {:?}", kv.shape()))),
        }
    }
}

impl Kernel for TopK {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        if x.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), &self.at)?;
        let n = x.shape()[axis];
        let k = self.k(inputs)?;
        if k < 0 || k as u64 > n as u64 {
            let what = if self.k_attr.is_some() { "attribute k" } else { "k" };
            return Err(Error::node(
                &self.at,
                format!("{what} = {k} is outside [0, {n}] (axis {axis} of {:?})", x.shape()),
            ));
        }
        let k = k as usize;
        let dims = (elems::count(&x.shape()[..axis], &self.at)?, n, elems::count(&x.shape()[axis + 1..], &self.at)?);
        let mut shape = x.shape().to_vec();
        shape[axis] = k;
        let (values, indices) = crate::dispatch_numeric!(x.dtype(), T => {
            let (v, i) = top_k(x.as_slice::<T>()?, dims, k, self.largest);
            (util::out(shape.clone(), v)?, i)
        }, _ => return Err(dtype_error(&self.at, 0, &[FLOAT_TYPES, INT_TYPES].concat(), x.dtype())));
        Ok(vec![values, util::out(shape, indices)?])
    }
}

#[cfg(test)]
mod tests {
    use half::f16;
    use onyx_core::Tensor;

    use crate::ops::layout::testkit::*;

    fn topk(x: Tensor, k: i64, attrs: Vec<Attr>) -> (Tensor, Tensor) {
        let mut out = run_n("TopK", 11, attrs, &[Some(x), Some(i64s(&[k]))], 2).unwrap();
        let i = out.pop().unwrap().into_tensor().unwrap();
        (out.pop().unwrap().into_tensor().unwrap(), i)
    }

    #[test]
    fn matches_numpy_with_ties_and_axes() {
        // x = np.array([[3,1,4,1,5,9,2],[6,5,3,5,8,9,7],[9,3,2,3,8,4,6]], float32)
        let x = t(&[3, 7], vec![3f32, 1., 4., 1., 5., 9., 2., 6., 5., 3., 5., 8., 9., 7., 9., 3., 2., 3., 8., 4., 6.]);
        let (v, i) = topk(x.clone(), 3, vec![]);
        assert_eq!(f32s(&v), (vec![3, 3], vec![9., 5., 4., 9., 8., 7., 9., 8., 6.]));
        assert_eq!(i64v(&i), (vec![3, 3], vec![5, 4, 2, 5, 4, 6, 0, 4, 6]));
        // Smallest along axis 1: ties keep the lower index first.
        let (v, i) = topk(x.clone(), 4, vec![int("largest", 0)]);
        assert_eq!(f32s(&v).1, vec![1., 1., 2., 3., 3., 5., 5., 6., 2., 3., 3., 4.]);
        assert_eq!(i64v(&i).1, vec![1, 3, 6, 0, 2, 1, 3, 0, 2, 1, 3, 5]);
        // Along axis 0 (inner > 1), k = 2.
        let (v, i) = topk(x.clone(), 2, vec![int("axis", 0)]);
        assert_eq!(f32s(&v), (vec![2, 7], vec![9., 5., 4., 5., 8., 9., 7., 6., 3., 3., 3., 8., 9., 6.]));
        assert_eq!(i64v(&i).1, vec![2, 1, 0, 1, 1, 0, 1, 1, 2, 1, 2, 2, 1, 2]);
        // k = 0 and k = n.
        let (v, _) = topk(x.clone(), 0, vec![]);
        assert_eq!(v.shape(), &[3, 0]);
        let (_, i) = topk(x.clone(), 7, vec![int("axis", -1)]);
        assert_eq!(&i64v(&i).1[..7], &[5, 4, 2, 0, 6, 1, 3]);
    }

    #[test]
    fn other_types_opsets_and_large_inputs() {
        let x = t(&[5], vec![3i32, -7, 12, 0, 12]);
        let (v, i) = topk(x, 2, vec![]);
        assert_eq!((v.as_slice::<i32>().unwrap(), i64v(&i).1), (&[12, 12][..], vec![2, 4]));
        let h: Vec<f16> = [0.5f32, -1.0, 2.5, f32::NAN].iter().map(|&v| f16::from_f32(v)).collect();
        let (v, i) = topk(t(&[4], h), 2, vec![int("largest", 0)]);
        assert_eq!(v.as_slice::<f16>().unwrap(), &[f16::from_f32(-1.0), f16::from_f32(0.5)]);
        assert_eq!(i64v(&i).1, vec![1, 0]);
        // Opset 1 takes k as an attribute.
        let y = run_n("TopK", 1, vec![int("k", 1)], &[Some(t(&[2, 2], vec![1f32, 2., 4., 3.]))], 2).unwrap();
        assert_eq!(y[1].as_tensor().unwrap().as_slice::<i64>().unwrap(), &[1, 0]);
        // A large input takes the parallel path and agrees with a full sort.
        let data = rand_f32(64 * 1031, 5);
        let (v, i) = topk(t(&[64, 1031], data.clone()), 17, vec![]);
        for r in [0, 31, 63] {
            let mut row: Vec<(f32, usize)> = data[r * 1031..(r + 1) * 1031].iter().copied().zip(0..).collect();
            row.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            assert_eq!(&f32s(&v).1[r * 17..(r + 1) * 17], row[..17].iter().map(|p| p.0).collect::<Vec<_>>());
            assert_eq!(&i64v(&i).1[r * 17..(r + 1) * 17], row[..17].iter().map(|p| p.1 as i64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn invalid_k_and_inputs_are_errors() {
        let x = t(&[2, 3], rand_f32(6, 1));
        let err = run_n("TopK", 11, vec![], &[Some(x.clone()), Some(i64s(&[4]))], 2).unwrap_err().to_string();
        assert!(err.contains("k = 4") && err.contains("[0, 3]"), "{err}");
        let err = run_n("TopK", 11, vec![], &[Some(x.clone()), Some(i64s(&[-1]))], 2).unwrap_err().to_string();
        assert!(err.contains("k = -1"), "{err}");
        let err = run_n("TopK", 11, vec![], &[Some(x.clone()), Some(i64s(&[1, 2]))], 2).unwrap_err().to_string();
        assert!(err.contains("input 1"), "{err}");
        let err = run_n("TopK", 11, vec![int("axis", 2)], &[Some(x.clone()), Some(i64s(&[1]))], 2).unwrap_err();
        assert!(err.to_string().contains("axis 2"), "{err}");
        let err = run_n("TopK", 11, vec![], &[Some(Tensor::scalar(1f32)), Some(i64s(&[1]))], 2).unwrap_err();
        assert!(err.to_string().contains("scalar"), "{err}");
        let b = Tensor::from_bools(vec![2], vec![true, false]).unwrap();
        let err = run_n("TopK", 11, vec![], &[Some(b), Some(i64s(&[1]))], 2).unwrap_err();
        assert!(err.to_string().contains("bool"), "{err}");
        assert!(run_n("TopK", 1, vec![], &[Some(x)], 2).unwrap_err().to_string().contains("'k'"));
    }
}
