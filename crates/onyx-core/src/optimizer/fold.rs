//! Constant folding: nodes whose inputs are all constants are evaluated once, by the CPU
//! provider, and replaced by initializers; so are nodes whose outputs inference already knows
//! (shape arithmetic on fixed shapes). Never random ops, nodes with subgraphs, the
//! quantize/dequantize pairs of quantized models, graph outputs, or results over 16 MiB.

use std::collections::{HashMap, HashSet};

use super::view::View;
use super::{Changes, Fusion, Rewrite};
use crate::ep::{ExecutionProvider, ValueRef};
use crate::ir::{Node, MS_DOMAIN};
use crate::ops::infer::{from_constant, infer_node, merge, Inferred};
use crate::ops::registry;
use crate::types::TensorType;
use crate::{Device, Result, Tensor, Value};

/// Largest output constant folding creates.
pub(crate) const MAX_FOLDED_BYTES: usize = 16 << 20;

/// Ops whose result differs from run to run.
const NONDETERMINISTIC: &[&str] =
    &["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"];

/// Ops kept although their inputs are constant: folding a DequantizeLinear of int8 weights would
/// undo the quantization (ONNX Runtime keeps them too); an Identity is removed by the identity
/// pass, which renames its readers to its input and so shares the tensor instead of copying it
/// (exporters tie weights through Identity). Their readers still fold: inference passes the
/// constant through.
const KEPT: &[&str] = &["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Identity"];

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

/// Replaces foldable nodes by initializers. Nodes are in topological order, and the pass keeps
/// inference up to date as it goes: what it folded, and what nodes reading those values infer
/// from them (a Pad whose pads were computed from shapes gets a fixed output shape, so a Shape
/// of it folds too). So the whole of an exported model's shape arithmetic, chains dozens of
/// nodes deep through data-dependent nodes, folds in one pass.
pub(super) fn fold_constants(view: &View<'_>, fusion: &Fusion<'_>) -> Result<Changes> {
    let cpu = fusion.providers().iter().find(|p| p.device() == Device::Cpu);
    let mut folded = vec![];
    let mut fresh = Fresh { view, values: HashMap::new() };
    for i in 0..view.graph.nodes.len() {
        let node = view.node(i);
        fresh.reinfer(node);
        if !may_fold(view, i) {
            continue;
        }
        let outputs: Vec<&String> = node.outputs.iter().filter(|o| !o.is_empty()).collect();
        let values = if let Some(known) = outputs.iter().map(|o| fresh.constant(o).cloned()).collect::<Option<Vec<_>>>()
        {
            Some(known)
        } else {
            let inputs_constant = node.inputs.iter().filter(|n| !n.is_empty()).all(|n| fresh.constant(n).is_some());
            let fits = outputs.iter().all(|o| fits(fresh.tensor_type(o)));
            match cpu {
                Some(cpu) if inputs_constant && fits => evaluate(&fresh, node, cpu.as_ref()),
                _ => None,
            }
        };
        if let Some(values) = values {
            for (name, value) in outputs.iter().zip(&values) {
                fresh.values.insert(name.to_string(), from_constant(value));
            }
            folded.push((i, outputs.into_iter().cloned().zip(values).collect()));
        }
    }
    Ok(changes_for(view, folded))
}

/// The rewrites that replace the `folded` nodes by their values. Only values some node left in
/// the graph reads become initializers, and initializers only folded nodes read are dropped: a
/// chain folded whole leaves its end alone, and the next view is not made of thousands of
/// unread constants.
fn changes_for(view: &View<'_>, folded: Vec<(usize, Vec<(String, Tensor)>)>) -> Changes {
    let removed: HashSet<usize> = folded.iter().map(|(i, _)| *i).collect();
    let read = |name: &str| view.is_output(name) || view.readers(name).iter().any(|r| !removed.contains(r));
    let mut changes = Changes::default();
    for (i, mut values) in folded {
        values.retain(|(name, _)| read(name));
        changes.add(Rewrite { remove: vec![i], nodes: vec![], initializers: values });
    }
    for name in view.graph.initializers.keys() {
        if !view.readers(name).is_empty() && !read(name) && !view.is_input(name) {
            changes.drop_initializer(name);
        }
    }
    changes
}

/// True for a fixed shape of at most [`MAX_FOLDED_BYTES`].
fn fits(t: Option<&TensorType>) -> bool {
    let count = t.and_then(|t| t.concrete()).and_then(|s| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d)));
    count.zip(t).and_then(|(c, t)| t.dtype.byte_len(c)).is_some_and(|b| b <= MAX_FOLDED_BYTES)
}

/// What the folding pass knows beyond its view: the values it folded and what inference gives
/// from them downstream, made after the view was.
struct Fresh<'v, 'g> {
    view: &'v View<'g>,
    values: HashMap<String, Inferred>,
}

impl Fresh<'_, '_> {
    fn inferred(&self, name: &str) -> Option<&Inferred> {
        self.values.get(name).or_else(|| self.view.inferred(name))
    }

    /// The constant value of `name` (never a graph input's).
    fn constant(&self, name: &str) -> Option<&Tensor> {
        match self.values.get(name) {
            Some(v) => v.constant.as_ref(),
            None => self.view.constant(name),
        }
    }

    fn tensor_type(&self, name: &str) -> Option<&TensorType> {
        self.inferred(name)?.tensor_type()
    }

    /// Infers `node` again when it reads a value this pass learned more about (nodes with
    /// subgraphs keep what the view inferred); the view's facts fill what the new inference
    /// leaves open.
    fn reinfer(&mut self, node: &Node) {
        if node.subgraphs().next().is_some() || !node.inputs.iter().any(|n| self.values.contains_key(n)) {
            return;
        }
        let Ok(since) = registry::since_version(node, &self.view.opsets) else {
            return;
        };
        let inputs: Vec<Option<&Inferred>> =
            node.inputs.iter().map(|n| if n.is_empty() { None } else { self.inferred(n) }).collect();
        let Ok(outputs) = infer_node(node, since, &inputs) else {
            return;
        };
        for (name, mut out) in node.outputs.iter().zip(outputs).filter(|(name, _)| !name.is_empty()) {
            if let Some(old) = self.view.inferred(name) {
                out.ty = merge(&out.ty, &old.ty);
            }
            self.values.insert(name.clone(), out);
        }
    }
}

/// Runs `node` on its constant inputs with the CPU provider: its host tensor
/// outputs, or `None` when the provider does not take it or it fails (the run would report
/// that error).
fn evaluate(fresh: &Fresh<'_, '_>, node: &Node, cpu: &dyn ExecutionProvider) -> Option<Vec<Tensor>> {
    let inputs: HashMap<String, Tensor> =
        node.inputs.iter().filter_map(|n| Some((n.clone(), fresh.constant(n)?.clone()))).collect();
    let ctx = fresh.view.context(node, &inputs).ok()?;
    if !cpu.supports(&ctx) {
        return None;
    }
    let kernel = cpu.build_kernel(&ctx).ok()?;
    let values: Vec<Option<Value>> = node.inputs.iter().map(|n| inputs.get(n).cloned().map(Value::Tensor)).collect();
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
