//! Which operators exist in which opset, from ONNX's own schemas (see `onnx_ops.rs`).

use super::onnx_ops::{MAX_OPSET, OPS};
use crate::ir::{Node, OpsetImports, MS_DOMAIN, ONYX_DOMAIN};
use crate::{Error, Result};

/// Domains whose operators Onyx does not know yet but keeps (for later EPs and contrib ops).
const KEPT_DOMAINS: &[&str] = &[MS_DOMAIN, ONYX_DOMAIN];

/// Operators ONNX Runtime registers in the default domain although ONNX does not define them
/// (its contrib ops that model builders emit there), all at version 1.
const ORT_DEFAULT_DOMAIN_OPS: &[&str] = &["SimplifiedLayerNormalization"];

fn max_opset(domain: &str) -> Option<i64> {
    MAX_OPSET.iter().find(|(d, _)| *d == domain).map(|(_, v)| *v)
}

fn versions(domain: &str, op: &str) -> Option<&'static [i64]> {
    OPS.binary_search_by(|(d, o, _)| (*d, *o).cmp(&(domain, op))).ok().map(|i| OPS[i].2)
}

/// Checks the opset imports: every known domain at a version Onyx knows.
pub fn check_opsets(opsets: &OpsetImports) -> Result<()> {
    for (domain, &version) in opsets {
        if let Some(max) = max_opset(domain) {
            let name = if domain.is_empty() { "ai.onnx" } else { domain };
            let message = format!("opset import {name} version {version}: expected a version from 1 to {max}");
            if version > max {
                return Err(Error::Version(message));
            }
            if version < 1 {
                return Err(Error::InvalidModel(message));
            }
        }
    }
    Ok(())
}

/// The opset version in which the definition of `node`'s op that applies under `opsets` was
/// introduced (the "since version" that selects a kernel's behaviour).
pub fn since_version(node: &Node, opsets: &OpsetImports) -> Result<i64> {
    let Some(&imported) = opsets.get(&node.domain) else {
        return Err(unknown(node, 0, "its domain is not imported by the model"));
    };
    if KEPT_DOMAINS.contains(&node.domain.as_str()) {
        return Ok(imported);
    }
    if max_opset(&node.domain).is_none() {
        return Err(unknown(node, imported, "the domain is unknown"));
    }
    let Some(vs) = versions(&node.domain, &node.op_type) else {
        if node.domain.is_empty() && ORT_DEFAULT_DOMAIN_OPS.contains(&node.op_type.as_str()) {
            return Ok(1);
        }
        return Err(unknown(node, imported, "no such operator in this domain"));
    };
    vs.iter()
        .rev()
        .copied()
        .find(|&v| v <= imported)
        .ok_or_else(|| unknown(node, imported, &format!("the operator first appears in opset {}", vs[0])))
}

/// Checks that `node`'s operator exists in its domain at the imported opset version.
pub fn check_node(node: &Node, opsets: &OpsetImports) -> Result<()> {
    since_version(node, opsets).map(|_| ())
}

fn unknown(node: &Node, version: i64, reason: &str) -> Error {
    let domain = if node.domain.is_empty() { "ai.onnx".to_string() } else { node.domain.clone() };
    Error::UnknownOp { at: node.location(), domain, op: node.op_type.clone(), version, reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, domain: &str) -> Node {
        Node { op_type: op.into(), domain: domain.into(), ..Default::default() }
    }

    #[test]
    fn resolves_since_versions() {
        let opsets: OpsetImports = [("".to_string(), 17)].into();
        assert_eq!(since_version(&node("Relu", ""), &opsets).unwrap(), 14);
        assert_eq!(since_version(&node("LayerNormalization", ""), &opsets).unwrap(), 17);
        let err = since_version(&node("RMSNormalization", ""), &opsets).unwrap_err().to_string();
        assert!(err.contains("first appears in opset 23"), "{err}");
        assert_eq!(since_version(&node("SimplifiedLayerNormalization", ""), &opsets).unwrap(), 1);
        let err = since_version(&node("Frobnicate", ""), &opsets).unwrap_err().to_string();
        assert!(err.contains("Frobnicate") && err.contains("no such operator"), "{err}");
        assert!(since_version(&node("Relu", "com.example"), &opsets).is_err());
    }

    #[test]
    fn rejects_unknown_opset_versions() {
        assert!(check_opsets(&[("".to_string(), 17)].into()).is_ok());
        let err = check_opsets(&[("".to_string(), 99)].into()).unwrap_err();
        assert!(matches!(&err, Error::Version(m) if m.contains("version 99")), "{err}");
        let err = check_opsets(&[("".to_string(), 0)].into()).unwrap_err();
        assert!(matches!(err, Error::InvalidModel(_)), "{err}");
    }

    #[test]
    fn rejects_ir_versions_newer_than_the_build() {
        let mut model = crate::ir::Model { ir_version: 99, ..Default::default() };
        let err = crate::ir::check_model(&mut model).unwrap_err();
        assert!(matches!(&err, Error::Version(m) if m.contains("IR version 99: expected at most 13")), "{err}");
        model.ir_version = crate::ir::MAX_IR_VERSION;
        model.opsets = [("".to_string(), 17)].into();
        assert!(crate::ir::check_model(&mut model).is_ok());
    }

    #[test]
    fn table_is_sorted() {
        assert!(OPS.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
    }
}
