//! The IR's `Attribute` to AttributeProto, for every attribute type (subgraphs recursively).

use onyx_core::ir::{AttrValue, Attribute};
use onyx_core::{Location, Result};

use super::graph::{graph_to_proto, Ext};
use super::tensor::{sparse_to_proto, tensor_to_proto};
use super::types::type_to_proto;
use crate::proto::attribute_proto::AttributeType as T;
use crate::proto::AttributeProto;

/// Converts an attribute of the node at `at`, which sits in a graph `depth` levels deep.
pub(crate) fn attribute_to_proto(
    a: &Attribute,
    at: &Location,
    ext: &mut Ext<'_>,
    depth: usize,
) -> Result<AttributeProto> {
    let what = format!("attribute '{}' of {at}", a.name);
    let mut p = AttributeProto { name: Some(a.name.clone()), ..Default::default() };
    let ty = match &a.value {
        AttrValue::Float(f) => set(&mut p.f, *f, T::Float),
        AttrValue::Int(i) => set(&mut p.i, *i, T::Int),
        AttrValue::String(s) => set(&mut p.s, s.clone(), T::String),
        AttrValue::Tensor(t) => set(&mut p.t, tensor_to_proto(t, None, &what, ext.as_deref_mut())?, T::Tensor),
        AttrValue::Graph(g) => set(&mut p.g, graph_to_proto(g, &a.name, ext, depth + 1)?, T::Graph),
        AttrValue::SparseTensor(t) => set(&mut p.sparse_tensor, sparse_to_proto(t, &what)?, T::SparseTensor),
        AttrValue::Type(t) => set(&mut p.tp, type_to_proto(t).unwrap_or_default(), T::TypeProto),
        AttrValue::Floats(v) => list(&mut p.floats, v.clone(), T::Floats),
        AttrValue::Ints(v) => list(&mut p.ints, v.clone(), T::Ints),
        AttrValue::Strings(v) => list(&mut p.strings, v.clone(), T::Strings),
        AttrValue::Tensors(ts) => {
            let ts = ts.iter().map(|t| tensor_to_proto(t, None, &what, ext.as_deref_mut())).collect::<Result<_>>()?;
            list(&mut p.tensors, ts, T::Tensors)
        }
        AttrValue::Graphs(gs) => {
            let gs = gs.iter().map(|g| graph_to_proto(g, &a.name, ext, depth + 1)).collect::<Result<_>>()?;
            list(&mut p.graphs, gs, T::Graphs)
        }
        AttrValue::SparseTensors(ts) => {
            let ts = ts.iter().map(|t| sparse_to_proto(t, &what)).collect::<Result<_>>()?;
            list(&mut p.sparse_tensors, ts, T::SparseTensors)
        }
        AttrValue::Types(ts) => {
            list(&mut p.type_protos, ts.iter().map(|t| type_to_proto(t).unwrap_or_default()).collect(), T::TypeProtos)
        }
    };
    p.r#type = Some(ty as i32);
    Ok(p)
}

fn set<V>(field: &mut Option<V>, value: V, ty: T) -> T {
    *field = Some(value);
    ty
}

fn list<V>(field: &mut Vec<V>, values: Vec<V>, ty: T) -> T {
    *field = values;
    ty
}
