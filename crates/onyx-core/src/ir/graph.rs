//! Model, Graph and Node.

use std::collections::BTreeMap;

use super::attribute::{expect, AttrValue, Attribute};
use crate::error::Location;
use crate::types::ValueInfo;
use crate::{Result, Tensor};

/// The default ONNX operator domain (`""`, also spelled `ai.onnx`).
pub const DEFAULT_DOMAIN: &str = "";
/// Microsoft's contrib operator domain, kept for later EPs.
pub const MS_DOMAIN: &str = "com.microsoft";
/// Onyx's own domain, for fused ops that neither ONNX (at the model's opset) nor ONNX Runtime's
/// contrib ops express: each has the contract of the default-domain op of the same name at
/// the newest opset (`Attention` as in opset 24).
pub const ONYX_DOMAIN: &str = "ai.onyx";

/// Opset version imported per domain (the default domain under `""`).
pub type OpsetImports = BTreeMap<String, i64>;

/// A loaded model: metadata plus its main graph.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// ONNX IR version of the file.
    pub ir_version: i64,
    /// Tool that produced the model.
    pub producer_name: String,
    /// Version of that tool.
    pub producer_version: String,
    /// Model namespace.
    pub domain: String,
    /// Model version; `None` when the file gives none (ONNX Runtime then reports `i64::MAX`).
    pub model_version: Option<i64>,
    /// Documentation string.
    pub doc: String,
    /// Operator set imports, by domain.
    pub opsets: OpsetImports,
    /// Free-form metadata, in file order.
    pub metadata: Vec<(String, String)>,
    /// The main graph.
    pub graph: Graph,
}

/// A graph: nodes in topological order, its inputs, outputs and constant initializers.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Nodes, topologically sorted once the model is checked.
    pub nodes: Vec<Node>,
    /// Declared inputs (may include initializers, as ONNX allows).
    pub inputs: Vec<ValueInfo>,
    /// Declared outputs.
    pub outputs: Vec<ValueInfo>,
    /// Constant tensors by name (sparse initializers already densified).
    pub initializers: BTreeMap<String, Tensor>,
    /// Type annotations of intermediate values.
    pub value_info: Vec<ValueInfo>,
    /// Documentation string.
    pub doc: String,
}

impl Graph {
    /// Inputs that are not initializers: what a caller must (or may, if it has a default) feed.
    pub fn runtime_inputs(&self) -> impl Iterator<Item = &ValueInfo> {
        self.inputs.iter().filter(|i| !self.initializers.contains_key(&i.name))
    }
}

/// One operator application.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// Node name (ONNX allows empty names).
    pub name: String,
    /// Operator type, e.g. `Conv`.
    pub op_type: String,
    /// Operator domain (`""` is the default ONNX domain).
    pub domain: String,
    /// Input value names; `""` marks an omitted optional input.
    pub inputs: Vec<String>,
    /// Output value names; `""` marks an omitted optional output.
    pub outputs: Vec<String>,
    /// Attributes, in file order.
    pub attributes: Vec<Attribute>,
    /// Values of enclosing graphs that this node's subgraphs read (filled by the checker).
    pub implicit_inputs: Vec<String>,
    /// Documentation string.
    pub doc: String,
}

macro_rules! getter {
    ($(#[$m:meta])* $name:ident, $ty:ty, $expected:literal, $pat:pat => $val:expr) => {
        $(#[$m])*
        pub fn $name(&self, name: &str) -> Result<Option<$ty>> {
            expect(&self.location(), self.attr(name), name, $expected, |v| match v {
                $pat => Some($val),
                _ => None,
            })
        }
    };
}

impl Node {
    /// Where this node is, for error messages.
    pub fn location(&self) -> Location {
        Location { node: self.name.clone(), op: self.op_type.clone() }
    }

    /// The attribute called `name`, if present.
    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.name == name)
    }

    /// Input `i` if present and not omitted.
    pub fn input(&self, i: usize) -> Option<&str> {
        self.inputs.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }

    getter!(/// An INT attribute.
        get_int, i64, "an int", AttrValue::Int(i) => *i);
    getter!(/// An INTS attribute.
        get_ints, &[i64], "a list of ints", AttrValue::Ints(v) => v.as_slice());
    getter!(/// A FLOATS attribute.
        get_floats, &[f32], "a list of floats", AttrValue::Floats(v) => v.as_slice());
    getter!(/// A TENSOR attribute.
        get_tensor, &Tensor, "a tensor", AttrValue::Tensor(t) => t);
    getter!(/// A GRAPH attribute.
        get_graph, &Graph, "a graph", AttrValue::Graph(g) => g.as_ref());
    getter!(/// A STRINGS attribute, as raw bytes.
        get_strings, &[Vec<u8>], "a list of strings", AttrValue::Strings(v) => v.as_slice());

    /// A FLOAT attribute (an INT is accepted too: some exporters write `alpha=1` as an int).
    pub fn get_float(&self, name: &str) -> Result<Option<f32>> {
        expect(&self.location(), self.attr(name), name, "a float", |v| match v {
            AttrValue::Float(f) => Some(*f),
            AttrValue::Int(i) => Some(*i as f32),
            _ => None,
        })
    }

    /// A STRING attribute decoded as UTF-8 (lossily).
    pub fn get_string(&self, name: &str) -> Result<Option<String>> {
        expect(&self.location(), self.attr(name), name, "a string", |v| match v {
            AttrValue::String(s) => Some(String::from_utf8_lossy(s).into_owned()),
            _ => None,
        })
    }

    /// An INT attribute with a default.
    pub fn int_or(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.get_int(name)?.unwrap_or(default))
    }

    /// A FLOAT attribute with a default.
    pub fn float_or(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.get_float(name)?.unwrap_or(default))
    }

    /// A STRING attribute with a default.
    pub fn string_or(&self, name: &str, default: &str) -> Result<String> {
        Ok(self.get_string(name)?.unwrap_or_else(|| default.to_string()))
    }

    /// Every subgraph among the attributes (If branches, Loop/Scan bodies).
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attributes.iter().flat_map(|a| match &a.value {
            AttrValue::Graph(g) => vec![g.as_ref()],
            AttrValue::Graphs(gs) => gs.iter().collect(),
            _ => vec![],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_attribute_access() {
        let node = Node {
            name: "c1".into(),
            op_type: "Conv".into(),
            attributes: vec![
                Attribute { name: "group".into(), value: AttrValue::Int(2) },
                Attribute { name: "pads".into(), value: AttrValue::Ints(vec![1, 1, 1, 1]) },
            ],
            ..Default::default()
        };
        assert_eq!(node.int_or("group", 1).unwrap(), 2);
        assert_eq!(node.int_or("missing", 7).unwrap(), 7);
        assert_eq!(node.get_ints("pads").unwrap(), Some(&[1i64, 1, 1, 1][..]));
        let err = node.get_ints("group").unwrap_err().to_string();
        assert!(err.contains("Conv node 'c1'") && err.contains("'group'") && err.contains("type int"), "{err}");
    }
}
