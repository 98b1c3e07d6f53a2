//! Static types of values: element type plus a shape whose dimensions may be symbolic.

use std::fmt;

use crate::DataType;

/// One dimension of a declared or inferred shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A known size.
    Fixed(usize),
    /// A named free dimension such as `batch` or `seq`.
    Symbol(String),
    /// Unknown and unnamed.
    Unknown,
}

impl Dim {
    /// The size, when known.
    pub fn fixed(&self) -> Option<usize> {
        match self {
            Dim::Fixed(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Symbol(s) => write!(f, "{s}"),
            Dim::Unknown => write!(f, "?"),
        }
    }
}

/// A tensor type: element type and shape (`None` when even the rank is unknown).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions, or `None` for unknown rank.
    pub shape: Option<Vec<Dim>>,
}

impl TensorType {
    /// A tensor type with a fully known shape.
    pub fn fixed(dtype: DataType, shape: &[usize]) -> Self {
        TensorType { dtype, shape: Some(shape.iter().map(|&d| Dim::Fixed(d)).collect()) }
    }

    /// The rank, when known.
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Vec::len)
    }

    /// The concrete shape when every dimension is known.
    pub fn concrete(&self) -> Option<Vec<usize>> {
        self.shape.as_ref()?.iter().map(Dim::fixed).collect()
    }
}

/// Formats dims as `[batch,3,224,224]`.
pub fn format_dims(dims: &Option<Vec<Dim>>) -> String {
    match dims {
        None => "[...]".into(),
        Some(d) => format!("[{}]", d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")),
    }
}

/// The type of any ONNX value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// A dense tensor.
    Tensor(TensorType),
    /// A sparse tensor (densified when loaded as an initializer).
    SparseTensor(TensorType),
    /// A sequence of values of one type.
    Sequence(Box<ValueType>),
    /// A map from a key element type to values of one type.
    Map(DataType, Box<ValueType>),
    /// A value that may be absent.
    Optional(Box<ValueType>),
    /// Type not declared.
    Unknown,
}

impl ValueType {
    /// The tensor type, if this is a tensor.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            ValueType::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueType::Tensor(t) => write!(f, "{}{}", t.dtype, format_dims(&t.shape)),
            ValueType::SparseTensor(t) => write!(f, "sparse {}{}", t.dtype, format_dims(&t.shape)),
            ValueType::Sequence(e) => write!(f, "seq({e})"),
            ValueType::Map(k, v) => write!(f, "map({k},{v})"),
            ValueType::Optional(e) => write!(f, "optional({e})"),
            ValueType::Unknown => write!(f, "?"),
        }
    }
}

/// A named, typed value of a graph (input, output or intermediate).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// Name of the value.
    pub name: String,
    /// Declared type.
    pub ty: ValueType,
    /// Per-dimension denotations (`DATA_BATCH`, ...), empty when none were given.
    pub denotations: Vec<Option<String>>,
    /// Documentation string from the model.
    pub doc: String,
}

impl ValueInfo {
    /// A value info with a type and no denotations.
    pub fn new(name: impl Into<String>, ty: ValueType) -> Self {
        ValueInfo { name: name.into(), ty, denotations: vec![], doc: String::new() }
    }
}
