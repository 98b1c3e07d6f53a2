//! Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): nearest, linear and cubic
//! interpolation on any axes, separably one axis at a time (see [`interp`]); GridSample and
//! AffineGrid ([`grid_sample`]).

mod grid_sample;
mod interp;
#[cfg(test)]
mod tests;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::Node;
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use self::interp::{Acc, Axis, Coord, Filter, Mode, Rounding};
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

/// How `sizes` is read when the aspect ratio is to be kept (opset 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Where the inputs are: Resize-10 and Upsample-9 take `(X, scales)`, Resize-11 on
/// `(X, roi, scales, sizes)`, Upsample-7 takes scales as an attribute.
#[derive(Debug, Clone, PartialEq)]
enum Inputs {
    ScalesAttr(Vec<f32>),
    Scales,
    RoiScalesSizes,
}

/// Resize or Upsample with its attributes decoded.
struct Resize {
    mode: Mode,
    coord: Coord,
    rounding: Rounding,
    filter: Filter,
    extrapolation: f64,
    axes: Option<Vec<i64>>,
    policy: Policy,
    inputs: Inputs,
    at: Location,
}

fn parse_mode(node: &Node, allow_cubic: bool, at: &Location) -> Result<Mode> {
    match node.string_or("mode", "nearest")?.as_str() {
        "nearest" => Ok(Mode::Nearest),
        "linear" | "bilinear" => Ok(Mode::Linear),
        "cubic" if allow_cubic => Ok(Mode::Cubic),
        other => Err(Error::attribute(
            at,
            "mode",
            if allow_cubic { "nearest, linear or cubic" } else { "nearest or linear" },
            other,
        )),
    }
}

fn parse_coord(s: &str, at: &Location) -> Result<Coord> {
    Ok(match s {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        other => {
            return Err(Error::attribute(at, "coordinate_transformation_mode", "a mode the ONNX spec lists", other))
        }
    })
}

fn parse_rounding(s: &str, at: &Location) -> Result<Rounding> {
    Ok(match s {
        "round_prefer_floor" => Rounding::RoundPreferFloor,
        "round_prefer_ceil" => Rounding::RoundPreferCeil,
        "floor" => Rounding::Floor,
        "ceil" => Rounding::Ceil,
        other => {
            return Err(Error::attribute(
                at,
                "nearest_mode",
                "round_prefer_floor, round_prefer_ceil, floor or ceil",
                other,
            ))
        }
    })
}

/// The behaviour of Resize-10 and Upsample: asymmetric coordinates, "simple" rounding.
fn legacy(node: &Node, inputs: Inputs) -> Result<Resize> {
    let at = node.location();
    let mode = parse_mode(node, false, &at)?;
    Ok(Resize {
        mode,
        coord: Coord::Asymmetric,
        rounding: Rounding::Simple,
        filter: Filter { mode, cubic_a: -0.75, exclude_outside: false, antialias: false },
        extrapolation: 0.0,
        axes: None,
        policy: Policy::Stretch,
        inputs,
        at,
    })
}

fn build_resize(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let v = ctx.since_version;
    if v < 11 {
        return Ok(Box::new(legacy(node, Inputs::Scales)?));
    }
    let at = node.location();
    let mode = parse_mode(node, true, &at)?;
    let policy = match node.string_or("keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => Policy::Stretch,
        "not_larger" if v >= 18 => Policy::NotLarger,
        "not_smaller" if v >= 18 => Policy::NotSmaller,
        other => {
            return Err(Error::attribute(&at, "keep_aspect_ratio_policy", "stretch, not_larger or not_smaller", other))
        }
    };
    let filter = Filter {
        mode,
        cubic_a: f64::from(node.float_or("cubic_coeff_a", -0.75)?),
        exclude_outside: node.int_or("exclude_outside", 0)? != 0,
        antialias: v >= 18 && node.int_or("antialias", 0)? != 0,
    };
    Ok(Box::new(Resize {
        mode,
        coord: parse_coord(&node.string_or("coordinate_transformation_mode", "half_pixel")?, &at)?,
        rounding: parse_rounding(&node.string_or("nearest_mode", "round_prefer_floor")?, &at)?,
        filter,
        extrapolation: f64::from(node.float_or("extrapolation_value", 0.0)?),
        axes: if v >= 18 { node.get_ints("axes")?.map(<[i64]>::to_vec) } else { None },
        policy,
        inputs: Inputs::RoiScalesSizes,
        at,
    }))
}

fn build_upsample(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let inputs = if ctx.since_version < 9 {
        let scales = node
            .get_floats("scales")?
            .ok_or_else(|| Error::attribute(&node.location(), "scales", "a list of floats", "nothing"))?;
        Inputs::ScalesAttr(scales.to_vec())
    } else {
        Inputs::Scales
    };
    Ok(Box::new(legacy(node, inputs)?))
}

impl Resize {
    /// A float input (scales, roi) as f64 values; `None` when omitted or empty.
    fn floats(&self, inputs: &[Option<ValueRef<'_>>], i: usize) -> Result<Option<Vec<f64>>> {
        let Some(v) = util::opt_input(inputs, i, &self.at)?.filter(|v| !v.is_empty()) else { return Ok(None) };
        util::expect_dtype(
            &v,
            &[DataType::Float, DataType::Float16, DataType::Double, DataType::BFloat16],
            i,
            &self.at,
        )?;
        Ok(Some(util::to_f32(&v)?.into_iter().map(f64::from).collect()))
    }

    /// The axes that scales/sizes/roi refer to.
    fn axes(&self, rank: usize) -> Result<Vec<usize>> {
        let Some(axes) = &self.axes else { return Ok((0..rank).collect()) };
        let mut seen = vec![false; rank];
        axes.iter()
            .map(|&a| {
                let d = util::normalize_axis(a, rank, &self.at)?;
                if std::mem::replace(&mut seen[d], true) {
                    return Err(Error::attribute(&self.at, "axes", "distinct axes", format!("{axes:?}")));
                }
                Ok(d)
            })
            .collect()
    }

    /// Every axis' input and output length, scale and region of interest.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<Axis>> {
        let axes = self.axes(shape.len())?;
        let (roi, scales, sizes) = match &self.inputs {
            Inputs::ScalesAttr(s) => (None, Some(s.iter().map(|&x| f64::from(x)).collect()), None),
            Inputs::Scales => (None, self.floats(inputs, 1)?, None),
            Inputs::RoiScalesSizes => {
                let sizes = util::opt_input(inputs, 3, &self.at)?.filter(|v| !v.is_empty());
                let sizes = sizes.map(|v| elems::int_values(&v, 3, &[DataType::Int64], &self.at)).transpose()?;
                (self.floats(inputs, 1)?, self.floats(inputs, 2)?, sizes)
            }
        };
        let mut plan: Vec<Axis> =
            shape.iter().map(|&d| Axis { input: d, output: d, scale: 1.0, roi: (0.0, 1.0) }).collect();
        match (scales, sizes) {
            (Some(_), Some(_)) => return Err(Error::node(&self.at, "Resize takes scales or sizes, not both")),
            (None, None) => return Err(Error::node(&self.at, "Resize needs scales or sizes")),
            (Some(scales), None) => self.apply_scales(&mut plan, &axes, &scales)?,
            (None, Some(sizes)) => self.apply_sizes(&mut plan, &axes, &sizes)?,
        }
        if self.coord == Coord::TfCropAndResize {
            let roi = roi.ok_or_else(|| Error::input(&self.at, 1, "a roi for tf_crop_and_resize", "no input"))?;
            if roi.len() != 2 * axes.len() {
                return Err(Error::input(
                    &self.at,
                    1,
                    format!("{} roi values (start and end per axis)", 2 * axes.len()),
                    roi.len().to_string(),
                ));
            }
            for (i, &d) in axes.iter().enumerate() {
                plan[d].roi = (roi[i], roi[i + axes.len()]);
            }
        }
        if let Some(a) = plan.iter().find(|a| a.input == 0 && a.output > 0) {
            return Err(Error::node(&self.at, format!("cannot resize an empty axis to {} elements", a.output)));
        }
        Ok(plan)
    }

    fn apply_scales(&self, plan: &mut [Axis], axes: &[usize], scales: &[f64]) -> Result<()> {
        let index = if matches!(self.inputs, Inputs::RoiScalesSizes) { 2 } else { 1 };
        if scales.len() != axes.len() || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return Err(Error::input(
                &self.at,
                index,
                format!("{} positive scales", axes.len()),
                format!("{scales:?}"),
            ));
        }
        for (&d, &s) in axes.iter().zip(scales) {
            let out = (plan[d].input as f64 * s).floor();
            if out > (usize::MAX / 16) as f64 {
                return Err(Error::input(
                    &self.at,
                    index,
                    "scales giving an output that fits in memory",
                    format!("{scales:?}"),
                ));
            }
            plan[d].output = out as usize;
            plan[d].scale = s;
        }
        Ok(())
    }

    fn apply_sizes(&self, plan: &mut [Axis], axes: &[usize], sizes: &[i64]) -> Result<()> {
        if sizes.len() != axes.len() || sizes.iter().any(|&s| s < 0) {
            return Err(Error::input(&self.at, 3, format!("{} non-negative sizes", axes.len()), format!("{sizes:?}")));
        }
        let ratios: Vec<f64> = axes.iter().zip(sizes).map(|(&d, &s)| s as f64 / plan[d].input as f64).collect();
        let common = match self.policy {
            Policy::Stretch => None,
            Policy::NotLarger => ratios.iter().copied().reduce(f64::min),
            Policy::NotSmaller => ratios.iter().copied().reduce(f64::max),
        };
        for ((&d, &s), &r) in axes.iter().zip(sizes).zip(&ratios) {
            let axis = &mut plan[d];
            match common {
                None => {
                    axis.output = s as usize;
                    axis.scale = r;
                }
                Some(c) => {
                    axis.output = (c * axis.input as f64 + 0.5).floor() as usize;
                    axis.scale = c;
                }
            }
        }
        Ok(())
    }

    /// Nearest: one gather through per-axis index maps, for every element type.
    fn nearest(&self, x: &TensorView<'_>, plan: &[Axis]) -> Result<Value> {
        let maps = plan
            .iter()
            .map(|a| interp::nearest_map(a, self.coord, self.rounding, &self.at))
            .collect::<Result<Vec<_>>>()?;
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        let fill = elems::scalar(x.dtype(), self.extrapolation, &self.at).ok();
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(x)?;
            let fill = match &fill {
                Some(f) => T::read(&f.view()?)?.first().cloned().unwrap_or_default(),
                None => T::default(),
            };
            elems::value(x.dtype(), shape, gather_axes(&data, x.shape(), &maps, &fill, &self.at)?)
        })
    }

    /// Linear/cubic: one separable pass per resized axis, in accumulator type `A`. Shrinking
    /// axes go first so that no intermediate is larger than the input or the output (the
    /// result is the same in any order: every row of weights sums to 1).
    fn filtered<A: Acc>(&self, mut data: Vec<A>, plan: &[Axis]) -> Result<Vec<A>> {
        let mut shape: Vec<usize> = plan.iter().map(|a| a.input).collect();
        let mut order: Vec<usize> = (0..plan.len()).filter(|&d| !plan[d].is_identity(self.coord)).collect();
        order.sort_by_key(|&d| plan[d].output > plan[d].input);
        for d in order {
            let axis = &plan[d];
            let taps = interp::taps(axis, self.coord, &self.filter, &self.at)?;
            let outer = elems::count(&shape[..d], &self.at)?;
            let inner = elems::count(&shape[d + 1..], &self.at)?;
            data = interp::pass(&data, outer, inner, axis, &taps, self.extrapolation, &self.at)?;
            shape[d] = axis.output;
        }
        Ok(data)
    }
}

impl Kernel for Resize {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let plan = self.plan(inputs, x.shape())?;
        if plan.iter().all(|a| a.is_identity(self.coord)) {
            return Ok(vec![elems::input_ref(inputs, 0, &self.at)?.to_value()]);
        }
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        if self.mode == Mode::Nearest || elems::count(&shape, &self.at)? == 0 {
            return Ok(vec![self.nearest(&x, &plan)?]);
        }
        let out = match x.dtype() {
            DataType::Double => util::out(
                shape,
                self.filtered(
                    x.as_slice::<f64>().map(<[f64]>::to_vec).or_else(|_| elems::numeric_f64(&x, 0, &self.at))?,
                    &plan,
                )?,
            )?,
            DataType::Float | DataType::Float16 | DataType::BFloat16 => {
                let data = util::to_f32(&x).map_err(|e| e.at(&self.at))?;
                util::from_f32(x.dtype(), shape, self.filtered(data, &plan)?)?
            }
            DataType::Int8 | DataType::Uint8 | DataType::Int16 | DataType::Uint16 => {
                let data = elems::numeric_f64(&x, 0, &self.at)?.into_iter().map(|v| v as f32).collect();
                let out: Vec<f64> = self.filtered::<f32>(data, &plan)?.into_iter().map(f64::from).collect();
                saturate(x.dtype(), shape, &out)?
            }
            dtype if dtype.is_integer() => {
                let out = self.filtered(elems::numeric_f64(&x, 0, &self.at)?, &plan)?;
                saturate(dtype, shape, &out)?
            }
            other => return Err(Error::input(&self.at, 0, "a numeric tensor for linear or cubic mode", other.name())),
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
