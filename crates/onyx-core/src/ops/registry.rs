//! Which operators exist in which opset, and which attributes each definition has, from
//! ONNX's own schemas (see `onnx_ops.rs` and `onnx_attributes.rs`).

use super::onnx_attributes::ATTRIBUTES;
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

/// Checks that `node`'s operator exists in its domain at the imported opset version, and that
/// the node has no attribute that definition lacks (as ONNX's checker and ONNX Runtime do).
pub fn check_node(node: &Node, opsets: &OpsetImports) -> Result<()> {
    let since = since_version(node, opsets)?;
    let key = (node.domain.as_str(), node.op_type.as_str(), since);
    let Ok(i) = ATTRIBUTES.binary_search_by(|(d, o, v, _)| (*d, *o, *v).cmp(&key)) else { return Ok(()) };
    let defined = ATTRIBUTES[i].3;
    match node.attributes.iter().find(|a| !defined.contains(&a.name.as_str())) {
        None => Ok(()),
        Some(extra) => Err(Error::Attribute {
            at: node.location(),
            name: extra.name.clone(),
            expected: match defined {
                [] => format!("no attribute ({} defines none at opset {since})", node.op_type),
                _ => format!("one of {} (its attributes at opset {since})", defined.join(", ")),
            },
            found: "an attribute the operator does not define".into(),
        }),
    }
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
        assert!(ATTRIBUTES.windows(2).all(|w| (w[0].0, w[0].1, w[0].2) < (w[1].0, w[1].1, w[1].2)));
    }

    #[test]
    fn rejects_attributes_the_operator_does_not_define() {
        use crate::ir::{AttrValue, Attribute};
        let opsets: OpsetImports = [("".to_string(), 17)].into();
        let attr = |name: &str| Attribute { name: name.into(), value: AttrValue::Int(1) };
        let mut add = node("Add", "");
        assert!(check_node(&add, &opsets).is_ok());
        add.attributes.push(attr("foo"));
        let err = check_node(&add, &opsets).unwrap_err().to_string();
        assert!(err.contains("attribute 'foo'") && err.contains("defines none at opset 14"), "{err}");
        let mut conv = node("Conv", "");
        conv.attributes = vec![attr("group"), attr("strides")];
        assert!(check_node(&conv, &opsets).is_ok());
        conv.attributes.push(attr("stride"));
        let err = check_node(&conv, &opsets).unwrap_err().to_string();
        assert!(err.contains("'stride'") && err.contains("one of auto_pad, dilations, group"), "{err}");
        // Domains ONNX's schemas do not cover are left to their kernels.
        let mut gqa = node("GroupQueryAttention", MS_DOMAIN);
        gqa.attributes.push(attr("anything"));
        assert!(check_node(&gqa, &[(MS_DOMAIN.to_string(), 1)].into()).is_ok());
    }
}
