//! `Model`, `Graph` and `Node` to ModelProto, GraphProto and NodeProto.

use onyx_core::ir::{Graph, Model, Node};
use onyx_core::{Error, Result};

use super::attribute::attribute_to_proto;
use super::external::ExternalWriter;
use super::tensor::tensor_to_proto;
use super::types::{non_empty, value_info_to_proto};
use crate::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto};

/// Where large tensors go: the external data file, or `None` to keep every tensor inline.
pub(crate) type Ext<'a> = Option<&'a mut ExternalWriter>;

/// The first IR version that supports each default-domain opset, from that opset on
/// (onnx.helper.VERSION_TABLE; opsets before 9 need IR version 3).
const IR_FOR_OPSET: [(i64, i64); 10] =
    [(9, 4), (10, 5), (11, 6), (12, 7), (15, 8), (19, 9), (21, 10), (23, 11), (24, 12), (25, 13)];

/// The IR version written for `model`: its own, or when it has none (a model built in code),
/// the first that supports its default-domain opset.
fn ir_version(model: &Model) -> i64 {
    if model.ir_version > 0 {
        return model.ir_version;
    }
    let opset = model.opsets.get("").copied().unwrap_or(1);
    IR_FOR_OPSET.iter().rev().find(|(since, _)| opset >= *since).map_or(3, |&(_, ir)| ir)
}

/// Converts a whole model.
pub(crate) fn model_to_proto(model: &Model, ext: &mut Ext<'_>) -> Result<ModelProto> {
    let opset_import = model
        .opsets
        .iter()
        .map(|(domain, &version)| OperatorSetIdProto { domain: Some(domain.clone()), version: Some(version) })
        .collect();
    Ok(ModelProto {
        ir_version: Some(ir_version(model)),
        opset_import,
        producer_name: non_empty(&model.producer_name),
        producer_version: non_empty(&model.producer_version),
        domain: non_empty(&model.domain),
        model_version: model.model_version,
        doc_string: non_empty(&model.doc),
        graph: Some(graph_to_proto(&model.graph, "main_graph", ext, 0)?),
        metadata_props: model.metadata.iter().map(|(k, v)| entry(k, v)).collect(),
        ..Default::default()
    })
}

/// A key/value entry.
pub(crate) fn entry(key: &str, value: &str) -> StringStringEntryProto {
    StringStringEntryProto { key: Some(key.to_string()), value: Some(value.to_string()) }
}

/// Converts a graph nested `depth` levels deep; a graph without a name is written as
/// `fallback_name`, since ONNX requires one.
pub(crate) fn graph_to_proto(
    graph: &Graph,
    fallback_name: &str,
    ext: &mut Ext<'_>,
    depth: usize,
) -> Result<GraphProto> {
    if depth > crate::MAX_SUBGRAPH_DEPTH {
        return Err(Error::InvalidModel(format!("subgraphs are nested more than {} deep", crate::MAX_SUBGRAPH_DEPTH)));
    }
    let name = if graph.name.is_empty() { fallback_name } else { &graph.name };
    let mut initializer = Vec::with_capacity(graph.initializers.len());
    for (n, t) in &graph.initializers {
        let what = format!("initializer '{n}' of graph '{name}'");
        initializer.push(tensor_to_proto(t, Some(n), &what, ext.as_deref_mut())?);
    }
    let node = graph.nodes.iter().map(|n| node_to_proto(n, ext, depth)).collect::<Result<_>>()?;
    Ok(GraphProto {
        name: Some(name.to_string()),
        node,
        initializer,
        input: graph.inputs.iter().map(value_info_to_proto).collect(),
        output: graph.outputs.iter().map(value_info_to_proto).collect(),
        value_info: graph.value_info.iter().map(value_info_to_proto).collect(),
        doc_string: non_empty(&graph.doc),
        ..Default::default()
    })
}

/// Converts a node; the default domain is written as no domain.
fn node_to_proto(node: &Node, ext: &mut Ext<'_>, depth: usize) -> Result<NodeProto> {
    let at = node.location();
    let attribute = node.attributes.iter().map(|a| attribute_to_proto(a, &at, ext, depth)).collect::<Result<_>>()?;
    Ok(NodeProto {
        input: node.inputs.clone(),
        output: node.outputs.clone(),
        name: non_empty(&node.name),
        op_type: Some(node.op_type.clone()),
        domain: non_empty(&node.domain),
        attribute,
        doc_string: non_empty(&node.doc),
        ..Default::default()
    })
}
