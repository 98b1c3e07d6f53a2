//! Attention (opset 23/24, and Onyx's fused `ai.onyx` Attention with the same contract): the
//! output `Y` takes Q's batch, query length and heads and V's head size; the KV cache outputs
//! append the new keys and values to the past ones along the sequence axis. Onyx's
//! `ai.onyx` PackedAttention reads q, k and v side by side from one `[B, S, W]` tensor.

use super::super::super::Inferred;
use super::super::ctx::{tensor_out, unknown, Ctx};
use crate::types::Dim;
use crate::Result;

/// `a / b` for known dims, else a fresh unknown.
fn div(a: &Dim, b: Option<i64>) -> Dim {
    match (a.fixed(), b) {
        (Some(a), Some(b)) if b > 0 && a % b as usize == 0 => Dim::Fixed(a / b as usize),
        _ => Dim::Unknown,
    }
}

/// `a + b` for known dims, else a fresh unknown.
fn add(a: &Dim, b: &Dim) -> Dim {
    match (a.fixed(), b.fixed()) {
        (Some(a), Some(b)) => Dim::Fixed(a + b),
        _ => Dim::Unknown,
    }
}

/// Y, present_key, present_value, qk_matmul_output.
pub fn attention(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = cx.dtype(0) else {
        return Ok(vec![unknown(), unknown(), unknown(), unknown()]);
    };
    let (q, k, v) = (cx.shape(0), cx.shape(1), cx.shape(2));
    for (i, s) in [(0, q), (1, k), (2, v)] {
        if let Some(s) = s.filter(|s| s.len() != 3 && s.len() != 4) {
            return Err(cx.input_error(i, "a 3-D or 4-D tensor", format!("rank {}", s.len())));
        }
    }
    let q_heads = cx.attr_int("q_num_heads", 0)?;
    let kv_heads = cx.attr_int("kv_num_heads", 0)?;
    let heads = |n: i64| (n > 0).then_some(n);
    // Each of K and V as [batch, kv heads, kv length, head size].
    let as_4d = |s: Option<&[Dim]>| -> Option<[Dim; 4]> {
        match s? {
            [b, t, h] => Some([
                b.clone(),
                heads(kv_heads).map_or(Dim::Unknown, |n| Dim::Fixed(n as usize)),
                t.clone(),
                div(h, heads(kv_heads)),
            ]),
            [b, n, t, d] => Some([b.clone(), n.clone(), t.clone(), d.clone()]),
            _ => None,
        }
    };
    let (k4, v4) = (as_4d(k), as_4d(v));
    let y = match (q, &v4) {
        (Some([b, s, _]), Some(v)) => Some(vec![
            b.clone(),
            s.clone(),
            match (heads(q_heads), v[3].fixed()) {
                (Some(n), Some(d)) => Dim::Fixed(n as usize * d),
                _ => Dim::Unknown,
            },
        ]),
        (Some([b, n, s, _]), Some(v)) => Some(vec![b.clone(), n.clone(), s.clone(), v[3].clone()]),
        _ => None,
    };
    // present = past ++ new along the sequence axis (past inputs are 4-D).
    let present = |new: &Option<[Dim; 4]>, past: usize| -> Inferred {
        let shape = new.as_ref().map(|[b, n, t, d]| {
            let total = match cx.shape(past) {
                Some([_, _, p, _]) => add(p, t),
                Some(_) => Dim::Unknown,
                None if cx.input(past).is_none() => t.clone(),
                None => Dim::Unknown,
            };
            vec![b.clone(), n.clone(), total, d.clone()]
        });
        tensor_out(dtype, shape)
    };
    Ok(vec![tensor_out(dtype, y), present(&k4, 4), present(&v4, 5), tensor_out(dtype, None)])
}

/// `ai.onyx` PackedAttention(QKV, attn_mask?) with `q_num_heads` and `kv_num_heads`: QKV is
/// `[B, S, (q_heads + 2 kv_heads) * head]` (q, k, v side by side); Y is `[B, S, q_heads * head]`.
pub fn packed_attention(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let Some(dtype) = cx.dtype(0) else { return Ok(vec![unknown()]) };
    let q_heads = cx.attr_int("q_num_heads", 0)?;
    let kv_heads = cx.attr_int("kv_num_heads", 0)?;
    if q_heads <= 0 || kv_heads <= 0 {
        return Err(cx.input_error(0, "q_num_heads and kv_num_heads above 0", format!("{q_heads} and {kv_heads}")));
    }
    let y = match cx.shape(0) {
        Some([b, s, w]) => {
            let head = div(w, Some(q_heads + 2 * kv_heads));
            Some(vec![b.clone(), s.clone(), head.fixed().map_or(Dim::Unknown, |d| Dim::Fixed(d * q_heads as usize))])
        }
        Some(other) => return Err(cx.input_error(0, "a 3-D tensor", format!("rank {}", other.len()))),
        None => None,
    };
    Ok(vec![tensor_out(dtype, y)])
}
