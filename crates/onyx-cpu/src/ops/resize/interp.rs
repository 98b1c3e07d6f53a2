//! The math of Resize: per-axis coordinate mapping, 1-D sampling tables (nearest index, or
//! indices and weights for linear/cubic, antialiased or not) and separable passes that apply
//! a table along one axis.

use rayon::prelude::*;

use crate::ops::layout::elems;
pub(crate) use onyx_core::ops::resize::{round_nearest, Axis, Coord, Filter, Mode, Rounding};
use onyx_core::{Location, Result};

/// For nearest mode: the input index each output index reads (`None`: extrapolated).
pub(crate) fn nearest_map(axis: &Axis, coord: Coord, rounding: Rounding, at: &Location) -> Result<Vec<Option<usize>>> {
    let mut map = elems::with_capacity(axis.output, at)?;
    map.extend(
        (0..axis.output).map(|x| axis.source(x, coord).map(|v| round_nearest(v, rounding, axis.scale, axis.input))),
    );
    Ok(map)
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
