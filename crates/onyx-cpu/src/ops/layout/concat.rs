//! Concat and Split.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::layout::split_sizes;
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::elems::{self, with_elem, Elem};
use crate::ops::util;

/// Concatenates `parts` (each `(data, shape)`, equal except along `axis`) along `axis`.
pub(crate) fn concat<T: Elem>(
    parts: &[(&[T], &[usize])],
    axis: usize,
    out_len: usize,
    at: &Location,
) -> Result<Vec<T>> {
    let mut out = elems::with_capacity(out_len, at)?;
    let Some((_, first_shape)) = parts.first() else { return Ok(out) };
    if out_len == 0 {
        return Ok(out);
    }
    let outer = elems::count(&first_shape[..axis], at)?;
    let blocks = parts.iter().map(|(_, s)| elems::count(&s[axis..], at)).collect::<Result<Vec<_>>>()?;
    for o in 0..outer {
        for ((data, _), &block) in parts.iter().zip(&blocks) {
            out.extend_from_slice(&data[o * block..(o + 1) * block]);
        }
    }
    Ok(out)
}

/// Splits `data` of `shape` along `axis` into pieces of `sizes` (summing to the axis' dim).
pub(crate) fn split<T: Elem>(
    data: &[T],
    shape: &[usize],
    axis: usize,
    sizes: &[usize],
    at: &Location,
) -> Result<Vec<Vec<T>>> {
    if elems::count(shape, at)? == 0 {
        return Ok(sizes.iter().map(|_| Vec::new()).collect());
    }
    let outer = elems::count(&shape[..axis], at)?;
    let inner = elems::count(&shape[axis + 1..], at)?;
    let row = shape[axis] * inner;
    let mut start = 0;
    let mut outs = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let block = size * inner;
        let mut out = elems::with_capacity(outer * block, at)?;
        for o in 0..outer {
            let from = o * row + start;
            out.extend_from_slice(&data[from..from + block]);
        }
        outs.push(out);
        start += block;
    }
    Ok(outs)
}

/// Concat: joins its inputs along `axis`.
pub(crate) struct Concat {
    axis: i64,
    at: Location,
}

pub(crate) fn build_concat(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let axis = ctx.node.get_int("axis")?.ok_or_else(|| Error::attribute(&at, "axis", "an int", "nothing"))?;
    Ok(Box::new(Concat { axis, at }))
}

impl Concat {
    /// The output shape, after checking that every input agrees with the first.
    fn out_shape(&self, views: &[TensorView<'_>], axis: usize) -> Result<Vec<usize>> {
        let first = views[0];
        let mut shape = first.shape().to_vec();
        shape[axis] = 0;
        for (i, v) in views.iter().enumerate() {
            let same_rank = v.rank() == first.rank();
            let same_dims = same_rank && (0..v.rank()).all(|d| d == axis || v.shape()[d] == first.shape()[d]);
            if v.dtype() != first.dtype() || !same_dims {
                return Err(Error::input(
                    &self.at,
                    i,
                    format!("{}{:?} (any size along axis {axis})", first.dtype(), first.shape()),
                    format!("{}{:?}", v.dtype(), v.shape()),
                ));
            }
            shape[axis] += v.shape()[axis];
        }
        Ok(shape)
    }
}

impl Kernel for Concat {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let views = (0..inputs.len()).map(|i| util::input(inputs, i, &self.at)).collect::<Result<Vec<_>>>()?;
        let Some(first) = views.first() else {
            return Err(Error::input(&self.at, 0, "at least one tensor", "no inputs"));
        };
        if first.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, first.rank(), &self.at)?;
        let shape = self.out_shape(&views, axis)?;
        if views.len() == 1 {
            return Ok(vec![elems::input_ref(inputs, 0, &self.at)?.to_value()]);
        }
        let len = elems::count(&shape, &self.at)?;
        with_elem!(first.dtype(), &self.at, T => {
            let datas = views.iter().map(T::read).collect::<Result<Vec<_>>>()?;
            let parts: Vec<(&[T], &[usize])> = datas.iter().zip(&views).map(|(d, v)| (&d[..], v.shape())).collect();
            let out = concat(&parts, axis, len, &self.at)?;
            Ok(vec![elems::value(first.dtype(), shape, out)?])
        })
    }
}

/// Split: cuts its input along `axis` into one piece per output.
pub(crate) struct Split {
    axis: i64,
    /// Sizes from the `split` attribute (before opset 13).
    split_attr: Option<Vec<i64>>,
    /// The `num_outputs` attribute (opset 18).
    num_outputs: Option<i64>,
    /// Whether sizes come from input 1 (opset 13 on).
    split_input: bool,
    /// Whether an uneven split without sizes leaves a smaller last piece (opset 18) or is an error.
    uneven_ok: bool,
    outputs: usize,
    at: Location,
}

pub(crate) fn build_split(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let v = ctx.since_version;
    let num_outputs = if v >= 18 { node.get_int("num_outputs")? } else { None };
    if let Some(n) = num_outputs {
        if n < 1 || n as usize != node.outputs.len() {
            return Err(Error::attribute(
                &at,
                "num_outputs",
                format!("the number of outputs ({})", node.outputs.len()),
                n.to_string(),
            ));
        }
    }
    Ok(Box::new(Split {
        axis: node.int_or("axis", 0)?,
        split_attr: if v < 13 { node.get_ints("split")?.map(<[i64]>::to_vec) } else { None },
        num_outputs,
        split_input: v >= 13,
        uneven_ok: v >= 18,
        outputs: node.outputs.len(),
        at,
    }))
}

impl Split {
    /// The size of every piece along an axis of `dim` elements.
    fn sizes(&self, inputs: &[Option<ValueRef<'_>>], dim: usize) -> Result<Vec<usize>> {
        let given = match (&self.split_attr, self.split_input) {
            (Some(s), _) => Some(s.clone()),
            (None, true) => match util::opt_input(inputs, 1, &self.at)? {
                Some(v) => Some(elems::int_values(&v, 1, &[DataType::Int64], &self.at)?),
                None => None,
            },
            (None, false) => None,
        };
        split_sizes(given, self.outputs, self.num_outputs, self.uneven_ok, dim, &self.at)
    }
}

impl Kernel for Split {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        if x.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), &self.at)?;
        let sizes = self.sizes(inputs, x.shape()[axis])?;
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let pieces = split(&data, x.shape(), axis, &sizes, &self.at)?;
            pieces.into_iter().zip(&sizes).map(|(p, &size)| {
                let mut shape = x.shape().to_vec();
                shape[axis] = size;
                elems::value(x.dtype(), shape, p)
            }).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use onyx_core::Tensor;

    #[test]
    fn concat_matches_numpy() {
        // np.concatenate([a, b], axis=1) with a = arange(6).reshape(2,3), b = arange(10,14).reshape(2,2)
        let a = t(&[2, 3], vec![0i64, 1, 2, 3, 4, 5]);
        let b = t(&[2, 2], vec![10i64, 11, 12, 13]);
        let y = run1("Concat", 13, vec![int("axis", -1)], &[Some(a.clone()), Some(b.clone())]).unwrap();
        assert_eq!(i64v(&y), (vec![2, 5], vec![0, 1, 2, 10, 11, 3, 4, 5, 12, 13]));
        let e = t(&[2, 0], Vec::<i64>::new());
        let y = run1("Concat", 11, vec![int("axis", 1)], &[Some(e), Some(a.clone()), Some(b.clone())]).unwrap();
        assert_eq!(y.shape(), &[2, 5]);
        let s1 = strs(&[1, 2], &["a", "b"]);
        let s2 = strs(&[1, 2], &["c", "d"]);
        let y = run1("Concat", 13, vec![int("axis", 0)], &[Some(s1), Some(s2)]).unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["a", "b", "c", "d"]);
    }

    #[test]
    fn concat_random_against_naive() {
        let shapes = [[3usize, 2, 5], [3, 7, 5], [3, 1, 5]];
        let parts: Vec<Vec<f32>> =
            shapes.iter().enumerate().map(|(i, s)| rand_f32(s.iter().product(), i as u64)).collect();
        let inputs: Vec<Option<Tensor>> = parts.iter().zip(&shapes).map(|(p, s)| Some(t(s, p.clone()))).collect();
        let y = run1("Concat", 4, vec![int("axis", 1)], &inputs).unwrap();
        let mut want = Vec::new();
        for o in 0..3 {
            for (p, s) in parts.iter().zip(&shapes) {
                want.extend_from_slice(&p[o * s[1] * 5..(o + 1) * s[1] * 5]);
            }
        }
        assert_eq!(f32s(&y), (vec![3, 10, 5], want));
    }

    #[test]
    fn concat_errors() {
        let a = t(&[2, 3], vec![0i64; 6]);
        let b = t(&[3, 2], vec![0i64; 6]);
        let err = run1("Concat", 13, vec![int("axis", 1)], &[Some(a.clone()), Some(b)]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("[3, 2]"), "{err}");
        let f = t(&[2, 3], vec![0f32; 6]);
        let err = run1("Concat", 13, vec![int("axis", 0)], &[Some(a.clone()), Some(f)]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("float"), "{err}");
        let err = run1("Concat", 13, vec![int("axis", 2)], &[Some(a.clone())]).unwrap_err().to_string();
        assert!(err.contains("axis 2"), "{err}");
        assert!(run1("Concat", 13, vec![], &[Some(a)]).unwrap_err().to_string().contains("'axis'"));
    }

    #[test]
    fn split_versions() {
        let x = t(&[2, 5], (0..10i64).collect());
        // np.split(x, [2], axis=1)
        let outs = run_n("Split", 2, vec![int("axis", 1), ints("split", &[2, 3])], &[Some(x.clone())], 2).unwrap();
        let outs: Vec<_> = outs.into_iter().map(|v| i64v(&v.into_tensor().unwrap())).collect();
        assert_eq!(outs, vec![(vec![2, 2], vec![0, 1, 5, 6]), (vec![2, 3], vec![2, 3, 4, 7, 8, 9])]);
        let outs = run_n("Split", 13, vec![int("axis", -1)], &[Some(x.clone()), Some(i64s(&[4, 1]))], 2).unwrap();
        assert_eq!(outs[1].as_tensor().unwrap().as_slice::<i64>().unwrap(), &[4, 9]);
        let outs = run_n("Split", 18, vec![int("axis", 1), int("num_outputs", 2)], &[Some(x.clone())], 2).unwrap();
        let outs: Vec<_> = outs.into_iter().map(|v| i64v(&v.into_tensor().unwrap())).collect();
        assert_eq!(outs, vec![(vec![2, 3], vec![0, 1, 2, 5, 6, 7]), (vec![2, 2], vec![3, 4, 8, 9])]);
        let outs = run_n("Split", 11, vec![], &[Some(x.clone())], 2).unwrap();
        assert_eq!(outs[1].as_tensor().unwrap().as_slice::<i64>().unwrap(), &[5, 6, 7, 8, 9]);
    }

    #[test]
    fn split_errors() {
        let x = t(&[2, 5], (0..10i64).collect());
        let err = run_n("Split", 13, vec![int("axis", 1)], &[Some(x.clone())], 2).unwrap_err().to_string();
        assert!(err.contains("evenly"), "{err}");
        let err = run_n("Split", 13, vec![int("axis", 1)], &[Some(x.clone()), Some(i64s(&[4, 2]))], 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("summing"), "{err}");
        let err = run_n("Split", 13, vec![int("axis", 1)], &[Some(x.clone()), Some(i64s(&[6, -1]))], 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("non-negative"), "{err}");
        let err = run_n("Split", 18, vec![int("axis", 1), int("num_outputs", 3)], &[Some(x.clone())], 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("num_outputs"), "{err}");
        let err = run_n("Split", 18, vec![int("axis", 1), int("num_outputs", 4)], &[Some(x.clone())], 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("smaller last"), "{err}");
        let err = run_n("Split", 13, vec![int("axis", 0)], &[Some(x), Some(t(&[2], vec![1i32, 1]))], 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 1") && err.contains("int32"), "{err}");
    }
}
