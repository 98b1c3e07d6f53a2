//! `com.microsoft` MultiHeadAttention and Attention, as ONNX Runtime's CPU EP computes them.
//! The model builder emits MultiHeadAttention where GroupQueryAttention is not available (cpu
//! fp16 builds: the KV heads repeated by plain ops, a 4-D additive mask) and the packed
//! Attention for BERT-style encoders and cuda fp32 builds.
//!
//! Both end in the same computation on `Q [B, N, S, H]`, `K [B, N, T, H]`, `V [B, N, T, Hv]`
//! (`T = P + L`: `P` past keys, then `L` new ones): `score = scale · q·k`, plus the attention
//! bias (not scaled), plus the key mask's value ([`KeyMask`]: `mask_filter_value` added where a
//! key is masked) or, for a key the causal rule bars ([`AttentionCommon::causal_masked`]), the
//! lowest float instead of the mask's value; then a plain softmax over the T keys and the
//! weighted sum of values. The output is `[B, S, N·Hv]`.
//!
//! MultiHeadAttention inputs: query `[B, S, D]`; key and value `[B, L, D]` / `[B, L, Dv]`, or
//! `[B, N, L, H]` each (cross attention: only the query part of `bias` is applied);
//! bias `[2D + Dv]`; key_padding_mask `int32` `[B]` (each row's key count), `[3B + 2]` (its
//! first B values, the same), `[B, T]` or `[B, S, T]` (> 0 keeps a key); attention_bias
//! `[B or 1, N or 1, S, T]`; past_key and past_value `[B, N, P, H]`; past_sequence_length (an
//! `int32` scalar: the past is a buffer of capacity M whose first P rows are valid, and the
//! present is that buffer with the new rows written at P). Outputs: output, present_key and
//! present_value (`[B, N, T, H]`, or `[B, N, M, H]` with past_sequence_length), qk `[B, N, S,
//! T]` (the scores before the softmax).
//!
//! Attention inputs: input `[B, S, Di]`, weights `[Di, D + D + Dv]` (columns q, k, v), bias
//! `[D + D + Dv]`, mask_index (`int32` `[B]`, `[2B]` (key counts, then first valid keys),
//! `[3B + 2]`, `[B, T]`, `[B, S, T]`; `[B, 1]` or `[1, 1]` mean no mask), past `[2, B, N, P,
//! H]`, attention_bias. Output, and present `[2, B, N, T, H]`. q, k and v are `input · weights
//! + bias`, then split into heads.
//!
//! Refused as ONNX Runtime's CPU EP refuses them: packed q/k/v or k/v inputs, a value head
//! size other than the key's with a past, Attention's rotary (`do_rotary`), a shared past
//! buffer for Attention, a past together with an attention bias for Attention, and
//! MultiHeadAttention's beam-search `cache_indirection`.

use crate::ir::Node;
use crate::{Error, Location, Result};

/// What both ops decode the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionCommon {
    /// Query heads (= key/value heads).
    pub num_heads: usize,
    /// Factor on `q·k` (0: `1 / sqrt(head size)`).
    pub scale: f32,
    /// Added to the scores of masked keys.
    pub mask_filter_value: f32,
    /// Whether a query sees only the keys up to its own position.
    pub unidirectional: bool,
    /// Where the node is, for errors.
    pub at: Location,
}

impl AttentionCommon {
    fn from_node(node: &Node) -> Result<Self> {
        Ok(AttentionCommon {
            num_heads: super::positive(node, "num_heads")?,
            scale: super::finite(node, "scale", 0.0)?,
            mask_filter_value: node.float_or("mask_filter_value", -10000.0)?,
            unidirectional: super::flag(node, "unidirectional", false)?,
            at: node.location(),
        })
    }

    /// The factor on `q·k`.
    pub fn scale_for(&self, head: usize) -> f32 {
        if self.scale == 0.0 {
            1.0 / (head as f32).sqrt()
        } else {
            self.scale
        }
    }

    /// Whether the causal rule bars query `i` of `seq` from key `j` (`past` keys before the new
    /// ones). As in ONNX Runtime, it applies only when `seq > 1`, and never to the last query.
    pub fn causal_masked(&self, seq: usize, past: usize, i: usize, j: usize) -> bool {
        self.unidirectional && i + 1 < seq && j > past + i
    }

    /// `dim / num_heads`, or an error naming input `i`.
    fn heads_of(&self, i: usize, what: &str, dim: usize) -> Result<usize> {
        if dim == 0 || dim % self.num_heads != 0 {
            return Err(Error::input(
                &self.at,
                i,
                format!("{what} that is a positive multiple of num_heads = {}", self.num_heads),
                dim.to_string(),
            ));
        }
        Ok(dim / self.num_heads)
    }

    /// The attention bias' `[batch, heads]` dims, checked against `[B or 1, N or 1, S, T]`.
    fn attention_bias(
        &self,
        i: usize,
        shape: Option<&[usize]>,
        batch: usize,
        seq: usize,
        total: usize,
    ) -> Result<Option<[usize; 2]>> {
        match shape {
            None => Ok(None),
            Some(&[bb, bn, bs, bt])
                if (bb == 1 || bb == batch) && (bn == 1 || bn == self.num_heads) && bs == seq && bt == total =>
            {
                Ok(Some([bb, bn]))
            }
            Some(s) => Err(Error::input(
                &self.at,
                i,
                format!("an attention bias [{batch} or 1, {} or 1, {seq}, {total}]", self.num_heads),
                format!("{s:?}"),
            )),
        }
    }
}

/// How a key mask reads, per `(b, i, j)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMask {
    /// No mask.
    None,
    /// `m[b]` keys are valid (`[B]`, or the first B values of `[3B + 2]`).
    Counts,
    /// Keys `m[B + b] .. m[b]` are valid (`[2B]`, Attention only).
    Range,
    /// `m[b, j] > 0` keeps key j for every query (`[B, T]`).
    Rows,
    /// `m[b, i, j] > 0` keeps key j for query i (`[B, S, T]`).
    Full,
}

impl KeyMask {
    /// Reads a mask's shape; `ranges` allows `[2B]` and `[B, 1]`/`[1, 1]` (no mask), as
    /// Attention does.
    fn from_shape(
        at: &Location,
        i: usize,
        shape: &[usize],
        batch: usize,
        seq: usize,
        total: usize,
        ranges: bool,
    ) -> Result<KeyMask> {
        Ok(match *shape {
            [n] if n == batch => KeyMask::Counts,
            [n] if n == 3 * batch + 2 => KeyMask::Counts,
            [n] if ranges && n == 2 * batch => KeyMask::Range,
            [b, 1] if ranges && (b == batch || b == 1) => KeyMask::None,
            [b, t] if b == batch && t == total => KeyMask::Rows,
            [b, s, t] if b == batch && s == seq && t == total => KeyMask::Full,
            _ => {
                let d1 = if ranges { format!("[{batch}], [{}], ", 2 * batch) } else { format!("[{batch}], ") };
                return Err(Error::input(
                    at,
                    i,
                    format!("a key mask {d1}[{}], [{batch}, {total}] or [{batch}, {seq}, {total}]", 3 * batch + 2),
                    format!("{shape:?}"),
                ));
            }
        })
    }

    /// Whether the mask `m` keeps key `j` for query `i` of row `b`.
    pub fn keeps(self, m: &[i32], batch: usize, seq: usize, total: usize, b: usize, i: usize, j: usize) -> bool {
        let count = |v: i32| usize::try_from(v).unwrap_or(0);
        match self {
            KeyMask::None => true,
            KeyMask::Counts => j < count(m[b]),
            KeyMask::Range => j < count(m[b]) && j >= count(m[batch + b]),
            KeyMask::Rows => m[b * total + j] > 0,
            KeyMask::Full => m[(b * seq + i) * total + j] > 0,
        }
    }
}

/// Sizes of one call of either op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShapes {
    /// Batch size.
    pub batch: usize,
    /// Queries per row.
    pub seq: usize,
    /// New keys per row.
    pub kv_seq: usize,
    /// Valid past keys per row.
    pub past: usize,
    /// Rows of the past and present buffers with a shared buffer (`None`: the present holds
    /// `past + kv_seq` rows).
    pub capacity: Option<usize>,
    /// Query and key head size.
    pub head: usize,
    /// Value head size.
    pub v_head: usize,
    /// Whether key and value are given as `[B, N, L, H]` (MultiHeadAttention only).
    pub kv_bnsh: bool,
    /// The key mask's form.
    pub mask: KeyMask,
    /// The attention bias' `[batch, heads]` dims (1 where it broadcasts).
    pub bias: Option<[usize; 2]>,
}

impl AttentionShapes {
    /// Keys each query is scored against: past then new.
    pub fn total(&self) -> usize {
        self.past + self.kv_seq
    }

    /// Rows of each present buffer.
    pub fn present_rows(&self) -> usize {
        self.capacity.unwrap_or(self.total())
    }
}

/// A decoded MultiHeadAttention node.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiHeadAttentionOp(pub AttentionCommon);

impl MultiHeadAttentionOp {
    /// The query.
    pub const QUERY: usize = 0;
    /// The new keys.
    pub const KEY: usize = 1;
    /// The new values.
    pub const VALUE: usize = 2;
    /// q, k and v biases.
    pub const BIAS: usize = 3;
    /// The key mask.
    pub const KEY_PADDING_MASK: usize = 4;
    /// Added to the scaled scores.
    pub const ATTENTION_BIAS: usize = 5;
    /// Past keys.
    pub const PAST_KEY: usize = 6;
    /// Past values.
    pub const PAST_VALUE: usize = 7;
    /// Valid rows of a shared past buffer.
    pub const PAST_SEQUENCE_LENGTH: usize = 8;
    /// Beam indices of DecoderMaskedMultiHeadAttention's path (refused).
    pub const CACHE_INDIRECTION: usize = 9;

    /// Decodes the node.
    pub fn from_node(node: &Node) -> Result<Self> {
        Ok(MultiHeadAttentionOp(AttentionCommon::from_node(node)?))
    }

    /// Checks the inputs' shapes (`shapes[i]` is input i's, `None` where absent);
    /// `past_sequence_length` is input 8's value when given.
    pub fn shapes(&self, shapes: &[Option<&[usize]>], past_sequence_length: Option<i64>) -> Result<AttentionShapes> {
        let c = &self.0;
        let at = &c.at;
        let get = |i: usize| shapes.get(i).copied().flatten();
        let q = get(Self::QUERY).ok_or_else(|| Error::input(at, Self::QUERY, "a query", "none"))?;
        let &[batch, seq, hidden] = q else {
            return Err(Error::input(
                at,
                Self::QUERY,
                "a 3-D query [batch, seq, hidden] (packed q, k, v is not supported)",
                format!("{q:?}"),
            ));
        };
        let head = c.heads_of(Self::QUERY, "a hidden size", hidden)?;
        if get(Self::CACHE_INDIRECTION).is_some() {
            return Err(Error::input(
                at,
                Self::CACHE_INDIRECTION,
                "no cache_indirection (beam search's decoder attention is not supported)",
                "a tensor",
            ));
        }
        let (k, v) = match (get(Self::KEY), get(Self::VALUE)) {
            (Some(k), Some(v)) => (k, v),
            _ => return Err(Error::input(at, Self::KEY, "key and value (packed q, k, v is not supported)", "none")),
        };
        let (kv_seq, v_head, kv_bnsh) = match (k, v) {
            (&[kb, l, kd], &[vb, vl, vd]) if kb == batch && vb == batch && vl == l && kd == hidden => {
                (l, c.heads_of(Self::VALUE, "a value hidden size", vd)?, false)
            }
            (&[_, _, _, _], _) if k == v && k[..2] == [batch, c.num_heads] && k[3] == head => (k[2], head, true),
            _ => {
                let want = format!("key and value [{batch}, L, {hidden}] and [{batch}, L, Dv], or both [{batch}, {}, L, {head}] (packed k and v is not supported)", c.num_heads);
                return Err(Error::input(at, Self::KEY, want, format!("{k:?} and {v:?}")));
            }
        };
        if let Some(bias) = get(Self::BIAS) {
            super::expect_shape(at, Self::BIAS, "biases of q, k and v", bias, &[2 * hidden + c.num_heads * v_head])?;
        }
        let (past, capacity) =
            self.past(get(Self::PAST_KEY), get(Self::PAST_VALUE), batch, head, v_head, kv_seq, past_sequence_length)?;
        let total = past + kv_seq;
        let mask = match get(Self::KEY_PADDING_MASK) {
            Some(m) => KeyMask::from_shape(at, Self::KEY_PADDING_MASK, m, batch, seq, total, false)?,
            None => KeyMask::None,
        };
        let bias = c.attention_bias(Self::ATTENTION_BIAS, get(Self::ATTENTION_BIAS), batch, seq, total)?;
        Ok(AttentionShapes { batch, seq, kv_seq, past, capacity, head, v_head, kv_bnsh, mask, bias })
    }

    /// The valid past rows and, with past_sequence_length, the buffers' capacity.
    fn past(
        &self,
        pk: Option<&[usize]>,
        pv: Option<&[usize]>,
        batch: usize,
        head: usize,
        v_head: usize,
        kv_seq: usize,
        valid: Option<i64>,
    ) -> Result<(usize, Option<usize>)> {
        let c = &self.0;
        let at = &c.at;
        let (pk, pv) = match (pk, pv) {
            (None, None) => return Ok((0, None)),
            (Some(pk), Some(pv)) => (pk, pv),
            (pk, _) => {
                let i = if pk.is_none() { Self::PAST_KEY } else { Self::PAST_VALUE };
                return Err(Error::input(
                    at,
                    i,
                    "past_key and past_value both given or both absent",
                    "only one of them",
                ));
            }
        };
        if v_head != head {
            return Err(Error::input(
                at,
                Self::PAST_VALUE,
                format!("no past (a value head size {v_head} other than the key's {head} has no cache)"),
                format!("{pv:?}"),
            ));
        }
        let rows = match pk {
            &[_, _, p, _] => p,
            _ => 0,
        };
        let want = [batch, c.num_heads, rows, head];
        super::expect_shape(at, Self::PAST_KEY, "past keys [batch, num_heads, past, head]", pk, &want)?;
        super::expect_shape(at, Self::PAST_VALUE, "past values (past_key's shape)", pv, &want)?;
        let Some(valid) = valid else {
            return Ok((rows, None));
        };
        match usize::try_from(valid) {
            Ok(p) if p + kv_seq <= rows => Ok((p, Some(rows))),
            _ => Err(Error::input(
                at,
                Self::PAST_SEQUENCE_LENGTH,
                format!(
                    "a past length in 0..={} (capacity {rows} minus {kv_seq} new keys)",
                    rows.saturating_sub(kv_seq)
                ),
                valid.to_string(),
            )),
        }
    }
}

/// A decoded `com.microsoft` Attention node (the packed form: one input projected to q, k, v).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedAttentionOp {
    /// Heads, scale, mask value and causality.
    pub common: AttentionCommon,
    /// The q, k and v hidden sizes (`None`: the weights' columns split in three).
    pub qkv_hidden_sizes: Option<[usize; 3]>,
}

impl PackedAttentionOp {
    /// The input.
    pub const INPUT: usize = 0;
    /// The q, k, v projection `[Di, D + D + Dv]`.
    pub const WEIGHTS: usize = 1;
    /// The projection's bias.
    pub const BIAS: usize = 2;
    /// The key mask.
    pub const MASK_INDEX: usize = 3;
    /// Past keys and values, `[2, B, N, P, H]`.
    pub const PAST: usize = 4;
    /// Added to the scaled scores.
    pub const ATTENTION_BIAS: usize = 5;
    /// Valid rows of a shared past buffer (refused with a past, as ONNX Runtime's CPU EP).
    pub const PAST_SEQUENCE_LENGTH: usize = 6;

    /// Decodes the node.
    pub fn from_node(node: &Node) -> Result<Self> {
        let common = AttentionCommon::from_node(node)?;
        let at = &common.at;
        if super::flag(node, "do_rotary", false)? {
            return Err(Error::attribute(
                at,
                "do_rotary",
                "0 (rotary inside Attention is not supported: RotaryEmbedding nodes before MultiHeadAttention are)",
                "1",
            ));
        }
        let qkv_hidden_sizes = match node.get_ints("qkv_hidden_sizes")? {
            None => None,
            Some(&[q, k, v]) => {
                let sizes = [q, k, v].map(|s| usize::try_from(s).ok().filter(|&s| s > 0 && s % common.num_heads == 0));
                match sizes {
                    [Some(q), Some(k), Some(v)] if q == k => Some([q, k, v]),
                    _ => {
                        return Err(Error::attribute(
                            at,
                            "qkv_hidden_sizes",
                            format!(
                                "three positive multiples of num_heads = {}, the first two equal",
                                common.num_heads
                            ),
                            format!("{:?}", [q, k, v]),
                        ))
                    }
                }
            }
            Some(other) => return Err(Error::attribute(at, "qkv_hidden_sizes", "three sizes", format!("{other:?}"))),
        };
        Ok(PackedAttentionOp { common, qkv_hidden_sizes })
    }

    /// The q and v hidden sizes from the weights' columns.
    pub fn hidden_sizes(&self, columns: usize) -> Result<(usize, usize)> {
        let at = &self.common.at;
        match self.qkv_hidden_sizes {
            Some([q, k, v]) if q + k + v == columns => Ok((q, v)),
            Some(s) => Err(Error::input(
                at,
                Self::WEIGHTS,
                format!("weights with {} columns (qkv_hidden_sizes {s:?})", s.iter().sum::<usize>()),
                columns.to_string(),
            )),
            None if columns % 3 == 0 && (columns / 3) % self.common.num_heads == 0 && columns > 0 => {
                Ok((columns / 3, columns / 3))
            }
            None => Err(Error::input(
                at,
                Self::WEIGHTS,
                format!(
                    "weights whose columns split into q, k and v of num_heads = {} heads each",
                    self.common.num_heads
                ),
                columns.to_string(),
            )),
        }
    }

    /// Checks the inputs' shapes (`shapes[i]` is input i's, `None` where absent).
    pub fn shapes(&self, shapes: &[Option<&[usize]>]) -> Result<AttentionShapes> {
        let c = &self.common;
        let at = &c.at;
        let get = |i: usize| shapes.get(i).copied().flatten();
        let x = get(Self::INPUT).ok_or_else(|| Error::input(at, Self::INPUT, "an input", "none"))?;
        let &[batch, seq, input_hidden] = x else {
            return Err(Error::input(at, Self::INPUT, "a 3-D input [batch, seq, hidden]", format!("{x:?}")));
        };
        let w = get(Self::WEIGHTS).ok_or_else(|| Error::input(at, Self::WEIGHTS, "weights", "none"))?;
        let &[rows, columns] = w else {
            return Err(Error::input(
                at,
                Self::WEIGHTS,
                format!("weights [{input_hidden}, D + D + Dv]"),
                format!("{w:?}"),
            ));
        };
        if rows != input_hidden {
            return Err(Error::input(
                at,
                Self::WEIGHTS,
                format!("weights with {input_hidden} rows (the input's hidden size)"),
                format!("{w:?}"),
            ));
        }
        let (q_hidden, v_hidden) = self.hidden_sizes(columns)?;
        let (head, v_head) = (q_hidden / c.num_heads, v_hidden / c.num_heads);
        if let Some(b) = get(Self::BIAS) {
            super::expect_shape(at, Self::BIAS, "the projection's bias", b, &[columns])?;
        }
        let past = match get(Self::PAST) {
            None => 0,
            Some(p) => {
                if get(Self::ATTENTION_BIAS).is_some() {
                    return Err(Error::input(
                        at,
                        Self::ATTENTION_BIAS,
                        "no attention bias with a past (as ONNX Runtime's CPU EP)",
                        "both",
                    ));
                }
                if v_head != head {
                    return Err(Error::input(
                        at,
                        Self::PAST,
                        format!("no past (a value head size {v_head} other than the key's {head} has no cache)"),
                        format!("{p:?}"),
                    ));
                }
                let rows = if p.len() == 5 { p[3] } else { 0 };
                super::expect_shape(
                    at,
                    Self::PAST,
                    "a past [2, batch, num_heads, past, head]",
                    p,
                    &[2, batch, c.num_heads, rows, head],
                )?;
                if get(Self::PAST_SEQUENCE_LENGTH).is_some() {
                    return Err(Error::input(
                        at,
                        Self::PAST_SEQUENCE_LENGTH,
                        "no past_sequence_length (a shared past buffer is not supported for Attention)",
                        "a tensor",
                    ));
                }
                rows
            }
        };
        let total = past + seq;
        let mask = match get(Self::MASK_INDEX) {
            Some(m) => KeyMask::from_shape(at, Self::MASK_INDEX, m, batch, seq, total, true)?,
            None => KeyMask::None,
        };
        let bias = c.attention_bias(Self::ATTENTION_BIAS, get(Self::ATTENTION_BIAS), batch, seq, total)?;
        Ok(AttentionShapes { batch, seq, kv_seq: seq, past, capacity: None, head, v_head, kv_bnsh: false, mask, bias })
    }

    /// Checks a `[2B]` mask's values (a negative count is an error, as in ONNX Runtime).
    pub fn check_mask_values(&self, mask: KeyMask, values: &[i32]) -> Result<()> {
        if matches!(mask, KeyMask::Counts | KeyMask::Range) {
            if let Some((i, v)) = values.iter().enumerate().find(|(_, &v)| v < 0) {
                return Err(Error::input(
                    &self.common.at,
                    Self::MASK_INDEX,
                    format!("key counts >= 0 (element {i})"),
                    v.to_string(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute};

    fn node(op: &str, attrs: &[(&str, AttrValue)]) -> Node {
        Node {
            op_type: op.into(),
            domain: crate::ir::MS_DOMAIN.into(),
            name: "n".into(),
            attributes: attrs.iter().map(|(n, v)| Attribute { name: (*n).into(), value: v.clone() }).collect(),
            ..Default::default()
        }
    }

    fn mha(heads: i64) -> MultiHeadAttentionOp {
        MultiHeadAttentionOp::from_node(&node("MultiHeadAttention", &[("num_heads", AttrValue::Int(heads))])).unwrap()
    }

    #[test]
    fn causal_rule_skips_the_last_query_and_single_queries() {
        let mut c = mha(2).0;
        c.unidirectional = true;
        assert!(c.causal_masked(3, 2, 0, 3));
        assert!(!c.causal_masked(3, 2, 0, 2));
        assert!(!c.causal_masked(3, 2, 2, 9), "the last query is never barred");
        assert!(!c.causal_masked(1, 0, 0, 5), "one query: no causal mask");
    }

    #[test]
    fn mha_shapes_cover_every_key_form() {
        let op = mha(2);
        let s = op.shapes(&[Some(&[2, 3, 8]), Some(&[2, 5, 8]), Some(&[2, 5, 6])], None).unwrap();
        assert_eq!((s.kv_seq, s.head, s.v_head, s.kv_bnsh, s.total()), (5, 4, 3, false, 5));
        let s = op.shapes(&[Some(&[2, 3, 8]), Some(&[2, 2, 7, 4]), Some(&[2, 2, 7, 4])], None).unwrap();
        assert_eq!((s.kv_seq, s.kv_bnsh), (7, true));
        let past: &[usize] = &[2, 2, 9, 4];
        let mut shapes = vec![
            Some(&[2usize, 1, 8][..]),
            Some(&[2, 1, 8][..]),
            Some(&[2, 1, 8][..]),
            None,
            Some(&[2, 10][..]),
            None,
            Some(past),
            Some(past),
        ];
        let s = op.shapes(&shapes, None).unwrap();
        assert_eq!((s.past, s.present_rows(), s.mask), (9, 10, KeyMask::Rows));
        shapes[4] = Some(&[2, 5]);
        let s = op.shapes(&shapes, Some(4)).unwrap();
        assert_eq!((s.past, s.capacity, s.present_rows()), (4, Some(9), 9));
        let e = op.shapes(&shapes, Some(9)).unwrap_err().to_string();
        assert!(e.contains("past_sequence_length") || e.contains("input 8"), "{e}");
    }

    #[test]
    fn mha_rejects_what_onnx_runtime_rejects() {
        let op = mha(2);
        for (shapes, what) in [
            (vec![Some(&[2usize, 3, 2, 3, 4][..])], "packed qkv"),
            (vec![Some(&[2, 3, 8][..])], "no key"),
            (vec![Some(&[2, 3, 8][..]), Some(&[2, 5, 8][..]), Some(&[2, 4, 8][..])], "key and value lengths differ"),
            (vec![Some(&[2, 3, 7][..]), Some(&[2, 5, 7][..]), Some(&[2, 5, 7][..])], "7 does not split into 2 heads"),
            (vec![Some(&[2, 3, 8][..]), Some(&[2, 5, 8][..]), Some(&[2, 5, 8][..]), Some(&[23][..])], "bias length"),
            (
                vec![Some(&[2, 3, 8][..]), Some(&[2, 5, 8][..]), Some(&[2, 5, 8][..]), None, Some(&[4][..])],
                "a [2B] mask",
            ),
            (
                vec![
                    Some(&[2, 3, 8][..]),
                    Some(&[2, 5, 8][..]),
                    Some(&[2, 5, 8][..]),
                    None,
                    None,
                    Some(&[2, 2, 3, 4][..]),
                ],
                "bias keys",
            ),
        ] {
            assert!(op.shapes(&shapes, None).is_err(), "{what}");
        }
    }

    #[test]
    fn masks_read_as_onnx_runtime_reads_them() {
        let m = [2, 3, 1, 0];
        assert!(KeyMask::Counts.keeps(&m, 2, 1, 4, 0, 0, 1) && !KeyMask::Counts.keeps(&m, 2, 1, 4, 0, 0, 2));
        assert!(KeyMask::Range.keeps(&m, 2, 1, 4, 0, 0, 1) && !KeyMask::Range.keeps(&m, 2, 1, 4, 0, 0, 0));
        assert!(
            KeyMask::Rows.keeps(&[1, 0, 2, -1], 1, 1, 4, 0, 0, 2)
                && !KeyMask::Rows.keeps(&[1, 0, 2, -1], 1, 1, 4, 0, 0, 3)
        );
        assert!(KeyMask::Counts.keeps(&[-2], 1, 1, 1, 0, 0, 0) == false);
    }

    #[test]
    fn packed_attention_decodes_and_checks() {
        let n = node(
            "Attention",
            &[("num_heads", AttrValue::Int(2)), ("qkv_hidden_sizes", AttrValue::Ints(vec![8, 8, 6]))],
        );
        let op = PackedAttentionOp::from_node(&n).unwrap();
        let s = op.shapes(&[Some(&[2, 3, 5]), Some(&[5, 22]), Some(&[22]), Some(&[4])]).unwrap();
        assert_eq!((s.head, s.v_head, s.mask), (4, 3, KeyMask::Range));
        assert!(op.shapes(&[Some(&[2, 3, 5]), Some(&[5, 21])]).is_err());
        assert!(op.check_mask_values(KeyMask::Counts, &[1, -1]).is_err());
        let rotary = node("Attention", &[("num_heads", AttrValue::Int(2)), ("do_rotary", AttrValue::Int(1))]);
        assert!(PackedAttentionOp::from_node(&rotary).unwrap_err().to_string().contains("do_rotary"));
        let unequal = node(
            "Attention",
            &[("num_heads", AttrValue::Int(2)), ("qkv_hidden_sizes", AttrValue::Ints(vec![8, 4, 4]))],
        );
        assert!(PackedAttentionOp::from_node(&unequal).is_err());
        let plain = PackedAttentionOp::from_node(&node("Attention", &[("num_heads", AttrValue::Int(2))])).unwrap();
        let s = plain.shapes(&[Some(&[1, 2, 5]), Some(&[5, 12]), None, None, Some(&[2, 1, 2, 4, 2])]).unwrap();
        assert_eq!((s.past, s.total(), s.head), (4, 6, 2));
    }
}
