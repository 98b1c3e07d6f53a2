//! The math of Resize: per-axis coordinate mapping, 1-D sampling tables (nearest index, or
//! indices and weights for linear/cubic, antialiased or not) and separable passes that apply
//! a table along one axis.

use rayon::prelude::*;

use crate::ops::layout::elems;
use onyx_core::{Location, Result};

/// Interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Nearest neighbour.
    Nearest,
    /// (Multi-)linear.
    Linear,
    /// (Multi-)cubic (Keys kernel with coefficient `a`).
    Cubic,
}

/// How an output coordinate maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coord {
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
pub(crate) enum Rounding {
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

/// One axis to resize.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Axis {
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
        let v = match coord {
            Coord::HalfPixel => (x + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = output / (s * input);
                let offset = input / 2.0 * (1.0 - adjustment);
                offset + (x + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel => {
                if self.output > 1 {
                    (x + 0.5) / s - 0.5
                } else {
                    0.0
                }
            }
            Coord::AlignCorners => {
                // ONNX's reference divides by the unrounded output length (scale * input), so a
                // downsampling scale of 0.6 on 4 elements maps onto 2.4, not 2.
                let exact = s * input;
                if exact != 1.0 && self.output > 1 {
                    x * (input - 1.0) / (exact - 1.0)
                } else {
                    0.0
                }
            }
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
        };
        Some(v)
    }
}

/// The input index nearest to `x` under `rounding`, clamped into the axis.
fn round(x: f64, rounding: Rounding, scale: f64, len: usize) -> usize {
    let f = x.floor();
    let r = x - f;
    let i = match rounding {
        Rounding::RoundPreferFloor => {
            if r <= 0.5 {
                f
            } else {
                f + 1.0
            }
        }
        Rounding::RoundPreferCeil => {
            if r < 0.5 {
                f
            } else {
                f + 1.0
            }
        }
        Rounding::Floor => f,
        Rounding::Ceil => x.ceil(),
        Rounding::Simple => {
            if scale < 1.0 {
                x.ceil()
            } else {
                f
            }
        }
    };
    i.clamp(0.0, len.saturating_sub(1) as f64) as usize
}

/// For nearest mode: the input index each output index reads (`None`: extrapolated).
pub(crate) fn nearest_map(axis: &Axis, coord: Coord, rounding: Rounding, at: &Location) -> Result<Vec<Option<usize>>> {
    let mut map = elems::with_capacity(axis.output, at)?;
    map.extend((0..axis.output).map(|x| axis.source(x, coord).map(|v| round(v, rounding, axis.scale, axis.input))));
    Ok(map)
}

/// Filter options of linear and cubic modes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Filter {
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
    fn weight(&self, x: f64) -> f64 {
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

/// For linear/cubic: `width` taps (input index, weight) per output index, and which outputs
/// take the extrapolation value.
pub(crate) struct Taps {
    /// Taps per output index.
    pub width: usize,
    /// `output * width` input indices (clamped into the axis).
    pub index: Vec<usize>,
    /// `output * width` weights.
    pub weight: Vec<f64>,
    /// Per output index: extrapolated (TfCropAndResize outside the input).
    pub extrapolated: Vec<bool>,
}

/// The sampling table of one axis.
pub(crate) fn taps(axis: &Axis, coord: Coord, filter: &Filter, at: &Location) -> Result<Taps> {
    let support = if filter.mode == Mode::Cubic { 2.0 } else { 1.0 };
    let s = if filter.antialias { axis.scale.min(1.0) } else { 1.0 };
    let reach = (support / s).ceil();
    if reach.is_nan() || reach > 1e6 {
        return Err(onyx_core::Error::node(
            at,
            format!("antialiasing at scale {} needs too wide a filter", axis.scale),
        ));
    }
    let start = (-support / s).floor() as i64 + 1;
    let width = (2 - 2 * start) as usize;
    let n = axis.output.saturating_mul(width);
    let mut index = elems::with_capacity(n, at)?;
    let mut weight = elems::with_capacity(n, at)?;
    let mut extrapolated = elems::with_capacity(axis.output, at)?;
    let last = axis.input.saturating_sub(1) as i64;
    let mut w = vec![0f64; width];
    for x in 0..axis.output {
        let src = axis.source(x, coord);
        extrapolated.push(src.is_none());
        let v = src.unwrap_or(0.0);
        let mut f = v.floor();
        let mut ratio = v - f;
        if ratio == 0.0 {
            f -= 1.0;
            ratio = 1.0;
        }
        let base = f as i64;
        for (k, wk) in w.iter_mut().enumerate() {
            *wk = filter.weight(((start + k as i64) as f64 - ratio) * s);
        }
        let inside = |k: usize| (0..=last).contains(&(base + start + k as i64));
        if filter.exclude_outside {
            for (k, wk) in w.iter_mut().enumerate() {
                if !inside(k) {
                    *wk = 0.0;
                }
            }
        }
        if filter.antialias || filter.exclude_outside {
            let sum: f64 = w.iter().sum();
            if sum != 0.0 {
                w.iter_mut().for_each(|wk| *wk /= sum);
            }
        }
        for (k, &wk) in w.iter().enumerate() {
            index.push((base + start + k as i64).clamp(0, last) as usize);
            weight.push(wk);
        }
    }
    Ok(Taps { width, index, weight, extrapolated })
}

/// The accumulator type of linear/cubic passes: f32 or f64.
pub(crate) trait Acc:
    Copy + Default + Send + Sync + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> + 'static
{
    /// From f64 (rounding).
    fn from_f64(v: f64) -> Self;
}

impl Acc for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Acc for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// Resamples `data` (viewed as `[outer, axis.input, inner]`) along the middle axis with
/// `taps`, giving `[outer, axis.output, inner]`.
pub(crate) fn pass<A: Acc>(
    data: &[A],
    outer: usize,
    inner: usize,
    axis: &Axis,
    taps: &Taps,
    extrapolation: f64,
    at: &Location,
) -> Result<Vec<A>> {
    let n = outer * axis.output * inner;
    let mut out = elems::alloc::<A>(n, at)?;
    if n == 0 {
        return Ok(out);
    }
    let width = taps.width;
    let weights: Vec<A> = taps.weight.iter().map(|&w| A::from_f64(w)).collect();
    let fill = A::from_f64(extrapolation);
    let row = |(r, dst): (usize, &mut [A])| {
        let (o, j) = (r / axis.output, r % axis.output);
        if taps.extrapolated[j] {
            dst.fill(fill);
            return;
        }
        let src = &data[o * axis.input * inner..(o + 1) * axis.input * inner];
        let idx = &taps.index[j * width..(j + 1) * width];
        let ws = &weights[j * width..(j + 1) * width];
        if inner == 1 {
            dst[0] = idx.iter().zip(ws).fold(A::default(), |acc, (&i, &w)| acc + w * src[i]);
            return;
        }
        dst.fill(A::default());
        for (&i, &w) in idx.iter().zip(ws) {
            for (d, &s) in dst.iter_mut().zip(&src[i * inner..(i + 1) * inner]) {
                *d = *d + w * s;
            }
        }
    };
    if elems::parallel(n * width) {
        out.par_chunks_mut(inner).with_min_len((1 << 12) / inner + 1).enumerate().for_each(row);
    } else {
        out.chunks_mut(inner).enumerate().for_each(row);
    }
    Ok(out)
}
