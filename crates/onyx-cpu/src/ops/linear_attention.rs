//! LinearAttention (opset 27): recurrent linear attention over packed `[batch, seq, heads * size]`
//! inputs, with a state of shape `[batch, kv_heads, d_k, d_v]` carried in `past_state` and
//! returned in `present_state`.
//!
//! Per (batch, KV head) and token `t`, with `S` the `d_k × d_v` state:
//! - gating (`gated`, `gated_delta`): `S ← exp(g_t) · S` (per head, or per key row);
//! - delta (`delta`, `gated_delta`): `v_t ← β_t · (v_t − Sᵀ k_t)`;
//! - write: `S ← S + k_t ⊗ v_t`;
//! - read: `o_t = scale · q_tᵀ S` for every query head of the group (`h_q / (H_q / H_kv)`).
//!
//! Computed in f32 (f64 for double inputs; f16 and bf16 widened to f32), as the recurrence is
//! defined; `chunk_size` is a tuning hint that does not change the result.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};
use rayon::prelude::*;

use super::matmul::real::{compute_type, float_output, float_slice, Real};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("LinearAttention", build_linear_attention);
}

/// The recurrence a LinearAttention node runs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rule {
    /// The state decays by `exp(decay)` before each write.
    gating: bool,
    /// The written value is corrected by what the state already retrieves for the key.
    delta: bool,
}

/// A LinearAttention node with its attributes decoded.
struct LinearAttention {
    q_heads: usize,
    kv_heads: usize,
    /// `None`: `1 / sqrt(d_k)`.
    scale: Option<f64>,
    rule: Rule,
    at: Location,
}

fn heads_attr(ctx: &NodeContext<'_>, name: &str) -> Result<usize> {
    let at = ctx.node.location();
    match ctx.node.get_int(name)? {
        Some(v) if v > 0 => Ok(v as usize),
        Some(v) => Err(Error::attribute(&at, name, "a positive number of heads", v.to_string())),
        None => Err(Error::attribute(&at, name, "a number of heads (required)", "nothing")),
    }
}

fn build_linear_attention(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let q_heads = heads_attr(ctx, "q_num_heads")?;
    let kv_heads = heads_attr(ctx, "kv_num_heads")?;
    if q_heads % kv_heads != 0 {
        return Err(Error::attribute(
            &at,
            "q_num_heads",
            format!("a multiple of kv_num_heads ({kv_heads})"),
            q_heads.to_string(),
        ));
    }
    let rule = match node.string_or("update_rule", "gated_delta")?.as_str() {
        "linear" => Rule { gating: false, delta: false },
        "gated" => Rule { gating: true, delta: false },
        "delta" => Rule { gating: false, delta: true },
        "gated_delta" => Rule { gating: true, delta: true },
        other => return Err(Error::attribute(&at, "update_rule", "linear, gated, delta or gated_delta", other)),
    };
    let scale = match node.get_float("scale")? {
        None => None,
        Some(s) if s == 0.0 => None,
        Some(s) if s.is_finite() => Some(s as f64),
        Some(s) => return Err(Error::attribute(&at, "scale", "a finite scale", s.to_string())),
    };
    Ok(Box::new(LinearAttention { q_heads, kv_heads, scale, rule, at }))
}

/// Sizes of one run.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    seq: usize,
    q_heads: usize,
    kv_heads: usize,
    dk: usize,
    dv: usize,
    /// Decay values per (batch, token, KV head): 1 (per head) or `dk` (per key row).
    decay_width: usize,
    /// Beta values per (batch, token): `kv_heads` or 1 (shared by the heads).
    beta_heads: usize,
}

impl Dims {
    fn group(&self) -> usize {
        self.q_heads / self.kv_heads
    }
}

/// The inputs of one run (decay and beta only where the rule uses them).
struct Inputs<'r> {
    q: TensorView<'r>,
    k: TensorView<'r>,
    v: TensorView<'r>,
    past: Option<TensorView<'r>>,
    decay: Option<TensorView<'r>>,
    beta: Option<TensorView<'r>>,
}

/// The per-token operands of one (batch, KV head) recurrence.
struct Operands<'a, T> {
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    decay: Option<&'a [T]>,
    beta: Option<&'a [T]>,
}

impl LinearAttention {
    fn read_inputs<'r>(&self, inputs: &[Option<ValueRef<'r>>]) -> Result<Inputs<'r>> {
        let at = &self.at;
        let q = util::input(inputs, 0, at)?;
        if compute_type(q.dtype()).is_none() {
            return Err(Error::input(at, 0, "a float tensor", q.dtype().name()));
        }
        let k = util::input(inputs, 1, at)?;
        let v = util::input(inputs, 2, at)?;
        let past = util::opt_input(inputs, 3, at)?;
        let decay = util::opt_input(inputs, 4, at)?;
        let beta = util::opt_input(inputs, 5, at)?;
        for (i, t) in [(1, Some(&k)), (2, Some(&v)), (4, decay.as_ref()), (5, beta.as_ref())] {
            if let Some(t) = t {
                if t.dtype() != q.dtype() {
                    return Err(Error::input(at, i, q.dtype().name(), t.dtype().name()));
                }
            }
        }
        if let Some(p) = &past {
            if compute_type(p.dtype()).is_none() {
                return Err(Error::input(at, 3, "a float past_state", p.dtype().name()));
            }
        }
        let (gating, delta) = (self.rule.gating, self.rule.delta);
        if gating != decay.is_some() {
            let want = if gating {
                "a decay input (the update rule gates)"
            } else {
                "no decay input (the update rule does not gate)"
            };
            return Err(Error::input(at, 4, want, if decay.is_some() { "a tensor" } else { "no input" }));
        }
        if delta != beta.is_some() {
            let want = if delta {
                "a beta input (the update rule is a delta rule)"
            } else {
                "no beta input (the update rule is not a delta rule)"
            };
            return Err(Error::input(at, 5, want, if beta.is_some() { "a tensor" } else { "no input" }));
        }
        Ok(Inputs { q, k, v, past, decay, beta })
    }

    /// Checks every shape against Q's and the head counts.
    fn dims(&self, x: &Inputs<'_>) -> Result<Dims> {
        let at = &self.at;
        let rank3 = |t: &TensorView<'_>, i: usize| -> Result<[usize; 3]> {
            <[usize; 3]>::try_from(t.shape()).map_err(|_| {
                Error::input(at, i, "a rank-3 tensor [batch, seq, heads * size]", format!("{:?}", t.shape()))
            })
        };
        let [batch, seq, qw] = rank3(&x.q, 0)?;
        let [kb, ks, kw] = rank3(&x.k, 1)?;
        let [vb, vs, vw] = rank3(&x.v, 2)?;
        let (qh, kh) = (self.q_heads, self.kv_heads);
        if qw % qh != 0 || qw == 0 {
            return Err(Error::input(
                at,
                0,
                format!("a last axis divisible by q_num_heads ({qh})"),
                format!("{:?}", x.q.shape()),
            ));
        }
        let dk = qw / qh;
        if (kb, ks, kw) != (batch, seq, kh * dk) {
            return Err(Error::input(
                at,
                1,
                format!("shape [{batch}, {seq}, {}]", kh * dk),
                format!("{:?}", x.k.shape()),
            ));
        }
        if (vb, vs) != (batch, seq) || vw % kh != 0 || vw == 0 {
            return Err(Error::input(
                at,
                2,
                format!("shape [{batch}, {seq}, kv_num_heads ({kh}) * v_head_size]"),
                format!("{:?}", x.v.shape()),
            ));
        }
        let dv = vw / kh;
        let mut d = Dims { batch, seq, q_heads: qh, kv_heads: kh, dk, dv, decay_width: 1, beta_heads: 1 };
        if let Some(g) = &x.decay {
            let [gb, gs, gw] = rank3(g, 4)?;
            if (gb, gs) != (batch, seq) || (gw != kh && gw != kh * dk) {
                return Err(Error::input(
                    at,
                    4,
                    format!("shape [{batch}, {seq}, {kh} or {}]", kh * dk),
                    format!("{:?}", g.shape()),
                ));
            }
            d.decay_width = gw / kh;
        }
        if let Some(b) = &x.beta {
            let [bb, bs, bw] = rank3(b, 5)?;
            if (bb, bs) != (batch, seq) || (bw != kh && bw != 1) {
                return Err(Error::input(
                    at,
                    5,
                    format!("shape [{batch}, {seq}, {kh} or 1]"),
                    format!("{:?}", b.shape()),
                ));
            }
            d.beta_heads = bw;
        }
        if let Some(p) = &x.past {
            if p.shape() != [batch, kh, dk, dv] {
                return Err(Error::input(
                    at,
                    3,
                    format!("shape [{batch}, {kh}, {dk}, {dv}]"),
                    format!("{:?}", p.shape()),
                ));
            }
        }
        Ok(d)
    }

    fn compute<T: Real>(&self, x: &Inputs<'_>) -> Result<Vec<Value>> {
        let d = self.dims(x)?;
        let q = float_slice::<T>(&x.q)?;
        let k = float_slice::<T>(&x.k)?;
        let v = float_slice::<T>(&x.v)?;
        let decay = x.decay.as_ref().map(float_slice::<T>).transpose()?;
        let beta = x.beta.as_ref().map(float_slice::<T>).transpose()?;
        let state_len = d.dk * d.dv;
        let past = match &x.past {
            Some(p) => float_slice::<T>(p)?.into_owned(),
            None => super::matmul::real::zeroed::<T>(d.batch * d.kv_heads * state_len)?,
        };
        let scale = T::from_f64(self.scale.unwrap_or(1.0 / (d.dk as f64).sqrt()));
        let ops = Operands { q: &q, k: &k, v: &v, decay: decay.as_deref(), beta: beta.as_deref() };
        let one =
            |(bh, s): (usize, &[T])| recur(&d, &ops, self.rule, scale, bh / d.kv_heads, bh % d.kv_heads, s.to_vec());
        let heads: Vec<(Vec<T>, Vec<T>)> = if d.batch * d.kv_heads > 1 && d.seq * state_len * d.group() >= 4096 {
            past.par_chunks(state_len.max(1)).take(d.batch * d.kv_heads).enumerate().map(one).collect()
        } else {
            (0..d.batch * d.kv_heads).map(|bh| one((bh, &past[bh * state_len..(bh + 1) * state_len]))).collect()
        };
        // Scatter each head's [seq, group * dv] block into [batch, seq, q_heads * dv].
        let (g, dv) = (d.group(), d.dv);
        let row = d.q_heads * dv;
        let mut y = super::matmul::real::zeroed::<T>(d.batch * d.seq * row)?;
        let mut state = Vec::with_capacity(past.len());
        for (bh, (out, s)) in heads.into_iter().enumerate() {
            let (b, h) = (bh / d.kv_heads, bh % d.kv_heads);
            for t in 0..d.seq {
                let dst = (b * d.seq + t) * row + h * g * dv;
                y[dst..dst + g * dv].copy_from_slice(&out[t * g * dv..(t + 1) * g * dv]);
            }
            state.extend_from_slice(&s);
        }
        let state_dtype = x.past.as_ref().map_or(x.q.dtype(), |p| p.dtype());
        Ok(vec![
            float_output(x.q.dtype(), vec![d.batch, d.seq, row], y)?,
            float_output(state_dtype, vec![d.batch, d.kv_heads, d.dk, d.dv], state)?,
        ])
    }
}

/// Runs the recurrence of batch `b`, KV head `h` from `state` (`dk × dv`, row-major). Returns
/// the outputs of the head's query group as `[seq, group * dv]` and the final state.
fn recur<T: Real>(
    d: &Dims,
    x: &Operands<'_, T>,
    rule: Rule,
    scale: T,
    b: usize,
    h: usize,
    mut state: Vec<T>,
) -> (Vec<T>, Vec<T>) {
    let (dk, dv, g) = (d.dk, d.dv, d.group());
    let mut out = vec![T::ZERO; d.seq * g * dv];
    let mut val = vec![T::ZERO; dv];
    for t in 0..d.seq {
        let bt = b * d.seq + t;
        let key = &x.k[(bt * d.kv_heads + h) * dk..][..dk];
        val.copy_from_slice(&x.v[(bt * d.kv_heads + h) * dv..][..dv]);
        if let (true, Some(decay)) = (rule.gating, x.decay) {
            let w = d.decay_width;
            let gates = &decay[(bt * d.kv_heads + h) * w..][..w];
            for (r, s_row) in state.chunks_exact_mut(dv).enumerate() {
                let f = T::from_f64(gates[if w == 1 { 0 } else { r }].to_f64().exp());
                s_row.iter_mut().for_each(|s| *s *= f);
            }
        }
        if let (true, Some(beta)) = (rule.delta, x.beta) {
            let bw = d.beta_heads;
            let bt_h = beta[bt * bw + if bw == 1 { 0 } else { h }];
            let mut retrieved = vec![T::ZERO; dv];
            for (r, s_row) in state.chunks_exact(dv).enumerate() {
                let kr = key[r];
                retrieved.iter_mut().zip(s_row).for_each(|(a, &s)| *a += s * kr);
            }
            val.iter_mut().zip(&retrieved).for_each(|(v, &r)| *v = bt_h * (*v - r));
        }
        for (r, s_row) in state.chunks_exact_mut(dv).enumerate() {
            let kr = key[r];
            s_row.iter_mut().zip(&val).for_each(|(s, &v)| *s += kr * v);
        }
        for j in 0..g {
            let hq = h * g + j;
            let query = &x.q[(bt * d.q_heads + hq) * dk..][..dk];
            let o = &mut out[(t * g + j) * dv..][..dv];
            for (r, s_row) in state.chunks_exact(dv).enumerate() {
                let qr = query[r];
                o.iter_mut().zip(s_row).for_each(|(a, &s)| *a += qr * s);
            }
            o.iter_mut().for_each(|a| *a *= scale);
        }
    }
    (out, state)
}

impl Kernel for LinearAttention {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = self.read_inputs(inputs)?;
        let r = match compute_type(x.q.dtype()) {
            Some(DataType::Double) => self.compute::<f64>(&x),
            _ => self.compute::<f32>(&x),
        };
        r.map_err(|e| e.at(&self.at))
    }
}

#[cfg(test)]
mod tests;
