//! Loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//!
//! Both read an input `[N, C, d1..dk]` (log-probabilities for NLL, scores for SCE) and integer
//! targets `[N, d1..dk]` in `0..C`, optionally weighted per class. A target equal to
//! `ignore_index` contributes nothing, neither loss nor weight. Reductions: `none` (the loss
//! per target), `sum`, and `mean` (Σ loss / Σ weight of the counted targets; 0/0 is NaN, as in
//! ONNX's reference). Computed in f64, written in the input's float type.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

#[cfg(test)]
mod tests;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("NegativeLogLikelihoodLoss", build_loss);
    r.add("SoftmaxCrossEntropyLoss", build_loss);
}

/// How the per-target losses are combined.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

/// NegativeLogLikelihoodLoss or SoftmaxCrossEntropyLoss with its attributes decoded.
struct LossOp {
    /// SoftmaxCrossEntropyLoss: the input holds scores, log-softmaxed along axis 1 first.
    softmax: bool,
    reduction: Reduction,
    ignore_index: Option<i64>,
    at: Location,
}

fn build_loss(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let reduction = match node.string_or("reduction", "mean")?.as_str() {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => return Err(Error::attribute(&at, "reduction", "none, sum or mean", other)),
    };
    let softmax = node.op_type == "SoftmaxCrossEntropyLoss";
    Ok(Box::new(LossOp { softmax, reduction, ignore_index: node.get_int("ignore_index")?, at }))
}

/// The input seen as `[n, c, inner]`.
#[derive(Clone, Copy, Debug)]
struct Dims {
    n: usize,
    c: usize,
    inner: usize,
}

/// Log-softmax along the middle axis of `[n, c, inner]`.
fn log_softmax(x: &[f64], d: Dims) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for i in 0..d.n {
        for k in 0..d.inner {
            let at = |j: usize| (i * d.c + j) * d.inner + k;
            let m = (0..d.c).map(|j| x[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let lse = m + (0..d.c).map(|j| (x[at(j)] - m).exp()).sum::<f64>().ln();
            (0..d.c).for_each(|j| out[at(j)] = x[at(j)] - lse);
        }
    }
    out
}

impl LossOp {
    fn dims(&self, x: &[usize], target: &[usize]) -> Result<Dims> {
        if x.len() < 2 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 2 or more ([N, C, ...])", format!("{x:?}")));
        }
        let want: Vec<usize> = [x[0]].into_iter().chain(x[2..].iter().copied()).collect();
        if target != want {
            return Err(Error::input(&self.at, 1, format!("targets of shape {want:?}"), format!("{target:?}")));
        }
        Ok(Dims { n: x[0], c: x[1], inner: x[2..].iter().product() })
    }

    /// The loss of every target and its weight (0 for ignored targets).
    fn per_target(
        &self,
        logp: &[f64],
        d: Dims,
        target: &[i64],
        weight: Option<&[f64]>,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let mut loss = Vec::with_capacity(target.len());
        let mut weights = Vec::with_capacity(target.len());
        for (flat, &t) in target.iter().enumerate() {
            if Some(t) == self.ignore_index {
                loss.push(0.0);
                weights.push(0.0);
                continue;
            }
            let class = usize::try_from(t).ok().filter(|&t| t < d.c).ok_or_else(|| {
                Error::input(&self.at, 1, format!("class indices in 0..{} (or ignore_index)", d.c), t.to_string())
            })?;
            let (i, k) = (flat / d.inner, flat % d.inner);
            let w = weight.map_or(1.0, |w| w[class]);
            loss.push(-logp[(i * d.c + class) * d.inner + k] * w);
            weights.push(w);
        }
        Ok((loss, weights))
    }

    fn compute(
        &self,
        x: &TensorView<'_>,
        target: &TensorView<'_>,
        weight: Option<&TensorView<'_>>,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let at = &self.at;
        let dtype = x.dtype();
        if compute_type(dtype).is_none() {
            return Err(Error::input(at, 0, "a float tensor", dtype.name()));
        }
        if !matches!(target.dtype(), DataType::Int32 | DataType::Int64) {
            return Err(Error::input(at, 1, "int32 or int64 targets", target.dtype().name()));
        }
        let d = self.dims(x.shape(), target.shape())?;
        let weight = match weight {
            Some(w) if w.dtype() != dtype || w.shape() != [d.c] => {
                return Err(Error::input(
                    at,
                    2,
                    format!("{dtype} weights of shape [{}]", d.c),
                    format!("{} {:?}", w.dtype(), w.shape()),
                ));
            }
            Some(w) => Some(float_slice::<f64>(w)?.into_owned()),
            None => None,
        };
        let xs = float_slice::<f64>(x)?;
        let logp = if self.softmax { log_softmax(&xs, d) } else { xs.into_owned() };
        let (loss, weights) = self.per_target(&logp, d, &util::to_i64(target)?, weight.as_deref())?;
        let total: f64 = loss.iter().sum();
        let loss = match self.reduction {
            Reduction::None => float_output(dtype, target.shape().to_vec(), loss)?,
            Reduction::Sum => float_output(dtype, vec![], vec![total])?,
            Reduction::Mean => float_output(dtype, vec![], vec![total / weights.iter().sum::<f64>()])?,
        };
        let mut outs = vec![loss];
        if self.softmax && wanted.get(1).copied().unwrap_or(false) {
            outs.push(float_output(dtype, x.shape().to_vec(), logp)?);
        }
        Ok(outs)
    }
}

impl Kernel for LossOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let target = util::input(inputs, 1, &self.at)?;
        let weight = util::opt_input(inputs, 2, &self.at)?;
        self.compute(&x, &target, weight.as_ref(), wanted).map_err(|e| e.at(&self.at))
    }
}
