//! Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): nearest, linear and cubic
//! interpolation on any axes, separably one axis at a time (see [`interp`]); GridSample and
//! AffineGrid ([`grid_sample`]).

mod grid_sample;
mod interp;
#[cfg(test)]
mod tests;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::resize::{Arguments, ResizeAttrs};
use onyx_core::{DataType, Error, Result, TensorView, Value};

use self::interp::{Acc, Axis, Mode};
use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::layout::index_map::gather_axes;
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Resize", build_resize);
    r.add("Upsample", build_upsample);
    r.add("GridSample", grid_sample::build_grid_sample);
    r.add("AffineGrid", grid_sample::build_affine_grid);
}

/// Resize or Upsample with its attributes decoded (shared with the other EPs).
struct Resize {
    attrs: ResizeAttrs,
}

fn build_resize(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Resize { attrs: ResizeAttrs::from_node(ctx.node, ctx.since_version)? }))
}

fn build_upsample(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build_resize(ctx)
}

impl Resize {
    /// A float input (scales, roi) as f64 values; `None` when omitted or empty.
    fn floats(&self, inputs: &[Option<ValueRef<'_>>], i: usize) -> Result<Option<Vec<f64>>> {
        let Some(v) = util::opt_input(inputs, i, &self.attrs.at)?.filter(|v| !v.is_empty()) else { return Ok(None) };
        util::expect_dtype(
            &v,
            &[DataType::Float, DataType::Float16, DataType::Double, DataType::BFloat16],
            i,
            &self.attrs.at,
        )?;
        Ok(Some(util::to_f32(&v)?.into_iter().map(f64::from).collect()))
    }

    /// Every axis' input and output length, scale and region of interest.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<Axis>> {
        let (roi, scales, sizes) = match self.attrs.arguments {
            Arguments::ScalesAttr(_) => (None, None, None),
            Arguments::Scales => (None, self.floats(inputs, 1)?, None),
            Arguments::RoiScalesSizes => {
                let sizes = util::opt_input(inputs, 3, &self.attrs.at)?.filter(|v| !v.is_empty());
                let sizes = sizes.map(|v| elems::int_values(&v, 3, &[DataType::Int64], &self.attrs.at)).transpose()?;
                (self.floats(inputs, 1)?, self.floats(inputs, 2)?, sizes)
            }
        };
        self.attrs.plan(shape, roi, scales, sizes, usize::MAX / 16)
    }

    /// Nearest: one gather through per-axis index maps, for every element type.
    fn nearest(&self, x: &TensorView<'_>, plan: &[Axis]) -> Result<Value> {
        let maps = plan
            .iter()
            .map(|a| interp::nearest_map(a, self.attrs.coord, self.attrs.rounding, &self.attrs.at))
            .collect::<Result<Vec<_>>>()?;
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        let fill = elems::scalar(x.dtype(), self.attrs.extrapolation, &self.attrs.at).ok();
        with_elem!(x.dtype(), &self.attrs.at, T => {
            let data = T::read(x)?;
            let fill = match &fill {
                Some(f) => T::read(&f.view()?)?.first().cloned().unwrap_or_default(),
                None => T::default(),
            };
            elems::value(x.dtype(), shape, gather_axes(&data, x.shape(), &maps, &fill, &self.attrs.at)?)
        })
    }

    /// Linear/cubic: one separable pass per resized axis, in accumulator type `A`. Shrinking
    /// axes go first so that no intermediate is larger than the input or the output (the
    /// result is the same in any order: every row of weights sums to 1).
    fn filtered<A: Acc>(&self, mut data: Vec<A>, plan: &[Axis]) -> Result<Vec<A>> {
        let mut shape: Vec<usize> = plan.iter().map(|a| a.input).collect();
        let mut order: Vec<usize> = (0..plan.len()).filter(|&d| !plan[d].is_identity(self.attrs.coord)).collect();
        order.sort_by_key(|&d| plan[d].output > plan[d].input);
        for d in order {
            let axis = &plan[d];
            let taps = interp::taps(axis, self.attrs.coord, &self.attrs.filter, &self.attrs.at)?;
            let outer = elems::count(&shape[..d], &self.attrs.at)?;
            let inner = elems::count(&shape[d + 1..], &self.attrs.at)?;
            data = interp::pass(&data, outer, inner, axis, &taps, self.attrs.extrapolation, &self.attrs.at)?;
            shape[d] = axis.output;
        }
        Ok(data)
    }
}

impl Kernel for Resize {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.attrs.at)?;
        let plan = self.plan(inputs, x.shape())?;
        if plan.iter().all(|a| a.is_identity(self.attrs.coord)) {
            return Ok(vec![elems::input_ref(inputs, 0, &self.attrs.at)?.to_value()]);
        }
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        if self.attrs.mode == Mode::Nearest || elems::count(&shape, &self.attrs.at)? == 0 {
            return Ok(vec![self.nearest(&x, &plan)?]);
        }
        let out = match x.dtype() {
            DataType::Double => util::out(
                shape,
                self.filtered(
                    x.as_slice::<f64>().map(<[f64]>::to_vec).or_else(|_| elems::numeric_f64(&x, 0, &self.attrs.at))?,
                    &plan,
                )?,
            )?,
            DataType::Float | DataType::Float16 | DataType::BFloat16 => {
                let data = util::to_f32(&x).map_err(|e| e.at(&self.attrs.at))?;
                util::from_f32(x.dtype(), shape, self.filtered(data, &plan)?)?
            }
            DataType::Int8 | DataType::Uint8 | DataType::Int16 | DataType::Uint16 => {
                let data = elems::numeric_f64(&x, 0, &self.attrs.at)?.into_iter().map(|v| v as f32).collect();
                let out: Vec<f64> = self.filtered::<f32>(data, &plan)?.into_iter().map(f64::from).collect();
                saturate(x.dtype(), shape, &out)?
            }
            dtype if dtype.is_integer() => {
                let out = self.filtered(elems::numeric_f64(&x, 0, &self.attrs.at)?, &plan)?;
                saturate(dtype, shape, &out)?
            }
            other => {
                return Err(Error::input(&self.attrs.at, 0, "a numeric tensor for linear or cubic mode", other.name()))
            }
        };
        Ok(vec![out])
    }
}

/// Integer results: rounded half to even, clamped to the type's range (as ONNX's reference).
fn saturate(dtype: DataType, shape: Vec<usize>, data: &[f64]) -> Result<Value> {
    macro_rules! cast {
        ($t:ty) => {
            util::out(
                shape,
                data.iter().map(|&v| v.round_ties_even().clamp(<$t>::MIN as f64, <$t>::MAX as f64) as $t).collect(),
            )
        };
    }
    match dtype {
        DataType::Int8 => cast!(i8),
        DataType::Uint8 => cast!(u8),
        DataType::Int16 => cast!(i16),
        DataType::Uint16 => cast!(u16),
        DataType::Int32 => cast!(i32),
        DataType::Uint32 => cast!(u32),
        DataType::Int64 => cast!(i64),
        DataType::Uint64 => cast!(u64),
        other => Err(Error::DType { expected: DataType::Int32, found: other }),
    }
}
