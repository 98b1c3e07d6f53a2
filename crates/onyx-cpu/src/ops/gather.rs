//! Gather and scatter kernels: Gather, GatherElements, GatherND, ScatterND, ScatterElements
//! (and the deprecated Scatter), OneHot, Trilu. Every index is checked against its bound
//! before any element moves.

mod onehot;
mod scatter;
#[cfg(test)]
mod tests;

use rayon::prelude::*;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Gather", build_gather);
    r.add("GatherElements", build_gather_elements);
    r.add("GatherND", build_gather_nd);
    r.add("ScatterND", scatter::build_scatter_nd);
    r.add("ScatterElements", scatter::build_scatter_elements);
    r.add("Scatter", scatter::build_scatter_elements);
    r.add("OneHot", onehot::build_one_hot);
    r.add("Trilu", onehot::build_trilu);
}

/// Maps index `i` (negative counts from the end) into `0..bound`, or an error naming the
/// index, the bound and the input it came from.
pub(crate) fn wrap_index(i: i64, bound: usize, input: usize, at: &Location) -> Result<usize> {
    let b = bound as i64;
    if i < -b || i >= b {
        return Err(Error::input(at, input, format!("indices in [-{b}, {b})"), format!("index {i}")));
    }
    Ok(if i < 0 { (i + b) as usize } else { i as usize })
}

/// An int32/int64 indices input read as i64.
pub(crate) fn indices(view: &TensorView<'_>, input: usize, at: &Location) -> Result<Vec<i64>> {
    elems::int_values(view, input, &[DataType::Int32, DataType::Int64], at)
}

/// Gathers whole blocks: for every outer position and every index, the `inner` elements at
/// `index` along an axis of `dim` elements. `idx` must already be in range.
pub(crate) fn gather_blocks<T: Elem>(
    data: &[T],
    outer: usize,
    dim: usize,
    inner: usize,
    idx: &[usize],
    at: &Location,
) -> Result<Vec<T>> {
    let n = outer * idx.len() * inner;
    let mut out = elems::alloc::<T>(n, at)?;
    if inner == 0 || idx.is_empty() {
        return Ok(out);
    }
    let copy = |(j, dst): (usize, &mut [T])| {
        let (o, i) = (j / idx.len(), idx[j % idx.len()]);
        let from = (o * dim + i) * inner;
        dst.clone_from_slice(&data[from..from + inner]);
    };
    if elems::parallel(n) {
        out.par_chunks_mut(inner).with_min_len((1 << 12) / inner + 1).enumerate().for_each(copy);
    } else {
        out.chunks_mut(inner).enumerate().for_each(copy);
    }
    Ok(out)
}

/// Gather: `out[..., i..., ...] = data[..., indices[i...], ...]` along `axis`.
struct Gather {
    axis: i64,
    at: Location,
}

fn build_gather(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Gather { axis: ctx.node.int_or("axis", 0)?, at: ctx.node.location() }))
}

impl Kernel for Gather {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let iv = util::input(inputs, 1, &self.at)?;
        if x.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), &self.at)?;
        let dim = x.shape()[axis];
        let idx = indices(&iv, 1, &self.at)?
            .into_iter()
            .map(|i| wrap_index(i, dim, 1, &self.at))
            .collect::<Result<Vec<_>>>()?;
        let shape: Vec<usize> =
            x.shape()[..axis].iter().chain(iv.shape()).chain(&x.shape()[axis + 1..]).copied().collect();
        if elems::count(&shape, &self.at)? == 0 {
            return with_elem!(x.dtype(), &self.at, T => Ok(vec![elems::value::<T>(x.dtype(), shape, Vec::new())?]));
        }
        let outer = elems::count(&x.shape()[..axis], &self.at)?;
        let inner = elems::count(&x.shape()[axis + 1..], &self.at)?;
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let out = gather_blocks(&data, outer, dim, inner, &idx, &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

/// The data offset every element of an indices tensor of `ishape` addresses along `axis` of
/// data of `dshape` (GatherElements and ScatterElements); checks ranks, dims and indices.
pub(crate) fn element_offsets(
    dshape: &[usize],
    ishape: &[usize],
    idx: &[i64],
    axis: usize,
    input: usize,
    at: &Location,
) -> Result<Vec<usize>> {
    if ishape.len() != dshape.len() || (0..dshape.len()).any(|d| d != axis && ishape[d] > dshape[d]) {
        return Err(Error::input(
            at,
            input,
            format!("indices of rank {} no larger than the data {dshape:?} off the axis", dshape.len()),
            format!("{ishape:?}"),
        ));
    }
    if idx.is_empty() {
        return Ok(Vec::new());
    }
    let strides = elems::strides(dshape, at)?;
    let dim = dshape[axis];
    let mut offsets = Vec::with_capacity(idx.len());
    let mut pos = vec![0usize; ishape.len()];
    for &i in idx {
        let i = wrap_index(i, dim, input, at)?;
        let base: usize =
            pos.iter().zip(&strides).enumerate().map(|(d, (&p, &s))| if d == axis { 0 } else { p * s }).sum();
        offsets.push(base + i * strides[axis]);
        for d in (0..pos.len()).rev() {
            pos[d] += 1;
            if pos[d] < ishape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Ok(offsets)
}

/// The elements of `data` at `offsets` (all in range).
fn pick<T: Elem>(data: &[T], offsets: &[usize]) -> Vec<T> {
    offsets.iter().map(|&o| data[o].clone()).collect()
}

/// GatherElements: `out[p] = data[p with p[axis] = indices[p]]`.
struct GatherElements {
    axis: i64,
    at: Location,
}

fn build_gather_elements(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GatherElements { axis: ctx.node.int_or("axis", 0)?, at: ctx.node.location() }))
}

impl Kernel for GatherElements {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let iv = util::input(inputs, 1, &self.at)?;
        if x.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), &self.at)?;
        let offsets = element_offsets(x.shape(), iv.shape(), &indices(&iv, 1, &self.at)?, axis, 1, &self.at)?;
        with_elem!(x.dtype(), &self.at, T => {
            let out = pick(&T::read(&x)?, &offsets);
            Ok(vec![elems::value(x.dtype(), iv.shape().to_vec(), out)?])
        })
    }
}

/// Where the slices of GatherND/ScatterND start in the data, and how long they are.
pub(crate) struct NdPlan {
    /// Start of each addressed slice in the data.
    pub starts: Vec<usize>,
    /// Elements per slice.
    pub slice: usize,
    /// `indices.shape[..q-1]` followed by the slice's dims (GatherND's output shape).
    pub out_shape: Vec<usize>,
}

/// Resolves the index tuples of `indices` (shape `ishape`, last dim = tuple length) into data
/// of `dshape` with `batch` leading batch dims.
pub(crate) fn nd_plan(dshape: &[usize], ishape: &[usize], idx: &[i64], batch: usize, at: &Location) -> Result<NdPlan> {
    let (r, q) = (dshape.len(), ishape.len());
    let k = ishape.last().copied().unwrap_or(0);
    if r == 0 || q == 0 || batch >= r.min(q) || k > r - batch || dshape[..batch] != ishape[..batch] {
        return Err(Error::input(
            at,
            1,
            format!(
            "indices of rank >= 1 whose first {batch} dims match the data {dshape:?} and whose last dim is at most {}",
            r.saturating_sub(batch)
        ),
            format!("{ishape:?}"),
        ));
    }
    let strides = elems::strides(dshape, at)?;
    let slice = elems::count(&dshape[batch + k..], at)?;
    let batch_size = elems::count(&dshape[batch..], at)?;
    let tuples_per_batch = elems::count(&ishape[batch..q - 1], at)?;
    let tuples = match idx.len().checked_div(k) {
        Some(t) => t,
        None => elems::count(&ishape[..q - 1], at)?,
    };
    let mut starts = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let b = t.checked_div(tuples_per_batch).unwrap_or(0);
        let mut start = b * batch_size;
        for j in 0..k {
            start += wrap_index(idx[t * k + j], dshape[batch + j], 1, at)? * strides[batch + j];
        }
        starts.push(start);
    }
    let out_shape = ishape[..q - 1].iter().chain(&dshape[batch + k..]).copied().collect();
    Ok(NdPlan { starts, slice, out_shape })
}

/// GatherND: slices of the data addressed by index tuples.
struct GatherNd {
    batch_dims: usize,
    at: Location,
}

fn build_gather_nd(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let b = if ctx.since_version >= 12 { ctx.node.int_or("batch_dims", 0)? } else { 0 };
    let batch_dims =
        usize::try_from(b).map_err(|_| Error::attribute(&at, "batch_dims", "a non-negative int", b.to_string()))?;
    Ok(Box::new(GatherNd { batch_dims, at }))
}

impl Kernel for GatherNd {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let iv = util::input(inputs, 1, &self.at)?;
        util::expect_dtype(&iv, &[DataType::Int64], 1, &self.at)?;
        let plan = nd_plan(x.shape(), iv.shape(), &indices(&iv, 1, &self.at)?, self.batch_dims, &self.at)?;
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let mut out = elems::with_capacity(plan.starts.len() * plan.slice, &self.at)?;
            for &s in &plan.starts {
                out.extend_from_slice(&data[s..s + plan.slice]);
            }
            Ok(vec![elems::value(x.dtype(), plan.out_shape, out)?])
        })
    }
}
