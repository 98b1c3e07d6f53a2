//! Normalization: BatchNormalization (inference and training mode), InstanceNormalization, LayerNormalization,
//! GroupNormalization, LRN and MeanVarianceNormalization, every opset from 7 to 22, and
//! RMSNormalization ([`rms`]), ONNX Runtime's SimplifiedLayerNormalization and
//! SkipSimplifiedLayerNormalization ([`simplified`]). Rows
//! (planes, groups) are normalized in parallel when the tensor is large.

mod rms;
mod simplified;

use rayon::prelude::*;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::Node;
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::matmul::real::{compute_type, float_output, float_slice, Real};
use crate::ops::util;
use crate::Registry;

/// Tensors with fewer elements than this are normalized on the calling thread.
const PARALLEL_ELEMS: usize = 1 << 15;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("BatchNormalization", build_batch_norm);
    r.add("InstanceNormalization", build_instance_norm);
    r.add("LayerNormalization", build_layer_norm);
    r.add("GroupNormalization", build_group_norm);
    r.add("LRN", build_lrn);
    r.add("MeanVarianceNormalization", build_mvn);
    r.add("RMSNormalization", rms::build_rms_norm);
    // ONNX Runtime registers SimplifiedLayerNormalization in the default domain.
    r.add("SimplifiedLayerNormalization", simplified::build);
    r.add_in(onyx_core::ir::MS_DOMAIN, "SimplifiedLayerNormalization", simplified::build);
    r.add_in(onyx_core::ir::MS_DOMAIN, "SkipSimplifiedLayerNormalization", simplified::build);
}

/// Mean and `1 / sqrt(variance + eps)` of `xs` (two passes, population variance, sums in f64:
/// rows with a large mean keep their precision). Each pass sums in 16 independent f64 lanes so
/// that it vectorizes.
#[inline(always)]
fn mean_inv_std<T: Real>(xs: &[T], eps: T) -> (T, T) {
    let n = xs.len().max(1) as f64;
    let mean = lane_sum(xs, |x| x) / n;
    let var = lane_sum(xs, |x| (x - mean) * (x - mean)) / n;
    (T::from_f64(mean), T::from_f64(1.0 / (var + eps.to_f64()).sqrt()))
}

/// Σ f(x) over `xs`, each `x` widened to f64, in 16 lanes added at the end.
#[inline(always)]
fn lane_sum<T: Real>(xs: &[T], f: impl Fn(f64) -> f64) -> f64 {
    const LANES: usize = 16;
    let mut acc = [0.0f64; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f(x.to_f64());
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&x| f(x.to_f64())).sum();
    acc.iter().sum::<f64>() + tail
}

/// Runs `f(chunk index, input chunk, output chunk)` over equal chunks, in parallel when large.
fn for_chunks<T: Real>(x: &[T], y: &mut [T], len: usize, f: impl Fn(usize, &[T], &mut [T]) + Sync + Send) {
    let len = len.max(1);
    if y.len() >= PARALLEL_ELEMS {
        crate::parallel::for_each_chunk_pair(x, len, y, len, &|i, xc, yc| f(i, xc, yc));
    } else {
        y.chunks_mut(len).zip(x.chunks(len)).enumerate().for_each(|(i, (yc, xc))| f(i, xc, yc));
    }
}

/// Float inputs of a node: all of one of the float types.
const FLOATS: [DataType; 4] = [DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16];

/// Input `i` with its element count checked against `len`.
fn param<'r>(
    inputs: &[Option<ValueRef<'r>>],
    i: usize,
    lens: &[usize],
    what: &str,
    at: &Location,
) -> Result<TensorView<'r>> {
    let v = util::input(inputs, i, at)?;
    util::expect_dtype(&v, &FLOATS, i, at)?;
    if !lens.contains(&v.len()) {
        let lens: Vec<String> = lens.iter().map(usize::to_string).collect();
        return Err(Error::input(
            at,
            i,
            format!("{} elements ({what})", lens.join(" or ")),
            format!("shape {:?}", v.shape()),
        ));
    }
    Ok(v)
}

/// X of a channel-first op: a float tensor of rank `min_rank` or more.
fn channel_input<'r>(inputs: &[Option<ValueRef<'r>>], min_rank: usize, at: &Location) -> Result<TensorView<'r>> {
    let x = util::input(inputs, 0, at)?;
    util::expect_dtype(&x, &FLOATS, 0, at)?;
    if x.rank() < min_rank {
        return Err(Error::input(
            at,
            0,
            format!("a tensor of rank {min_rank} or more ([N, C, ...])"),
            format!("shape {:?}", x.shape()),
        ));
    }
    Ok(x)
}

/// The computation type of X, as [`compute_type`], for float inputs checked before.
fn is_double(x: &TensorView<'_>) -> bool {
    compute_type(x.dtype()) == Some(DataType::Double)
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization

/// BatchNormalization. In training mode (opset 14+, `training_mode=1`) it normalizes by the
/// batch's own statistics and also outputs the updated running mean and variance.
struct BatchNorm {
    at: Location,
    epsilon: f32,
    /// `Some(momentum)` in training mode.
    training: Option<f32>,
}

fn build_batch_norm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let training = match node.int_or("training_mode", 0)? {
        0 => None,
        1 => Some(node.float_or("momentum", 0.9)?),
        other => return Err(Error::attribute(&at, "training_mode", "0 or 1", other.to_string())),
    };
    Ok(Box::new(BatchNorm { at, epsilon: node.float_or("epsilon", 1e-5)?, training }))
}

/// Per-channel mean and population variance of X seen as `[N, channels, inner]` (sums in f64).
fn batch_statistics<T: Real>(x: &[T], channels: usize, inner: usize) -> (Vec<T>, Vec<T>) {
    let planes = |f: usize| x.chunks(inner.max(1)).skip(f).step_by(channels.max(1));
    let count = (x.len() / channels.max(1)).max(1) as f64;
    (0..channels)
        .map(|f| {
            let mean = planes(f).map(|p| lane_sum(p, |v| v)).sum::<f64>() / count;
            let var = planes(f).map(|p| lane_sum(p, |v| (v - mean) * (v - mean))).sum::<f64>() / count;
            (T::from_f64(mean), T::from_f64(var))
        })
        .unzip()
}

/// `y[n, f, i] = (x - mean[f]) / sqrt(var[f] + eps) * scale[f] + b[f]` on X seen as
/// `[N, features, inner]`: features are the channels (inner: the spatial size), or for the old
/// non-spatial form every element of one image (inner: 1).
pub(crate) fn batch_norm<T: Real>(
    x: &[T],
    inner: usize,
    scale: &[T],
    b: &[T],
    mean: &[T],
    var: &[T],
    eps: T,
) -> Vec<T> {
    let a: Vec<T> = scale.iter().zip(var).map(|(&s, &v)| s / (v + eps).sqrt()).collect();
    let shift: Vec<T> = b.iter().zip(mean).zip(&a).map(|((&b, &m), &a)| b - m * a).collect();
    let features = a.len().max(1);
    let mut y = onyx_core::host_pool::take::<T>(x.len()); // every element is written
    if inner <= 1 {
        for_chunks(x, &mut y, features, |_, xc, yc| {
            util::simd(|| {
                for ((y, &x), (&a, &s)) in yc.iter_mut().zip(xc).zip(a.iter().zip(&shift)) {
                    *y = x * a + s;
                }
            })
        });
    } else {
        for_chunks(x, &mut y, inner, |i, xc, yc| {
            let (a, s) = (a[i % features], shift[i % features]);
            util::simd(|| {
                for (y, &x) in yc.iter_mut().zip(xc) {
                    *y = x * a + s;
                }
            })
        });
    }
    y
}

impl BatchNorm {
    /// Y, and in training mode the running mean and variance.
    fn run_typed<T: Real>(&self, x: &TensorView<'_>, params: &[TensorView<'_>; 4], inner: usize) -> Result<Vec<Value>> {
        let xs = float_slice::<T>(x)?;
        let [s, b, m, v] = [0, 1, 2, 3].map(|i| float_slice::<T>(&params[i]));
        let (s, b, m, v) = (s?, b?, m?, v?);
        let eps = T::from_f32(self.epsilon);
        let Some(momentum) = self.training else {
            return Ok(vec![float_output(x.dtype(), x.shape().to_vec(), batch_norm(&xs, inner, &s, &b, &m, &v, eps))?]);
        };
        let (mean, var) = batch_statistics(&xs, s.len(), inner);
        let y = float_output(x.dtype(), x.shape().to_vec(), batch_norm(&xs, inner, &s, &b, &mean, &var, eps))?;
        let momentum = T::from_f32(momentum);
        let running = |old: &[T], new: &[T], dtype| {
            let r = old.iter().zip(new).map(|(&o, &n)| o * momentum + n * (T::from_f32(1.0) - momentum)).collect();
            float_output(dtype, vec![new.len()], r)
        };
        Ok(vec![y, running(&m, &mean, params[2].dtype())?, running(&v, &var, params[3].dtype())?])
    }
}

impl Kernel for BatchNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        if self.training.is_none() && wanted.iter().skip(1).any(|&w| w) {
            return Err(Error::Unsupported(format!(
                "{at} (the running statistics outputs exist only in training mode)"
            )));
        }
        let x = channel_input(inputs, 2, at)?;
        let c = x.shape()[1];
        let spatial: usize = x.shape()[2..].iter().product();
        let scale = param(inputs, 1, &[c, c * spatial], "one per channel", at)?;
        let features = scale.len();
        let [b, m, v] = [(2, "like scale"), (3, "like scale"), (4, "like scale")]
            .map(|(i, what)| param(inputs, i, &[features], what, at));
        let params = [scale, b?, m?, v?];
        if self.training.is_some() && features != c {
            return Err(Error::input(at, 1, format!("{c} elements (one per channel)"), format!("{features}")));
        }
        let inner = if features == c { spatial } else { 1 };
        if is_double(&x) {
            self.run_typed::<f64>(&x, &params, inner)
        } else {
            self.run_typed::<f32>(&x, &params, inner)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// InstanceNormalization and GroupNormalization

/// Normalizes X (`[N, C, inner]`) per image and group of `C / groups` channels by the group's
/// mean and variance, then applies `scale` and `bias` (one per channel).
pub(crate) fn group_norm<T: Real>(
    x: &[T],
    channels: usize,
    groups: usize,
    inner: usize,
    scale: &[T],
    bias: &[T],
    eps: T,
) -> Vec<T> {
    let per_group = channels / groups.max(1);
    let mut y = onyx_core::host_pool::take_zeroed::<T>(x.len());
    for_chunks(x, &mut y, per_group * inner, |block, xc, yc| {
        let (mean, inv) = mean_inv_std(xc, eps);
        let first = (block % groups.max(1)) * per_group;
        for (c, (xs, ys)) in xc.chunks(inner.max(1)).zip(yc.chunks_mut(inner.max(1))).enumerate() {
            // Centered: `x * a + (bias - mean * a)` cancels where the variance is small.
            let (a, b) = (inv * scale[first + c], bias[first + c]);
            for (y, &x) in ys.iter_mut().zip(xs) {
                *y = (x - mean) * a + b;
            }
        }
    });
    y
}

/// InstanceNormalization or GroupNormalization.
struct GroupNorm {
    at: Location,
    epsilon: f32,
    /// `None`: one group per channel (InstanceNormalization).
    groups: Option<usize>,
    /// GroupNormalization-18: scale and bias hold one value per group.
    per_group_params: bool,
    /// Compute in f64 (stash_type double).
    stash_double: bool,
}

fn build_instance_norm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(GroupNorm {
        at: node.location(),
        epsilon: node.float_or("epsilon", 1e-5)?,
        groups: None,
        per_group_params: false,
        stash_double: false,
    }))
}

fn build_group_norm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let groups = match node.get_int("num_groups")? {
        Some(g) if g > 0 => g as usize,
        Some(g) => return Err(Error::attribute(&at, "num_groups", "a positive integer", g.to_string())),
        None => return Err(Error::attribute(&at, "num_groups", "an int", "no attribute")),
    };
    Ok(Box::new(GroupNorm {
        epsilon: node.float_or("epsilon", 1e-5)?,
        groups: Some(groups),
        per_group_params: ctx.since_version < 21,
        stash_double: stash_type(node, &at)? == DataType::Double,
        at,
    }))
}

/// The `stash_type` attribute: a float type, float by default.
fn stash_type(node: &Node, at: &Location) -> Result<DataType> {
    let code = node.int_or("stash_type", DataType::Float.onnx_code().into())?;
    match i32::try_from(code).ok().and_then(DataType::from_onnx) {
        Some(t) if FLOATS.contains(&t) => Ok(t),
        _ => Err(Error::attribute(at, "stash_type", "a float type code (1, 10, 11 or 16)", code.to_string())),
    }
}

impl GroupNorm {
    fn run_typed<T: Real>(
        &self,
        x: &TensorView<'_>,
        scale: &TensorView<'_>,
        bias: &TensorView<'_>,
        groups: usize,
    ) -> Result<Value> {
        let c = x.shape()[1];
        let inner: usize = x.shape()[2..].iter().product();
        let (mut s, mut b) = (float_slice::<T>(scale)?.into_owned(), float_slice::<T>(bias)?.into_owned());
        if s.len() != c {
            let per_group = c / groups;
            s = (0..c).map(|ch| s[ch / per_group]).collect();
            b = (0..c).map(|ch| b[ch / per_group]).collect();
        }
        let y = group_norm(&float_slice::<T>(x)?, c, groups, inner, &s, &b, T::from_f32(self.epsilon));
        float_output(x.dtype(), x.shape().to_vec(), y)
    }
}

impl Kernel for GroupNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = channel_input(inputs, 2, at)?;
        let c = x.shape()[1];
        let groups = self.groups.unwrap_or(c);
        if c % groups != 0 {
            return Err(Error::input(
                at,
                0,
                format!("a channel count divisible by num_groups {groups}"),
                format!("shape {:?}", x.shape()),
            ));
        }
        let (lens, what) =
            if self.per_group_params { (vec![groups, c], "one per group") } else { (vec![c], "one per channel") };
        let scale = param(inputs, 1, &lens, what, at)?;
        let bias = param(inputs, 2, &[scale.len()], "like scale", at)?;
        let y = if self.stash_double || is_double(&x) {
            self.run_typed::<f64>(&x, &scale, &bias, groups)?
        } else {
            self.run_typed::<f32>(&x, &scale, &bias, groups)?
        };
        Ok(vec![y])
    }
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization

/// LayerNormalization of `rows` rows of `x`: `y = (x - mean) * inv_std * scale + bias`, with
/// `scale` and `bias` one value per row element. Returns Y, the means and the inverse
/// standard deviations.
pub(crate) fn layer_norm<T: Real>(
    x: &[T],
    row_len: usize,
    scale: &[T],
    bias: Option<&[T]>,
    eps: T,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let rows = x.len().checked_div(row_len).unwrap_or(0);
    let mut y = onyx_core::host_pool::take::<T>(x.len()); // rows * row_len == x.len(): all written
    let mut stats = vec![(T::ZERO, T::ZERO); rows];
    let len = row_len.max(1);
    // Blocks of whole rows, each normalized by one SIMD-compiled call.
    let block = (PARALLEL_ELEMS / 4 / len).max(1);
    let body = |((x, y), stats): ((&[T], &mut [T]), &mut [(T, T)])| {
        util::simd_body(NormRows { x, y, stats, len, scale, bias, eps })
    };
    if x.len() >= PARALLEL_ELEMS {
        x.par_chunks(len * block).zip(y.par_chunks_mut(len * block)).zip(stats.par_chunks_mut(block)).for_each(body);
    } else {
        x.chunks(len * block).zip(y.chunks_mut(len * block)).zip(stats.chunks_mut(block)).for_each(body);
    }
    let (means, invs) = stats.into_iter().unzip();
    (y, means, invs)
}

/// Rows of [`layer_norm`]: `y = (x - mean) * inv_std * scale (+ bias)` per row of `len`.
struct NormRows<'a, T> {
    x: &'a [T],
    y: &'a mut [T],
    stats: &'a mut [(T, T)],
    len: usize,
    scale: &'a [T],
    bias: Option<&'a [T]>,
    eps: T,
}

impl<T: Real> util::SimdBody for NormRows<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let rows = self.x.chunks(self.len).zip(self.y.chunks_mut(self.len)).zip(self.stats.iter_mut());
        for ((xr, yr), st) in rows {
            let (mean, inv) = mean_inv_std(xr, self.eps);
            *st = (mean, inv);
            match self.bias {
                Some(b) => {
                    for (((y, &x), &s), &b) in yr.iter_mut().zip(xr).zip(self.scale).zip(b) {
                        *y = (x - mean) * inv * s + b;
                    }
                }
                None => {
                    for ((y, &x), &s) in yr.iter_mut().zip(xr).zip(self.scale) {
                        *y = (x - mean) * inv * s;
                    }
                }
            }
        }
    }
}

/// LayerNormalization (opset 17).
struct LayerNorm {
    at: Location,
    axis: i64,
    epsilon: f32,
    stash: DataType,
}

fn build_layer_norm(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    Ok(Box::new(LayerNorm {
        axis: node.int_or("axis", -1)?,
        epsilon: node.float_or("epsilon", 1e-5)?,
        stash: stash_type(node, &at)?,
        at,
    }))
}

/// Expands `v` (unidirectionally broadcastable to `shape`) to `shape`'s element count.
pub(super) fn broadcast_to<T: Copy>(v: &[T], from: &[usize], shape: &[usize]) -> Option<Vec<T>> {
    if from.len() > shape.len() {
        return None;
    }
    let lead = shape.len() - from.len();
    if from.iter().zip(&shape[lead..]).any(|(&f, &s)| f != s && f != 1) {
        return None;
    }
    let from_strides = util::strides(from);
    let count: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let at: usize = (0..from.len()).map(|d| if from[d] == 1 { 0 } else { idx[lead + d] * from_strides[d] }).sum();
        out.push(*v.get(at)?);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Some(out)
}

impl LayerNorm {
    fn run_typed<T: Real>(
        &self,
        x: &TensorView<'_>,
        scale: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        axis: usize,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let at = &self.at;
        let norm_shape = &x.shape()[axis..];
        let row_len: usize = norm_shape.iter().product();
        let expand = |v: &TensorView<'_>, i: usize| -> Result<Vec<T>> {
            broadcast_to(&float_slice::<T>(v)?, v.shape(), norm_shape).ok_or_else(|| {
                Error::input(
                    at,
                    i,
                    format!("a shape broadcastable to {norm_shape:?} (X's dims from axis {axis})"),
                    format!("shape {:?}", v.shape()),
                )
            })
        };
        let s = expand(scale, 1)?;
        let b = bias.map(|b| expand(b, 2)).transpose()?;
        let (y, means, invs) = layer_norm(&float_slice::<T>(x)?, row_len, &s, b.as_deref(), T::from_f32(self.epsilon));
        let mut stat_shape = x.shape()[..axis].to_vec();
        stat_shape.resize(x.rank(), 1);
        let mut out = vec![float_output(x.dtype(), x.shape().to_vec(), y)?];
        if wanted.get(1).copied().unwrap_or(false) || wanted.get(2).copied().unwrap_or(false) {
            out.push(float_output(self.stash, stat_shape.clone(), means)?);
            out.push(float_output(self.stash, stat_shape, invs)?);
        }
        Ok(out)
    }
}

impl Kernel for LayerNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &FLOATS, 0, at)?;
        let axis = util::normalize_axis(self.axis, x.rank(), at)?;
        let scale = util::input(inputs, 1, at)?;
        util::expect_dtype(&scale, &FLOATS, 1, at)?;
        let bias = util::opt_input(inputs, 2, at)?;
        if let Some(b) = &bias {
            util::expect_dtype(b, &FLOATS, 2, at)?;
        }
        if self.stash == DataType::Double || is_double(&x) {
            self.run_typed::<f64>(&x, &scale, bias.as_ref(), axis, wanted)
        } else {
            self.run_typed::<f32>(&x, &scale, bias.as_ref(), axis, wanted)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// LRN

/// Local response normalization across channels of X (`[N, C, inner]`):
/// `y = x / (bias + alpha / size * sum of x^2 over the neighbouring channels)^beta`.
pub(crate) fn lrn<T: Real>(x: &[T], channels: usize, inner: usize, size: usize, alpha: T, beta: T, bias: T) -> Vec<T> {
    let (before, after) = ((size - 1) / 2, size / 2);
    let image = channels * inner;
    let scale = alpha / T::from_usize(size);
    let mut y = vec![T::ZERO; x.len()];
    let plane = |acc: &mut Vec<T>, (p, yp): (usize, &mut [T])| {
        let (n, c) = (p / channels.max(1), p % channels.max(1));
        let img = &x[n * image..][..image];
        acc.clear();
        acc.resize(inner, T::ZERO);
        for cc in c.saturating_sub(before)..(c + after + 1).min(channels) {
            for (a, &v) in acc.iter_mut().zip(&img[cc * inner..][..inner]) {
                *a += v * v;
            }
        }
        for ((y, &v), &a) in yp.iter_mut().zip(&img[c * inner..][..inner]).zip(acc.iter()) {
            *y = v / (bias + scale * a).powf(beta);
        }
    };
    if x.len() >= PARALLEL_ELEMS {
        y.par_chunks_mut(inner.max(1)).enumerate().for_each_init(Vec::new, plane);
    } else {
        let mut acc = Vec::new();
        y.chunks_mut(inner.max(1)).enumerate().for_each(|p| plane(&mut acc, p));
    }
    y
}

/// LRN (opsets 1 and 13).
struct Lrn {
    at: Location,
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
}

fn build_lrn(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let size = match node.get_int("size")? {
        Some(s) if s > 0 => s as usize,
        Some(s) => return Err(Error::attribute(&at, "size", "a positive integer", s.to_string())),
        None => return Err(Error::attribute(&at, "size", "an int", "no attribute")),
    };
    Ok(Box::new(Lrn {
        size,
        alpha: node.float_or("alpha", 1e-4)?,
        beta: node.float_or("beta", 0.75)?,
        bias: node.float_or("bias", 1.0)?,
        at,
    }))
}

impl Lrn {
    fn run_typed<T: Real>(&self, x: &TensorView<'_>) -> Result<Value> {
        let c = x.shape()[1];
        let inner: usize = x.shape()[2..].iter().product();
        let f = T::from_f32;
        let y = lrn(&float_slice::<T>(x)?, c, inner, self.size, f(self.alpha), f(self.beta), f(self.bias));
        float_output(x.dtype(), x.shape().to_vec(), y)
    }
}

impl Kernel for Lrn {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = channel_input(inputs, 2, &self.at)?;
        let y = if is_double(&x) { self.run_typed::<f64>(&x)? } else { self.run_typed::<f32>(&x)? };
        Ok(vec![y])
    }
}

// ---------------------------------------------------------------------------------------------
// MeanVarianceNormalization

/// `y = (x - mean) / (sqrt(variance) + 1e-9)`, with mean and variance taken over the axes
/// where `reduced` is true.
pub(crate) fn mean_variance_norm<T: Real>(x: &[T], shape: &[usize], reduced: &[bool]) -> Vec<T> {
    // Each element belongs to the group numbered by its indices along the kept axes.
    let mut group_strides = vec![0usize; shape.len()];
    let mut groups = 1;
    for d in (0..shape.len()).rev() {
        if !reduced[d] {
            group_strides[d] = groups;
            groups *= shape[d];
        }
    }
    let count = x.len().checked_div(groups).unwrap_or(0);
    let mut group_of = vec![0usize; x.len()];
    let mut idx = vec![0usize; shape.len()];
    for g in group_of.iter_mut() {
        *g = idx.iter().zip(&group_strides).map(|(i, s)| i * s).sum();
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let n = T::from_usize(count.max(1));
    let mut mean = vec![T::ZERO; groups];
    for (&v, &g) in x.iter().zip(&group_of) {
        mean[g] += v;
    }
    mean.iter_mut().for_each(|m| *m = *m / n);
    let mut var = vec![T::ZERO; groups];
    for (&v, &g) in x.iter().zip(&group_of) {
        var[g] += (v - mean[g]) * (v - mean[g]);
    }
    let denom: Vec<T> = var.iter().map(|&v| (v / n).sqrt() + T::from_f64(1e-9)).collect();
    x.iter().zip(&group_of).map(|(&v, &g)| (v - mean[g]) / denom[g]).collect()
}

/// MeanVarianceNormalization (opsets 9 and 13).
struct Mvn {
    at: Location,
    axes: Vec<i64>,
}

fn build_mvn(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let axes = node.get_ints("axes")?.map_or_else(|| vec![0, 2, 3], <[i64]>::to_vec);
    Ok(Box::new(Mvn { at: node.location(), axes }))
}

impl Mvn {
    fn run_typed<T: Real>(&self, x: &TensorView<'_>, reduced: &[bool]) -> Result<Value> {
        let y = mean_variance_norm(&float_slice::<T>(x)?, x.shape(), reduced);
        float_output(x.dtype(), x.shape().to_vec(), y)
    }
}

impl Kernel for Mvn {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &FLOATS, 0, at)?;
        let mut reduced = vec![false; x.rank()];
        for &a in &self.axes {
            let d = util::normalize_axis(a, x.rank(), at).map_err(|_| {
                Error::attribute(
                    at,
                    "axes",
                    format!("axes within rank {} of X {:?}", x.rank(), x.shape()),
                    format!("{:?}", self.axes),
                )
            })?;
            reduced[d] = true;
        }
        let y = if is_double(&x) { self.run_typed::<f64>(&x, &reduced)? } else { self.run_typed::<f32>(&x, &reduced)? };
        Ok(vec![y])
    }
}

#[cfg(test)]
mod tests;
