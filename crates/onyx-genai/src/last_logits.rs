//! Logits of the last position only: generation reads one row of logits per run, so the
//! language-model head (the largest matrix product of a prompt step: hidden x vocabulary for
//! every prompt token) runs on the last position's hidden state only, and the logits output
//! is `[batch, 1, vocab]`.
//!
//! The rewrite walks back from the logits output through per-position ops (Cast, Tanh,
//! element-wise ops with a constant: Gemma's soft-capping) to the head's matrix product
//! (MatMul, MatMulNBits) and slices its input to the last position. Graphs of another shape
//! are left as they are.

use onyx_runtime::ir::{Graph, Node};
use onyx_runtime::types::{Dim, ValueType};
use onyx_runtime::Tensor;

/// Ops between the head's product and the logits that work position by position.
const PER_POSITION: [&str; 7] = ["Cast", "Tanh", "Div", "Mul", "Add", "Sub", "Softcap"];

/// Slices the input of the head that computes `logits` to the last position; returns whether
/// the graph was changed.
pub(crate) fn keep_last_position(graph: &mut Graph, logits: &str) -> bool {
    let Some(head) = find_head(graph, logits) else {
        return false;
    };
    let hidden = graph.nodes[head].inputs[0].clone();
    let last = format!("{hidden}/onyx_last_position");
    let constants = [("starts", -1), ("ends", i64::MAX), ("axes", 1)].map(|(name, v)| (format!("{last}/{name}"), v));
    for (name, v) in &constants {
        match Tensor::from_vec(vec![1], vec![*v]) {
            Ok(t) => graph.initializers.insert(name.clone(), t),
            Err(_) => return false,
        };
    }
    let slice = Node {
        name: last.clone(),
        op_type: "Slice".into(),
        inputs: vec![hidden, constants[0].0.clone(), constants[1].0.clone(), constants[2].0.clone()],
        outputs: vec![last.clone()],
        ..Node::default()
    };
    graph.nodes[head].inputs[0] = last;
    graph.nodes.insert(head, slice);
    // Declared shapes of the values after the head said "every position": they are now 1.
    let downstream = chain_values(graph, logits);
    graph.value_info.retain(|v| !downstream.contains(&v.name));
    for output in graph.outputs.iter_mut().filter(|o| o.name == logits) {
        if let ValueType::Tensor(t) = &mut output.ty {
            if let Some(dims) = t.shape.as_mut().filter(|d| d.len() == 3) {
                dims[1] = Dim::Fixed(1);
            }
        }
    }
    true
}

/// The index of the MatMul/MatMulNBits node whose output reaches `logits` through
/// per-position ops, each value used once.
fn find_head(graph: &Graph, logits: &str) -> Option<usize> {
    let mut value = logits.to_string();
    for _ in 0..8 {
        let (i, node) = graph.nodes.iter().enumerate().find(|(_, n)| n.outputs.first() == Some(&value))?;
        // The logits are read as the graph's output only; each value before by the next op.
        if uses(graph, &value) != 1 {
            return None;
        }
        match node.op_type.as_str() {
            "MatMul" | "MatMulNBits" => return (!node.inputs.is_empty()).then_some(i),
            op if PER_POSITION.contains(&op) => {
                // One input flows from the head; the others are constants.
                let flowing: Vec<&String> = node
                    .inputs
                    .iter()
                    .filter(|v| !v.is_empty() && !graph.initializers.contains_key(*v) && !is_constant_node(graph, v))
                    .collect();
                let [from] = flowing.as_slice() else {
                    return None;
                };
                value = (*from).clone();
            }
            _ => return None,
        }
    }
    None
}

/// Values on the chain from the head's output to `logits`.
fn chain_values(graph: &Graph, logits: &str) -> Vec<String> {
    let mut values = vec![logits.to_string()];
    let mut value = logits.to_string();
    while let Some(node) = graph.nodes.iter().find(|n| n.outputs.first() == Some(&value)) {
        if matches!(node.op_type.as_str(), "MatMul" | "MatMulNBits") {
            break;
        }
        match node
            .inputs
            .iter()
            .find(|v| !v.is_empty() && !graph.initializers.contains_key(*v) && !is_constant_node(graph, v))
        {
            Some(v) => {
                values.push(v.clone());
                value = v.clone();
            }
            None => break,
        }
    }
    values
}

fn uses(graph: &Graph, value: &str) -> usize {
    graph.nodes.iter().flat_map(|n| n.inputs.iter().chain(&n.implicit_inputs)).filter(|v| *v == value).count()
        + graph.outputs.iter().filter(|o| o.name == value).count()
}

fn is_constant_node(graph: &Graph, value: &str) -> bool {
    graph.nodes.iter().any(|n| n.op_type == "Constant" && n.outputs.first().map(String::as_str) == Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits_output() -> Vec<onyx_runtime::types::ValueInfo> {
        let dims = vec![Dim::Symbol("batch".into()), Dim::Symbol("sequence".into()), Dim::Fixed(1)];
        let ty = ValueType::Tensor(onyx_runtime::types::TensorType {
            dtype: onyx_runtime::DataType::Float,
            shape: Some(dims),
        });
        vec![onyx_runtime::types::ValueInfo { name: "logits".into(), ty, denotations: vec![], doc: String::new() }]
    }

    fn node(op: &str, inputs: &[&str], output: &str) -> Node {
        Node {
            name: output.into(),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            ..Node::default()
        }
    }

    #[test]
    fn slices_the_head_input_through_soft_capping_only() {
        let mut g = Graph {
            nodes: vec![
                node("SimplifiedLayerNormalization", &["x", "w"], "h"),
                node("MatMul", &["h", "W"], "m"),
                node("Div", &["m", "c"], "d"),
                node("Tanh", &["d"], "logits"),
            ],
            outputs: logits_output(),
            ..Graph::default()
        };
        for c in ["w", "W", "c"] {
            g.initializers.insert(c.into(), Tensor::from_vec(vec![1], vec![1.0f32]).unwrap());
        }
        assert!(keep_last_position(&mut g, "logits"));
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["SimplifiedLayerNormalization", "Slice", "MatMul", "Div", "Tanh"]);
        assert_eq!(g.nodes[2].inputs[0], g.nodes[1].outputs[0]);
        let ValueType::Tensor(t) = &g.outputs[0].ty else { unreachable!() };
        assert_eq!(t.shape.as_ref().unwrap()[1], Dim::Fixed(1), "the logits output now has one position");

        // A head output that something else reads too is left alone.
        let mut shared = Graph {
            nodes: vec![
                node("MatMul", &["h", "W"], "m"),
                node("Tanh", &["m"], "logits"),
                node("Relu", &["m"], "other"),
            ],
            outputs: logits_output(),
            ..Graph::default()
        };
        shared.initializers.insert("W".into(), Tensor::from_vec(vec![1], vec![1.0f32]).unwrap());
        assert!(!keep_last_position(&mut shared, "logits"));
    }
}
