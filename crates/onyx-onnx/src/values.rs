//! Serialized values of ONNX test data sets (`test_data_set_*/input_0.pb`): TensorProto,
//! SequenceProto, MapProto and OptionalProto (onnx-data.proto).

use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Map, Optional, Result, Sequence, Tensor, Value};
use prost::Message;

use crate::external::ExternalData;
use crate::proto::{MapProto, OptionalProto, SequenceProto, SparseTensorProto, TensorProto};
use crate::sparse::densify;
use crate::tensor::tensor_from_proto;

/// Values nested deeper than this (sequences of sequences ...) are rejected.
const MAX_VALUE_DEPTH: usize = 64;

/// Decodes a serialized TensorProto (external data is not allowed).
pub fn tensor_from_pb_bytes(bytes: &[u8]) -> Result<Tensor> {
    tensor_from_proto(decode::<TensorProto>(bytes, "TensorProto")?, &mut ExternalData::new(None))
}

/// Decodes a serialized value whose kind `expected` gives: a TensorProto for tensors (and for
/// unknown types), a SparseTensorProto (densified), SequenceProto, MapProto or OptionalProto.
pub fn value_from_pb_bytes(bytes: &[u8], expected: &ValueType) -> Result<Value> {
    let mut ext = ExternalData::new(None);
    match expected {
        ValueType::Tensor(_) | ValueType::Unknown => {
            Ok(Value::Tensor(tensor_from_proto(decode::<TensorProto>(bytes, "TensorProto")?, &mut ext)?))
        }
        ValueType::SparseTensor(_) => {
            Ok(Value::Tensor(densify(decode::<SparseTensorProto>(bytes, "SparseTensorProto")?, &mut ext)?.1))
        }
        ValueType::Sequence(elem) => sequence(decode(bytes, "SequenceProto")?, elem, &mut ext, 0),
        ValueType::Map(key, value) => map(decode(bytes, "MapProto")?, *key, value, &mut ext, 0),
        ValueType::Optional(elem) => optional(decode(bytes, "OptionalProto")?, elem, &mut ext, 0),
    }
}

fn decode<M: Message + Default>(bytes: &[u8], what: &str) -> Result<M> {
    M::decode(bytes).map_err(|e| Error::Load(format!("not a valid ONNX {what}: {e}")))
}

fn check_depth(depth: usize) -> Result<()> {
    if depth > MAX_VALUE_DEPTH {
        return Err(Error::InvalidModel(format!("values are nested more than {MAX_VALUE_DEPTH} deep")));
    }
    Ok(())
}

fn sequence(p: SequenceProto, elem: &ValueType, ext: &mut ExternalData, depth: usize) -> Result<Value> {
    check_depth(depth)?;
    let items: Vec<Value> = match elem {
        ValueType::Tensor(_) | ValueType::Unknown => {
            p.tensor_values.into_iter().map(|t| tensor_from_proto(t, ext).map(Value::Tensor)).collect::<Result<_>>()?
        }
        ValueType::SparseTensor(_) => {
            p.sparse_tensor_values.into_iter().map(|s| Ok(Value::Tensor(densify(s, ext)?.1))).collect::<Result<_>>()?
        }
        ValueType::Sequence(e) => {
            p.sequence_values.into_iter().map(|s| sequence(s, e, ext, depth + 1)).collect::<Result<_>>()?
        }
        ValueType::Map(k, v) => {
            p.map_values.into_iter().map(|m| map(m, *k, v, ext, depth + 1)).collect::<Result<_>>()?
        }
        ValueType::Optional(e) => {
            p.optional_values.into_iter().map(|o| optional(o, e, ext, depth + 1)).collect::<Result<_>>()?
        }
    };
    Ok(Value::Sequence(Sequence { elem_type: elem.clone(), items }))
}

fn map(p: MapProto, key: DataType, value: &ValueType, ext: &mut ExternalData, depth: usize) -> Result<Value> {
    check_depth(depth)?;
    let count = if key == DataType::String { p.string_keys.len() } else { p.keys.len() };
    let keys = map_keys(&p, key)?;
    let values = match sequence(p.values.unwrap_or_default(), value, ext, depth + 1)? {
        Value::Sequence(s) => s,
        other => return Err(Error::ValueKind { expected: "sequence".into(), found: other.kind().into() }),
    };
    if values.items.len() != count {
        return Err(Error::InvalidModel(format!(
            "map '{}': {count} keys but {} values",
            p.name.unwrap_or_default(),
            values.items.len()
        )));
    }
    Ok(Value::Map(Map { keys, values }))
}

/// The keys as a 1-D tensor of `key`'s type (integers are stored as int64 in the file).
fn map_keys(p: &MapProto, key: DataType) -> Result<Tensor> {
    use DataType::*;
    let ints = &p.keys;
    let shape = vec![if key == String { p.string_keys.len() } else { ints.len() }];
    let bad = |k: i64| Error::InvalidModel(format!("map key {k} does not fit a {key} key"));
    macro_rules! narrow {
        ($t:ty) => {
            Tensor::from_vec(
                shape,
                ints.iter().map(|&k| <$t>::try_from(k).map_err(|_| bad(k))).collect::<Result<Vec<$t>>>()?,
            )
        };
    }
    match key {
        String => {
            let keys = p.string_keys.iter().map(|s| std::string::String::from_utf8_lossy(s).into_owned()).collect();
            Tensor::from_strings(shape, keys)
        }
        Int64 => Tensor::from_vec(shape, ints.clone()),
        Int32 => narrow!(i32),
        Int16 => narrow!(i16),
        Int8 => narrow!(i8),
        Uint64 => narrow!(u64),
        Uint32 => narrow!(u32),
        Uint16 => narrow!(u16),
        Uint8 => narrow!(u8),
        other => Err(Error::InvalidModel(format!("map keys of type {other} are not allowed (integers or strings)"))),
    }
}

fn optional(p: OptionalProto, elem: &ValueType, ext: &mut ExternalData, depth: usize) -> Result<Value> {
    check_depth(depth)?;
    let value = match elem {
        ValueType::Tensor(_) | ValueType::Unknown => {
            p.tensor_value.map(|t| tensor_from_proto(t, ext).map(Value::Tensor))
        }
        ValueType::SparseTensor(_) => p.sparse_tensor_value.map(|s| Ok(Value::Tensor(densify(s, ext)?.1))),
        ValueType::Sequence(e) => p.sequence_value.map(|s| sequence(s, e, ext, depth + 1)),
        ValueType::Map(k, v) => p.map_value.map(|m| map(m, *k, v, ext, depth + 1)),
        ValueType::Optional(e) => p.optional_value.map(|o| optional(*o, e, ext, depth + 1)),
    };
    let value = value.transpose()?.map(Box::new);
    Ok(Value::Optional(Optional { elem_type: elem.clone(), value }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{optional_proto, sequence_proto};
    use crate::testutil::float_tensor;
    use onyx_core::types::TensorType;

    fn float_type() -> ValueType {
        ValueType::Tensor(TensorType { dtype: DataType::Float, shape: None })
    }

    fn floats(v: &Value) -> Vec<f32> {
        v.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn tensors_round_trip() {
        let p = float_tensor("input_0", &[2, 2], vec![1.0, -2.0, 3.5, 0.25]);
        let t = tensor_from_pb_bytes(&p.encode_to_vec()).unwrap();
        assert_eq!((t.shape(), t.as_slice::<f32>().unwrap()), (&[2usize, 2][..], &[1.0, -2.0, 3.5, 0.25][..]));
        let v = value_from_pb_bytes(&p.encode_to_vec(), &ValueType::Unknown).unwrap();
        assert_eq!(floats(&v), [1.0, -2.0, 3.5, 0.25]);
    }

    #[test]
    fn sequences_of_tensors_and_of_sequences() {
        let seq = SequenceProto {
            elem_type: Some(sequence_proto::DataType::Tensor as i32),
            tensor_values: vec![float_tensor("", &[1], vec![4.0]), float_tensor("", &[2], vec![5.0, 6.0])],
            ..Default::default()
        };
        let v = value_from_pb_bytes(&seq.encode_to_vec(), &ValueType::Sequence(Box::new(float_type()))).unwrap();
        let Value::Sequence(s) = &v else { panic!("not a sequence: {}", v.kind()) };
        assert_eq!((floats(&s.items[0]), floats(&s.items[1])), (vec![4.0], vec![5.0, 6.0]));
        let outer =
            SequenceProto { sequence_values: vec![seq.clone(), SequenceProto::default()], ..Default::default() };
        let ty = ValueType::Sequence(Box::new(ValueType::Sequence(Box::new(float_type()))));
        let Value::Sequence(s) = value_from_pb_bytes(&outer.encode_to_vec(), &ty).unwrap() else { panic!() };
        let Value::Sequence(inner) = &s.items[1] else { panic!() };
        assert_eq!((s.items.len(), inner.items.len()), (2, 0));
    }

    #[test]
    fn maps_with_integer_and_string_keys() {
        let values = SequenceProto {
            tensor_values: vec![float_tensor("", &[], vec![1.5]), float_tensor("", &[], vec![-1.0])],
            ..Default::default()
        };
        let m =
            MapProto { key_type: Some(6), keys: vec![-3, 70000], values: Some(values.clone()), ..Default::default() };
        let ty = ValueType::Map(DataType::Int32, Box::new(float_type()));
        let Value::Map(map) = value_from_pb_bytes(&m.encode_to_vec(), &ty).unwrap() else { panic!() };
        assert_eq!(map.keys.as_slice::<i32>().unwrap(), &[-3, 70000]);
        assert_eq!(floats(&map.values.items[1]), [-1.0]);
        let m = MapProto {
            key_type: Some(8),
            string_keys: vec![b"a".to_vec(), b"b".to_vec()],
            values: Some(values),
            ..Default::default()
        };
        let ty = ValueType::Map(DataType::String, Box::new(float_type()));
        let Value::Map(map) = value_from_pb_bytes(&m.encode_to_vec(), &ty).unwrap() else { panic!() };
        assert_eq!(map.keys.view().unwrap().strings().unwrap(), &["a", "b"]);
    }

    #[test]
    fn optionals_present_and_absent() {
        let ty = ValueType::Optional(Box::new(float_type()));
        let present = OptionalProto {
            elem_type: Some(optional_proto::DataType::Tensor as i32),
            tensor_value: Some(float_tensor("", &[1], vec![9.0])),
            ..Default::default()
        };
        let Value::Optional(o) = value_from_pb_bytes(&present.encode_to_vec(), &ty).unwrap() else { panic!() };
        assert_eq!(floats(o.value.as_deref().unwrap()), [9.0]);
        let absent = OptionalProto { elem_type: Some(0), ..Default::default() };
        let Value::Optional(o) = value_from_pb_bytes(&absent.encode_to_vec(), &ty).unwrap() else { panic!() };
        assert!(o.value.is_none());
        assert_eq!(o.elem_type, float_type());
    }

    #[test]
    fn invalid_values_are_errors() {
        let bad_bytes = [0x0Au8, 0xFF, 0x01];
        assert!(matches!(tensor_from_pb_bytes(&bad_bytes), Err(Error::Load(m)) if m.contains("TensorProto")));
        let seq_ty = ValueType::Sequence(Box::new(float_type()));
        assert!(matches!(value_from_pb_bytes(&bad_bytes, &seq_ty), Err(Error::Load(m)) if m.contains("SequenceProto")));
        let mut ext = float_tensor("e", &[1], vec![]);
        ext.data_location = Some(1);
        ext.external_data =
            vec![crate::proto::StringStringEntryProto { key: Some("location".into()), value: Some("e.bin".into()) }];
        let err = tensor_from_pb_bytes(&ext.encode_to_vec()).unwrap_err().to_string();
        assert!(err.contains("without a folder"), "{err}");
        let m = MapProto {
            key_type: Some(3),
            keys: vec![300],
            values: Some(SequenceProto { tensor_values: vec![float_tensor("", &[], vec![1.0])], ..Default::default() }),
            ..Default::default()
        };
        let ty = ValueType::Map(DataType::Int8, Box::new(float_type()));
        let err = value_from_pb_bytes(&m.encode_to_vec(), &ty).unwrap_err().to_string();
        assert!(err.contains("300 does not fit a int8"), "{err}");
        let m = MapProto { keys: vec![1, 2], values: Some(SequenceProto::default()), ..Default::default() };
        let ty = ValueType::Map(DataType::Int64, Box::new(float_type()));
        let err = value_from_pb_bytes(&m.encode_to_vec(), &ty).unwrap_err().to_string();
        assert!(err.contains("2 keys but 0 values"), "{err}");
    }
}
