//! Values: what flows along a graph's edges.

use crate::types::ValueType;
use crate::{DataType, Error, Result, Tensor, TensorView};

/// Any ONNX value: a tensor, a sequence, a map or an optional.
#[derive(Clone, Debug)]
pub enum Value {
    /// A dense tensor (host or device).
    Tensor(Tensor),
    /// An ordered sequence of values.
    Sequence(Sequence),
    /// A map with tensor keys.
    Map(Map),
    /// A value that may be absent.
    Optional(Optional),
}

/// A sequence of values of one type.
#[derive(Clone, Debug)]
pub struct Sequence {
    /// Type of every element (needed for empty sequences).
    pub elem_type: ValueType,
    /// The elements.
    pub items: Vec<Value>,
}

/// A map: `keys` is a 1-D tensor of the key type, `values` has one entry per key.
#[derive(Clone, Debug)]
pub struct Map {
    /// 1-D tensor of keys (integers or strings).
    pub keys: Tensor,
    /// One value per key.
    pub values: Sequence,
}

/// An optional value: `None` carries its type.
#[derive(Clone, Debug)]
pub struct Optional {
    /// The type of the contained value.
    pub elem_type: ValueType,
    /// The value, when present.
    pub value: Option<Box<Value>>,
}

impl Value {
    /// A short name of the value's kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Sequence(_) => "sequence",
            Value::Map(_) => "map",
            Value::Optional(_) => "optional",
        }
    }

    /// The tensor, or an error naming the kind found.
    pub fn as_tensor(&self) -> Result<&Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(Error::ValueKind { expected: "tensor".into(), found: other.kind().into() }),
        }
    }

    /// Consumes the value and returns its tensor.
    pub fn into_tensor(self) -> Result<Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(Error::ValueKind { expected: "tensor".into(), found: other.kind().into() }),
        }
    }

    /// Describes the value's type for error messages (`float[1,3]`, `seq(...)`).
    pub fn describe(&self) -> String {
        match self {
            Value::Tensor(t) => format!("{}{:?}", t.dtype(), t.shape()),
            Value::Sequence(s) => format!("seq of {} ({})", s.items.len(), s.elem_type),
            Value::Map(m) => format!("map with {} {} keys", m.keys.len(), m.keys.dtype()),
            Value::Optional(o) => match &o.value {
                Some(v) => format!("optional({})", v.describe()),
                None => format!("empty optional({})", o.elem_type),
            },
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}

/// A value given to `Session::run`: owned, or a caller's host memory borrowed without copying.
#[derive(Clone, Debug)]
pub enum InputValue<'a> {
    /// An owned (or shared) value.
    Value(Value),
    /// A borrowed host tensor.
    View(TensorView<'a>),
}

impl<'a> InputValue<'a> {
    /// Element type and shape when the input is a tensor.
    pub fn tensor_type(&self) -> Option<(DataType, &[usize])> {
        match self {
            InputValue::Value(Value::Tensor(t)) => Some((t.dtype(), t.shape())),
            InputValue::View(v) => Some((v.dtype(), v.shape())),
            _ => None,
        }
    }
}

impl From<Value> for InputValue<'_> {
    fn from(v: Value) -> Self {
        InputValue::Value(v)
    }
}

impl From<Tensor> for InputValue<'_> {
    fn from(t: Tensor) -> Self {
        InputValue::Value(Value::Tensor(t))
    }
}

impl<'a> From<TensorView<'a>> for InputValue<'a> {
    fn from(v: TensorView<'a>) -> Self {
        InputValue::View(v)
    }
}
