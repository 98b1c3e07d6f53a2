//! RotaryEmbedding, in both of its forms: ONNX's (opset 23: `x, cos_cache, sin_cache,
//! position_ids?`) and ONNX Runtime's `com.microsoft` one (`x, position_ids, cos_cache,
//! sin_cache`, which model builders emit beside attention for the DML and WebGPU targets).
//!
//! The input is `[batch, heads, seq, head]` or `[batch, seq, heads * head]`. The first
//! `rotary_embedding_dim` (default: the whole head, or twice the cache width in the Microsoft
//! form) elements of each head vector are rotated in pairs `(x1, x2)` — the two halves, or
//! neighbours when `interleaved` — by the angle whose cosine and sine the caches hold:
//! `(x1 cos − x2 sin, x1 sin + x2 cos)`. Cache rows are chosen by `position_ids[b, s]`
//! (caches `[max_position, rot / 2]`), by `position_ids[0] + s` when the Microsoft form gets
//! one offset, or per token (`[batch, seq, rot / 2]` caches, ONNX's form without positions).

use crate::ir::{Node, MS_DOMAIN};
use crate::{Error, Location, Result};

/// Which of the two operators a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotaryForm {
    /// ONNX's RotaryEmbedding (opset 23).
    Onnx,
    /// ONNX Runtime's `com.microsoft` RotaryEmbedding.
    Microsoft,
}

/// A decoded RotaryEmbedding node.
#[derive(Debug, Clone, PartialEq)]
pub struct RotaryOp {
    /// Which operator.
    pub form: RotaryForm,
    /// Pairs are neighbours (`2i, 2i + 1`) rather than halves (`i, i + rot / 2`).
    pub interleaved: bool,
    /// Rotated elements per head vector (0: the default).
    pub rotary_dim: usize,
    /// Heads of a 3-D input (0: not given).
    pub num_heads: usize,
    /// Where the node is, for errors.
    pub at: Location,
}

/// Sizes and layout of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotaryDims {
    /// Batch size.
    pub batch: usize,
    /// Heads.
    pub heads: usize,
    /// Tokens per batch entry.
    pub seq: usize,
    /// Elements per head vector.
    pub head: usize,
    /// Rotated elements per head vector (even, at most `head`).
    pub rot: usize,
    /// Whether the input is 3-D `[batch, seq, heads * head]`.
    pub three_d: bool,
}

impl RotaryDims {
    /// Offset of head vector (b, h, s) in the input.
    pub fn offset(&self, b: usize, h: usize, s: usize) -> usize {
        if self.three_d {
            (b * self.seq + s) * self.heads * self.head + h * self.head
        } else {
            ((b * self.heads + h) * self.seq + s) * self.head
        }
    }

    /// The element positions of pair `i`'s members inside the head vector.
    pub fn pair(&self, i: usize, interleaved: bool) -> (usize, usize) {
        if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + self.rot / 2)
        }
    }
}

/// How the cache row of token (b, s) is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheRows {
    /// `position_ids[b, s]` into a `[max_position, rot / 2]` cache.
    Ids {
        /// Rows of the cache.
        max_position: usize,
    },
    /// `offset + s`, the offset being the one element of `position_ids`.
    Offset {
        /// Rows of the cache.
        max_position: usize,
    },
    /// Row `b * seq + s` of a `[batch, seq, rot / 2]` cache.
    PerToken,
}

impl RotaryOp {
    /// Decodes the node; the domain tells the form.
    pub fn from_node(node: &Node) -> Result<Self> {
        let form = if node.domain == MS_DOMAIN { RotaryForm::Microsoft } else { RotaryForm::Onnx };
        Ok(RotaryOp {
            form,
            interleaved: super::flag(node, "interleaved", false)?,
            rotary_dim: super::non_negative(node, "rotary_embedding_dim", 0)?,
            num_heads: super::non_negative(node, "num_heads", 0)?,
            at: node.location(),
        })
    }

    /// Input positions of (cos_cache, sin_cache, position_ids).
    pub fn input_indices(&self) -> (usize, usize, usize) {
        match self.form {
            RotaryForm::Onnx => (1, 2, 3),
            RotaryForm::Microsoft => (2, 3, 1),
        }
    }

    /// The layout of an input of shape `x`, with caches of shape `cache`.
    pub fn dims(&self, x: &[usize], cache: &[usize]) -> Result<RotaryDims> {
        let at = &self.at;
        let heads = match (x, self.num_heads, self.form) {
            (&[_, h, _, _], _, _) => h,
            (&[_, _, _], h, _) if h > 0 => h,
            // ONNX Runtime's form: the head size is the rotated width, twice the cache's.
            (&[_, _, hidden], 0, RotaryForm::Microsoft) if self.rotary_dim == 0 => match cache.last() {
                Some(&c) if c > 0 && hidden % (2 * c) == 0 => hidden / (2 * c),
                _ => {
                    return Err(Error::input(
                        at,
                        0,
                        format!("a hidden size that is a multiple of twice the cache width {cache:?}"),
                        format!("{x:?}"),
                    ))
                }
            },
            (&[_, _, _], _, _) => return Err(Error::node(at, "a 3-D input needs the num_heads attribute")),
            _ => return Err(Error::input(at, 0, "a 3-D or 4-D input", format!("{x:?}"))),
        };
        let (batch, seq, head, three_d) = match *x {
            [b, _, s, d] => (b, s, d, false),
            [b, s, hidden] if hidden % heads == 0 => (b, s, hidden / heads, true),
            _ => {
                return Err(Error::input(
                    at,
                    0,
                    format!("a hidden size divisible by num_heads = {heads}"),
                    format!("{x:?}"),
                ))
            }
        };
        let rot = match (self.rotary_dim, self.form) {
            (0, RotaryForm::Microsoft) => cache.last().map_or(head, |&c| 2 * c),
            (0, RotaryForm::Onnx) => head,
            (r, _) => r,
        };
        if rot > head || rot % 2 != 0 {
            return Err(Error::node(
                at,
                format!("rotary_embedding_dim {rot} must be even and at most the head size {head}"),
            ));
        }
        Ok(RotaryDims { batch, heads, seq, head, rot, three_d })
    }

    /// Checks the caches and position ids (their shapes; `None` when absent) against the
    /// input's dims and tells how cache rows are found. The ids' values are checked by
    /// [`Self::position`].
    pub fn cache_rows(&self, d: &RotaryDims, cos: &[usize], sin: &[usize], pos: Option<&[usize]>) -> Result<CacheRows> {
        let at = &self.at;
        let (ci, _, pi) = self.input_indices();
        let half = d.rot / 2;
        if cos != sin {
            return Err(Error::node(at, format!("cos_cache {cos:?} and sin_cache {sin:?} differ in shape")));
        }
        let table = |cos: &[usize]| -> Result<usize> {
            if cos.len() != 2 || cos[1] != half || cos[0] == 0 {
                return Err(Error::input(
                    at,
                    ci,
                    format!("a cache of shape [max_position >= 1, {half}]"),
                    format!("{cos:?}"),
                ));
            }
            Ok(cos[0])
        };
        match (pos, self.form) {
            (Some(p), _) if p == [d.batch, d.seq] => Ok(CacheRows::Ids { max_position: table(cos)? }),
            (Some(p), RotaryForm::Microsoft) if p.iter().product::<usize>() == 1 && p.len() <= 1 => {
                Ok(CacheRows::Offset { max_position: table(cos)? })
            }
            (Some(p), _) => {
                Err(Error::input(at, pi, format!("position_ids of shape [{}, {}]", d.batch, d.seq), format!("{p:?}")))
            }
            (None, RotaryForm::Microsoft) => Err(Error::input(at, pi, "position_ids", "none")),
            (None, RotaryForm::Onnx) => {
                if cos != [d.batch, d.seq, half] {
                    return Err(Error::input(
                        at,
                        ci,
                        format!("a cache of shape [{}, {}, {half}]", d.batch, d.seq),
                        format!("{cos:?}"),
                    ));
                }
                Ok(CacheRows::PerToken)
            }
        }
    }

    /// The cache row of token (b, s), from `ids` (the position ids as integers; empty for
    /// [`CacheRows::PerToken`]); an error names a position outside the cache.
    pub fn position(&self, rows: CacheRows, d: &RotaryDims, ids: &[i64], b: usize, s: usize) -> Result<usize> {
        let (max, p) = match rows {
            CacheRows::PerToken => return Ok(b * d.seq + s),
            CacheRows::Ids { max_position } => (max_position, ids[b * d.seq + s]),
            CacheRows::Offset { max_position } => (max_position, ids[0].saturating_add(s as i64)),
        };
        usize::try_from(p).ok().filter(|&p| p < max).ok_or_else(|| {
            Error::input(&self.at, self.input_indices().2, format!("positions in 0..{max}"), p.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute};

    fn node(domain: &str, attrs: &[(&str, i64)]) -> Node {
        Node {
            op_type: "RotaryEmbedding".into(),
            domain: domain.into(),
            attributes: attrs.iter().map(|(n, v)| Attribute { name: (*n).into(), value: AttrValue::Int(*v) }).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn both_forms_find_their_layout_and_rows() {
        let ms = RotaryOp::from_node(&node(MS_DOMAIN, &[])).unwrap();
        assert_eq!(ms.input_indices(), (2, 3, 1));
        // 3-D without num_heads: the head is twice the cache width.
        let d = ms.dims(&[2, 5, 24], &[16, 4]).unwrap();
        assert_eq!((d.heads, d.head, d.rot, d.three_d), (3, 8, 8, true));
        assert_eq!(ms.cache_rows(&d, &[16, 4], &[16, 4], Some(&[1])).unwrap(), CacheRows::Offset { max_position: 16 });
        assert_eq!(ms.position(CacheRows::Offset { max_position: 16 }, &d, &[3], 1, 4).unwrap(), 7);
        let err = ms.position(CacheRows::Offset { max_position: 16 }, &d, &[12], 0, 4).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("0..16"), "{err}");
        assert!(ms.cache_rows(&d, &[16, 4], &[16, 4], None).is_err());
        let onnx = RotaryOp::from_node(&node("", &[("num_heads", 3), ("rotary_embedding_dim", 6)])).unwrap();
        let d = onnx.dims(&[2, 5, 30], &[16, 3]).unwrap();
        assert_eq!((d.head, d.rot), (10, 6));
        assert_eq!(onnx.cache_rows(&d, &[2, 5, 3], &[2, 5, 3], None).unwrap(), CacheRows::PerToken);
        assert!(onnx.cache_rows(&d, &[16, 3], &[16, 3], Some(&[2, 4])).is_err());
        let err = RotaryOp::from_node(&node("", &[("interleaved", 2)])).unwrap_err().to_string();
        assert!(err.contains("interleaved"), "{err}");
    }
}
