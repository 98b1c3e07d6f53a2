//! Unique: the distinct elements (or slices along an axis), with the index of each one's first
//! occurrence, the inverse map and the counts.

use std::cmp::Ordering;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Location, Result, TensorView, Value};

use super::total_cmp;
use crate::ops::gather::gather_blocks;
use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;

/// Unique over the flattened input (no axis) or over slices along `axis`.
struct Unique {
    axis: Option<i64>,
    sorted: bool,
    at: Location,
}

pub(super) fn build_unique(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(Unique { axis: node.get_int("axis")?, sorted: node.int_or("sorted", 1)? != 0, at: node.location() }))
}

/// The distinct slices of `[outer, dim, inner]` data along the middle axis.
#[derive(Debug, PartialEq)]
pub(crate) struct Distinct {
    /// Index of the first occurrence of each distinct slice, in output order.
    pub first: Vec<usize>,
    /// For every slice of the input, the output position of its distinct slice.
    pub inverse: Vec<usize>,
    /// How many input slices each distinct slice stands for.
    pub counts: Vec<usize>,
}

/// Groups equal slices (compared element by element, lexicographically) and orders the groups
/// by value (`sorted`) or by first occurrence.
pub(crate) fn distinct<T>(
    data: &[T],
    (outer, dim, inner): (usize, usize, usize),
    sorted: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> Distinct {
    let compare = |a: usize, b: usize| -> Ordering {
        for o in 0..outer {
            let (ra, rb) = ((o * dim + a) * inner, (o * dim + b) * inner);
            for i in 0..inner {
                match cmp(&data[ra + i], &data[rb + i]) {
                    Ordering::Equal => {}
                    other => return other,
                }
            }
        }
        Ordering::Equal
    };
    let mut order: Vec<usize> = (0..dim).collect();
    order.sort_by(|&a, &b| compare(a, b)); // stable: the first occurrence leads its group
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &j in &order {
        match groups.last_mut() {
            Some(g) if compare(g[0], j) == Ordering::Equal => g.push(j),
            _ => groups.push(vec![j]),
        }
    }
    if !sorted {
        groups.sort_by_key(|g| g[0]);
    }
    let mut inverse = vec![0; dim];
    for (p, g) in groups.iter().enumerate() {
        for &j in g {
            inverse[j] = p;
        }
    }
    Distinct { first: groups.iter().map(|g| g[0]).collect(), counts: groups.iter().map(Vec::len).collect(), inverse }
}

/// [`distinct`] for a tensor of any element type but packed ones.
fn distinct_of(x: &TensorView<'_>, dims: (usize, usize, usize), sorted: bool, at: &Location) -> Result<Distinct> {
    Ok(match x.dtype() {
        DataType::String => distinct(x.strings()?, dims, sorted, |a, b| a.cmp(b)),
        DataType::Bool => distinct(x.bytes()?, dims, sorted, |a, b| a.cmp(b)),
        other => crate::dispatch_numeric!(other, T => {
            distinct(&elems::typed::<T>(x.bytes()?), dims, sorted, total_cmp)
        }, _ => return Err(elems::unsupported_dtype(at, other))),
    })
}

fn int64s(v: &[usize]) -> Result<Value> {
    util::out(vec![v.len()], v.iter().map(|&i| i as i64).collect())
}

impl Kernel for Unique {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let (dims, axis) = match self.axis {
            None => ((1, elems::count(x.shape(), &self.at)?, 1), None),
            Some(a) => {
                let axis = util::normalize_axis(a, x.rank(), &self.at)?;
                let s = x.shape();
                if s.is_empty() {
                    return Err(onyx_core::Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
                }
                ((elems::count(&s[..axis], &self.at)?, s[axis], elems::count(&s[axis + 1..], &self.at)?), Some(axis))
            }
        };
        let d = distinct_of(&x, dims, self.sorted, &self.at)?;
        let shape = match axis {
            None => vec![d.first.len()],
            Some(a) => {
                let mut s = x.shape().to_vec();
                s[a] = d.first.len();
                s
            }
        };
        let y = with_elem!(x.dtype(), &self.at, T => {
            let out = gather_blocks(&T::read(&x)?, dims.0, dims.1, dims.2, &d.first, &self.at)?;
            elems::value(x.dtype(), shape, out)
        })?;
        Ok(vec![y, int64s(&d.first)?, int64s(&d.inverse)?, int64s(&d.counts)?])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::ops::layout::testkit::*;

    fn unique(x: Tensor, attrs: Vec<Attr>) -> Vec<Tensor> {
        run_n("Unique", 11, attrs, &[Some(x)], 4).unwrap().into_iter().map(|v| v.into_tensor().unwrap()).collect()
    }

    #[test]
    fn flattened_sorted_and_unsorted() {
        // np.unique([2,1,1,3,4,3,-0.0,0,nan,nan], return_index/inverse/counts=True)
        let x = t(&[2, 5], vec![2f32, 1., 1., 3., 4., 3., -0.0, 0., f32::NAN, f32::NAN]);
        let out = unique(x.clone(), vec![]);
        let y = f32s(&out[0]);
        assert_eq!(y.0, vec![6]);
        assert_eq!(&y.1[..5], &[0., 1., 2., 3., 4.]);
        assert!(y.1[5].is_nan());
        assert_eq!(i64v(&out[1]).1, vec![6, 1, 0, 3, 4, 8]);
        assert_eq!(i64v(&out[2]).1, vec![2, 1, 1, 3, 4, 3, 0, 0, 5, 5]);
        assert_eq!(i64v(&out[3]).1, vec![2, 2, 1, 2, 1, 2]);
        // sorted = 0: order of first occurrence (the ONNX spec's example).
        let out = unique(t(&[6], vec![2i64, 1, 1, 3, 4, 3]), vec![int("sorted", 0)]);
        assert_eq!(i64v(&out[0]).1, vec![2, 1, 3, 4]);
        assert_eq!(i64v(&out[1]).1, vec![0, 1, 3, 4]);
        assert_eq!(i64v(&out[2]).1, vec![0, 1, 1, 2, 3, 2]);
        assert_eq!(i64v(&out[3]).1, vec![1, 2, 2, 1]);
        let out = unique(strs(&[4], &["b", "a", "b", "c"]), vec![]);
        assert_eq!(out[0].view().unwrap().strings().unwrap(), &["a", "b", "c"]);
    }

    #[test]
    fn slices_along_an_axis() {
        // np.unique(A, axis=0/1) for the ONNX spec's example A = [[1,0,0],[1,0,0],[2,3,4]]
        let a = t(&[3, 3], vec![1i32, 0, 0, 1, 0, 0, 2, 3, 4]);
        let out = unique(a.clone(), vec![int("axis", 0)]);
        assert_eq!((out[0].shape(), out[0].as_slice::<i32>().unwrap()), (&[2usize, 3][..], &[1, 0, 0, 2, 3, 4][..]));
        assert_eq!(i64v(&out[1]).1, vec![0, 2]);
        assert_eq!(i64v(&out[2]).1, vec![0, 0, 1]);
        assert_eq!(i64v(&out[3]).1, vec![2, 1]);
        // Along the last axis of a 3-D input: columns compared over both outer rows.
        let b = t(&[2, 2, 4], vec![1i64, 0, 1, 0, 2, 5, 2, 5, 3, 3, 3, 1, 0, 7, 0, 7]);
        let out = unique(b, vec![int("axis", -1)]);
        assert_eq!(i64v(&out[0]), (vec![2, 2, 3], vec![0, 0, 1, 5, 5, 2, 1, 3, 3, 7, 7, 0]));
        assert_eq!(i64v(&out[1]).1, vec![3, 1, 0]);
        assert_eq!(i64v(&out[2]).1, vec![2, 1, 2, 0]);
        assert_eq!(i64v(&out[3]).1, vec![1, 1, 2]);
        let err = run_n("Unique", 11, vec![int("axis", 2)], &[Some(a)], 4).unwrap_err().to_string();
        assert!(err.contains("axis 2"), "{err}");
        let out = unique(t(&[0], Vec::<f32>::new()), vec![]);
        assert_eq!(out[0].shape(), &[0]);
    }
}
