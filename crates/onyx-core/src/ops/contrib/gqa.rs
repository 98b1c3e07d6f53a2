//! `com.microsoft` GroupQueryAttention, as ONNX Runtime's CPU EP computes it: causal
//! multi-head attention whose `num_heads` query heads share `kv_num_heads` key/value heads,
//! with a KV cache in BNSH layout, optional rotary embedding of q and k, a sliding window,
//! a softcap, an additive bias, a smooth softmax or per-head sink logits.
//!
//! Inputs: query `[B, S, Hq·D]` (or q, k and v packed: `[B, S, (Hq + 2·Hkv)·D]`, key and
//! value then absent), key and value `[B, S, Hkv·D]`, past_key and past_value `[B, Hkv, P, D]`,
//! seqlens_k `int32[B]` (each row's total length minus one), total_sequence_length `int32`
//! scalar, cos_cache and sin_cache `[max_position, R/2]`, position_ids `int64[B, S]`,
//! attention_bias `[B or 1, Hq or 1, S, T]`, head_sink `[Hq]`.
//!
//! Outputs: output `[B, S, Hq·D]`, present_key and present_value `[B, Hkv, T, D]` with
//! `T = max(P, total_sequence_length)`, and output_qk `[B, Hq, S, T]` (`qk_output` = 1: the
//! scaled products before softcap and mask; 2: the softmax) when asked for.
//!
//! Row b holds `L_b = seqlens_k[b] + 1` tokens in all. A first prompt (`S` equal to
//! total_sequence_length, whatever the past holds) has no past: its new tokens sit at 0..S (a
//! row shorter than S is right-padded; the padding tokens are written to the cache too).
//! Otherwise the row's past is `L_b − S` tokens and the new ones follow. The present cache is
//! each row's first `past_b` past tokens followed by the new ones, zeros elsewhere; when the
//! caller binds one buffer as both past and present (onnxruntime-genai's shared buffer) only
//! the new tokens are written.
//!
//! With `sliding_window_cache` (ONNX Runtime 1.32's windowed cache of windowed layers) past
//! and present are `[B, Hkv, C, D]` buffers holding each row's last
//! [`GroupQueryAttentionOp::window_rows`] tokens in order; positions stay absolute (rotary,
//! windows, the bias' columns).
//!
//! Query `s` of row b sees the keys before `L = min(past_b + s + 1, L_b)` (all `L_b` keys when
//! `causal` is 0), the last `local_window_size` of them (the query's own included) when a
//! window is set. The scores are `scale · q·k`, then the softcap, then the bias; the keys a
//! query does not see are left out of its softmax (probability 0). Rotary positions are
//! `base + s` in a first prompt (`base` = position_ids' first element, or 0) and
//! `position_ids[b, s]` or `past_b + s` otherwise. q and k are rotated in f32 and rounded to
//! the input's type; everything after is f32 until the output is rounded.

use crate::ir::Node;
use crate::{Error, Location, Result};

/// A decoded GroupQueryAttention node.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupQueryAttentionOp {
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (divides `num_heads`).
    pub kv_num_heads: usize,
    /// Factor on `q·k` (0: `1 / sqrt(head size)`).
    pub scale: f32,
    /// `c · tanh(x / c)` on the scaled products when > 0.
    pub softcap: f32,
    /// Keys before the query's own position that it sees (`None`: all).
    pub local_window: Option<usize>,
    /// Whether q and k are rotated by the caches (inputs 7 and 8).
    pub do_rotary: bool,
    /// Rotation pairs are neighbours rather than halves.
    pub rotary_interleaved: bool,
    /// Softmax with an extra zero logit in the denominator.
    pub smooth_softmax: bool,
    /// What output 3 holds: 0 nothing, 1 the scores before the softmax, 2 the softmax.
    pub qk_output: u8,
    /// Whether a query sees only the keys up to its own position (ONNX Runtime 1.32's
    /// `causal`, default 1).
    pub causal: bool,
    /// ONNX Runtime 1.32's windowed cache (`sliding_window_cache`): the past and present
    /// buffers hold only each row's last tokens (see [`GroupQueryAttentionOp::window_rows`]).
    pub sliding_cache: bool,
    /// Where the node is, for errors.
    pub at: Location,
}

/// Sizes of one call, from the inputs' shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GqaShapes {
    /// Batch size.
    pub batch: usize,
    /// New tokens per row.
    pub seq: usize,
    /// Elements per head.
    pub head: usize,
    /// q, k and v packed in the query input.
    pub packed: bool,
    /// Tokens the past buffers hold (their capacity; 0 without a past).
    pub past_capacity: usize,
    /// Rotated elements per head (0 without rotary).
    pub rotary_dim: usize,
    /// Rows of the rotary caches.
    pub max_position: usize,
    /// Columns of position_ids (0 without them).
    pub position_columns: usize,
    /// The attention bias' `[batch, heads]` dims (1 where it broadcasts) and its last dim.
    pub bias: Option<(usize, usize, usize)>,
}

/// One batch row's lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLengths {
    /// Tokens before the new ones (the position of the first new token).
    pub past: usize,
    /// Tokens in all, `seqlens_k[b] + 1`.
    pub total: usize,
    /// Rows of the past buffer the row reads: its last `cached` past tokens (all `past` of
    /// them, except with the windowed cache).
    pub cached: usize,
}

impl RowLengths {
    /// The position of the past buffer's first row the row reads.
    pub fn origin(&self) -> usize {
        self.past - self.cached
    }
}

/// Per-run lengths, from seqlens_k and total_sequence_length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GqaLengths {
    /// Tokens of the present cache, `max(past capacity, total_sequence_length)`.
    pub present: usize,
    /// Whether this is a first prompt (no past).
    pub first_prompt: bool,
    /// Each row's lengths.
    pub rows: Vec<RowLengths>,
}

impl GroupQueryAttentionOp {
    /// The query (or packed q, k, v).
    pub const QUERY: usize = 0;
    /// New keys.
    pub const KEY: usize = 1;
    /// New values.
    pub const VALUE: usize = 2;
    /// Past keys.
    pub const PAST_KEY: usize = 3;
    /// Past values.
    pub const PAST_VALUE: usize = 4;
    /// Each row's total length minus one.
    pub const SEQLENS_K: usize = 5;
    /// The batch's total length.
    pub const TOTAL_SEQUENCE_LENGTH: usize = 6;
    /// Rotary cosines.
    pub const COS_CACHE: usize = 7;
    /// Rotary sines.
    pub const SIN_CACHE: usize = 8;
    /// Rotary positions.
    pub const POSITION_IDS: usize = 9;
    /// Added to the scaled products.
    pub const ATTENTION_BIAS: usize = 10;
    /// Per-head sink logits.
    pub const HEAD_SINK: usize = 11;

    /// Decodes the node.
    pub fn from_node(node: &Node) -> Result<Self> {
        let at = node.location();
        let num_heads = super::positive(node, "num_heads")?;
        let kv_num_heads = super::positive(node, "kv_num_heads")?;
        if num_heads % kv_num_heads != 0 {
            return Err(Error::attribute(
                &at,
                "kv_num_heads",
                format!("a divisor of num_heads = {num_heads}"),
                kv_num_heads.to_string(),
            ));
        }
        let scale = super::finite(node, "scale", 0.0)?;
        let softcap = super::finite(node, "softcap", 0.0)?;
        if softcap < 0.0 {
            return Err(Error::attribute(&at, "softcap", "a value >= 0", softcap.to_string()));
        }
        // Negative sizes mean no window, as in ONNX Runtime.
        let local_window = usize::try_from(node.int_or("local_window_size", -1)?).ok();
        let causal = super::flag(node, "causal", true)?;
        if !causal && local_window.is_some() {
            return Err(Error::attribute(&at, "local_window_size", "-1 when causal is 0", format!("{local_window:?}")));
        }
        let sliding_cache = super::flag(node, "sliding_window_cache", false)?;
        if sliding_cache && local_window.is_none_or(|w| w == 0) {
            return Err(Error::attribute(
                &at,
                "local_window_size",
                "a window > 0 (sliding_window_cache is 1)",
                format!("{local_window:?}"),
            ));
        }
        // Quantized caches: not implemented, and refused rather than computed wrongly.
        let quant = node.string_or("k_quant_type", "NONE")?;
        if quant != "NONE" {
            return Err(Error::attribute(
                &at,
                "k_quant_type",
                "NONE (quantized KV caches are not supported yet)",
                quant,
            ));
        }
        let qk = node.int_or("qk_output", 0)?;
        let qk_output = u8::try_from(qk)
            .ok()
            .filter(|&q| q <= 2)
            .ok_or_else(|| Error::attribute(&at, "qk_output", "0, 1 or 2", qk.to_string()))?;
        Ok(GroupQueryAttentionOp {
            num_heads,
            kv_num_heads,
            scale,
            softcap,
            local_window,
            do_rotary: super::flag(node, "do_rotary", false)?,
            rotary_interleaved: super::flag(node, "rotary_interleaved", false)?,
            smooth_softmax: super::flag(node, "smooth_softmax", false)?,
            qk_output,
            causal,
            sliding_cache,
            at,
        })
    }

    /// Heads of q, k and v together in a packed query.
    fn packed_heads(&self) -> usize {
        self.num_heads + 2 * self.kv_num_heads
    }

    /// The head size from the query's last dimension.
    pub fn head_size(&self, hidden: usize, packed: bool) -> Result<usize> {
        let heads = if packed { self.packed_heads() } else { self.num_heads };
        if hidden == 0 || hidden % heads != 0 {
            let what =
                if packed { format!("(num_heads + 2 kv_num_heads) = {heads}") } else { format!("num_heads = {heads}") };
            return Err(Error::input(
                &self.at,
                Self::QUERY,
                format!("a hidden size that is a positive multiple of {what}"),
                hidden.to_string(),
            ));
        }
        Ok(hidden / heads)
    }

    /// The factor on `q·k`.
    pub fn scale_for(&self, head: usize) -> f32 {
        if self.scale == 0.0 {
            1.0 / (head as f32).sqrt()
        } else {
            self.scale
        }
    }

    /// Checks the inputs' shapes (`shapes[i]` is input i's, `None` where absent).
    pub fn shapes(&self, shapes: &[Option<&[usize]>]) -> Result<GqaShapes> {
        let at = &self.at;
        let get = |i: usize| shapes.get(i).copied().flatten();
        let q = get(Self::QUERY).ok_or_else(|| Error::input(at, Self::QUERY, "a query", "none"))?;
        let &[batch, seq, hidden] = q else {
            return Err(Error::input(at, Self::QUERY, "a 3-D query [batch, seq, hidden]", format!("{q:?}")));
        };
        let packed = match (get(Self::KEY), get(Self::VALUE)) {
            (None, None) => true,
            (Some(_), Some(_)) => false,
            (k, _) => {
                let i = if k.is_none() { Self::KEY } else { Self::VALUE };
                return Err(Error::input(
                    at,
                    i,
                    "key and value both given or both absent (packed q, k, v)",
                    "only one of them",
                ));
            }
        };
        let head = self.head_size(hidden, packed)?;
        let kv_hidden = self.kv_num_heads * head;
        if !packed {
            for i in [Self::KEY, Self::VALUE] {
                super::expect_shape(at, i, "new keys/values", get(i).unwrap_or_default(), &[batch, seq, kv_hidden])?;
            }
        }
        let past_capacity = match (get(Self::PAST_KEY), get(Self::PAST_VALUE)) {
            (None, None) => 0,
            (Some(pk), Some(pv)) => {
                let capacity = match pk {
                    &[_, _, p, _] => p,
                    _ => 0,
                };
                let want = [batch, self.kv_num_heads, capacity, head];
                super::expect_shape(at, Self::PAST_KEY, "past keys [batch, kv_num_heads, capacity, head]", pk, &want)?;
                super::expect_shape(at, Self::PAST_VALUE, "past values (past_key's shape)", pv, &want)?;
                capacity
            }
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
        let seqlens = get(Self::SEQLENS_K).ok_or_else(|| Error::input(at, Self::SEQLENS_K, "seqlens_k", "none"))?;
        super::expect_shape(at, Self::SEQLENS_K, "seqlens_k", seqlens, &[batch])?;
        let total = get(Self::TOTAL_SEQUENCE_LENGTH)
            .ok_or_else(|| Error::input(at, Self::TOTAL_SEQUENCE_LENGTH, "total_sequence_length", "none"))?;
        if total.iter().product::<usize>() != 1 || total.len() > 1 {
            return Err(Error::input(at, Self::TOTAL_SEQUENCE_LENGTH, "a scalar", format!("{total:?}")));
        }
        let (rotary_dim, max_position) = self.check_rotary(get(Self::COS_CACHE), get(Self::SIN_CACHE), head)?;
        let position_columns = match get(Self::POSITION_IDS) {
            Some(&[pb, ps]) if pb == batch && ps >= seq => ps,
            Some(p) => {
                return Err(Error::input(
                    at,
                    Self::POSITION_IDS,
                    format!("position_ids [{batch}, >= {seq}]"),
                    format!("{p:?}"),
                ))
            }
            None => 0,
        };
        let bias = match get(Self::ATTENTION_BIAS) {
            Some(&[bb, bh, bs, bt])
                if (bb == 1 || bb == batch) && (bh == 1 || bh == self.num_heads) && bs == seq && bt > 0 =>
            {
                Some((bb, bh, bt))
            }
            Some(b) => {
                return Err(Error::input(
                    at,
                    Self::ATTENTION_BIAS,
                    format!("an attention bias [{batch} or 1, {} or 1, {seq}, total]", self.num_heads),
                    format!("{b:?}"),
                ))
            }
            None => None,
        };
        if let Some(s) = get(Self::HEAD_SINK) {
            super::expect_shape(at, Self::HEAD_SINK, "head_sink", s, &[self.num_heads])?;
        }
        Ok(GqaShapes { batch, seq, head, packed, past_capacity, rotary_dim, max_position, position_columns, bias })
    }

    /// The rotary width and the caches' rows, when `do_rotary` asks for them.
    fn check_rotary(&self, cos: Option<&[usize]>, sin: Option<&[usize]>, head: usize) -> Result<(usize, usize)> {
        let at = &self.at;
        match (self.do_rotary, cos, sin) {
            (false, _, _) => Ok((0, 0)),
            (true, Some(c), Some(s)) => {
                if c.len() != 2 || c[0] == 0 || c[1] == 0 || 2 * c[1] > head {
                    return Err(Error::input(
                        at,
                        Self::COS_CACHE,
                        format!("a cache [max_position, rotary_dim / 2] with rotary_dim <= the head size {head}"),
                        format!("{c:?}"),
                    ));
                }
                super::expect_shape(at, Self::SIN_CACHE, "a sine cache (cos_cache's shape)", s, c)?;
                Ok((2 * c[1], c[0]))
            }
            (true, c, _) => {
                let i = if c.is_none() { Self::COS_CACHE } else { Self::SIN_CACHE };
                Err(Error::input(at, i, "rotary caches (do_rotary is 1)", "none"))
            }
        }
    }

    /// Each row's lengths from `seqlens_k` and `total_sequence_length`, checked against the
    /// buffers: the past a row keeps fits the past buffer and its tokens fit the present one.
    pub fn lengths(&self, s: &GqaShapes, seqlens_k: &[i32], total: i32) -> Result<GqaLengths> {
        let at = &self.at;
        let (present, first_prompt) = self.phase(s, total)?;
        let total = total as usize;
        let rows = seqlens_k
            .iter()
            .map(|&k| {
                let row = usize::try_from(k).ok().map(|k| k + 1);
                let bad = |want: String| Error::input(at, Self::SEQLENS_K, want, k.to_string());
                let total_b = row
                    .filter(|&t| t <= total)
                    .ok_or_else(|| bad(format!("row lengths minus one in 0..{total} (total_sequence_length)")))?;
                if first_prompt {
                    return Ok(RowLengths { past: 0, total: total_b, cached: 0 });
                }
                let past = total_b
                    .checked_sub(s.seq)
                    .ok_or_else(|| bad(format!("at least {} (the new tokens) minus one", s.seq)))?;
                if self.sliding_cache {
                    return Ok(RowLengths { past, total: total_b, cached: self.window_rows(s.past_capacity, past) });
                }
                if past > s.past_capacity {
                    return Err(bad(format!("a past of at most the {} tokens past_key holds", s.past_capacity)));
                }
                Ok(RowLengths { past, total: total_b, cached: past })
            })
            .collect::<Result<Vec<_>>>()?;
        if s.rotary_dim > 0 {
            let need = if first_prompt { s.seq } else { rows.iter().map(|r| r.total).max().unwrap_or(0) };
            if need > s.max_position && s.position_columns == 0 {
                return Err(Error::input(
                    at,
                    Self::COS_CACHE,
                    format!("a cache of at least {need} positions"),
                    s.max_position.to_string(),
                ));
            }
        }
        Ok(GqaLengths { present, first_prompt, rows })
    }

    /// What total_sequence_length alone decides (a GPU kernel, which reads seqlens_k on the
    /// device, checks no more on the host): the present cache's length and whether this is a
    /// first prompt, with the checks of the total against the shapes.
    pub fn phase(&self, s: &GqaShapes, total: i32) -> Result<(usize, bool)> {
        let at = &self.at;
        let total = usize::try_from(total)
            .ok()
            .filter(|&t| t >= 1)
            .ok_or_else(|| Error::input(at, Self::TOTAL_SEQUENCE_LENGTH, "a total length >= 1", total.to_string()))?;
        let first_prompt = s.seq == total;
        if !first_prompt && total < s.seq {
            return Err(Error::input(
                at,
                Self::TOTAL_SEQUENCE_LENGTH,
                format!("a total length >= the {} new tokens", s.seq),
                total.to_string(),
            ));
        }
        if let Some((_, _, bt)) = s.bias {
            if bt != total {
                return Err(Error::input(
                    at,
                    Self::ATTENTION_BIAS,
                    format!("a last dim equal to total_sequence_length = {total}"),
                    bt.to_string(),
                ));
            }
        }
        if self.sliding_cache {
            let w = self.local_window.unwrap_or(0);
            if s.past_capacity < w {
                return Err(Error::input(
                    at,
                    Self::PAST_KEY,
                    format!("a windowed cache of at least local_window_size = {w} rows"),
                    s.past_capacity.to_string(),
                ));
            }
            return Ok((s.past_capacity, first_prompt));
        }
        Ok((s.past_capacity.max(total), first_prompt))
    }

    /// Rows of a windowed cache of `capacity` rows after `t` tokens: all of them until the
    /// buffer is full, then, each time it overflows, the last `window` tokens kept and the
    /// rest of the buffer filled again (ONNX Runtime 1.32's `sliding_window_cache`; rows
    /// `0..rows` hold positions `t - rows .. t` in order).
    pub fn window_rows(&self, capacity: usize, t: usize) -> usize {
        let w = self.local_window.unwrap_or(capacity).min(capacity);
        let step = capacity - w + 1;
        if t <= capacity {
            t
        } else {
            t - step * (t - capacity).div_ceil(step)
        }
    }

    /// The keys query `s` of a row with `row` lengths sees: `start..end`.
    pub fn keys(&self, row: RowLengths, s: usize) -> std::ops::Range<usize> {
        let end = if self.causal { (row.past + s + 1).min(row.total) } else { row.total };
        let start = match self.local_window {
            Some(w) if end > w => end - w,
            _ => 0,
        };
        start..end
    }

    /// The rotary position of new token `s` of row `b`, from `ids` (position_ids with
    /// `columns` columns; empty without them); an error names a position outside the caches.
    pub fn position(&self, shapes: &GqaShapes, lengths: &GqaLengths, ids: &[i64], b: usize, s: usize) -> Result<usize> {
        let p = match (lengths.first_prompt, ids.is_empty()) {
            (true, true) => s as i64,
            (true, false) => ids[0].saturating_add(s as i64),
            (false, true) => (lengths.rows[b].past + s) as i64,
            (false, false) => ids[b * shapes.position_columns + s],
        };
        usize::try_from(p).ok().filter(|&p| p < shapes.max_position).ok_or_else(|| {
            let i = if ids.is_empty() { Self::SEQLENS_K } else { Self::POSITION_IDS };
            Error::input(
                &self.at,
                i,
                format!("rotary positions in 0..{} (the cache's rows)", shapes.max_position),
                p.to_string(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute};

    fn node(attrs: &[(&str, i64)]) -> Node {
        Node {
            op_type: "GroupQueryAttention".into(),
            name: "gqa".into(),
            attributes: attrs.iter().map(|(n, v)| Attribute { name: (*n).into(), value: AttrValue::Int(*v) }).collect(),
            ..Default::default()
        }
    }

    /// ONNX Runtime's windowed cache with window 3 and 5 rows, over 12 steps.
    #[test]
    fn windowed_cache_rows_follow_onnx_runtime() {
        let op = GroupQueryAttentionOp::from_node(&node(&[
            ("num_heads", 2),
            ("kv_num_heads", 1),
            ("local_window_size", 3),
            ("sliding_window_cache", 1),
        ]))
        .unwrap();
        let rows: Vec<usize> = (1..=12).map(|t| op.window_rows(5, t)).collect();
        assert_eq!(rows, [1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5, 3]);
        assert!(GroupQueryAttentionOp::from_node(&node(&[
            ("num_heads", 2),
            ("kv_num_heads", 1),
            ("sliding_window_cache", 1)
        ]))
        .is_err());
    }

    #[test]
    fn decodes_and_checks_shapes_and_lengths() {
        let op =
            GroupQueryAttentionOp::from_node(&node(&[("num_heads", 4), ("kv_num_heads", 2), ("local_window_size", 3)]))
                .unwrap();
        let q = [2usize, 1, 40];
        let kv = [2usize, 1, 20];
        let past = [2usize, 2, 16, 10];
        let shapes: Vec<Option<&[usize]>> =
            vec![Some(&q), Some(&kv), Some(&kv), Some(&past), Some(&past), Some(&[2]), Some(&[])];
        let s = op.shapes(&shapes).unwrap();
        assert_eq!((s.head, s.packed, s.past_capacity), (10, false, 16));
        let l = op.lengths(&s, &[6, 3], 7).unwrap();
        assert_eq!((l.present, l.first_prompt), (16, false));
        assert_eq!(l.rows, [RowLengths { past: 6, total: 7, cached: 6 }, RowLengths { past: 3, total: 4, cached: 3 }]);
        assert_eq!(op.keys(l.rows[0], 0), 4..7);
        let rotary = GqaShapes { rotary_dim: 8, max_position: 8, ..s };
        assert_eq!(op.position(&rotary, &l, &[], 1, 0).unwrap(), 3);
        let err = op.position(&rotary, &l, &[9, 9], 1, 0).unwrap_err().to_string();
        assert!(err.contains("input 9") && err.contains("0..8"), "{err}");
        assert_eq!(op.lengths(&s, &[16, 3], 17).unwrap().present, 17);
        let err = op.lengths(&s, &[17, 3], 18).unwrap_err().to_string();
        assert!(err.contains("input 5") && err.contains("at most the 16"), "{err}");
        let err = op.lengths(&s, &[7, 3], 7).unwrap_err().to_string();
        assert!(err.contains("input 5"), "{err}");
        // Packed: hidden = (4 + 2·2)·10.
        let packed = [2usize, 5, 80];
        let s = op.shapes(&[Some(&packed), None, None, None, None, Some(&[2]), Some(&[1])]).unwrap();
        assert!(s.packed && s.head == 10 && s.past_capacity == 0);
        let l = op.lengths(&s, &[4, 2], 5).unwrap();
        assert!(l.first_prompt && l.rows[1] == RowLengths { past: 0, total: 3, cached: 0 });
        // A padding query of a first prompt sees the row's valid keys.
        assert_eq!(op.keys(l.rows[1], 4), 0..3);
        let err = op.shapes(&[Some(&packed), Some(&kv), None]).unwrap_err().to_string();
        assert!(err.contains("input 2"), "{err}");
        let bad_past = [2usize, 2, 16, 8];
        let err = op
            .shapes(&[Some(&q), Some(&kv), Some(&kv), Some(&bad_past), Some(&bad_past), Some(&[2]), Some(&[])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 3") && err.contains("[2, 2, 16, 10]"), "{err}");
        assert!(GroupQueryAttentionOp::from_node(&node(&[("num_heads", 4), ("kv_num_heads", 3)])).is_err());
        assert!(GroupQueryAttentionOp::from_node(&node(&[("num_heads", 4)])).is_err());
    }
}
