//! GraphProto and NodeProto to the IR's `Graph` and `Node`.

use std::collections::BTreeMap;

use onyx_core::ir::{Graph, Node};
use onyx_core::{Error, Location, Result, Tensor};

use crate::attribute::attribute;
use crate::external::ExternalData;
use crate::proto::{GraphProto, NodeProto};
use crate::sparse::densify;
use crate::tensor::tensor_from_proto;
use crate::types::value_info;

/// Converts a graph nested `depth` levels deep (0 for the main graph).
pub(crate) fn graph(proto: GraphProto, ext: &mut ExternalData, depth: usize) -> Result<Graph> {
    if depth > crate::MAX_SUBGRAPH_DEPTH {
        return Err(Error::InvalidModel(format!("subgraphs are nested more than {} deep", crate::MAX_SUBGRAPH_DEPTH)));
    }
    let name = proto.name.unwrap_or_default();
    let what = if depth == 0 { "the main graph".to_string() } else { format!("subgraph '{name}'") };
    let initializers = initializers(proto.initializer, proto.sparse_initializer, ext, &what)?;
    let nodes = proto.node.into_iter().map(|n| node(n, ext, depth)).collect::<Result<Vec<_>>>()?;
    let infos = |v: Vec<_>| v.into_iter().map(value_info).collect::<Result<Vec<_>>>();
    Ok(Graph {
        name,
        nodes,
        inputs: infos(proto.input).map_err(|e| crate::in_context(e, &what))?,
        outputs: infos(proto.output).map_err(|e| crate::in_context(e, &what))?,
        initializers,
        value_info: infos(proto.value_info).map_err(|e| crate::in_context(e, &what))?,
        doc: proto.doc_string.unwrap_or_default(),
    })
}

/// Dense and densified sparse initializers by name; names must be present and unique.
fn initializers(
    dense: Vec<crate::proto::TensorProto>,
    sparse: Vec<crate::proto::SparseTensorProto>,
    ext: &mut ExternalData,
    what: &str,
) -> Result<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    let mut insert = |name: String, t: Tensor| {
        if name.is_empty() {
            return Err(Error::InvalidModel(format!("{what}: an initializer has no name")));
        }
        if out.contains_key(&name) {
            return Err(Error::InvalidModel(format!("{what}: initializer '{name}' is declared twice")));
        }
        out.insert(name, t);
        Ok(())
    };
    for t in dense {
        let name = t.name.clone().unwrap_or_default();
        insert(name, tensor_from_proto(t, ext).map_err(|e| crate::in_context(e, what))?)?;
    }
    for s in sparse {
        let (name, t) = densify(s, ext).map_err(|e| crate::in_context(e, what))?;
        insert(name, t)?;
    }
    Ok(out)
}

fn node(proto: NodeProto, ext: &mut ExternalData, depth: usize) -> Result<Node> {
    let at = Location { node: proto.name.clone().unwrap_or_default(), op: proto.op_type.clone().unwrap_or_default() };
    if at.op.is_empty() {
        return Err(Error::InvalidModel(format!("{at}: the node has no op_type")));
    }
    let mut attributes = Vec::with_capacity(proto.attribute.len());
    for a in proto.attribute {
        let a = attribute(a, ext, &at, depth)?;
        if attributes.iter().any(|b: &onyx_core::ir::Attribute| b.name == a.name) {
            return Err(Error::attribute(&at, &a.name, "one value", "the attribute given twice"));
        }
        attributes.push(a);
    }
    Ok(Node {
        name: at.node,
        op_type: at.op,
        domain: crate::normalize_domain(proto.domain.as_deref()),
        inputs: proto.input,
        outputs: proto.output,
        attributes,
        implicit_inputs: vec![],
        doc: proto.doc_string.unwrap_or_default(),
    })
}
