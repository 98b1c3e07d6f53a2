//! TypeProto and ValueInfoProto to the IR's `ValueType` and `ValueInfo`.

use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx_core::{DataType, Error, Result};

use crate::proto::tensor_shape_proto::{dimension, Dimension};
use crate::proto::type_proto::Value as TypeValue;
use crate::proto::{TensorShapeProto, TypeProto, ValueInfoProto};

/// The element type with ONNX code `code`; `what` names the value for the error.
pub(crate) fn data_type(code: i32, what: &str) -> Result<DataType> {
    DataType::from_onnx(code).ok_or_else(|| {
        Error::InvalidModel(format!("{what}: element type code {code} is not an ONNX data type (expected 1 to 26)"))
    })
}

/// Converts a declared value (graph input, output or value_info).
pub(crate) fn value_info(proto: ValueInfoProto) -> Result<ValueInfo> {
    let name = proto.name.unwrap_or_default();
    let what = format!("value '{name}'");
    let denotations = proto.r#type.as_ref().map(dim_denotations).unwrap_or_default();
    let ty = match proto.r#type {
        Some(t) => value_type(t, &what)?,
        None => ValueType::Unknown,
    };
    Ok(ValueInfo { name, ty, denotations, doc: proto.doc_string.unwrap_or_default() })
}

/// Per-dimension denotations of a tensor type; empty when no dimension has one.
fn dim_denotations(ty: &TypeProto) -> Vec<Option<String>> {
    let dims = match &ty.value {
        Some(TypeValue::TensorType(t)) => t.shape.as_ref().map(|s| s.dim.as_slice()),
        Some(TypeValue::SparseTensorType(t)) => t.shape.as_ref().map(|s| s.dim.as_slice()),
        _ => None,
    };
    let dims = dims.unwrap_or_default();
    if dims.iter().all(|d| d.denotation.as_deref().unwrap_or("").is_empty()) {
        return vec![];
    }
    dims.iter().map(|d| d.denotation.clone().filter(|s| !s.is_empty())).collect()
}

/// Converts a TypeProto; `what` names the value for errors.
pub(crate) fn value_type(proto: TypeProto, what: &str) -> Result<ValueType> {
    let Some(value) = proto.value else { return Ok(ValueType::Unknown) };
    Ok(match value {
        TypeValue::TensorType(t) => match tensor_type(t.elem_type, t.shape, what)? {
            Some(tt) => ValueType::Tensor(tt),
            None => ValueType::Unknown,
        },
        TypeValue::SparseTensorType(t) => match tensor_type(t.elem_type, t.shape, what)? {
            Some(tt) => ValueType::SparseTensor(tt),
            None => ValueType::Unknown,
        },
        TypeValue::SequenceType(s) => ValueType::Sequence(Box::new(inner(s.elem_type.map(|b| *b), what)?)),
        TypeValue::OptionalType(o) => ValueType::Optional(Box::new(inner(o.elem_type.map(|b| *b), what)?)),
        TypeValue::MapType(m) => {
            let key = data_type(m.key_type.unwrap_or(0), &format!("{what}: map key"))?;
            ValueType::Map(key, Box::new(inner(m.value_type.map(|b| *b), what)?))
        }
        // Opaque types carry no structure Onyx can use.
        TypeValue::OpaqueType(_) => ValueType::Unknown,
    })
}

fn inner(proto: Option<TypeProto>, what: &str) -> Result<ValueType> {
    proto.map_or(Ok(ValueType::Unknown), |t| value_type(t, what))
}

/// A tensor type; `None` when the element type is left undefined (code 0), as partially
/// annotated files do.
fn tensor_type(elem_type: Option<i32>, shape: Option<TensorShapeProto>, what: &str) -> Result<Option<TensorType>> {
    let code = elem_type.unwrap_or(0);
    if code == 0 {
        return Ok(None);
    }
    let dtype = data_type(code, what)?;
    let shape = shape.map(|s| s.dim.into_iter().map(|d| dim(d, what)).collect::<Result<Vec<_>>>()).transpose()?;
    Ok(Some(TensorType { dtype, shape }))
}

fn dim(d: Dimension, what: &str) -> Result<Dim> {
    match d.value {
        Some(dimension::Value::DimValue(v)) => usize::try_from(v)
            .map(Dim::Fixed)
            .map_err(|_| Error::InvalidModel(format!("{what}: dimension {v} is negative"))),
        Some(dimension::Value::DimParam(p)) if !p.is_empty() => Ok(Dim::Symbol(p)),
        _ => Ok(Dim::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::type_proto;

    fn shape(dims: &[(Option<dimension::Value>, Option<&str>)]) -> TensorShapeProto {
        TensorShapeProto {
            dim: dims.iter().map(|(v, d)| Dimension { value: v.clone(), denotation: d.map(str::to_string) }).collect(),
        }
    }

    fn tensor(code: i32, s: Option<TensorShapeProto>) -> TypeProto {
        TypeProto {
            denotation: None,
            value: Some(TypeValue::TensorType(type_proto::Tensor { elem_type: Some(code), shape: s })),
        }
    }

    fn wrap(v: TypeValue) -> TypeProto {
        TypeProto { denotation: None, value: Some(v) }
    }

    #[test]
    fn tensor_dims_of_every_kind() {
        let s = shape(&[
            (Some(dimension::Value::DimValue(3)), None),
            (Some(dimension::Value::DimParam("batch".into())), Some("DATA_BATCH")),
            (None, None),
            (Some(dimension::Value::DimParam(String::new())), None),
        ]);
        let info = value_info(ValueInfoProto {
            name: Some("x".into()),
            r#type: Some(tensor(10, Some(s))),
            doc_string: Some("doc".into()),
            metadata_props: vec![],
        })
        .unwrap();
        let want = TensorType {
            dtype: DataType::Float16,
            shape: Some(vec![Dim::Fixed(3), Dim::Symbol("batch".into()), Dim::Unknown, Dim::Unknown]),
        };
        assert_eq!(info.ty, ValueType::Tensor(want));
        assert_eq!(info.denotations, vec![None, Some("DATA_BATCH".to_string()), None, None]);
        assert_eq!(info.doc, "doc");
    }

    #[test]
    fn nested_types() {
        let t = tensor(7, None);
        let seq =
            wrap(TypeValue::SequenceType(Box::new(type_proto::Sequence { elem_type: Some(Box::new(t.clone())) })));
        let map =
            wrap(TypeValue::MapType(Box::new(type_proto::Map { key_type: Some(8), value_type: Some(Box::new(seq)) })));
        let opt = wrap(TypeValue::OptionalType(Box::new(type_proto::Optional { elem_type: Some(Box::new(map)) })));
        let got = value_type(opt, "v").unwrap();
        let int64 = ValueType::Tensor(TensorType { dtype: DataType::Int64, shape: None });
        let want = ValueType::Optional(Box::new(ValueType::Map(
            DataType::String,
            Box::new(ValueType::Sequence(Box::new(int64))),
        )));
        assert_eq!(got, want);
        let sparse = wrap(TypeValue::SparseTensorType(type_proto::SparseTensor {
            elem_type: Some(1),
            shape: Some(shape(&[(Some(dimension::Value::DimValue(5)), None)])),
        }));
        assert_eq!(value_type(sparse, "s").unwrap(), ValueType::SparseTensor(TensorType::fixed(DataType::Float, &[5])));
    }

    #[test]
    fn undefined_and_missing_types_are_unknown() {
        assert_eq!(value_type(tensor(0, None), "v").unwrap(), ValueType::Unknown);
        assert_eq!(value_type(TypeProto::default(), "v").unwrap(), ValueType::Unknown);
        let info = value_info(ValueInfoProto { name: Some("y".into()), ..Default::default() }).unwrap();
        assert_eq!(info.ty, ValueType::Unknown);
        assert!(info.denotations.is_empty());
    }

    #[test]
    fn invalid_types_are_errors() {
        let neg = tensor(1, Some(shape(&[(Some(dimension::Value::DimValue(-2)), None)])));
        let err = value_type(neg, "value 'x'").unwrap_err().to_string();
        assert!(err.contains("value 'x'") && err.contains("-2") && err.contains("negative"), "{err}");
        let err = value_type(tensor(99, None), "value 'x'").unwrap_err().to_string();
        assert!(err.contains("99"), "{err}");
        let bad_key = wrap(TypeValue::MapType(Box::new(type_proto::Map { key_type: None, value_type: None })));
        assert!(value_type(bad_key, "m").unwrap_err().to_string().contains("map key"));
    }
}
