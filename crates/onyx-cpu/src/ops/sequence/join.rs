//! SplitToSequence and ConcatFromSequence, and [`join`]: concatenating or stacking tensors
//! (also how Loop and Scan assemble their scan outputs).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Location, Result, Sequence, Tensor, TensorView, Value};

use super::{seq_input, tensor_type, tensors};
use crate::ops::layout::concat::{concat, split};
use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;

/// Joins `parts` along `axis`: concatenated (equal shapes but along `axis`), or stacked along a
/// new axis `axis` when `new_axis` (equal shapes). Errors name input `input` of the node.
pub(crate) fn join(
    parts: &[TensorView<'_>],
    axis: usize,
    new_axis: bool,
    input: usize,
    at: &Location,
) -> Result<Tensor> {
    let first = parts.first().ok_or_else(|| Error::input(at, input, "at least one tensor to join", "none"))?;
    let rank = first.rank() + usize::from(new_axis);
    if axis >= rank {
        return Err(Error::node(
            at,
            format!("axis {axis} is out of range for joining tensors of shape {:?}", first.shape()),
        ));
    }
    let shape_of = |v: &TensorView<'_>| -> Vec<usize> {
        let mut s = v.shape().to_vec();
        if new_axis {
            s.insert(axis, 1);
        }
        s
    };
    let base = shape_of(first);
    let mut out_shape = base.clone();
    out_shape[axis] = 0;
    for v in parts {
        let s = shape_of(v);
        let same = s.len() == base.len() && (0..s.len()).all(|d| d == axis || s[d] == base[d]);
        if v.dtype() != first.dtype() || !same {
            return Err(Error::input(
                at,
                input,
                format!(
                    "tensors like the first, {}{:?}{}",
                    first.dtype(),
                    first.shape(),
                    if new_axis { "" } else { " but along the axis" }
                ),
                format!("{}{:?}", v.dtype(), v.shape()),
            ));
        }
        out_shape[axis] += s[axis];
    }
    let len = elems::count(&out_shape, at)?;
    let shapes: Vec<Vec<usize>> = parts.iter().map(shape_of).collect();
    with_elem!(first.dtype(), at, T => {
        let datas = parts.iter().map(T::read).collect::<Result<Vec<_>>>()?;
        let p: Vec<(&[T], &[usize])> = datas.iter().zip(&shapes).map(|(d, s)| (&d[..], &s[..])).collect();
        T::tensor(first.dtype(), out_shape, concat(&p, axis, len, at)?)
    })
}

/// The slices of `x` along `axis`, each without that axis (the inverse of stacking).
pub(crate) fn unstack(x: &TensorView<'_>, axis: usize, at: &Location) -> Result<Vec<Tensor>> {
    let dim = x.shape()[axis];
    let mut shape = x.shape().to_vec();
    shape.remove(axis);
    with_elem!(x.dtype(), at, T => {
        let pieces = split(&T::read(x)?, x.shape(), axis, &vec![1; dim], at)?;
        pieces.into_iter().map(|p| T::tensor(x.dtype(), shape.clone(), p)).collect()
    })
}

/// The stack of no slices whose declared type is `ty` (a tensor type): shape `[0, dims...]`
/// when the slice shape is known, `[0]` otherwise; float when the type is unknown.
pub(crate) fn empty_stack(ty: &ValueType, axis: usize) -> Result<Value> {
    let (dtype, mut shape) = match ty {
        ValueType::Tensor(t) => (t.dtype, t.concrete().unwrap_or_default()),
        _ => (DataType::Float, vec![]),
    };
    shape.insert(axis.min(shape.len()), 0);
    Tensor::zeros(dtype, shape).map(Value::Tensor)
}

/// SplitToSequence: pieces of the input along `axis`, as a sequence.
struct SplitToSequence {
    axis: i64,
    keepdims: bool,
    at: Location,
}

pub(super) fn build_split_to_sequence(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(SplitToSequence {
        axis: node.int_or("axis", 0)?,
        keepdims: node.int_or("keepdims", 1)? != 0,
        at: node.location(),
    }))
}

impl SplitToSequence {
    /// The piece sizes, and whether the axis is dropped from each piece.
    fn sizes(&self, inputs: &[Option<ValueRef<'_>>], dim: usize) -> Result<(Vec<usize>, bool)> {
        let Some(sv) = util::opt_input(inputs, 1, &self.at)? else {
            return Ok((vec![1; dim], !self.keepdims));
        };
        let v = elems::int_values(&sv, 1, &[DataType::Int32, DataType::Int64], &self.at)?;
        if sv.rank() == 0 {
            let chunk = v[0];
            if chunk <= 0 {
                return Err(Error::input(&self.at, 1, "a positive piece size", chunk.to_string()));
            }
            let chunk = chunk as usize;
            let mut sizes = vec![chunk; dim / chunk];
            if dim % chunk != 0 {
                sizes.push(dim % chunk);
            }
            return Ok((sizes, false));
        }
        if sv.rank() != 1
            || v.iter().any(|&s| s < 0)
            || v.iter().try_fold(0i64, |a, &s| a.checked_add(s)) != Some(dim as i64)
        {
            return Err(Error::input(
                &self.at,
                1,
                format!("a scalar, or non-negative sizes summing to {dim}"),
                format!("{v:?}"),
            ));
        }
        Ok((v.iter().map(|&s| s as usize).collect(), false))
    }
}

impl Kernel for SplitToSequence {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        if x.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), &self.at)?;
        let (sizes, squeeze) = self.sizes(inputs, x.shape()[axis])?;
        let items = with_elem!(x.dtype(), &self.at, T => {
            let pieces = split(&T::read(&x)?, x.shape(), axis, &sizes, &self.at)?;
            pieces.into_iter().zip(&sizes).map(|(p, &size)| {
                let mut shape = x.shape().to_vec();
                if squeeze { shape.remove(axis); } else { shape[axis] = size; }
                elems::value(x.dtype(), shape, p)
            }).collect::<Result<Vec<_>>>()
        })?;
        Ok(vec![Value::Sequence(Sequence { elem_type: tensor_type(x.dtype()), items })])
    }
}

/// ConcatFromSequence: the sequence's tensors concatenated (or stacked, `new_axis = 1`).
struct ConcatFromSequence {
    axis: i64,
    new_axis: bool,
    at: Location,
}

pub(super) fn build_concat_from_sequence(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let axis = node.get_int("axis")?.ok_or_else(|| Error::attribute(&at, "axis", "an int", "nothing"))?;
    Ok(Box::new(ConcatFromSequence { axis, new_axis: node.int_or("new_axis", 0)? != 0, at }))
}

impl Kernel for ConcatFromSequence {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let s = seq_input(inputs, 0, &self.at)?;
        let ts = tensors(s, 0, &self.at)?;
        let views = ts.iter().map(|t| t.view()).collect::<Result<Vec<_>>>()?;
        let first =
            views.first().ok_or_else(|| Error::input(&self.at, 0, "a non-empty sequence", "an empty sequence"))?;
        let rank = first.rank() + usize::from(self.new_axis);
        let axis = util::normalize_axis(self.axis, rank, &self.at)?;
        Ok(vec![Value::Tensor(join(&views, axis, self.new_axis, 0, &self.at)?)])
    }
}
