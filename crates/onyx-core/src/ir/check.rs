//! Structural checks of a graph: names resolve, no value is produced twice, no cycles.
//! Sorts nodes topologically and records the outer-scope values each subgraph reads.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{Graph, Model, Node};
use crate::ops::registry;
use crate::{Error, Result};

/// Subgraphs nested deeper than this are rejected (a malicious file could nest without bound).
pub const MAX_SUBGRAPH_DEPTH: usize = 64;

/// The newest model IR version this build reads (ONNX 1.22's, that of its onnx-ml.proto).
pub const MAX_IR_VERSION: i64 = 13;

/// Checks a whole model: opset imports, every node's operator, every graph's structure.
/// Reorders nodes topologically and fills [`Node::implicit_inputs`].
pub fn check_model(model: &mut Model) -> Result<()> {
    if model.ir_version > MAX_IR_VERSION {
        return Err(Error::Version(format!(
            "model IR version {}: expected at most {MAX_IR_VERSION} (this build's ONNX format)",
            model.ir_version
        )));
    }
    registry::check_opsets(&model.opsets)?;
    check_graph(&mut model.graph, &HashSet::new(), &model.opsets, 0)?;
    Ok(())
}

fn check_graph(
    graph: &mut Graph,
    outer: &HashSet<String>,
    opsets: &super::OpsetImports,
    depth: usize,
) -> Result<BTreeSet<String>> {
    if depth > MAX_SUBGRAPH_DEPTH {
        return Err(Error::InvalidModel(format!("subgraphs are nested more than {MAX_SUBGRAPH_DEPTH} deep")));
    }
    let what = if depth == 0 { "the main graph".to_string() } else { format!("subgraph '{}'", graph.name) };
    // Names defined in this graph, checked for duplicates.
    let mut defined: HashSet<String> = HashSet::new();
    for input in &graph.inputs {
        if !defined.insert(input.name.clone()) {
            return Err(Error::InvalidModel(format!("{what}: input '{}' is declared twice", input.name)));
        }
    }
    defined.extend(graph.initializers.keys().cloned());
    for node in &graph.nodes {
        for out in node.outputs.iter().filter(|o| !o.is_empty()) {
            if !defined.insert(out.clone()) {
                return Err(Error::InvalidModel(format!(
                    "{what}: value '{out}' is produced twice (again by {})",
                    node.location()
                )));
            }
        }
    }
    // Subgraphs see everything visible here.
    let mut visible: HashSet<String> = outer.clone();
    visible.extend(defined.iter().cloned());
    let mut outer_reads: BTreeSet<String> = BTreeSet::new();
    for node in &mut graph.nodes {
        registry::check_node(node, opsets)?;
        let mut implicit = BTreeSet::new();
        for attr in &mut node.attributes {
            let subs: Vec<&mut Graph> = match &mut attr.value {
                super::AttrValue::Graph(g) => vec![g.as_mut()],
                super::AttrValue::Graphs(gs) => gs.iter_mut().collect(),
                _ => vec![],
            };
            for sub in subs {
                implicit.extend(check_graph(sub, &visible, opsets, depth + 1)?);
            }
        }
        node.implicit_inputs = implicit.into_iter().collect();
        for name in node.inputs.iter().chain(&node.implicit_inputs).filter(|n| !n.is_empty()) {
            if !defined.contains(name) {
                if outer.contains(name) {
                    outer_reads.insert(name.clone());
                } else {
                    return Err(Error::InvalidModel(format!(
                        "{what}: {} reads '{name}', which no node, input or initializer defines",
                        node.location()
                    )));
                }
            }
        }
    }
    for out in &graph.outputs {
        if !defined.contains(&out.name) {
            if outer.contains(&out.name) {
                outer_reads.insert(out.name.clone());
            } else {
                return Err(Error::InvalidModel(format!("{what}: output '{}' is never produced", out.name)));
            }
        }
    }
    topo_sort(graph, &what)?;
    Ok(outer_reads)
}

/// Sorts `graph.nodes` so that every node comes after the producers of its inputs.
/// Keeps the file order where it is already valid; reports a cycle by naming its nodes.
pub fn topo_sort(graph: &mut Graph, what: &str) -> Result<()> {
    let producer: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().filter(|o| !o.is_empty()).map(move |o| (o.as_str(), i)))
        .collect();
    let n = graph.nodes.len();
    let mut pending = vec![0usize; n];
    let mut consumers: Vec<Vec<usize>> = vec![vec![]; n];
    for (i, node) in graph.nodes.iter().enumerate() {
        let deps: BTreeSet<usize> = node_reads(node).filter_map(|name| producer.get(name).copied()).collect();
        pending[i] = deps.len();
        for d in deps {
            consumers[d].push(i);
        }
    }
    // A min-heap on the original index keeps the order stable.
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> =
        (0..n).filter(|&i| pending[i] == 0).map(std::cmp::Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &c in &consumers[i] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.push(std::cmp::Reverse(c));
            }
        }
    }
    if order.len() != n {
        let stuck: Vec<String> =
            (0..n).filter(|&i| pending[i] > 0).take(5).map(|i| graph.nodes[i].location().to_string()).collect();
        return Err(Error::InvalidModel(format!("{what} has a cycle through {}", stuck.join(", "))));
    }
    let mut nodes: Vec<Option<Node>> = std::mem::take(&mut graph.nodes).into_iter().map(Some).collect();
    graph.nodes = order.into_iter().filter_map(|i| nodes[i].take()).collect();
    Ok(())
}

fn node_reads(node: &Node) -> impl Iterator<Item = &str> {
    node.inputs.iter().chain(&node.implicit_inputs).map(String::as_str).filter(|s| !s.is_empty())
}
