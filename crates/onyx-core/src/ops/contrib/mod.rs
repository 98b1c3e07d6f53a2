//! Contracts of ONNX Runtime's contrib operators that LLM models use (the ops
//! onnxruntime-genai's model builder emits): each op's attributes decoded and validated once,
//! with its shape rules and geometry as methods, so that shape inference and every EP's kernel
//! accept and reject the same nodes and inputs. Semantics follow ONNX Runtime's CPU EP.

pub mod gqa;
pub mod mha;
pub mod nbits;
pub mod rms_norm;
pub mod rotary;

use crate::ir::Node;
use crate::{Error, Location, Result};

/// A 0/1 attribute.
pub(crate) fn flag(node: &Node, name: &str, default: bool) -> Result<bool> {
    match node.int_or(name, i64::from(default))? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::attribute(&node.location(), name, "0 or 1", v.to_string())),
    }
}

/// A required attribute that must be at least 1.
pub(crate) fn positive(node: &Node, name: &str) -> Result<usize> {
    let at = node.location();
    match node.get_int(name)? {
        Some(v) if v > 0 => {
            usize::try_from(v).map_err(|_| Error::attribute(&at, name, "a size that fits in memory", v.to_string()))
        }
        Some(v) => Err(Error::attribute(&at, name, "a value >= 1", v.to_string())),
        None => Err(Error::attribute(&at, name, "a value >= 1", "no attribute")),
    }
}

/// An optional attribute that must be at least 0 (`default` when absent).
pub(crate) fn non_negative(node: &Node, name: &str, default: usize) -> Result<usize> {
    let v = node.int_or(name, default as i64)?;
    usize::try_from(v).map_err(|_| Error::attribute(&node.location(), name, "a value >= 0", v.to_string()))
}

/// A float attribute that must be finite.
pub(crate) fn finite(node: &Node, name: &str, default: f32) -> Result<f32> {
    let v = node.float_or(name, default)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(Error::attribute(&node.location(), name, "a finite value", v.to_string()))
    }
}

/// Checks that input `i` has shape `want`.
pub(crate) fn expect_shape(at: &Location, i: usize, name: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::input(at, i, format!("{name} of shape {want:?}"), format!("{got:?}")))
    }
}
