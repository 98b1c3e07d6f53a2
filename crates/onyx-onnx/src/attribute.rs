//! AttributeProto to the IR's `Attribute`, for every attribute type.

use onyx_core::ir::{AttrValue, Attribute};
use onyx_core::{Error, Location, Result};

use crate::external::ExternalData;
use crate::graph::graph;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::AttributeProto;
use crate::sparse::densify;
use crate::tensor::tensor_from_proto;
use crate::types::value_type;

/// Converts an attribute of the node at `at`, which sits in a graph `depth` levels deep.
pub(crate) fn attribute(
    mut p: AttributeProto,
    ext: &mut ExternalData,
    at: &Location,
    depth: usize,
) -> Result<Attribute> {
    let name = p.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(Error::attribute(at, "", "a named attribute", "an attribute without a name"));
    }
    if let Some(r) = p.ref_attr_name.as_deref().filter(|r| !r.is_empty()) {
        let found = format!("a reference to function attribute '{r}' outside a function body");
        return Err(Error::attribute(at, &name, "a value", found));
    }
    let ty = attribute_type(&p).map_err(|found| Error::attribute(at, &name, "a known attribute type", found))?;
    let context = format!("{at}: attribute '{name}'");
    let value = value(&mut p, ty, ext, depth)
        .map_err(|e| crate::in_context(e, &context))?
        .ok_or_else(|| Error::attribute(at, &name, format!("a {} value", ty.as_str_name()), "none"))?;
    Ok(Attribute { name, value })
}

/// The declared type, or for files that leave it UNDEFINED, the type of the field that is set.
fn attribute_type(p: &AttributeProto) -> std::result::Result<AttributeType, String> {
    let code = p.r#type.unwrap_or(0);
    match AttributeType::try_from(code) {
        Ok(AttributeType::Undefined) => inferred_type(p).ok_or_else(|| "no type and no value".to_string()),
        Ok(t) => Ok(t),
        Err(_) => Err(format!("type code {code}")),
    }
}

fn inferred_type(p: &AttributeProto) -> Option<AttributeType> {
    use AttributeType as T;
    let set = [
        (p.f.is_some(), T::Float),
        (p.i.is_some(), T::Int),
        (p.s.is_some(), T::String),
        (p.t.is_some(), T::Tensor),
        (p.g.is_some(), T::Graph),
        (p.sparse_tensor.is_some(), T::SparseTensor),
        (p.tp.is_some(), T::TypeProto),
        (!p.floats.is_empty(), T::Floats),
        (!p.ints.is_empty(), T::Ints),
        (!p.strings.is_empty(), T::Strings),
        (!p.tensors.is_empty(), T::Tensors),
        (!p.graphs.is_empty(), T::Graphs),
        (!p.sparse_tensors.is_empty(), T::SparseTensors),
        (!p.type_protos.is_empty(), T::TypeProtos),
    ];
    set.into_iter().find(|(present, _)| *present).map(|(_, t)| t)
}

/// The value of type `ty`, moved out of `p`; `None` when a single tensor, graph or type is absent.
/// Scalars left out of the file take protobuf's defaults (0, empty).
fn value(p: &mut AttributeProto, ty: AttributeType, ext: &mut ExternalData, depth: usize) -> Result<Option<AttrValue>> {
    use AttributeType as T;
    Ok(Some(match ty {
        T::Undefined => return Ok(None),
        T::Float => AttrValue::Float(p.f.unwrap_or(0.0)),
        T::Int => AttrValue::Int(p.i.unwrap_or(0)),
        T::String => AttrValue::String(p.s.take().unwrap_or_default()),
        T::Floats => AttrValue::Floats(std::mem::take(&mut p.floats)),
        T::Ints => AttrValue::Ints(std::mem::take(&mut p.ints)),
        T::Strings => AttrValue::Strings(std::mem::take(&mut p.strings)),
        T::Tensor => match p.t.take() {
            Some(t) => AttrValue::Tensor(tensor_from_proto(t, ext)?),
            None => return Ok(None),
        },
        T::Graph => match p.g.take() {
            Some(g) => AttrValue::Graph(Box::new(graph(g, ext, depth + 1)?)),
            None => return Ok(None),
        },
        T::SparseTensor => match p.sparse_tensor.take() {
            Some(s) => AttrValue::SparseTensor(densify(s, ext)?.1),
            None => return Ok(None),
        },
        T::TypeProto => match p.tp.take() {
            Some(t) => AttrValue::Type(value_type(t, "type")?),
            None => return Ok(None),
        },
        T::Tensors => AttrValue::Tensors(each(&mut p.tensors, |t| tensor_from_proto(t, ext))?),
        T::Graphs => AttrValue::Graphs(each(&mut p.graphs, |g| graph(g, ext, depth + 1))?),
        T::SparseTensors => AttrValue::SparseTensors(each(&mut p.sparse_tensors, |s| Ok(densify(s, ext)?.1))?),
        T::TypeProtos => AttrValue::Types(each(&mut p.type_protos, |t| value_type(t, "type"))?),
    }))
}

fn each<P, T>(items: &mut Vec<P>, f: impl FnMut(P) -> Result<T>) -> Result<Vec<T>> {
    std::mem::take(items).into_iter().map(f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{type_proto, GraphProto, SparseTensorProto, TensorProto, TypeProto};
    use crate::testutil::{float_tensor, graph_proto, node};
    use onyx_core::types::{TensorType, ValueType};
    use onyx_core::DataType;

    fn at() -> Location {
        Location { node: "n1".into(), op: "Op".into() }
    }

    fn convert(p: AttributeProto) -> Result<Attribute> {
        attribute(p, &mut ExternalData::new(None), &at(), 0)
    }

    fn named(ty: Option<AttributeType>) -> AttributeProto {
        AttributeProto { name: Some("a".into()), r#type: ty.map(|t| t as i32), ..Default::default() }
    }

    fn sparse() -> SparseTensorProto {
        SparseTensorProto {
            values: Some(float_tensor("s", &[1], vec![2.5])),
            indices: Some(TensorProto { data_type: Some(7), dims: vec![1], int64_data: vec![2], ..Default::default() }),
            dims: vec![3],
        }
    }

    fn int_type() -> TypeProto {
        TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(7), shape: None })),
        }
    }

    fn small_graph() -> GraphProto {
        graph_proto(vec![node("Relu", &["x"], &["y"])], &["x"], &["y"])
    }

    /// Sets the field of one kind of attribute.
    type Fill = fn(&mut AttributeProto);
    /// Checks the converted value.
    type Check = fn(&AttrValue) -> bool;

    fn cases() -> Vec<(AttributeType, Fill, Check)> {
        use AttributeType as T;
        vec![
            (T::Float, |p| p.f = Some(0.25), |v| matches!(v, AttrValue::Float(x) if *x == 0.25)),
            (T::Int, |p| p.i = Some(-7), |v| matches!(v, AttrValue::Int(-7))),
            (T::String, |p| p.s = Some(b"abc".to_vec()), |v| matches!(v, AttrValue::String(s) if s == b"abc")),
            (
                T::Tensor,
                |p| p.t = Some(float_tensor("t", &[2], vec![1.0, -2.0])),
                |v| matches!(v, AttrValue::Tensor(t) if t.as_slice::<f32>().unwrap() == [1.0, -2.0]),
            ),
            (
                T::Graph,
                |p| p.g = Some(small_graph()),
                |v| matches!(v, AttrValue::Graph(g) if g.nodes[0].op_type == "Relu" && g.inputs[0].name == "x"),
            ),
            (
                T::SparseTensor,
                |p| p.sparse_tensor = Some(sparse()),
                |v| matches!(v, AttrValue::SparseTensor(t) if t.as_slice::<f32>().unwrap() == [0.0, 0.0, 2.5]),
            ),
            (
                T::TypeProto,
                |p| p.tp = Some(int_type()),
                |v| matches!(v, AttrValue::Type(ValueType::Tensor(TensorType { dtype: DataType::Int64, shape: None }))),
            ),
            (
                T::Floats,
                |p| p.floats = vec![1.5, 2.5, -3.0],
                |v| matches!(v, AttrValue::Floats(f) if f == &[1.5, 2.5, -3.0]),
            ),
            (T::Ints, |p| p.ints = vec![3, -1], |v| matches!(v, AttrValue::Ints(i) if i == &[3, -1])),
            (
                T::Strings,
                |p| p.strings = vec![b"x".to_vec(), vec![0xFF]],
                |v| matches!(v, AttrValue::Strings(s) if s == &[b"x".to_vec(), vec![0xFF]]),
            ),
            (
                T::Tensors,
                |p| p.tensors = vec![float_tensor("a", &[1], vec![3.0]), float_tensor("b", &[], vec![4.0])],
                |v| matches!(v, AttrValue::Tensors(t) if t.len() == 2 && t[1].as_slice::<f32>().unwrap() == [4.0] && t[1].shape().is_empty()),
            ),
            (
                T::Graphs,
                |p| p.graphs = vec![small_graph(), small_graph()],
                |v| matches!(v, AttrValue::Graphs(g) if g.len() == 2),
            ),
            (
                T::SparseTensors,
                |p| p.sparse_tensors = vec![sparse()],
                |v| matches!(v, AttrValue::SparseTensors(t) if t[0].as_slice::<f32>().unwrap() == [0.0, 0.0, 2.5]),
            ),
            (
                T::TypeProtos,
                |p| p.type_protos = vec![int_type(), TypeProto::default()],
                |v| matches!(v, AttrValue::Types(t) if t.len() == 2 && t[1] == ValueType::Unknown),
            ),
        ]
    }

    #[test]
    fn every_attribute_type_declared_or_inferred() {
        for (ty, fill, check) in cases() {
            for declared in [Some(ty), None] {
                let mut p = named(declared);
                fill(&mut p);
                let a = convert(p).unwrap_or_else(|e| panic!("{ty:?} ({declared:?}): {e}"));
                assert_eq!(a.name, "a");
                assert!(check(&a.value), "{ty:?} ({declared:?}): got {:?}", a.value);
            }
        }
    }

    #[test]
    fn declared_scalars_default_when_absent() {
        let v = convert(named(Some(AttributeType::Int))).unwrap().value;
        assert!(matches!(v, AttrValue::Int(0)));
        let v = convert(named(Some(AttributeType::Floats))).unwrap().value;
        assert!(matches!(v, AttrValue::Floats(f) if f.is_empty()));
    }

    #[test]
    fn invalid_attributes_are_errors() {
        let cases: Vec<(AttributeProto, &str)> = vec![
            (named(None), "no type and no value"),
            (AttributeProto { r#type: Some(99), ..named(None) }, "type code 99"),
            (named(Some(AttributeType::Tensor)), "expected a TENSOR value, found none"),
            (named(Some(AttributeType::Graph)), "expected a GRAPH value"),
            (
                AttributeProto { ref_attr_name: Some("alpha".into()), ..named(Some(AttributeType::Float)) },
                "outside a function",
            ),
            (AttributeProto { name: None, i: Some(1), ..named(Some(AttributeType::Int)) }, "without a name"),
            (
                AttributeProto { t: Some(float_tensor("t", &[3], vec![1.0])), ..named(Some(AttributeType::Tensor)) },
                "needs 3 values",
            ),
        ];
        for (p, needle) in cases {
            let err = convert(p).unwrap_err().to_string();
            assert!(err.contains("Op node 'n1'") && err.contains(needle), "{err} (want {needle})");
        }
    }

    #[test]
    fn duplicate_attribute_names_are_errors() {
        let mut n = node("LeakyRelu", &["x"], &["y"]);
        n.attribute = vec![crate::testutil::float_attr("alpha", 0.1), crate::testutil::float_attr("alpha", 0.2)];
        let g = graph_proto(vec![n], &["x"], &["y"]);
        let err = crate::testutil::load(&crate::testutil::model_proto(g)).unwrap_err().to_string();
        assert!(err.contains("'alpha'") && err.contains("given twice"), "{err}");
    }
}
