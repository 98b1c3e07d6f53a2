//! Signal processing: DFT (opset 17 and 20), STFT, the Hann, Hamming and Blackman windows, and
//! MelWeightMatrix.
//!
//! Complex values are the last dimension of size 2 (real, imaginary); real signals have a last
//! dimension of 1. Transforms are computed in f64 as direct sums over precomputed twiddle factors
//! (O(n²) per line: these ops appear in small audio front-ends), written in the input's type.

use std::f64::consts::PI;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

#[cfg(test)]
mod tests;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("DFT", build_dft);
    r.add("STFT", build_stft);
    r.add("HannWindow", build_window);
    r.add("HammingWindow", build_window);
    r.add("BlackmanWindow", build_window);
    r.add("MelWeightMatrix", build_mel);
}

/// A complex number as (re, im).
type C64 = (f64, f64);

/// `Σ_n x[n] e^{∓2πi kn/len}` for `k` in `0..bins` over the first `len` samples of `x` (zeros
/// past its end), with `sign = -1` forwards and `+1` inverse (unnormalized).
fn dft(x: &[C64], len: usize, bins: usize, sign: f64) -> Vec<C64> {
    let twiddle: Vec<C64> = (0..len)
        .map(|m| {
            let a = sign * 2.0 * PI * m as f64 / len as f64;
            (a.cos(), a.sin())
        })
        .collect();
    (0..bins)
        .map(|k| {
            let mut acc = (0.0, 0.0);
            for (n, &(re, im)) in x.iter().take(len).enumerate() {
                let (c, s) = twiddle[(k * n) % len];
                acc.0 += re * c - im * s;
                acc.1 += re * s + im * c;
            }
            acc
        })
        .collect()
}

/// Reads a scalar integer input; `None` when omitted.
fn scalar_int(t: Option<&TensorView<'_>>, i: usize, name: &str, at: &Location) -> Result<Option<i64>> {
    match t {
        None => Ok(None),
        Some(t) if t.len() == 1 && t.rank() <= 1 && matches!(t.dtype(), DataType::Int32 | DataType::Int64) => {
            Ok(Some(util::to_i64(t)?[0]))
        }
        Some(t) => {
            Err(Error::input(at, i, format!("a scalar int32/int64 {name}"), format!("{} {:?}", t.dtype(), t.shape())))
        }
    }
}

/// A scalar integer that must be at least `min`.
fn at_least(v: i64, min: i64, i: usize, name: &str, at: &Location) -> Result<usize> {
    if v < min {
        return Err(Error::input(at, i, format!("{name} >= {min}"), v.to_string()));
    }
    usize::try_from(v).map_err(|_| Error::input(at, i, format!("a {name} that fits in memory"), v.to_string()))
}

fn flag(ctx: &NodeContext<'_>, name: &str, default: i64) -> Result<bool> {
    match ctx.node.int_or(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::attribute(&ctx.node.location(), name, "0 or 1", v.to_string())),
    }
}

/// A DFT node with its attributes decoded.
struct Dft {
    inverse: bool,
    onesided: bool,
    /// Opset 17-19: the axis attribute (opset 20 reads input 2).
    axis_attr: Option<i64>,
    at: Location,
}

fn build_dft(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let axis_attr = if ctx.since_version < 20 { Some(ctx.node.int_or("axis", 1)?) } else { None };
    Ok(Box::new(Dft {
        inverse: flag(ctx, "inverse", 0)?,
        onesided: flag(ctx, "onesided", 0)?,
        axis_attr,
        at: ctx.node.location(),
    }))
}

/// Reads a float tensor whose last dimension (1 or 2) holds real or complex values.
fn complex_values(x: &TensorView<'_>, at: &Location) -> Result<Vec<C64>> {
    if compute_type(x.dtype()).is_none() {
        return Err(Error::input(at, 0, "a float tensor", x.dtype().name()));
    }
    let data = float_slice::<f64>(x)?;
    match x.shape().last() {
        Some(1) => Ok(data.iter().map(|&r| (r, 0.0)).collect()),
        Some(2) => Ok(data.chunks_exact(2).map(|c| (c[0], c[1])).collect()),
        _ => Err(Error::input(at, 0, "a last dimension of 1 (real) or 2 (complex)", format!("{:?}", x.shape()))),
    }
}

impl Dft {
    fn compute(
        &self,
        x: &TensorView<'_>,
        length: Option<&TensorView<'_>>,
        axis: Option<&TensorView<'_>>,
    ) -> Result<Value> {
        let at = &self.at;
        let shape = x.shape();
        let r = shape.len();
        let values = complex_values(x, at)?;
        let axis = match self.axis_attr {
            Some(a) => a,
            None => scalar_int(axis, 2, "axis", at)?.unwrap_or(-2),
        };
        let axis = util::normalize_axis(axis, r, at)?;
        if axis + 1 >= r {
            return Err(Error::node(at, format!("axis {axis} is the complex dimension of an input of rank {r}")));
        }
        let complex_in = shape[r - 1] == 2;
        let irfft = self.inverse && self.onesided;
        if irfft && !complex_in {
            return Err(Error::input(at, 0, "a complex (last dimension 2) one-sided spectrum", format!("{shape:?}")));
        }
        if self.onesided && !self.inverse && complex_in {
            return Err(Error::input(
                at,
                0,
                "a real signal (last dimension 1) for a one-sided DFT",
                format!("{shape:?}"),
            ));
        }
        let dim = shape[axis];
        let default_len = if irfft { 2 * dim.saturating_sub(1) } else { dim };
        let n = match scalar_int(length, 1, "dft_length", at)? {
            Some(v) => at_least(v, 1, 1, "dft_length", at)?,
            None if default_len >= 1 => default_len,
            None => return Err(Error::input(at, 0, "a non-empty signal axis", format!("{shape:?}"))),
        };
        let bins = if self.onesided && !self.inverse { n / 2 + 1 } else { n };
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..r - 1].iter().product();
        let sign = if self.inverse { 1.0 } else { -1.0 };
        let channels = if irfft { 1 } else { 2 };
        let mut out = vec![0.0; outer * bins * inner * channels];
        for o in 0..outer {
            for i in 0..inner {
                let mut line: Vec<C64> = (0..dim).map(|k| values[(o * dim + k) * inner + i]).collect();
                if irfft {
                    line = hermitian(&line, n);
                }
                let y = dft(&line, n, bins, sign);
                for (k, (re, im)) in y.into_iter().enumerate() {
                    let (re, im) = if self.inverse { (re / n as f64, im / n as f64) } else { (re, im) };
                    let base = ((o * bins + k) * inner + i) * channels;
                    out[base] = re;
                    if channels == 2 {
                        out[base + 1] = im;
                    }
                }
            }
        }
        let mut out_shape = shape.to_vec();
        out_shape[axis] = bins;
        out_shape[r - 1] = channels;
        float_output(x.dtype(), out_shape, out)
    }
}

/// The full spectrum of length `n` of a real signal from its one-sided half (entries past the
/// half's end are zero; the rest mirror as complex conjugates).
fn hermitian(half: &[C64], n: usize) -> Vec<C64> {
    let get = |k: usize| half.get(k).copied().unwrap_or((0.0, 0.0));
    (0..n)
        .map(|k| {
            if k <= n / 2 {
                get(k)
            } else {
                let (re, im) = get(n - k);
                (re, -im)
            }
        })
        .collect()
}

impl Kernel for Dft {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let length = util::opt_input(inputs, 1, &self.at)?;
        let axis = util::opt_input(inputs, 2, &self.at)?;
        Ok(vec![self.compute(&x, length.as_ref(), axis.as_ref()).map_err(|e| e.at(&self.at))?])
    }
}

/// An STFT node.
struct Stft {
    onesided: bool,
    at: Location,
}

fn build_stft(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Stft { onesided: flag(ctx, "onesided", 1)?, at: ctx.node.location() }))
}

impl Stft {
    fn compute(
        &self,
        x: &TensorView<'_>,
        step: &TensorView<'_>,
        window: Option<&TensorView<'_>>,
        length: Option<&TensorView<'_>>,
    ) -> Result<Value> {
        let at = &self.at;
        let shape = x.shape();
        if shape.len() != 3 {
            return Err(Error::input(at, 0, "a signal of shape [batch, length, 1 or 2]", format!("{shape:?}")));
        }
        let values = complex_values(x, at)?;
        let (batch, len) = (shape[0], shape[1]);
        if self.onesided && shape[2] == 2 {
            return Err(Error::node(at, "a one-sided STFT needs a real signal"));
        }
        let step = at_least(scalar_int(Some(step), 1, "frame_step", at)?.unwrap_or(0), 1, 1, "frame_step", at)?;
        let window = match window {
            Some(w) if w.rank() == 1 && w.dtype() == x.dtype() => Some(float_slice::<f64>(w)?.into_owned()),
            Some(w) => {
                return Err(Error::input(
                    at,
                    2,
                    format!("a 1-D {} window", x.dtype()),
                    format!("{} {:?}", w.dtype(), w.shape()),
                ))
            }
            None => None,
        };
        let frame = match scalar_int(length, 3, "frame_length", at)? {
            Some(v) => at_least(v, 1, 3, "frame_length", at)?,
            None => window.as_ref().map_or(len, Vec::len),
        };
        let window = window.unwrap_or_else(|| vec![1.0; frame]);
        if window.len() != frame || frame > len || frame == 0 {
            return Err(Error::node(
                at,
                format!("window of {} and frame_length {frame} must agree and fit the signal of {len}", window.len()),
            ));
        }
        let frames = 1 + (len - frame) / step;
        let bins = if self.onesided { frame / 2 + 1 } else { frame };
        let mut out = Vec::with_capacity(batch * frames * bins * 2);
        for b in 0..batch {
            for f in 0..frames {
                let start = b * len + f * step;
                let seg: Vec<C64> = (0..frame)
                    .map(|k| {
                        let (re, im) = values[start + k];
                        (re * window[k], im * window[k])
                    })
                    .collect();
                dft(&seg, frame, bins, -1.0).into_iter().for_each(|(re, im)| out.extend([re, im]));
            }
        }
        float_output(x.dtype(), vec![batch, frames, bins, 2], out)
    }
}

impl Kernel for Stft {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let step = util::input(inputs, 1, at)?;
        let window = util::opt_input(inputs, 2, at)?;
        let length = util::opt_input(inputs, 3, at)?;
        Ok(vec![self.compute(&x, &step, window.as_ref(), length.as_ref()).map_err(|e| e.at(at))?])
    }
}

/// The float output type named by `output_datatype` (default float).
fn output_type(ctx: &NodeContext<'_>) -> Result<DataType> {
    let code = ctx.node.int_or("output_datatype", 1)?;
    i32::try_from(code).ok().and_then(DataType::from_onnx).filter(|&d| compute_type(d).is_some()).ok_or_else(|| {
        Error::attribute(
            &ctx.node.location(),
            "output_datatype",
            "a float type code (1, 10, 11 or 16)",
            code.to_string(),
        )
    })
}

/// Which window.
#[derive(Clone, Copy, Debug, PartialEq)]
enum WindowKind {
    Hann,
    Hamming,
    Blackman,
}

/// A window generator.
struct Window {
    kind: WindowKind,
    periodic: bool,
    dtype: DataType,
    at: Location,
}

fn build_window(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let kind = match ctx.node.op_type.as_str() {
        "HannWindow" => WindowKind::Hann,
        "HammingWindow" => WindowKind::Hamming,
        _ => WindowKind::Blackman,
    };
    Ok(Box::new(Window {
        kind,
        periodic: flag(ctx, "periodic", 1)?,
        dtype: output_type(ctx)?,
        at: ctx.node.location(),
    }))
}

/// The window of `size` points: `N = size` (periodic) or `size − 1` (symmetric) in the cosine
/// terms; a 1-point window is 1.
fn window(kind: WindowKind, size: usize, periodic: bool) -> Vec<f64> {
    let n = if periodic { size } else { size.saturating_sub(1) };
    (0..size)
        .map(|i| {
            if n == 0 {
                return 1.0;
            }
            let a = 2.0 * PI * i as f64 / n as f64;
            match kind {
                WindowKind::Hann => 0.5 - 0.5 * a.cos(),
                WindowKind::Hamming => 25.0 / 46.0 - (21.0 / 46.0) * a.cos(),
                WindowKind::Blackman => 0.42 - 0.5 * a.cos() + 0.08 * (2.0 * a).cos(),
            }
        })
        .collect()
}

impl Kernel for Window {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let size = util::input(inputs, 0, at)?;
        let size = at_least(scalar_int(Some(&size), 0, "size", at)?.unwrap_or(0), 0, 0, "size", at)?;
        Ok(vec![float_output(self.dtype, vec![size], window(self.kind, size, self.periodic))?])
    }
}

/// A MelWeightMatrix generator.
struct Mel {
    dtype: DataType,
    at: Location,
}

fn build_mel(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Mel { dtype: output_type(ctx)?, at: ctx.node.location() }))
}

/// Hertz to mel.
fn mel(hz: f64) -> f64 {
    2595.0 * (1.0 + hz / 700.0).log10()
}

/// The `[dft_length / 2 + 1, mel_bins]` matrix of triangular filters with peaks of 1, with
/// edges spaced evenly in mel from `lo` to `hi` Hz and rounded down to spectrogram bins, as
/// ONNX's reference computes them (the mel step divides the range into `mel_bins + 2` parts).
fn mel_matrix(mel_bins: usize, dft_length: usize, rate: usize, lo: f64, hi: f64, at: &Location) -> Result<Vec<f64>> {
    let spec_bins = dft_length / 2 + 1;
    let (lo_mel, hi_mel) = (mel(lo), mel(hi));
    let step = (hi_mel - lo_mel) / (mel_bins + 2) as f64;
    let edges: Vec<usize> = (0..mel_bins + 2)
        .map(|i| {
            let hz = 700.0 * (10f64.powf((i as f64 * step + lo_mel) / 2595.0) - 1.0);
            ((dft_length + 1) as f64 * hz / rate as f64).floor().max(0.0) as usize
        })
        .collect();
    if edges.iter().any(|&e| e >= spec_bins) {
        return Err(Error::node(
            at,
            format!("upper_edge_hertz {hi} is above the Nyquist frequency of sample rate {rate}"),
        ));
    }
    let mut out = vec![0.0; spec_bins * mel_bins];
    for i in 0..mel_bins {
        let (l, c, h) = (edges[i], edges[i + 1], edges[i + 2]);
        if c == l {
            out[c * mel_bins + i] = 1.0;
        } else {
            (l..=c).for_each(|j| out[j * mel_bins + i] = (j - l) as f64 / (c - l) as f64);
        }
        (c..h).for_each(|j| out[j * mel_bins + i] = (h - j) as f64 / (h - c) as f64);
    }
    Ok(out)
}

impl Kernel for Mel {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let int = |i: usize, name: &str, min: i64| -> Result<usize> {
            let t = util::input(inputs, i, at)?;
            at_least(scalar_int(Some(&t), i, name, at)?.unwrap_or(0), min, i, name, at)
        };
        let float = |i: usize, name: &str| -> Result<f64> {
            let t = util::input(inputs, i, at)?;
            if t.len() != 1 || compute_type(t.dtype()).is_none() {
                return Err(Error::input(
                    at,
                    i,
                    format!("a scalar float {name}"),
                    format!("{} {:?}", t.dtype(), t.shape()),
                ));
            }
            Ok(float_slice::<f64>(&t)?[0])
        };
        let (bins, len, rate) = (int(0, "num_mel_bins", 1)?, int(1, "dft_length", 1)?, int(2, "sample_rate", 1)?);
        let (lo, hi) = (float(3, "lower_edge_hertz")?, float(4, "upper_edge_hertz")?);
        if !(0.0 <= lo && lo < hi) {
            return Err(Error::node(at, format!("need 0 <= lower_edge_hertz < upper_edge_hertz, found {lo} and {hi}")));
        }
        let m = mel_matrix(bins, len, rate, lo, hi, at)?;
        Ok(vec![float_output(self.dtype, vec![len / 2 + 1, bins], m)?])
    }
}
