//! ScatterND and ScatterElements (also the deprecated Scatter), with reductions.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Element, Error, Location, Result, TensorView, Value};

use super::{element_offsets, indices, nd_plan};
use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;

/// How an update combines with the element it lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    /// Replace.
    None,
    /// Add.
    Add,
    /// Multiply.
    Mul,
    /// Keep the larger.
    Max,
    /// Keep the smaller.
    Min,
}

impl Reduction {
    /// Reads the `reduction` attribute as allowed at `version` (add/mul from 16, max/min from 18).
    fn build(ctx: &NodeContext<'_>) -> Result<Self> {
        let at = ctx.node.location();
        let v = ctx.since_version;
        if v < 16 {
            return Ok(Reduction::None);
        }
        match ctx.node.string_or("reduction", "none")?.as_str() {
            "none" => Ok(Reduction::None),
            "add" => Ok(Reduction::Add),
            "mul" => Ok(Reduction::Mul),
            "max" if v >= 18 => Ok(Reduction::Max),
            "min" if v >= 18 => Ok(Reduction::Min),
            other => Err(Error::attribute(
                &at,
                "reduction",
                if v >= 18 { "none, add, mul, max or min" } else { "none, add or mul" },
                other,
            )),
        }
    }
}

/// Arithmetic of the numeric element types for reductions: integers wrap.
pub(crate) trait Combine: Element + PartialOrd {
    /// `self + o`.
    fn add(self, o: Self) -> Self;
    /// `self * o`.
    fn mul(self, o: Self) -> Self;
}

macro_rules! combine_int {
    ($($t:ty),*) => {$(impl Combine for $t {
        fn add(self, o: Self) -> Self { self.wrapping_add(o) }
        fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
    })*};
}
combine_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! combine_float {
    ($($t:ty),*) => {$(impl Combine for $t {
        fn add(self, o: Self) -> Self { self + o }
        fn mul(self, o: Self) -> Self { self * o }
    })*};
}
combine_float!(f32, f64, half::f16, half::bf16);

/// Applies `reduction` to `dst` with `src`.
fn combine<T: Combine>(reduction: Reduction, dst: &mut T, src: T) {
    *dst = match reduction {
        Reduction::None => src,
        Reduction::Add => dst.add(src),
        Reduction::Mul => dst.mul(src),
        Reduction::Max => {
            if src > *dst {
                src
            } else {
                *dst
            }
        }
        Reduction::Min => {
            if src < *dst {
                src
            } else {
                *dst
            }
        }
    };
}

/// Writes `updates` into a copy of the data: element `i` of `updates` goes to `targets[i]`,
/// in order (later updates of one place see earlier ones).
fn scatter_moved<T: Elem>(data: &[T], targets: &[usize], updates: &[T], run: usize) -> Vec<T> {
    let mut out = data.to_vec();
    for (&t, u) in targets.iter().zip(updates.chunks(run.max(1))) {
        out[t..t + u.len()].clone_from_slice(u);
    }
    out
}

/// As [`scatter_moved`] with a numeric reduction.
fn scatter_reduce<T: Combine>(
    data: &[T],
    targets: &[usize],
    updates: &[T],
    run: usize,
    reduction: Reduction,
) -> Vec<T> {
    let mut out = data.to_vec();
    for (&t, u) in targets.iter().zip(updates.chunks(run.max(1))) {
        for (d, &s) in out[t..t + u.len()].iter_mut().zip(u) {
            combine(reduction, d, s);
        }
    }
    out
}

/// Scatters `updates` (runs of `run` elements) to `targets` of a copy of `x`.
fn scatter(
    x: &TensorView<'_>,
    u: &TensorView<'_>,
    targets: &[usize],
    run: usize,
    reduction: Reduction,
    at: &Location,
) -> Result<Value> {
    if u.dtype() != x.dtype() {
        return Err(Error::input(at, 2, format!("updates of the data's type {}", x.dtype()), u.dtype().name()));
    }
    if reduction == Reduction::None {
        return with_elem!(x.dtype(), at, T => {
            let out = scatter_moved(&T::read(x)?, targets, &T::read(u)?, run);
            elems::value(x.dtype(), x.shape().to_vec(), out)
        });
    }
    crate::dispatch_numeric!(x.dtype(), T => {
        let data = elems::typed::<T>(x.bytes()?);
        let updates = elems::typed::<T>(u.bytes()?);
        util::out(x.shape().to_vec(), scatter_reduce(&data, targets, &updates, run, reduction))
    }, _ => Err(Error::input(at, 0, format!("a numeric tensor for reduction {reduction:?}"), x.dtype().name())))
}

/// ScatterND: updates slices addressed by index tuples.
struct ScatterNd {
    reduction: Reduction,
    at: Location,
}

pub(crate) fn build_scatter_nd(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(ScatterNd { reduction: Reduction::build(ctx)?, at: ctx.node.location() }))
}

impl Kernel for ScatterNd {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let iv = util::input(inputs, 1, &self.at)?;
        let u = util::input(inputs, 2, &self.at)?;
        util::expect_dtype(&iv, &[DataType::Int64], 1, &self.at)?;
        let plan = nd_plan(x.shape(), iv.shape(), &indices(&iv, 1, &self.at)?, 0, &self.at)?;
        if u.shape() != plan.out_shape.as_slice() {
            return Err(Error::input(
                &self.at,
                2,
                format!("updates of shape {:?}", plan.out_shape),
                format!("{:?}", u.shape()),
            ));
        }
        Ok(vec![scatter(&x, &u, &plan.starts, plan.slice, self.reduction, &self.at)?])
    }
}

/// ScatterElements: `out[p with p[axis] = indices[p]] = updates[p]`.
struct ScatterElements {
    axis: i64,
    reduction: Reduction,
    at: Location,
}

pub(crate) fn build_scatter_elements(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let reduction = if ctx.node.op_type == "Scatter" { Reduction::None } else { Reduction::build(ctx)? };
    Ok(Box::new(ScatterElements { axis: ctx.node.int_or("axis", 0)?, reduction, at: ctx.node.location() }))
}

impl Kernel for ScatterElements {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let iv = util::input(inputs, 1, &self.at)?;
        let u = util::input(inputs, 2, &self.at)?;
        if x.rank() == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        if u.shape() != iv.shape() {
            return Err(Error::input(
                &self.at,
                2,
                format!("updates of the indices' shape {:?}", iv.shape()),
                format!("{:?}", u.shape()),
            ));
        }
        let axis = util::normalize_axis(self.axis, x.rank(), &self.at)?;
        let targets = element_offsets(x.shape(), iv.shape(), &indices(&iv, 1, &self.at)?, axis, 1, &self.at)?;
        Ok(vec![scatter(&x, &u, &targets, 1, self.reduction, &self.at)?])
    }
}
