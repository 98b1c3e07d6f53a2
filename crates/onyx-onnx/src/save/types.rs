//! `ValueType` and `ValueInfo` to TypeProto and ValueInfoProto.

use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};

use crate::proto::tensor_shape_proto::{dimension, Dimension};
use crate::proto::type_proto::{self, Value as TypeValue};
use crate::proto::{TensorShapeProto, TypeProto, ValueInfoProto};

/// A declared value; an `Unknown` type is written as no type, which ONNX allows.
pub(crate) fn value_info_to_proto(info: &ValueInfo) -> ValueInfoProto {
    let mut ty = type_to_proto(&info.ty);
    if let Some(shape) = ty.as_mut().and_then(shape_of) {
        for (d, denotation) in shape.dim.iter_mut().zip(&info.denotations) {
            d.denotation = denotation.clone();
        }
    }
    ValueInfoProto {
        name: Some(info.name.clone()),
        r#type: ty,
        doc_string: non_empty(&info.doc),
        metadata_props: vec![],
    }
}

/// A type; `None` for `Unknown`.
pub(crate) fn type_to_proto(ty: &ValueType) -> Option<TypeProto> {
    let value = match ty {
        ValueType::Unknown => return None,
        ValueType::Tensor(t) => {
            TypeValue::TensorType(type_proto::Tensor { elem_type: Some(t.dtype.onnx_code()), shape: shape(t) })
        }
        ValueType::SparseTensor(t) => TypeValue::SparseTensorType(type_proto::SparseTensor {
            elem_type: Some(t.dtype.onnx_code()),
            shape: shape(t),
        }),
        ValueType::Sequence(e) => TypeValue::SequenceType(Box::new(type_proto::Sequence { elem_type: boxed(e) })),
        ValueType::Optional(e) => TypeValue::OptionalType(Box::new(type_proto::Optional { elem_type: boxed(e) })),
        ValueType::Map(k, v) => {
            TypeValue::MapType(Box::new(type_proto::Map { key_type: Some(k.onnx_code()), value_type: boxed(v) }))
        }
    };
    Some(TypeProto { denotation: None, value: Some(value) })
}

fn boxed(ty: &ValueType) -> Option<Box<TypeProto>> {
    type_to_proto(ty).map(Box::new)
}

/// The shape of a tensor type; `None` (no shape field) for unknown rank.
fn shape(t: &TensorType) -> Option<TensorShapeProto> {
    let dims = t.shape.as_ref()?;
    Some(TensorShapeProto { dim: dims.iter().map(dim).collect() })
}

fn dim(d: &Dim) -> Dimension {
    let value = match d {
        Dim::Fixed(n) => Some(dimension::Value::DimValue(*n as i64)),
        Dim::Symbol(s) => Some(dimension::Value::DimParam(s.clone())),
        Dim::Unknown => None,
    };
    Dimension { value, denotation: None }
}

/// The shape inside a tensor or sparse tensor type, for denotations.
fn shape_of(ty: &mut TypeProto) -> Option<&mut TensorShapeProto> {
    match ty.value.as_mut()? {
        TypeValue::TensorType(t) => t.shape.as_mut(),
        TypeValue::SparseTensorType(t) => t.shape.as_mut(),
        _ => None,
    }
}

/// `Some(s)` unless `s` is empty (protobuf leaves empty strings out).
pub(crate) fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}
