//! Node attributes and typed access to them.

use crate::error::Location;
use crate::ir::Graph;
use crate::types::ValueType;
use crate::{Error, Result, Tensor};

/// The value of an attribute, one variant per ONNX `AttributeType`.
#[derive(Debug, Clone)]
pub enum AttrValue {
    /// FLOAT
    Float(f32),
    /// INT
    Int(i64),
    /// STRING (bytes; ONNX strings need not be UTF-8)
    String(Vec<u8>),
    /// TENSOR
    Tensor(Tensor),
    /// GRAPH (a subgraph, e.g. of If or Loop)
    Graph(Box<Graph>),
    /// SPARSE_TENSOR, densified at load
    SparseTensor(Tensor),
    /// TYPE_PROTO
    Type(ValueType),
    /// FLOATS
    Floats(Vec<f32>),
    /// INTS
    Ints(Vec<i64>),
    /// STRINGS
    Strings(Vec<Vec<u8>>),
    /// TENSORS
    Tensors(Vec<Tensor>),
    /// GRAPHS
    Graphs(Vec<Graph>),
    /// SPARSE_TENSORS, densified at load
    SparseTensors(Vec<Tensor>),
    /// TYPE_PROTOS
    Types(Vec<ValueType>),
}

impl AttrValue {
    /// The ONNX name of the attribute's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            AttrValue::Float(_) => "float",
            AttrValue::Int(_) => "int",
            AttrValue::String(_) => "string",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::Graph(_) => "graph",
            AttrValue::SparseTensor(_) => "sparse tensor",
            AttrValue::Type(_) => "type",
            AttrValue::Floats(_) => "floats",
            AttrValue::Ints(_) => "ints",
            AttrValue::Strings(_) => "strings",
            AttrValue::Tensors(_) => "tensors",
            AttrValue::Graphs(_) => "graphs",
            AttrValue::SparseTensors(_) => "sparse tensors",
            AttrValue::Types(_) => "types",
        }
    }
}

/// A named attribute of a node.
#[derive(Debug, Clone)]
pub struct Attribute {
    /// Attribute name.
    pub name: String,
    /// Attribute value.
    pub value: AttrValue,
}

/// Typed attribute lookups with errors that name the node and the attribute.
pub(crate) fn wrong_type(at: &Location, name: &str, expected: &str, found: &AttrValue) -> Error {
    Error::attribute(at, name, expected, format!("an attribute of type {}", found.type_name()))
}

pub(crate) fn expect<'a, T>(
    at: &Location,
    attr: Option<&'a Attribute>,
    name: &str,
    expected: &str,
    get: impl FnOnce(&'a AttrValue) -> Option<T>,
) -> Result<Option<T>> {
    match attr {
        None => Ok(None),
        Some(a) => get(&a.value).map(Some).ok_or_else(|| wrong_type(at, name, expected, &a.value)),
    }
}
