//! ONNX Runtime's RMS normalizations, SimplifiedLayerNormalization and `com.microsoft`
//! SkipSimplifiedLayerNormalization, on the contract of `onyx_core::ops::contrib::rms_norm`.
//! Computed in f32 (f64 for double), squares summed in f64; half types are rounded once, on
//! output, like ONNX Runtime's CPU EP (the residual sum a half-typed Skip form returns is
//! rounded, the one it normalizes is not).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::contrib::rms_norm::{RmsGeometry, RmsNormOp};
use onyx_core::{DataType, Error, Result, TensorView, Value};

use super::broadcast_to;
use crate::ops::elementwise::FLOAT_TYPES;
use crate::ops::matmul::real::{compute_type, float_output, float_slice, Real};
use crate::ops::util;
use crate::parallel;

/// Rows normalized per parallel task, at least.
const ROWS_PER_TASK: usize = 16;

struct RmsNorm(RmsNormOp);

/// Builds either form's kernel.
pub(crate) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(RmsNorm(RmsNormOp::from_node(ctx.node)?)))
}

/// How a row's root mean square and output are computed, as ONNX Runtime's CPU EP does (its
/// rounding is reproduced, since a flipped rounding of a half-typed output is amplified by
/// the int8 activations of the next `accuracy_level` 4 product).
#[derive(Clone, Copy, PartialEq)]
enum Arith {
    /// SimplifiedLayerNormalization of rows of 16 or more with a full gamma: squares summed in
    /// 8 FMA lanes, `y = (x · inv) · g`.
    Lanes,
    /// Shorter rows, and the Skip form: squares summed one by one, `y = (x / rms) · g`.
    Sequential,
    /// Double inputs, or a broadcast gamma: everything in f64.
    Wide,
}

/// `Σ x²` in 8 FMA lanes, the lanes added as a tree, the tail as ONNX Runtime adds it.
fn lane_squares(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            lanes[l] = c[l].mul_add(c[l], lanes[l]);
        }
    }
    let a: [f32; 4] = std::array::from_fn(|i| lanes[i] + lanes[i + 4]);
    let mut s = (a[0] + a[2]) + (a[1] + a[3]);
    let (four, rest) = tail.split_at(if tail.len() >= 4 { 4 } else { 0 });
    for &v in four {
        s += v * v;
    }
    for &v in rest {
        s = v.mul_add(v, s);
    }
    s
}

/// One row: writes y, returns `1 / rms`.
fn normalize_row<T: Real>(x: &[T], gamma: &[T], eps: f64, arith: Arith, y: &mut [T]) -> T {
    let n = x.len();
    if arith == Arith::Wide {
        let ms = x.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>() / n as f64;
        let rms = (ms + eps).sqrt();
        for ((o, &v), &g) in y.iter_mut().zip(x).zip(gamma) {
            *o = T::from_f64(v.to_f64() / rms * g.to_f64());
        }
        return T::from_f64(1.0 / rms);
    }
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    let sum = match arith {
        Arith::Lanes => lane_squares(&xf),
        _ => xf.iter().fold(0f32, |s, &v| s + v * v),
    };
    let rms = (sum / n as f32 + eps as f32).sqrt();
    let inv = 1.0 / rms;
    for ((o, &v), &g) in y.iter_mut().zip(&xf).zip(gamma) {
        let v = if arith == Arith::Lanes { v * inv } else { v / rms };
        *o = T::from_f32(v * g.to_f32());
    }
    T::from_f32(inv)
}

/// Normalizes each `hidden`-long row of `x` into `y`, rows split over the pool in tasks of at
/// least [`ROWS_PER_TASK`] rows (or 4096 elements); with `want_inv`, returns each row's
/// `1 / rms` (else nothing).
fn normalize<T: Real>(
    x: &[T],
    gamma: &[T],
    hidden: usize,
    eps: f64,
    arith: Arith,
    y: &mut [T],
    want_inv: bool,
) -> Vec<T> {
    let hidden = hidden.max(1);
    let task_rows = ROWS_PER_TASK.max(4096 / hidden);
    parallel::for_each_chunk_mut(y, task_rows * hidden, &|t, y| {
        for (r, yr) in y.chunks_mut(hidden).enumerate() {
            let row = t * task_rows + r;
            normalize_row(&x[row * hidden..][..hidden], gamma, eps, arith, yr);
        }
    });
    if !want_inv {
        return vec![];
    }
    let mut scratch = vec![T::ZERO; hidden];
    x.chunks(hidden).map(|row| normalize_row(row, gamma, eps, arith, &mut scratch)).collect()
}

impl RmsNorm {
    fn run_typed<T: Real>(
        &self,
        x: &TensorView<'_>,
        parts: &[Option<TensorView<'_>>; 3],
        g: RmsGeometry,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let op = &self.0;
        let [skip, gamma, bias] = parts;
        let gamma_view = gamma.as_ref().expect("gamma is checked");
        let axis = op.first_axis(x.rank())?;
        let gamma = broadcast_to(&float_slice::<T>(gamma_view)?, gamma_view.shape(), &x.shape()[axis..])
            .expect("gamma is checked");
        let mut sum = float_slice::<T>(x)?.into_owned();
        if let Some(skip) = skip {
            let skip = float_slice::<T>(skip)?;
            sum.chunks_mut(g.skip_len.max(1)).for_each(|c| c.iter_mut().zip(skip.iter()).for_each(|(s, &k)| *s += k));
        }
        if let Some(bias) = bias {
            let bias = float_slice::<T>(bias)?;
            sum.chunks_mut(g.hidden.max(1)).for_each(|c| c.iter_mut().zip(bias.iter()).for_each(|(s, &b)| *s += b));
        }
        let mut y = vec![T::ZERO; sum.len()];
        let full_gamma = gamma_view.len() == g.hidden;
        let arith = match (T::DTYPE == DataType::Double || !full_gamma, op.skip, g.hidden >= 16) {
            (true, _, _) => Arith::Wide,
            (false, false, true) => Arith::Lanes,
            _ => Arith::Sequential,
        };
        let want = |i: usize| wanted.get(i).copied().unwrap_or(false);
        let inv = normalize(&sum, &gamma, g.hidden, f64::from(op.epsilon), arith, &mut y, want(op.inv_std_output()));
        let shape = x.shape().to_vec();
        let stats_shape = op.stats_shape(&shape)?;
        let stat_type = if T::DTYPE == DataType::Double { DataType::Double } else { DataType::Float };
        // The plain form's Y has gamma's type (ONNX Runtime's `V`), which may differ from X's.
        let mut out = vec![float_output(gamma_view.dtype(), shape.clone(), y)?];
        let last = (1..wanted.len()).rev().find(|&i| want(i)).unwrap_or(0);
        for i in 1..=last {
            out.push(match (op.skip, i) {
                (true, 1) => float_output(stat_type, stats_shape.clone(), vec![T::ZERO; g.rows])?,
                (true, 3) => float_output(x.dtype(), shape.clone(), std::mem::take(&mut sum))?,
                // inv_std_var, or zeros in a place no one reads.
                _ if inv.is_empty() => float_output(stat_type, stats_shape.clone(), vec![T::ZERO; g.rows])?,
                _ => float_output(stat_type, stats_shape.clone(), inv.clone())?,
            });
        }
        Ok(out)
    }
}

impl Kernel for RmsNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.0;
        let at = &op.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, FLOAT_TYPES, 0, at)?;
        let (skip, gamma, bias) = if op.skip {
            (Some(util::input(inputs, 1, at)?), util::input(inputs, 2, at)?, util::opt_input(inputs, 3, at)?)
        } else {
            (None, util::input(inputs, 1, at)?, None)
        };
        util::expect_dtype(&gamma, FLOAT_TYPES, if op.skip { 2 } else { 1 }, at)?;
        let indices = if op.skip { [1, 2, 3] } else { [usize::MAX, usize::MAX, usize::MAX] };
        for (i, t) in
            indices.into_iter().zip([skip.as_ref(), Some(&gamma), bias.as_ref()]).filter(|(i, _)| *i != usize::MAX)
        {
            if let Some(t) = t.filter(|t| t.dtype() != x.dtype()) {
                return Err(Error::input(at, i, x.dtype().name(), t.dtype().name()));
            }
        }
        let g =
            op.geometry(x.shape(), skip.as_ref().map(|s| s.shape()), gamma.shape(), bias.as_ref().map(|b| b.shape()))?;
        let parts = [skip, Some(gamma), bias];
        match compute_type(x.dtype()) {
            Some(DataType::Double) => self.run_typed::<f64>(&x, &parts, g, wanted),
            _ => self.run_typed::<f32>(&x, &parts, g, wanted),
        }
    }
}
