//! FlexAttention (`ai.onnx.preview`, opset 1): scaled dot-product attention over rank-4 inputs
//! (`Q [B, Hq, L, E]`, `K [B, Hkv, S, E]`, `V [B, Hkv, S, Ev]`) with two optional modifier
//! subgraphs: `score_mod` on the scores `scale · Q Kᵀ` before the softmax and `prob_mod` on the
//! probabilities after it, each taking and returning one `[B, Hq, L, S]` tensor.
//!
//! Query head `h` reads KV head `h / (Hq / Hkv)`. The scores, softmax and `P V` are computed in
//! the softmax precision (`softmax_precision`, by default float32, or float64 for double inputs);
//! f16 and bf16 precisions are computed in f32 and handed to the subgraphs in their own type. A
//! row whose every score is -inf gives NaN probabilities, as Softmax does.

use std::collections::HashMap;
use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, SubgraphRunner, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};
use rayon::prelude::*;

use super::control_flow::outer_values;
use super::matmul::gemm::{gemm_serial, MatMut, MatRef, PARALLEL_WORK};
use super::matmul::real::{float_output, float_slice, Real};
use super::util;
use crate::Registry;

/// The domain FlexAttention lives in.
const PREVIEW: &str = "ai.onnx.preview";

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add_in(PREVIEW, "FlexAttention", build_flex_attention);
}

/// A FlexAttention node with its attributes decoded and its subgraphs compiled.
struct FlexAttention {
    /// `None`: `1 / sqrt(E)`.
    scale: Option<f64>,
    score_mod: Option<Arc<dyn SubgraphRunner>>,
    prob_mod: Option<Arc<dyn SubgraphRunner>>,
    /// The softmax precision, when the attribute gives one.
    precision: Option<DataType>,
    /// Number of the node's own inputs; the subgraphs' outer-scope values follow them.
    formal_inputs: usize,
    /// Names of the outer-scope values the subgraphs read.
    implicit: Vec<String>,
    at: Location,
}

fn build_flex_attention(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let modifier = |name: &str| -> Result<Option<Arc<dyn SubgraphRunner>>> {
        let Some(g) = node.get_graph(name)? else { return Ok(None) };
        if g.inputs.len() != 1 || g.outputs.len() != 1 {
            let found = format!("{} inputs and {} outputs", g.inputs.len(), g.outputs.len());
            return Err(Error::attribute(&at, name, "a graph with 1 input and 1 output", found));
        }
        (ctx.subgraphs)(g).map(Some)
    };
    let scale = match node.get_float("scale")? {
        None => None,
        Some(s) if s.is_finite() => Some(s as f64),
        Some(s) => return Err(Error::attribute(&at, "scale", "a finite scale", s.to_string())),
    };
    let precision = match node.get_int("softmax_precision")? {
        None => None,
        Some(p) => match i32::try_from(p).ok().and_then(|p| DataType::from_onnx(p)) {
            Some(d @ (DataType::Float | DataType::Double | DataType::Float16 | DataType::BFloat16)) => Some(d),
            _ => {
                return Err(Error::attribute(
                    &at,
                    "softmax_precision",
                    "FLOAT, FLOAT16, BFLOAT16 or DOUBLE (1, 10, 16, 11)",
                    p.to_string(),
                ))
            }
        },
    };
    Ok(Box::new(FlexAttention {
        scale,
        score_mod: modifier("score_mod")?,
        prob_mod: modifier("prob_mod")?,
        precision,
        formal_inputs: node.inputs.len(),
        implicit: node.implicit_inputs.clone(),
        at,
    }))
}

/// Sizes of one run.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_seq: usize,
    kv_seq: usize,
    head: usize,
    v_head: usize,
}

impl Dims {
    /// Shape of the scores and probabilities.
    fn scores(&self) -> Vec<usize> {
        vec![self.batch, self.q_heads, self.q_seq, self.kv_seq]
    }
}

impl FlexAttention {
    fn dims(&self, q: &TensorView<'_>, k: &TensorView<'_>, v: &TensorView<'_>) -> Result<Dims> {
        let at = &self.at;
        let rank4 = |t: &TensorView<'_>, i: usize| -> Result<[usize; 4]> {
            <[usize; 4]>::try_from(t.shape())
                .map_err(|_| Error::input(at, i, "a rank-4 tensor", format!("{:?}", t.shape())))
        };
        let [batch, q_heads, q_seq, head] = rank4(q, 0)?;
        let [kb, kv_heads, kv_seq, kh] = rank4(k, 1)?;
        let [vb, vh, vs, v_head] = rank4(v, 2)?;
        if kb != batch || kh != head || kv_heads == 0 || q_heads % kv_heads != 0 {
            let want = format!("shape [{batch}, heads dividing {q_heads}, kv_seq, {head}]");
            return Err(Error::input(at, 1, want, format!("{:?}", k.shape())));
        }
        if (vb, vh, vs) != (batch, kv_heads, kv_seq) {
            return Err(Error::input(
                at,
                2,
                format!("shape [{batch}, {kv_heads}, {kv_seq}, v_head_size]"),
                format!("{:?}", v.shape()),
            ));
        }
        Ok(Dims { batch, q_heads, kv_heads, q_seq, kv_seq, head, v_head })
    }

    /// Runs a modifier subgraph on `data` (shape [`Dims::scores`]) handed over as `dtype`.
    fn modify<T: Real>(
        &self,
        name: &str,
        runner: &dyn SubgraphRunner,
        data: Vec<T>,
        d: &Dims,
        dtype: DataType,
        outer: &HashMap<&str, ValueRef<'_>>,
    ) -> Result<Vec<T>> {
        let input = float_output(dtype, d.scores(), data)?;
        let outs = runner.run(&[ValueRef::Value(&input)], outer)?;
        let bad = |found: String| {
            Error::node(
                &self.at,
                format!("{name} must return one {dtype} tensor of shape {:?}, returned {found}", d.scores()),
            )
        };
        let [out] = outs.as_slice() else { return Err(bad(format!("{} values", outs.len()))) };
        let t = out.as_tensor().map_err(|_| bad(out.describe()))?;
        if t.dtype() != dtype || t.shape() != d.scores() {
            return Err(bad(format!("{}{:?}", t.dtype(), t.shape())));
        }
        Ok(float_slice::<T>(&t.view()?)?.into_owned())
    }

    /// `scale · Q Kᵀ` for every (batch, query head), as `[B, Hq, L, S]`.
    fn scores<T: Real>(&self, d: &Dims, q: &[T], k: &[T]) -> Result<Vec<T>> {
        let scale = T::from_f64(self.scale.unwrap_or(1.0 / (d.head as f64).sqrt()));
        let group = d.q_heads / d.kv_heads;
        let (l, s, e) = (d.q_seq, d.kv_seq, d.head);
        let mut out = vec![T::ZERO; d.batch * d.q_heads * l * s];
        let one = |(bh, c): (usize, &mut [T])| -> Result<()> {
            let (b, h) = (bh / d.q_heads, bh % d.q_heads);
            let qm = MatRef::row_major(&q[bh * l * e..][..l * e], l, e);
            let km = MatRef::row_major(&k[(b * d.kv_heads + h / group) * s * e..][..s * e], s, e).t();
            gemm_serial(scale, qm, km, T::ZERO, MatMut::row_major(c, l, s))
        };
        let chunk = (l * s).max(1);
        if d.batch * d.q_heads * l * s * e >= PARALLEL_WORK {
            out.par_chunks_mut(chunk).enumerate().try_for_each(one)?;
        } else {
            out.chunks_mut(chunk).enumerate().try_for_each(one)?;
        }
        Ok(out)
    }

    /// `P V` for every (batch, query head), as `[B, Hq, L, Ev]`.
    fn weigh<T: Real>(&self, d: &Dims, p: &[T], v: &[T]) -> Result<Vec<T>> {
        let group = d.q_heads / d.kv_heads;
        let (l, s, ev) = (d.q_seq, d.kv_seq, d.v_head);
        let mut out = vec![T::ZERO; d.batch * d.q_heads * l * ev];
        let one = |(bh, c): (usize, &mut [T])| -> Result<()> {
            let (b, h) = (bh / d.q_heads, bh % d.q_heads);
            let pm = MatRef::row_major(&p[bh * l * s..][..l * s], l, s);
            let vm = MatRef::row_major(&v[(b * d.kv_heads + h / group) * s * ev..][..s * ev], s, ev);
            gemm_serial(T::ONE, pm, vm, T::ZERO, MatMut::row_major(c, l, ev))
        };
        let chunk = (l * ev).max(1);
        if d.batch * d.q_heads * l * s * ev >= PARALLEL_WORK {
            out.par_chunks_mut(chunk).enumerate().try_for_each(one)?;
        } else {
            out.chunks_mut(chunk).enumerate().try_for_each(one)?;
        }
        Ok(out)
    }

    fn compute<T: Real>(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        x: [&TensorView<'_>; 3],
        precision: DataType,
    ) -> Result<Value> {
        let [q, k, v] = x;
        let d = self.dims(q, k, v)?;
        let outer = outer_values(&self.implicit, self.formal_inputs, inputs, &self.at)?;
        let mut s = self.scores(&d, &float_slice::<T>(q)?, &float_slice::<T>(k)?)?;
        if let Some(m) = &self.score_mod {
            s = self.modify("score_mod", m.as_ref(), s, &d, precision, &outer)?;
        }
        s.chunks_mut(d.kv_seq.max(1)).for_each(softmax_row);
        if let Some(m) = &self.prob_mod {
            s = self.modify("prob_mod", m.as_ref(), s, &d, precision, &outer)?;
        }
        let y = self.weigh(&d, &s, &float_slice::<T>(v)?)?;
        float_output(v.dtype(), vec![d.batch, d.q_heads, d.q_seq, d.v_head], y)
    }
}

/// Softmax of one row in place (a row of -inf only gives NaN, as Softmax does).
fn softmax_row<T: Real>(row: &mut [T]) {
    let m = row.iter().map(|x| x.to_f64()).fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for x in row.iter_mut() {
        let e = (x.to_f64() - m).exp();
        sum += e;
        *x = T::from_f64(e);
    }
    let inv = T::from_f64(1.0 / sum);
    row.iter_mut().for_each(|x| *x *= inv);
}

impl Kernel for FlexAttention {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let q = util::input(inputs, 0, at)?;
        let k = util::input(inputs, 1, at)?;
        let v = util::input(inputs, 2, at)?;
        util::expect_dtype(&q, &[DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16], 0, at)?;
        for (i, t) in [(1, &k), (2, &v)] {
            if t.dtype() != q.dtype() {
                return Err(Error::input(at, i, q.dtype().name(), t.dtype().name()));
            }
        }
        let precision =
            self.precision.unwrap_or(if q.dtype() == DataType::Double { DataType::Double } else { DataType::Float });
        let y = if precision == DataType::Double {
            self.compute::<f64>(inputs, [&q, &k, &v], precision)
        } else {
            self.compute::<f32>(inputs, [&q, &k, &v], precision)
        };
        Ok(vec![y.map_err(|e| e.at(at))?])
    }
}

#[cfg(test)]
mod tests;
