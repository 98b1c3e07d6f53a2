//! Shape kernels: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Expand, Identity,
//! Dropout (inference). The ones that only change the shape share the input's elements when it
//! is an owned value.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

pub(crate) use onyx_core::ops::layout::reshape_dims;

use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::layout::index_map::gather_axes;
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Reshape", build_reshape);
    r.add("Flatten", build_flatten);
    r.add("Squeeze", build_squeeze);
    r.add("Unsqueeze", build_unsqueeze);
    r.add("Shape", build_shape);
    r.add("Size", build_size);
    r.add("Expand", build_expand);
    r.add("Identity", build_identity);
    r.add("Dropout", build_dropout);
}

/// The shape of tensor input `i` (host or device).
fn shape_of<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, at: &Location) -> Result<&'r [usize]> {
    match elems::input_ref(inputs, i, at)? {
        ValueRef::View(v) => Ok(v.shape()),
        ValueRef::Value(v) => {
            v.as_tensor().map(Tensor::shape).map_err(|e| Error::input(at, i, "a tensor", e.to_string()))
        }
    }
}

/// Input `i` with a new shape (shares an owned value's elements).
fn reshape_input(inputs: &[Option<ValueRef<'_>>], i: usize, shape: Vec<usize>, at: &Location) -> Result<Vec<Value>> {
    Ok(vec![elems::reshaped(elems::input_ref(inputs, i, at)?, shape, at)?])
}

/// A 1-D int64 input read as i64 values.
fn i64_input(inputs: &[Option<ValueRef<'_>>], i: usize, at: &Location) -> Result<Vec<i64>> {
    elems::int_values(&util::input(inputs, i, at)?, i, &[DataType::Int64], at)
}

/// Reshape.
struct Reshape {
    allowzero: bool,
    at: Location,
}

fn build_reshape(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let allowzero = ctx.since_version >= 14 && ctx.node.int_or("allowzero", 0)? != 0;
    Ok(Box::new(Reshape { allowzero, at: ctx.node.location() }))
}

impl Kernel for Reshape {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let input = shape_of(inputs, 0, &self.at)?;
        let spec = i64_input(inputs, 1, &self.at)?;
        let shape = reshape_dims(input, &spec, self.allowzero, &self.at)?;
        reshape_input(inputs, 0, shape, &self.at)
    }
}

/// Flatten: `[prod(dims[..axis]), prod(dims[axis..])]`.
struct Flatten {
    axis: i64,
    at: Location,
}

fn build_flatten(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Flatten { axis: ctx.node.int_or("axis", 1)?, at: ctx.node.location() }))
}

impl Kernel for Flatten {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let input = shape_of(inputs, 0, &self.at)?;
        let r = input.len() as i64;
        if self.axis < -r || self.axis > r {
            return Err(Error::attribute(&self.at, "axis", format!("a value in [{}, {r}]", -r), self.axis.to_string()));
        }
        let axis = if self.axis < 0 { self.axis + r } else { self.axis } as usize;
        let shape = vec![elems::count(&input[..axis], &self.at)?, elems::count(&input[axis..], &self.at)?];
        reshape_input(inputs, 0, shape, &self.at)
    }
}

/// Where the axes of Squeeze/Unsqueeze come from.
enum Axes {
    Attribute(Option<Vec<i64>>),
    Input,
}

impl Axes {
    fn build(ctx: &NodeContext<'_>) -> Result<Self> {
        Ok(if ctx.since_version >= 13 {
            Axes::Input
        } else {
            Axes::Attribute(ctx.node.get_ints("axes")?.map(<[i64]>::to_vec))
        })
    }

    fn get(&self, inputs: &[Option<ValueRef<'_>>], at: &Location) -> Result<Option<Vec<i64>>> {
        match self {
            Axes::Attribute(a) => Ok(a.clone()),
            Axes::Input => match util::opt_input(inputs, 1, at)? {
                Some(v) => elems::int_values(&v, 1, &[DataType::Int64], at).map(Some),
                None => Ok(None),
            },
        }
    }
}

/// Normalizes `axes` against `rank`, rejecting repeats.
fn distinct_axes(axes: &[i64], rank: usize, at: &Location) -> Result<Vec<bool>> {
    let mut chosen = vec![false; rank];
    for &a in axes {
        let d = util::normalize_axis(a, rank, at)?;
        if std::mem::replace(&mut chosen[d], true) {
            return Err(Error::node(at, format!("axis {a} appears twice in axes {axes:?}")));
        }
    }
    Ok(chosen)
}

/// Squeeze: drops the listed size-1 dims (every size-1 dim when none are listed).
struct Squeeze {
    axes: Axes,
    at: Location,
}

fn build_squeeze(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Squeeze { axes: Axes::build(ctx)?, at: ctx.node.location() }))
}

impl Kernel for Squeeze {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let input = shape_of(inputs, 0, &self.at)?;
        let shape = match self.axes.get(inputs, &self.at)? {
            None => input.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let chosen = distinct_axes(&axes, input.len(), &self.at)?;
                if let Some(d) = (0..input.len()).find(|&d| chosen[d] && input[d] != 1) {
                    return Err(Error::input(
                        &self.at,
                        0,
                        format!("size 1 along squeezed axis {d}"),
                        format!("{input:?}"),
                    ));
                }
                input.iter().zip(&chosen).filter(|(_, &c)| !c).map(|(&d, _)| d).collect()
            }
        };
        reshape_input(inputs, 0, shape, &self.at)
    }
}

/// Unsqueeze: inserts size-1 dims at the listed output positions.
struct Unsqueeze {
    axes: Axes,
    at: Location,
}

fn build_unsqueeze(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let axes = Axes::build(ctx)?;
    if let Axes::Attribute(None) = axes {
        return Err(Error::attribute(&ctx.node.location(), "axes", "a list of ints", "nothing"));
    }
    Ok(Box::new(Unsqueeze { axes, at: ctx.node.location() }))
}

impl Kernel for Unsqueeze {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let input = shape_of(inputs, 0, &self.at)?;
        let axes = self.axes.get(inputs, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "axes", "no input"))?;
        let rank = input.len() + axes.len();
        let chosen = distinct_axes(&axes, rank, &self.at)?;
        let mut dims = input.iter();
        let shape = chosen.iter().map(|&c| if c { 1 } else { dims.next().copied().unwrap_or(1) }).collect();
        reshape_input(inputs, 0, shape, &self.at)
    }
}

/// Shape: the input's dims `start..end` (clamped) as int64.
struct ShapeOp {
    start: i64,
    end: Option<i64>,
    at: Location,
}

fn build_shape(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let (start, end) =
        if ctx.since_version >= 15 { (ctx.node.int_or("start", 0)?, ctx.node.get_int("end")?) } else { (0, None) };
    Ok(Box::new(ShapeOp { start, end, at: ctx.node.location() }))
}

impl Kernel for ShapeOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let input = shape_of(inputs, 0, &self.at)?;
        let r = input.len() as i64;
        let clamp = |x: i64| (if x < 0 { x.saturating_add(r) } else { x }).clamp(0, r) as usize;
        let start = clamp(self.start);
        let end = clamp(self.end.unwrap_or(r)).max(start);
        let dims: Vec<i64> = input[start..end].iter().map(|&d| d as i64).collect();
        Ok(vec![util::out(vec![dims.len()], dims)?])
    }
}

/// Size: the input's element count as an int64 scalar.
struct Size {
    at: Location,
}

fn build_size(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Size { at: ctx.node.location() }))
}

impl Kernel for Size {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let n = elems::count(shape_of(inputs, 0, &self.at)?, &self.at)?;
        Ok(vec![Value::Tensor(Tensor::scalar(n as i64))])
    }
}

/// The broadcast of two shapes (numpy rules), or an error naming both.
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize], at: &Location) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Error::node(at, format!("shapes {a:?} and {b:?} cannot be broadcast together"))),
        })
        .collect()
}

/// Expand: broadcasts the input to a shape (bidirectionally, as numpy does).
struct Expand {
    at: Location,
}

fn build_expand(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Expand { at: ctx.node.location() }))
}

impl Kernel for Expand {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let spec = i64_input(inputs, 1, &self.at)?;
        let spec: Vec<usize> = spec
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::input(&self.at, 1, "non-negative dims", format!("{spec:?}")))?;
        let shape = broadcast_shapes(x.shape(), &spec, &self.at)?;
        elems::check_output(x.dtype(), shape.iter().map(|&d| d as u128), &self.at)?;
        if shape == x.shape() {
            return Ok(vec![elems::input_ref(inputs, 0, &self.at)?.to_value()]);
        }
        // The input's dims aligned to the output's rank; size-1 dims always read index 0.
        let pad = shape.len() - x.rank();
        let in_shape: Vec<usize> = (0..shape.len()).map(|d| if d < pad { 1 } else { x.shape()[d - pad] }).collect();
        let maps: Vec<Vec<Option<usize>>> = shape
            .iter()
            .zip(&in_shape)
            .map(|(&n, &i)| (0..n).map(|o| Some(if i == 1 { 0 } else { o })).collect())
            .collect();
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let out = gather_axes(&data, &in_shape, &maps, &T::default(), &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

/// Identity: the input value itself (tensors, sequences and optionals alike).
struct Identity {
    at: Location,
}

fn build_identity(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Identity { at: ctx.node.location() }))
}

impl Kernel for Identity {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        Ok(vec![elems::input_ref(inputs, 0, &self.at)?.to_value()])
    }
}

/// Dropout at inference: the input unchanged, and a mask of ones when asked for.
struct Dropout {
    /// Before opset 10 the mask has the input's type, from 10 on it is bool.
    bool_mask: bool,
    at: Location,
}

fn build_dropout(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Dropout { bool_mask: ctx.since_version >= 10, at: ctx.node.location() }))
}

impl Dropout {
    /// Refuses training mode with a non-zero ratio: random dropout is not an inference op.
    fn check_training(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<()> {
        let Some(training) = util::opt_input(inputs, 2, &self.at)? else { return Ok(()) };
        util::expect_dtype(&training, &[DataType::Bool], 2, &self.at)?;
        if training.bytes()?.first().is_none_or(|&b| b == 0) {
            return Ok(());
        }
        let ratio = match util::opt_input(inputs, 1, &self.at)? {
            Some(r) => util::to_f32(&r).map_err(|e| e.at(&self.at))?.first().copied().unwrap_or(0.5),
            None => 0.5,
        };
        if ratio == 0.0 {
            Ok(())
        } else {
            Err(Error::Unsupported(format!("{} in training mode (random dropout with ratio {ratio})", self.at)))
        }
    }
}

impl Kernel for Dropout {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        self.check_training(inputs)?;
        let x = util::input(inputs, 0, &self.at)?;
        let mut outs = vec![elems::input_ref(inputs, 0, &self.at)?.to_value()];
        if wanted.get(1).copied().unwrap_or(false) {
            let n = elems::count(x.shape(), &self.at)?;
            let mask = if self.bool_mask {
                Tensor::from_bools(x.shape().to_vec(), vec![true; n])?
            } else {
                let one = elems::scalar(x.dtype(), 1.0, &self.at)?;
                with_elem!(x.dtype(), &self.at, T => {
                    let one = T::read(&one.view()?)?.first().cloned().unwrap_or_default();
                    T::tensor(x.dtype(), x.shape().to_vec(), vec![one; n])
                })?
            };
            outs.push(Value::Tensor(mask));
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests;
