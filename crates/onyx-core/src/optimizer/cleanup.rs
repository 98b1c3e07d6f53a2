//! Basic clean-ups: nodes whose outputs nobody reads, initializers nobody reads, Identity and
//! inference-mode Dropout.

use std::collections::HashSet;

use super::view::View;
use super::{Changes, Fusion, Rewrite};
use crate::Result;

/// Removes nodes none of whose outputs is read or is a graph output (from the last node back,
/// so whole dead chains go at once), then initializers nobody reads (defaults of inputs kept).
pub(super) fn dead_nodes(view: &View<'_>, _: &Fusion<'_>) -> Result<Changes> {
    let graph = view.graph;
    let mut changes = Changes::default();
    let mut dead: HashSet<usize> = HashSet::new();
    for i in (0..graph.nodes.len()).rev() {
        let node = &graph.nodes[i];
        let live = node.outputs.is_empty()
            || node
                .outputs
                .iter()
                .filter(|o| !o.is_empty())
                .any(|o| view.is_output(o) || view.readers(o).iter().any(|r| !dead.contains(r)));
        if !live {
            dead.insert(i);
            changes.add(Rewrite { remove: vec![i], nodes: vec![], initializers: vec![] });
        }
    }
    for name in graph.initializers.keys() {
        let read = view.readers(name).iter().any(|r| !dead.contains(r));
        if !read && !view.is_output(name) && !view.is_input(name) {
            changes.drop_initializer(name);
        }
    }
    Ok(changes)
}

/// True when node `i` is an Identity, or a Dropout that computes nothing at inference: its
/// mask unread and training mode absent or a constant false (`is_test` not 0 before opset 7).
fn passes_through(view: &View<'_>, i: usize) -> bool {
    let node = view.node(i);
    match view.op(i) {
        "Identity" => node.input(0).is_some(),
        "Dropout" => {
            let mask_unread =
                node.outputs.get(1).is_none_or(|m| m.is_empty() || (view.readers(m).is_empty() && !view.is_output(m)));
            let training = match node.input(2) {
                None => Some(false),
                Some(t) => {
                    view.constant(t).and_then(|t| t.view().ok()?.bytes().ok().map(|b| b.iter().any(|&x| x != 0)))
                }
            };
            // Dropout before opset 7: `is_test` = 0 asks for training behaviour.
            let test_mode = node.get_int("is_test").ok().flatten().is_none_or(|v| v != 0);
            mask_unread && training == Some(false) && test_mode && node.input(0).is_some()
        }
        _ => false,
    }
}

/// Removes Identity and inference-mode Dropout nodes: readers of the output read the input
/// instead; when the output is a graph output, the input's producer writes it directly.
/// Values read by subgraphs are not renamed (their readers are not rewritten). A value is
/// renamed once per pass; renames chain, so many Identity nodes of one weight (exporters tie
/// weights that way) go at once.
pub(super) fn identities(view: &View<'_>, _: &Fusion<'_>) -> Result<Changes> {
    let graph = view.graph;
    let mut changes = Changes::default();
    let mut renamed: HashSet<&str> = HashSet::new();
    let read_by_subgraph = |name: &str| graph.nodes.iter().any(|n| n.implicit_inputs.iter().any(|v| v == name));
    for i in 0..graph.nodes.len() {
        if !passes_through(view, i) {
            continue;
        }
        let node = view.node(i);
        let (x, y) = (node.inputs[0].as_str(), node.outputs[0].as_str());
        if y.is_empty() || read_by_subgraph(x) || read_by_subgraph(y) {
            continue;
        }
        let (from, to) = if !view.is_output(y) {
            (y, x)
        } else if view.producer(x).is_some() && !view.is_output(x) && !view.is_input(x) {
            (x, y)
        } else {
            continue;
        };
        if !renamed.contains(from) && changes.add(Rewrite { remove: vec![i], nodes: vec![], initializers: vec![] }) {
            changes.rename(from, to);
            renamed.insert(from);
        }
    }
    Ok(changes)
}
