//! ONNX Runtime's RMS normalizations: `SimplifiedLayerNormalization` (default domain in ONNX
//! Runtime) and `com.microsoft` `SkipSimplifiedLayerNormalization`.
//!
//! `y = x / sqrt(mean(x²) + epsilon) * gamma` over the axes from `axis` on (the last axis for
//! the Skip form, whose `x` is first `input + skip + bias`). Optional outputs: the inverse
//! standard deviation per row (`inv_std_var`, float) and, for the Skip form, the sum
//! `input + skip + bias` in the input's type. The Skip form's `mean` output is never computed
//! by ONNX Runtime; Onyx gives zeros.

use crate::ir::Node;
use crate::{Error, Location, Result};

/// A decoded SimplifiedLayerNormalization or SkipSimplifiedLayerNormalization node.
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNormOp {
    /// First normalized axis (negative counts from the end; always -1 for the Skip form).
    pub axis: i64,
    /// Added to the mean square.
    pub epsilon: f32,
    /// Whether this is the Skip form (inputs: input, skip, gamma, bias?).
    pub skip: bool,
    /// Where the node is, for errors.
    pub at: Location,
}

/// Sizes of one call: `rows` vectors of `hidden` elements each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmsGeometry {
    /// Number of normalized vectors.
    pub rows: usize,
    /// Elements per vector.
    pub hidden: usize,
    /// Elements of `skip` (a multiple of `hidden`: skip repeats over the leading rows).
    pub skip_len: usize,
}

impl RmsNormOp {
    /// Decodes the node (`SkipSimplifiedLayerNormalization` when `op_type` says so).
    pub fn from_node(node: &Node) -> Result<Self> {
        let skip = node.op_type == "SkipSimplifiedLayerNormalization";
        let at = node.location();
        let axis = if skip { -1 } else { node.int_or("axis", -1)? };
        let epsilon = super::finite(node, "epsilon", if skip { 1e-12 } else { 1e-5 })?;
        if epsilon < 0.0 {
            return Err(Error::attribute(&at, "epsilon", "a value >= 0", epsilon.to_string()));
        }
        if !skip {
            let stash = node.int_or("stash_type", 1)?;
            if stash != 1 {
                return Err(Error::attribute(&at, "stash_type", "1 (float)", stash.to_string()));
            }
        }
        Ok(RmsNormOp { axis, epsilon, skip, at })
    }

    /// The first normalized axis of an input of rank `rank`.
    pub fn first_axis(&self, rank: usize) -> Result<usize> {
        let r = rank as i64;
        let a = if self.axis < 0 { self.axis + r } else { self.axis };
        if rank == 0 || a < 0 || a >= r {
            return Err(Error::attribute(
                &self.at,
                "axis",
                format!("an axis of a rank-{rank} input"),
                self.axis.to_string(),
            ));
        }
        Ok(a as usize)
    }

    /// Checks the inputs' shapes: `x`, then `skip` (Skip form: the input's shape or its
    /// trailing dims, repeated over the leading rows), `gamma` (Skip form: `[hidden]`; else
    /// broadcastable to the normalized dims) and the optional `bias` (Skip form: `[hidden]`).
    pub fn geometry(
        &self,
        x: &[usize],
        skip: Option<&[usize]>,
        gamma: &[usize],
        bias: Option<&[usize]>,
    ) -> Result<RmsGeometry> {
        let at = &self.at;
        let axis = self.first_axis(x.len())?;
        let hidden: usize = x[axis..].iter().product();
        let rows: usize = x[..axis].iter().product();
        // The Skip form takes a vector; the plain form anything that broadcasts (NumPy's rule)
        // to the normalized dims.
        let trailing = &x[axis..];
        let gamma_ok = if self.skip {
            gamma == [hidden]
        } else {
            gamma.len() <= trailing.len()
                && gamma.iter().rev().zip(trailing.iter().rev()).all(|(&g, &t)| g == t || g == 1)
        };
        let (gi, si, bi) = if self.skip { (2, 1, 3) } else { (1, usize::MAX, usize::MAX) };
        if !gamma_ok {
            return Err(Error::input(at, gi, format!("a gamma of shape {:?}", &x[axis..]), format!("{gamma:?}")));
        }
        let skip_len = match (self.skip, skip) {
            (true, Some(s)) => {
                let first = s.iter().position(|&d| d != 1).unwrap_or(s.len());
                if s.is_empty() || s.len() > x.len() || s.last() != x.last() || !x.ends_with(&s[first..]) {
                    return Err(Error::input(
                        at,
                        si,
                        format!("a skip of shape {x:?} or its trailing dims"),
                        format!("{s:?}"),
                    ));
                }
                s.iter().product()
            }
            (true, None) => return Err(Error::input(at, si, "a skip tensor", "none")),
            (false, _) => 0,
        };
        if let Some(b) = bias {
            if b != [hidden] {
                return Err(Error::input(at, bi, format!("a bias of shape [{hidden}]"), format!("{b:?}")));
            }
        }
        Ok(RmsGeometry { rows, hidden, skip_len })
    }

    /// The shape of the statistics outputs: `x`'s with the normalized dims set to 1.
    pub fn stats_shape(&self, x: &[usize]) -> Result<Vec<usize>> {
        let axis = self.first_axis(x.len())?;
        Ok(x.iter().enumerate().map(|(i, &d)| if i < axis { d } else { 1 }).collect())
    }

    /// Index of the output holding `inv_std_var`.
    pub fn inv_std_output(&self) -> usize {
        if self.skip {
            2
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute};

    fn node(op: &str, attrs: Vec<(&str, AttrValue)>) -> Node {
        Node {
            op_type: op.into(),
            name: "n".into(),
            attributes: attrs.into_iter().map(|(n, v)| Attribute { name: n.into(), value: v }).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn decodes_defaults_and_checks_shapes() {
        let op = RmsNormOp::from_node(&node("SimplifiedLayerNormalization", vec![])).unwrap();
        assert_eq!((op.axis, op.epsilon, op.skip), (-1, 1e-5, false));
        assert_eq!(op.geometry(&[2, 3, 5], None, &[5], None).unwrap(), RmsGeometry { rows: 6, hidden: 5, skip_len: 0 });
        let op =
            RmsNormOp::from_node(&node("SimplifiedLayerNormalization", vec![("axis", AttrValue::Int(1))])).unwrap();
        assert_eq!(op.geometry(&[2, 3, 5], None, &[3, 5], None).unwrap().hidden, 15);
        assert!(op.geometry(&[2, 3, 5], None, &[5], None).is_ok());
        let err = op.geometry(&[2, 3, 5], None, &[2, 5], None).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("[3, 5]"), "{err}");
        let skip = RmsNormOp::from_node(&node("SkipSimplifiedLayerNormalization", vec![])).unwrap();
        assert_eq!(skip.epsilon, 1e-12);
        assert_eq!(skip.geometry(&[2, 3, 5], Some(&[3, 5]), &[5], Some(&[5])).unwrap().skip_len, 15);
        let err = skip.geometry(&[2, 3, 5], Some(&[2, 5]), &[5], None).unwrap_err().to_string();
        assert!(err.contains("input 1"), "{err}");
        let err = skip.geometry(&[2, 3, 5], Some(&[3, 5]), &[5], Some(&[4])).unwrap_err().to_string();
        assert!(err.contains("input 3") && err.contains("[5]"), "{err}");
        let err = RmsNormOp::from_node(&node("SimplifiedLayerNormalization", vec![("stash_type", AttrValue::Int(10))]))
            .unwrap_err();
        assert!(err.to_string().contains("stash_type"), "{err}");
        assert_eq!(op.stats_shape(&[2, 3, 5]).unwrap(), vec![2, 1, 1]);
    }
}
