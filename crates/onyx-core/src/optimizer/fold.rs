//! Constant folding: nodes whose inputs are all constants are evaluated once, by the CPU
//! provider, and replaced by initializers; so are nodes whose outputs inference already knows
//! (shape arithmetic on fixed shapes). Never random ops, nodes with subgraphs, the
//! quantize/dequantize pairs of quantized models, graph outputs, or results over 16 MiB.

use std::collections::HashMap;

use super::view::View;
use super::{Changes, Fusion, Rewrite};
use crate::ep::{ExecutionProvider, ValueRef};
use crate::ir::{Node, MS_DOMAIN};
use crate::ops::infer::{from_constant, infer_node, Inferred};
use crate::ops::registry;
use crate::types::TensorType;
use crate::{Device, Result, Tensor, Value};

/// Largest output constant folding creates.
pub(crate) const MAX_FOLDED_BYTES: usize = 16 << 20;

/// Ops whose result differs from run to run.
const NONDETERMINISTIC: &[&str] =
    &["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"];

/// Ops kept although their inputs are constant: folding a DequantizeLinear of int8 weights would
/// undo the quantization (ONNX Runtime keeps them too).
const KEPT: &[&str] = &["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"];

/// True when node `i` may be replaced by its values.
fn may_fold(view: &View<'_>, i: usize) -> bool {
    let node = view.node(i);
    let domain_ok = node.domain.is_empty() || node.domain == "ai.onnx" || node.domain == MS_DOMAIN;
    domain_ok
        && !NONDETERMINISTIC.contains(&node.op_type.as_str())
        && !KEPT.contains(&node.op_type.as_str())
        && node.implicit_inputs.is_empty()
        && node.subgraphs().next().is_none()
        && node.outputs.iter().any(|o| !o.is_empty())
        && node.outputs.iter().all(|o| !view.is_output(o))
}

/// Replaces foldable nodes by initializers. Nodes are in topological order and each one sees
/// the constants this pass folded before it, so a whole chain of foldable nodes (the shape
/// arithmetic of exported models can be dozens of nodes deep) folds in one pass.
pub(super) fn fold_constants(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let cpu = fusion.providers().iter().find(|p| p.device() == Device::Cpu);
    let mut changes = Changes::default();
    let mut folded: HashMap<String, Tensor> = HashMap::new();
    for i in 0..view.graph.nodes.len() {
        if !may_fold(view, i) {
            continue;
        }
        let node = view.node(i);
        let outputs: Vec<&String> = node.outputs.iter().filter(|o| !o.is_empty()).collect();
        let values = if let Some(known) = outputs.iter().map(|o| view.constant(o).cloned()).collect::<Option<Vec<_>>>()
        {
            Some(known)
        } else {
            let inputs_constant =
                node.inputs.iter().filter(|n| !n.is_empty()).all(|n| constant(view, &folded, n).is_some());
            match cpu {
                Some(cpu) if inputs_constant && outputs_fit(view, node, &folded) => {
                    evaluate(view, node, cpu.as_ref(), &folded)
                }
                _ => None,
            }
        };
        if let Some(values) = values {
            folded.extend(outputs.iter().map(|o| o.to_string()).zip(values.iter().cloned()));
            let initializers = outputs.into_iter().cloned().zip(values).collect();
            changes.add(Rewrite { remove: vec![i], node: None, initializers });
        }
    }
    Ok(changes)
}

/// True when every output of `node`, whose inputs are all constants, has a fixed shape of at
/// most [`MAX_FOLDED_BYTES`]: as the view inferred it, or, where an input was folded by this
/// pass (after the view was made), as inference gives it from the constant inputs.
fn outputs_fit(view: &View<'_>, node: &Node, folded: &HashMap<String, Tensor>) -> bool {
    let fits = |t: Option<&TensorType>| {
        let count = t.and_then(|t| t.concrete()).and_then(|s| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d)));
        count.zip(t).and_then(|(c, t)| t.dtype.byte_len(c)).is_some_and(|b| b <= MAX_FOLDED_BYTES)
    };
    if !node.inputs.iter().any(|n| folded.contains_key(n)) {
        return node.outputs.iter().filter(|o| !o.is_empty()).all(|o| fits(view.tensor_type(o)));
    }
    let Ok(since) = registry::since_version(node, &view.opsets) else {
        return false;
    };
    let inputs: Vec<Option<Inferred>> =
        node.inputs.iter().map(|n| constant(view, folded, n).map(from_constant)).collect();
    let inputs: Vec<Option<&Inferred>> = inputs.iter().map(Option::as_ref).collect();
    let Ok(inferred) = infer_node(node, since, &inputs) else {
        return false;
    };
    node.outputs
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.is_empty())
        .all(|(i, _)| fits(inferred.get(i).and_then(Inferred::tensor_type)))
}

/// The constant value of `name`: one the view knows, or one this pass `folded`.
fn constant<'a>(view: &'a View<'_>, folded: &'a HashMap<String, Tensor>, name: &str) -> Option<&'a Tensor> {
    folded.get(name).or_else(|| view.constant(name))
}

/// Runs `node` on its constant inputs (see [`constant`]) with the CPU provider: its host tensor
/// outputs, or `None` when the provider does not take it or it fails (the run would report
/// that error).
fn evaluate(
    view: &View<'_>,
    node: &Node,
    cpu: &dyn ExecutionProvider,
    folded: &HashMap<String, Tensor>,
) -> Option<Vec<Tensor>> {
    let ctx = view.context(node, folded).ok()?;
    if !cpu.supports(&ctx) {
        return None;
    }
    let kernel = cpu.build_kernel(&ctx).ok()?;
    let values: Vec<Option<Value>> =
        node.inputs.iter().map(|n| constant(view, folded, n).cloned().map(Value::Tensor)).collect();
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
    let wanted: Vec<bool> = node.outputs.iter().map(|o| !o.is_empty()).collect();
    let out = kernel.run(&refs, &wanted).ok()?;
    let mut tensors = vec![];
    for (i, name) in node.outputs.iter().enumerate() {
        if name.is_empty() {
            continue;
        }
        match out.get(i) {
            Some(Value::Tensor(t)) if t.device() == Device::Cpu && t.dtype().byte_len(t.len())? <= MAX_FOLDED_BYTES => {
                tensors.push(t.clone())
            }
            _ => return None,
        }
    }
    Some(tensors)
}
