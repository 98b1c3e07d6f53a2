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

/// Normalizes each `hidden`-long row of `x` into `y`; returns each row's `1 / rms`. Rows are
/// split over the pool in tasks of at least [`ROWS_PER_TASK`] rows (or 4096 elements).
fn normalize<T: Real>(x: &[T], gamma: &[T], hidden: usize, eps: f64, y: &mut [T]) -> Vec<T> {
    let hidden = hidden.max(1);
    let task_rows = ROWS_PER_TASK.max(4096 / hidden);
    let mut inv = vec![T::ZERO; x.len() / hidden];
    parallel::for_each_chunk_mut(&mut inv, task_rows, &|t, inv| {
        for (r, inv) in inv.iter_mut().enumerate() {
            let xr = &x[(t * task_rows + r) * hidden..][..hidden];
            let ms = xr.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>() / hidden as f64;
            *inv = T::from_f64(1.0 / (ms + eps).sqrt());
        }
    });
    parallel::for_each_chunk_mut(y, task_rows * hidden, &|t, y| {
        for (r, yr) in y.chunks_mut(hidden).enumerate() {
            let row = t * task_rows + r;
            // ONNX Runtime divides by the root mean square rather than multiplying by its inverse.
            let rms = T::ONE / inv[row];
            for ((o, &v), &g) in yr.iter_mut().zip(&x[row * hidden..][..hidden]).zip(gamma) {
                *o = v / rms * g;
            }
        }
    });
    inv
}

impl RmsNorm {
    fn run_typed<T: Real>(&self, x: &TensorView<'_>, parts: &[Option<TensorView<'_>>; 3], g: RmsGeometry, wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.0;
        let [skip, gamma, bias] = parts;
        let gamma_view = gamma.as_ref().expect("gamma is checked");
        let axis = op.first_axis(x.rank())?;
        let gamma = broadcast_to(&float_slice::<T>(gamma_view)?, gamma_view.shape(), &x.shape()[axis..]).expect("gamma is checked");
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
        let inv = normalize(&sum, &gamma, g.hidden, f64::from(op.epsilon), &mut y);
        let shape = x.shape().to_vec();
        let stats_shape = op.stats_shape(&shape)?;
        let stat_type = if T::DTYPE == DataType::Double { DataType::Double } else { DataType::Float };
        let want = |i: usize| wanted.get(i).copied().unwrap_or(false);
        // The plain form's Y has gamma's type (ONNX Runtime's `V`), which may differ from X's.
        let mut out = vec![float_output(gamma_view.dtype(), shape.clone(), y)?];
        let last = (1..wanted.len()).rev().find(|&i| want(i)).unwrap_or(0);
        for i in 1..=last {
            out.push(match (op.skip, i) {
                (true, 1) => float_output(stat_type, stats_shape.clone(), vec![T::ZERO; g.rows])?,
                (true, 3) => float_output(x.dtype(), shape.clone(), std::mem::take(&mut sum))?,
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
        for (i, t) in indices.into_iter().zip([skip.as_ref(), Some(&gamma), bias.as_ref()]).filter(|(i, _)| *i != usize::MAX) {
            if let Some(t) = t.filter(|t| t.dtype() != x.dtype()) {
                return Err(Error::input(at, i, x.dtype().name(), t.dtype().name()));
            }
        }
        let g = op.geometry(x.shape(), skip.as_ref().map(|s| s.shape()), gamma.shape(), bias.as_ref().map(|b| b.shape()))?;
        let parts = [skip, Some(gamma), bias];
        match compute_type(x.dtype()) {
            Some(DataType::Double) => self.run_typed::<f64>(&x, &parts, g, wanted),
            _ => self.run_typed::<f32>(&x, &parts, g, wanted),
        }
    }
}
