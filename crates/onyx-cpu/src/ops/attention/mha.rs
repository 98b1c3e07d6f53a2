//! `com.microsoft` MultiHeadAttention and Attention on the contracts of
//! `onyx_core::ops::contrib::mha`: q, k and v gathered into `[B, N, seq, H]` heads (Attention
//! projects its input first, one matrix product), the past keys and values first, then per
//! (batch row, head) the scores of each query over every key with the bias and the mask added,
//! a softmax and the weighted sum of values. Computed in f32 (float16 and bfloat16 inputs are
//! widened exactly, as ONNX Runtime's inserted casts do); (row, head) pairs run in parallel.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::contrib::mha::{
    AttentionCommon, AttentionShapes, MultiHeadAttentionOp as Mha, PackedAttentionOp as Packed,
};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::gqa::{dot, softmax};
use crate::ops::matmul::gemm::{gemm, MatMut, MatRef};
use crate::ops::util;
use crate::parallel;

/// Builds the MultiHeadAttention kernel.
pub(crate) fn build_mha(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(MhaKernel(Mha::from_node(ctx.node)?)))
}

/// Builds the Attention kernel.
pub(crate) fn build_packed(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(PackedKernel(Packed::from_node(ctx.node)?)))
}

struct MhaKernel(Mha);
struct PackedKernel(Packed);

/// Queries, keys and values of one call in `[B, N, rows, head]` layout; keys and values hold
/// the valid past rows, then the new ones (`total` rows a head).
struct Heads {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

/// `[B, N, seq, head]` from rows of `stride` elements (`[B, seq, stride]`) whose head `n` starts
/// at `offset + n * head`, plus `bias[offset + n * head ..]` when given.
fn split_heads(
    x: &[f32],
    s: (usize, usize, usize, usize),
    stride: usize,
    offset: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let (batch, seq, heads, head) = s;
    let mut out = onyx_core::host_pool::take::<f32>(batch * heads * seq * head);
    for b in 0..batch {
        for n in 0..heads {
            for t in 0..seq {
                let src = &x[(b * seq + t) * stride + offset + n * head..][..head];
                let dst = &mut out[((b * heads + n) * seq + t) * head..][..head];
                match bias {
                    Some(bias) => dst
                        .iter_mut()
                        .zip(src.iter().zip(&bias[offset + n * head..]))
                        .for_each(|(d, (x, c))| *d = x + c),
                    None => dst.copy_from_slice(src),
                }
            }
        }
    }
    out
}

/// `[B, N, past + new, head]`: each head's first `past` rows of `old` (`rows` a head), then `new`
/// (`[B, N, L, head]`).
fn with_past(old: Option<&[f32]>, rows: usize, past: usize, new: &[f32], bn: usize, head: usize) -> Vec<f32> {
    let l = new.len() / bn.max(1) / head.max(1);
    let mut out = onyx_core::host_pool::take::<f32>(bn * (past + l) * head);
    for i in 0..bn {
        let dst = &mut out[i * (past + l) * head..][..(past + l) * head];
        if let Some(old) = old {
            dst[..past * head].copy_from_slice(&old[i * rows * head..][..past * head]);
        }
        dst[past * head..].copy_from_slice(&new[i * l * head..][..l * head]);
    }
    out
}

/// A shared present buffer: `old` (`[B, N, rows, head]`) with the rows from `past` on replaced
/// by those of `keys` (`[B, N, total, head]`).
fn into_buffer(old: &[f32], rows: usize, past: usize, keys: &[f32], total: usize, bn: usize, head: usize) -> Vec<f32> {
    let mut out = old.to_vec();
    for i in 0..bn {
        out[(i * rows + past) * head..(i * rows + total) * head]
            .copy_from_slice(&keys[(i * total + past) * head..(i + 1) * total * head]);
    }
    out
}

/// The additive bias and the key mask of one call.
struct Masks<'a> {
    bias: Option<&'a [f32]>,
    keys: Option<&'a [i32]>,
}

/// Outputs of the core: `[B, S, N·Hv]`, and the scores `[B, N, S, T]` when asked for.
fn attend(
    c: &AttentionCommon,
    s: &AttentionShapes,
    heads: &Heads,
    masks: &Masks<'_>,
    want_qk: bool,
) -> (Vec<f32>, Option<Vec<f32>>) {
    let (n_heads, seq, total, d, dv) = (c.num_heads, s.seq, s.total(), s.head, s.v_head);
    let scale = c.scale_for(d);
    let per_task = seq * dv + if want_qk { seq * total } else { 0 };
    let mut scratch = onyx_core::host_pool::take_zeroed::<f32>(s.batch * n_heads * per_task);
    parallel::for_each_chunk_mut(&mut scratch, per_task.max(1), &|task, chunk| {
        let (b, n) = (task / n_heads, task % n_heads);
        let (y, qk) = chunk.split_at_mut(seq * dv);
        let keys = &heads.k[task * total * d..][..total * d];
        let values = &heads.v[task * total * dv..][..total * dv];
        let mut scores = vec![0f32; total];
        for i in 0..seq {
            let q = &heads.q[(task * seq + i) * d..][..d];
            for (j, score) in scores.iter_mut().enumerate() {
                let mut x = scale * dot(q, &keys[j * d..][..d]);
                if let (Some(bias), Some([bb, bn])) = (masks.bias, s.bias) {
                    let (bi, ni) = (if bb == 1 { 0 } else { b }, if bn == 1 { 0 } else { n });
                    x += bias[((bi * bn + ni) * seq + i) * total + j];
                }
                if c.causal_masked(seq, s.past, i, j) {
                    x += f32::MIN;
                } else if masks.keys.is_some_and(|m| !s.mask.keeps(m, s.batch, seq, total, b, i, j)) {
                    x += c.mask_filter_value;
                }
                *score = x;
            }
            if want_qk {
                qk[i * total..][..total].copy_from_slice(&scores);
            }
            softmax(&mut scores, None);
            let out = &mut y[i * dv..][..dv];
            for (j, &p) in scores.iter().enumerate() {
                out.iter_mut().zip(&values[j * dv..][..dv]).for_each(|(o, &v)| *o += p * v);
            }
        }
    });
    let mut y = onyx_core::host_pool::take::<f32>(s.batch * seq * n_heads * dv);
    for (task, chunk) in scratch.chunks(per_task.max(1)).enumerate() {
        let (b, n) = (task / n_heads, task % n_heads);
        for i in 0..seq {
            y[((b * seq + i) * n_heads + n) * dv..][..dv].copy_from_slice(&chunk[i * dv..][..dv]);
        }
    }
    let qk = want_qk.then(|| scratch.chunks(per_task.max(1)).flat_map(|c| c[seq * dv..].iter().copied()).collect());
    (y, qk)
}

/// The float type of the call (input 0's), checked against the other float inputs.
fn float_type(at: &Location, views: &[Option<TensorView<'_>>], float_inputs: &[usize]) -> Result<DataType> {
    let dtype = views[0].as_ref().ok_or_else(|| Error::input(at, 0, "an input", "none"))?.dtype();
    if !matches!(dtype, DataType::Float | DataType::Float16 | DataType::BFloat16) {
        return Err(Error::input(at, 0, "float, float16 or bfloat16", dtype.name()));
    }
    for &i in float_inputs {
        if let Some(t) = views[i].as_ref().filter(|t| t.dtype() != dtype) {
            return Err(Error::input(at, i, dtype.name(), t.dtype().name()));
        }
    }
    Ok(dtype)
}

/// An optional `int32` input's values.
fn int32s<'a>(at: &Location, views: &'a [Option<TensorView<'_>>], i: usize) -> Result<Option<&'a [i32]>> {
    match views[i].as_ref() {
        Some(t) if t.dtype() == DataType::Int32 => Ok(Some(t.as_slice::<i32>()?)),
        Some(t) => Err(Error::input(at, i, "int32", t.dtype().name())),
        None => Ok(None),
    }
}

/// Each input's shape, `None` where absent.
fn shapes_of<'a>(views: &'a [Option<TensorView<'_>>]) -> Vec<Option<&'a [usize]>> {
    views.iter().map(|v| v.as_ref().map(|v| v.shape())).collect()
}

/// Input `i` widened to f32, `None` where absent.
fn f32s_of(views: &[Option<TensorView<'_>>], i: usize) -> Result<Option<Vec<f32>>> {
    views[i].as_ref().map(util::to_f32).transpose()
}

impl Kernel for MhaKernel {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.0;
        let c = &op.0;
        let at = &c.at;
        let views = (0..=Mha::CACHE_INDIRECTION).map(|i| util::opt_input(inputs, i, at)).collect::<Result<Vec<_>>>()?;
        let dtype = float_type(
            at,
            &views,
            &[Mha::KEY, Mha::VALUE, Mha::BIAS, Mha::ATTENTION_BIAS, Mha::PAST_KEY, Mha::PAST_VALUE],
        )?;
        let past_len = int32s(at, &views, Mha::PAST_SEQUENCE_LENGTH)?;
        let past_len = match past_len {
            Some(&[p]) => Some(i64::from(p)),
            Some(p) => {
                return Err(Error::input(at, Mha::PAST_SEQUENCE_LENGTH, "one value", format!("{} values", p.len())))
            }
            None => None,
        };
        let s = op.shapes(&shapes_of(&views), past_len.filter(|_| views[Mha::PAST_KEY].is_some()))?;
        let mask = int32s(at, &views, Mha::KEY_PADDING_MASK)?;
        let (n, d, dv, bn) = (c.num_heads, s.head, s.v_head, s.batch * c.num_heads);
        let get = |i| f32s_of(&views, i);
        let (q, k, v, bias) = (
            get(Mha::QUERY)?.unwrap_or_default(),
            get(Mha::KEY)?.unwrap_or_default(),
            get(Mha::VALUE)?.unwrap_or_default(),
            get(Mha::BIAS)?,
        );
        let q = split_heads(&q, (s.batch, s.seq, n, d), n * d, 0, bias.as_deref());
        // With BNSH keys and values the bias' k and v parts are not applied (ONNX Runtime's CPU EP).
        let (k, v) = if s.kv_bnsh {
            (k, v)
        } else {
            let kv_bias = bias.as_deref().map(|b| &b[n * d..]);
            (
                split_heads(&k, (s.batch, s.kv_seq, n, d), n * d, 0, kv_bias),
                split_heads(&v, (s.batch, s.kv_seq, n, dv), n * dv, 0, kv_bias.map(|b| &b[n * d..])),
            )
        };
        let (past_k, past_v) = (get(Mha::PAST_KEY)?, get(Mha::PAST_VALUE)?);
        let rows = s.capacity.unwrap_or(s.past);
        let heads = Heads {
            q,
            k: with_past(past_k.as_deref(), rows, s.past, &k, bn, d),
            v: with_past(past_v.as_deref(), rows, s.past, &v, bn, dv),
        };
        let attn_bias = get(Mha::ATTENTION_BIAS)?;
        let want_qk = wanted.get(3).copied().unwrap_or(false);
        let (y, qk) = attend(c, &s, &heads, &Masks { bias: attn_bias.as_deref(), keys: mask }, want_qk);
        let present = |old: Option<Vec<f32>>, all: Vec<f32>, width: usize| -> Vec<f32> {
            match (s.capacity, old) {
                (Some(cap), Some(old)) => into_buffer(&old, cap, s.past, &all, s.total(), bn, width),
                _ => all,
            }
        };
        let shape = |width| vec![s.batch, n, s.present_rows(), width];
        let out_k = util::from_f32(dtype, shape(d), present(past_k, heads.k, d))?;
        let out_v = util::from_f32(dtype, shape(dv), present(past_v, heads.v, dv))?;
        let mut out = vec![util::from_f32(dtype, vec![s.batch, s.seq, n * dv], y)?, out_k, out_v];
        if let Some(qk) = qk {
            out.push(util::from_f32(dtype, vec![s.batch, n, s.seq, s.total()], qk)?);
        }
        Ok(out)
    }
}

impl Kernel for PackedKernel {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.0;
        let c = &op.common;
        let at = &c.at;
        let views =
            (0..=Packed::PAST_SEQUENCE_LENGTH).map(|i| util::opt_input(inputs, i, at)).collect::<Result<Vec<_>>>()?;
        let dtype = float_type(at, &views, &[Packed::WEIGHTS, Packed::BIAS, Packed::PAST, Packed::ATTENTION_BIAS])?;
        let s = op.shapes(&shapes_of(&views))?;
        let want_present = wanted.get(1).copied().unwrap_or(false);
        if s.past > 0 && !want_present {
            return Err(Error::node(at, "a past needs the present output (ONNX Runtime's CPU EP refuses it too)"));
        }
        let mask = int32s(at, &views, Packed::MASK_INDEX)?;
        if let Some(m) = mask {
            op.check_mask_values(s.mask, m)?;
        }
        let (n, d, dv, bn) = (c.num_heads, s.head, s.v_head, s.batch * c.num_heads);
        let get = |i| f32s_of(&views, i);
        let (x, w) = (get(Packed::INPUT)?.unwrap_or_default(), get(Packed::WEIGHTS)?.unwrap_or_default());
        let (rows, cols) = (s.batch * s.seq, 2 * n * d + n * dv);
        let di = w.len() / cols;
        let mut qkv = onyx_core::host_pool::take_zeroed::<f32>(rows * cols);
        gemm(
            1.0,
            MatRef::row_major(&x, rows, di),
            MatRef::row_major(&w, di, cols),
            0.0,
            MatMut::row_major(&mut qkv, rows, cols),
        )?;
        let bias = get(Packed::BIAS)?;
        let geometry = |heads_width, offset| -> Vec<f32> {
            split_heads(&qkv, (s.batch, s.seq, n, heads_width), cols, offset, bias.as_deref())
        };
        let (q, k, v) = (geometry(d, 0), geometry(d, n * d), geometry(dv, 2 * n * d));
        let past = get(Packed::PAST)?;
        let half = bn * s.past * d;
        let (past_k, past_v) = match past.as_deref() {
            Some(p) => (Some(&p[..half]), Some(&p[half..])),
            None => (None, None),
        };
        let heads = Heads {
            q,
            k: with_past(past_k, s.past, s.past, &k, bn, d),
            v: with_past(past_v, s.past, s.past, &v, bn, dv),
        };
        let attn_bias = get(Packed::ATTENTION_BIAS)?;
        let (y, _) = attend(c, &s, &heads, &Masks { bias: attn_bias.as_deref(), keys: mask }, false);
        let mut out = vec![util::from_f32(dtype, vec![s.batch, s.seq, n * dv], y)?];
        if want_present {
            if dv != d {
                return Err(Error::node(
                    at,
                    format!("no present output (a value head size {dv} other than the key's {d} has no cache)"),
                ));
            }
            let mut both = heads.k;
            both.extend_from_slice(&heads.v);
            out.push(util::from_f32(dtype, vec![2, s.batch, n, s.total(), d], both)?);
        }
        Ok(out)
    }
}
