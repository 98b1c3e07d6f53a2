//! Resize and Upsample geometry, shared by every EP so that they agree to the last index:
//! the decoded attributes, the per-axis plan (output length, scale, region of interest) from
//! `scales` or `sizes`, the output-to-input coordinate mapping, nearest rounding and the
//! linear/cubic filter kernel. Each EP reads the host arguments and does the sampling.

use crate::ir::Node;
use crate::{Error, Location, Result};

/// Interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nearest neighbour.
    Nearest,
    /// (Multi-)linear.
    Linear,
    /// (Multi-)cubic (Keys kernel with coefficient `a`).
    Cubic,
}

/// How an output coordinate maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coord {
    /// `(x + 0.5) / scale - 0.5`.
    HalfPixel,
    /// Half pixel, centred when the output size was rounded.
    HalfPixelSymmetric,
    /// Half pixel, 0 for outputs of length 1.
    PytorchHalfPixel,
    /// `x * (in - 1) / (out - 1)`.
    AlignCorners,
    /// `x / scale`.
    Asymmetric,
    /// `(x + 0.5) / scale` (opset 11).
    TfHalfPixelForNn,
    /// Crop to the region of interest, extrapolating outside the input.
    TfCropAndResize,
}

/// How nearest mode rounds an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Floor.
    Floor,
    /// Ceil.
    Ceil,
    /// Opset 10 and Upsample: floor when upsampling, ceil when downsampling.
    Simple,
}

/// How `sizes` keeps the aspect ratio (opset 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Each axis gets its size.
    Stretch,
    /// One scale, the smallest ratio.
    NotLarger,
    /// One scale, the largest ratio.
    NotSmaller,
}

/// Where the arguments are: Resize-10 and Upsample-9 take `(X, scales)`, Resize-11 on
/// `(X, roi, scales, sizes)`, Upsample-7 takes scales as an attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// Upsample-7's `scales` attribute.
    ScalesAttr(Vec<f32>),
    /// Input 1 is `scales`.
    Scales,
    /// Inputs 1, 2, 3 are `roi`, `scales`, `sizes`.
    RoiScalesSizes,
}

impl Arguments {
    /// The index of the `scales` input.
    pub fn scales_input(&self) -> usize {
        if matches!(self, Arguments::RoiScalesSizes) {
            2
        } else {
            1
        }
    }
}

/// One axis to resize.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    /// Input length.
    pub input: usize,
    /// Output length.
    pub output: usize,
    /// Scale (output / input, or the given scale).
    pub scale: f64,
    /// Region of interest (start, end), normalized; only used by TfCropAndResize.
    pub roi: (f64, f64),
}

impl Axis {
    /// True when resizing along this axis changes nothing.
    pub fn is_identity(&self, coord: Coord) -> bool {
        self.input == self.output && self.scale == 1.0 && (coord != Coord::TfCropAndResize || self.roi == (0.0, 1.0))
    }

    /// The input coordinate of output index `x`, or `None` where TfCropAndResize extrapolates.
    pub fn source(&self, x: usize, coord: Coord) -> Option<f64> {
        let (x, input, output, s) = (x as f64, self.input as f64, self.output as f64, self.scale);
        Some(match coord {
            Coord::HalfPixel => (x + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = output / (s * input);
                input / 2.0 * (1.0 - adjustment) + (x + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel if self.output > 1 => (x + 0.5) / s - 0.5,
            // ONNX's reference divides by the unrounded output length (scale * input), so a
            // downsampling scale of 0.6 on 4 elements maps onto 2.4, not 2.
            Coord::AlignCorners if self.output > 1 && s * input != 1.0 => x * (input - 1.0) / (s * input - 1.0),
            Coord::PytorchHalfPixel | Coord::AlignCorners => 0.0,
            Coord::Asymmetric => x / s,
            Coord::TfHalfPixelForNn => (x + 0.5) / s,
            Coord::TfCropAndResize => {
                let (a, b) = self.roi;
                let v = if self.output > 1 {
                    a * (input - 1.0) + x * (b - a) * (input - 1.0) / (output - 1.0)
                } else {
                    0.5 * (a + b) * (input - 1.0)
                };
                if v < 0.0 || v > input - 1.0 {
                    return None;
                }
                v
            }
        })
    }
}

/// The input index nearest to `x` under `rounding`, clamped into an axis of `len`.
pub fn round_nearest(x: f64, rounding: Rounding, scale: f64, len: usize) -> usize {
    let f = x.floor();
    let r = x - f;
    let i = match rounding {
        Rounding::RoundPreferFloor if r <= 0.5 => f,
        Rounding::RoundPreferCeil if r < 0.5 => f,
        Rounding::RoundPreferFloor | Rounding::RoundPreferCeil => f + 1.0,
        Rounding::Floor => f,
        Rounding::Ceil => x.ceil(),
        Rounding::Simple if scale < 1.0 => x.ceil(),
        Rounding::Simple => f,
    };
    i.clamp(0.0, len.saturating_sub(1) as f64) as usize
}

/// Filter options of linear and cubic modes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Filter {
    /// Linear or cubic.
    pub mode: Mode,
    /// The cubic kernel's `a`.
    pub cubic_a: f64,
    /// Drop (and renormalize away) taps outside the input.
    pub exclude_outside: bool,
    /// Widen the kernel by 1/scale when downsampling.
    pub antialias: bool,
}

impl Filter {
    /// The kernel's value at distance `x`.
    pub fn weight(&self, x: f64) -> f64 {
        let x = x.abs();
        match self.mode {
            Mode::Cubic => {
                let a = self.cubic_a;
                if x <= 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
                } else {
                    0.0
                }
            }
            _ => (1.0 - x).max(0.0),
        }
    }
}

/// A Resize or Upsample node's attributes, decoded and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeAttrs {
    /// Interpolation mode.
    pub mode: Mode,
    /// Coordinate transformation.
    pub coord: Coord,
    /// Nearest rounding.
    pub rounding: Rounding,
    /// Linear/cubic filter.
    pub filter: Filter,
    /// The value of extrapolated outputs (TfCropAndResize).
    pub extrapolation: f64,
    /// The axes `scales`/`sizes`/`roi` refer to (opset 18), all when `None`.
    pub axes: Option<Vec<i64>>,
    /// Aspect-ratio policy for `sizes`.
    pub policy: Policy,
    /// Where the arguments are.
    pub arguments: Arguments,
    /// The node, for errors.
    pub at: Location,
}

impl ResizeAttrs {
    /// Decodes a Resize (`since_version` 10 to 19) or Upsample (7, 9) node.
    pub fn from_node(node: &Node, since_version: i64) -> Result<Self> {
        let at = node.location();
        let v = since_version;
        let legacy = node.op_type == "Upsample" || v < 11;
        let mode = parse_mode(&node.string_or("mode", "nearest")?, !legacy, &at)?;
        if legacy {
            let arguments = if node.op_type == "Upsample" && v < 9 {
                let scales = node
                    .get_floats("scales")?
                    .ok_or_else(|| Error::attribute(&at, "scales", "a list of floats", "nothing"))?;
                Arguments::ScalesAttr(scales.to_vec())
            } else {
                Arguments::Scales
            };
            return Ok(ResizeAttrs {
                mode,
                coord: Coord::Asymmetric,
                rounding: Rounding::Simple,
                filter: Filter { mode, cubic_a: -0.75, exclude_outside: false, antialias: false },
                extrapolation: 0.0,
                axes: None,
                policy: Policy::Stretch,
                arguments,
                at,
            });
        }
        let policy = match node.string_or("keep_aspect_ratio_policy", "stretch")?.as_str() {
            "stretch" => Policy::Stretch,
            "not_larger" if v >= 18 => Policy::NotLarger,
            "not_smaller" if v >= 18 => Policy::NotSmaller,
            other => {
                return Err(Error::attribute(
                    &at,
                    "keep_aspect_ratio_policy",
                    "stretch, not_larger or not_smaller",
                    other,
                ))
            }
        };
        let filter = Filter {
            mode,
            cubic_a: f64::from(node.float_or("cubic_coeff_a", -0.75)?),
            exclude_outside: node.int_or("exclude_outside", 0)? != 0,
            antialias: v >= 18 && node.int_or("antialias", 0)? != 0,
        };
        Ok(ResizeAttrs {
            mode,
            coord: parse_coord(&node.string_or("coordinate_transformation_mode", "half_pixel")?, &at)?,
            rounding: parse_rounding(&node.string_or("nearest_mode", "round_prefer_floor")?, &at)?,
            filter,
            extrapolation: f64::from(node.float_or("extrapolation_value", 0.0)?),
            axes: if v >= 18 { node.get_ints("axes")?.map(<[i64]>::to_vec) } else { None },
            policy,
            arguments: Arguments::RoiScalesSizes,
            at,
        })
    }

    /// Every axis' input and output length, scale and region of interest for an input of
    /// `shape`, from the arguments the EP read on the host (`None` when omitted or empty;
    /// Upsample-7's attribute scales are taken here). Output lengths above `max_len` are an
    /// error.
    pub fn plan(
        &self,
        shape: &[usize],
        roi: Option<Vec<f64>>,
        scales: Option<Vec<f64>>,
        sizes: Option<Vec<i64>>,
        max_len: usize,
    ) -> Result<Vec<Axis>> {
        let axes = self.axes(shape.len())?;
        let scales = match &self.arguments {
            Arguments::ScalesAttr(s) => Some(s.iter().map(|&x| f64::from(x)).collect()),
            _ => scales,
        };
        let mut plan: Vec<Axis> =
            shape.iter().map(|&d| Axis { input: d, output: d, scale: 1.0, roi: (0.0, 1.0) }).collect();
        match (scales, sizes) {
            (Some(_), Some(_)) => return Err(Error::node(&self.at, "Resize takes scales or sizes, not both")),
            (None, None) => return Err(Error::node(&self.at, "Resize needs scales or sizes")),
            (Some(scales), None) => self.apply_scales(&mut plan, &axes, &scales, max_len)?,
            (None, Some(sizes)) => self.apply_sizes(&mut plan, &axes, &sizes, max_len)?,
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

    /// The axes that scales/sizes/roi refer to.
    fn axes(&self, rank: usize) -> Result<Vec<usize>> {
        let Some(axes) = &self.axes else { return Ok((0..rank).collect()) };
        let mut seen = vec![false; rank];
        axes.iter()
            .map(|&a| {
                let r = rank as i64;
                if !(-r..r).contains(&a) {
                    return Err(Error::node(&self.at, format!("axis {a} is out of range for rank {rank}")));
                }
                let d = if a < 0 { (a + r) as usize } else { a as usize };
                if std::mem::replace(&mut seen[d], true) {
                    return Err(Error::attribute(&self.at, "axes", "distinct axes", format!("{axes:?}")));
                }
                Ok(d)
            })
            .collect()
    }

    fn apply_scales(&self, plan: &mut [Axis], axes: &[usize], scales: &[f64], max_len: usize) -> Result<()> {
        let index = self.arguments.scales_input();
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
            if out > max_len as f64 {
                return Err(Error::input(
                    &self.at,
                    index,
                    format!("scales giving at most {max_len} elements per axis"),
                    format!("{scales:?}"),
                ));
            }
            plan[d].output = out as usize;
            plan[d].scale = s;
        }
        Ok(())
    }

    fn apply_sizes(&self, plan: &mut [Axis], axes: &[usize], sizes: &[i64], max_len: usize) -> Result<()> {
        let too_long = |&s: &i64| usize::try_from(s).map_or(true, |s| s > max_len);
        if sizes.len() != axes.len() || sizes.iter().any(too_long) {
            return Err(Error::input(
                &self.at,
                3,
                format!("{} non-negative sizes of at most {max_len}", axes.len()),
                format!("{sizes:?}"),
            ));
        }
        let ratios: Vec<f64> = axes.iter().zip(sizes).map(|(&d, &s)| s as f64 / plan[d].input as f64).collect();
        let common = match self.policy {
            Policy::Stretch => None,
            Policy::NotLarger => ratios.iter().copied().reduce(f64::min),
            Policy::NotSmaller => ratios.iter().copied().reduce(f64::max),
        };
        for ((&d, &s), &r) in axes.iter().zip(sizes).zip(&ratios) {
            let axis = &mut plan[d];
            let (output, scale) = match common {
                None => (s as f64, r),
                Some(c) => ((c * axis.input as f64 + 0.5).floor(), c),
            };
            if !(output <= max_len as f64) {
                return Err(Error::input(&self.at, 3, "sizes whose aspect-kept lengths fit", format!("{sizes:?}")));
            }
            axis.output = output as usize;
            axis.scale = scale;
        }
        Ok(())
    }
}

fn parse_mode(s: &str, allow_cubic: bool, at: &Location) -> Result<Mode> {
    match s {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(input: usize, output: usize, scale: f64) -> Axis {
        Axis { input, output, scale, roi: (0.0, 1.0) }
    }

    #[test]
    fn coordinates_follow_the_spec_formulas() {
        let a = axis(4, 8, 2.0);
        assert_eq!(a.source(3, Coord::HalfPixel), Some(1.25));
        assert_eq!(a.source(3, Coord::Asymmetric), Some(1.5));
        assert_eq!(a.source(3, Coord::TfHalfPixelForNn), Some(1.75));
        assert_eq!(a.source(7, Coord::AlignCorners), Some(3.0));
        assert_eq!(axis(4, 1, 0.25).source(0, Coord::PytorchHalfPixel), Some(0.0));
        // align_corners divides by the unrounded length: 0.6 * 4 = 2.4 elements.
        let down = axis(4, 2, 0.6);
        assert!((down.source(1, Coord::AlignCorners).unwrap() - 3.0 / 1.4).abs() < 1e-12);
        let crop = Axis { roi: (0.5, 2.0), ..axis(5, 3, 1.0) };
        assert_eq!(crop.source(0, Coord::TfCropAndResize), Some(2.0));
        assert_eq!(crop.source(2, Coord::TfCropAndResize), None, "past the input: extrapolated");
    }

    #[test]
    fn nearest_rounding_modes() {
        assert_eq!(round_nearest(1.5, Rounding::RoundPreferFloor, 2.0, 9), 1);
        assert_eq!(round_nearest(1.5, Rounding::RoundPreferCeil, 2.0, 9), 2);
        assert_eq!(round_nearest(1.2, Rounding::Ceil, 2.0, 9), 2);
        assert_eq!(round_nearest(1.8, Rounding::Floor, 2.0, 9), 1);
        assert_eq!(round_nearest(1.2, Rounding::Simple, 0.5, 9), 2, "ceil when downsampling");
        assert_eq!(round_nearest(1.8, Rounding::Simple, 2.0, 9), 1, "floor when upsampling");
        assert_eq!(round_nearest(-0.7, Rounding::Floor, 2.0, 9), 0, "clamped");
        assert_eq!(round_nearest(12.0, Rounding::Floor, 2.0, 9), 8, "clamped");
    }

    #[test]
    fn cubic_weights_sum_to_one() {
        let f = Filter { mode: Mode::Cubic, cubic_a: -0.75, exclude_outside: false, antialias: false };
        for t in [0.0, 0.1, 0.37, 0.5, 0.99] {
            let sum: f64 = [-1.0 - t, -t, 1.0 - t, 2.0 - t].iter().map(|&x| f.weight(x)).sum();
            assert!((sum - 1.0).abs() < 1e-12, "{t}: {sum}");
        }
    }

    fn node(attrs: Vec<crate::ir::Attribute>) -> Node {
        Node { op_type: "Resize".into(), name: "r".into(), attributes: attrs, ..Default::default() }
    }

    fn string(name: &str, v: &str) -> crate::ir::Attribute {
        crate::ir::Attribute { name: name.into(), value: crate::ir::AttrValue::String(v.into()) }
    }

    #[test]
    fn plans_from_scales_sizes_and_policies() {
        let plain = ResizeAttrs::from_node(&node(vec![]), 19).unwrap();
        let plan = plain.plan(&[1, 3, 5, 7], None, Some(vec![1.0, 1.0, 2.0, 0.5]), None, 1 << 20).unwrap();
        assert_eq!(plan.iter().map(|a| a.output).collect::<Vec<_>>(), [1, 3, 10, 3]);
        let plan = plain.plan(&[2, 4], None, None, Some(vec![3, 9]), 1 << 20).unwrap();
        assert_eq!((plan[0].output, plan[0].scale, plan[1].output), (3, 1.5, 9));
        let not_larger =
            ResizeAttrs::from_node(&node(vec![string("keep_aspect_ratio_policy", "not_larger")]), 18).unwrap();
        let plan = not_larger.plan(&[4, 8], None, None, Some(vec![2, 2]), 1 << 20).unwrap();
        assert_eq!((plan[0].output, plan[1].output), (1, 2), "one scale, the smaller ratio 0.25");
        assert!(plain.plan(&[2], None, Some(vec![1e30]), None, 1 << 20).is_err(), "too long");
        assert!(plain.plan(&[2], None, None, Some(vec![-1]), 1 << 20).is_err(), "negative size");
        assert!(plain.plan(&[2], None, Some(vec![1.0]), Some(vec![2]), 1 << 20).is_err(), "both");
        assert!(plain.plan(&[2], None, Some(vec![0.0]), None, 1 << 20).is_err(), "zero scale");
        assert!(plain.plan(&[0], None, None, Some(vec![2]), 1 << 20).is_err(), "empty axis grown");
    }

    #[test]
    fn bad_attributes_are_errors() {
        assert!(ResizeAttrs::from_node(&node(vec![string("mode", "bicubic")]), 19).is_err());
        assert!(ResizeAttrs::from_node(&node(vec![string("coordinate_transformation_mode", "x")]), 19).is_err());
        assert!(ResizeAttrs::from_node(&node(vec![string("nearest_mode", "x")]), 19).is_err());
        assert!(ResizeAttrs::from_node(&node(vec![string("keep_aspect_ratio_policy", "not_larger")]), 13).is_err());
        let legacy = ResizeAttrs::from_node(&node(vec![string("mode", "linear")]), 10).unwrap();
        assert_eq!(
            (legacy.coord, legacy.rounding, legacy.arguments.scales_input()),
            (Coord::Asymmetric, Rounding::Simple, 1)
        );
    }
}
