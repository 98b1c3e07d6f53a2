//! The `all` level's layout choice: convolution chains move into the blocked NCHWc layout of
//! the EP that runs them, when it has one ([`ExecutionProvider::nchwc_block`]), as ONNX Runtime
//! does for its CPU EP.
//!
//! A blocked tensor of NCHW shape `[N, C, H, W]` with block `b` is `[N, ceil(C/b), H, W, b]`
//! (the `b` channels of a pixel are one SIMD vector). The pass walks the graph once, in order:
//!
//! - Conv and FusedConv (2-D, float, constant weights, group 1 or depthwise, pads explicit or
//!   resolvable) become `ai.onyx` NchwcConv, reading the blocked twin of X when there is one,
//!   X itself when it has fewer channels than a block (a stem), else a ReorderInput of X (one
//!   per value, shared); a FusedConv's residual likewise;
//! - MaxPool (Indices unread), AveragePool, GlobalAveragePool and GlobalMaxPool of a blocked
//!   value become their Nchwc forms;
//! - elementwise ops whose tensor inputs are all blocked values of one shape (no
//!   broadcasting) run unchanged on the blocked twins;
//! - any other reader of a converted value, and a graph output, gets the NCHW value back from
//!   one ReorderOutput placed before its first reader.
//!
//! Padding channels (past C in the last block) hold values no real channel depends on: the
//! kernels never mix lanes except NchwcConv, which reads only real input channels.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::conv::only_first_output_used;
use super::fresh_name;
use super::view::View;
use crate::ep::ExecutionProvider;
use crate::ir::{AttrValue, Attribute, Graph, Model, Node, MS_DOMAIN, ONYX_DOMAIN};
use crate::types::Dim;
use crate::{DataType, Result};

/// Elementwise ops that run unchanged on blocked tensors of one shape (every input blocked).
const ELEMENTWISE: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Sum",
    "Relu",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Selu",
    "Softplus",
    "Neg",
    "Abs",
    "Clip",
];

/// The blocked form of a value.
#[derive(Clone, Debug)]
struct Twin {
    /// Name of the blocked value.
    name: String,
    /// Channels of the NCHW value.
    channels: usize,
    block: usize,
    /// The provider that runs the chain.
    provider: usize,
}

/// The pass's state while it walks the graph.
struct Walk<'v, 'g> {
    view: &'v View<'g>,
    providers: &'v [Arc<dyn ExecutionProvider>],
    /// Blocked twins by NCHW name.
    twins: HashMap<String, Twin>,
    /// NCHW values a ReorderOutput already gives back.
    restored: HashSet<String>,
    /// Names taken by new values.
    taken: HashSet<String>,
    nodes: Vec<Node>,
    rewrites: usize,
}

/// Rewrites `model`'s main graph; returns the number of nodes converted.
pub(super) fn nchwc(model: &mut Model, providers: &[Arc<dyn ExecutionProvider>]) -> Result<usize> {
    if !providers.iter().any(|p| p.nchwc_block().is_some()) {
        return Ok(0);
    }
    let view = View::new(&model.graph, &model.opsets)?;
    let mut walk = Walk {
        view: &view,
        providers,
        twins: HashMap::new(),
        restored: HashSet::new(),
        taken: HashSet::new(),
        nodes: Vec::new(),
        rewrites: 0,
    };
    for i in 0..model.graph.nodes.len() {
        walk.node(i);
    }
    for output in &model.graph.outputs {
        walk.restore(&output.name);
    }
    let (nodes, rewrites) = (walk.nodes, walk.rewrites);
    if rewrites > 0 {
        model.graph.nodes = nodes;
        model.opsets.entry(ONYX_DOMAIN.to_string()).or_insert(1);
    }
    Ok(rewrites)
}

/// A new `ai.onyx` node.
fn onyx_node(op: &str, name: &str, inputs: Vec<String>, output: String, attributes: Vec<Attribute>) -> Node {
    Node {
        name: name.to_string(),
        op_type: op.to_string(),
        domain: ONYX_DOMAIN.to_string(),
        inputs,
        outputs: vec![output],
        attributes,
        ..Default::default()
    }
}

fn ints(name: &str, v: Vec<i64>) -> Attribute {
    Attribute { name: name.to_string(), value: AttrValue::Ints(v) }
}

fn int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.to_string(), value: AttrValue::Int(v) }
}

impl Walk<'_, '_> {
    fn graph(&self) -> &Graph {
        self.view.graph
    }

    /// A fresh name for a new value.
    fn fresh(&mut self, base: &str) -> String {
        let name = fresh_name(self.graph(), base, &self.taken);
        self.taken.insert(name.clone());
        name
    }

    /// The provider that takes node `i`, with its block size.
    fn provider_block(&self, node: &Node) -> Option<(usize, usize)> {
        let p = self.view.placement(node, &HashMap::new(), self.providers)?;
        Some((p, self.providers[p].nchwc_block()?))
    }

    /// True when provider `p` takes the new node `node`.
    fn takes(&self, p: usize, node: &Node) -> bool {
        self.view.placement(node, &HashMap::new(), self.providers) == Some(p)
    }

    /// Handles node `i`: converted, or copied after restoring the NCHW inputs it reads.
    fn node(&mut self, i: usize) {
        let node = self.view.node(i);
        let converted = match (node.domain.as_str(), node.op_type.as_str()) {
            ("" | "ai.onnx", "Conv") => self.conv(node),
            (MS_DOMAIN, "FusedConv") => self.conv(node),
            ("" | "ai.onnx", "MaxPool" | "AveragePool") => self.pool(node),
            ("" | "ai.onnx", "GlobalAveragePool" | "GlobalMaxPool") => self.global_pool(node),
            ("" | "ai.onnx", op) if ELEMENTWISE.contains(&op) => self.elementwise(node),
            _ => false,
        };
        if converted {
            self.rewrites += 1;
            return;
        }
        for name in node.inputs.iter().chain(&node.implicit_inputs) {
            self.restore(name);
        }
        self.nodes.push(node.clone());
    }

    /// Makes sure the NCHW value `name` exists: a ReorderOutput of its twin, once.
    fn restore(&mut self, name: &str) {
        let Some(twin) = self.twins.get(name) else { return };
        if !self.restored.insert(name.to_string()) {
            return;
        }
        let attrs = vec![int("block", twin.block as i64), int("channels", twin.channels as i64)];
        let reorder = onyx_node(
            "ReorderOutput",
            &format!("{name}_reorder_output"),
            vec![twin.name.clone()],
            name.to_string(),
            attrs,
        );
        self.nodes.push(reorder);
    }

    /// The blocked form of NCHW value `name` for a chain on provider `p` with block `b`: its
    /// twin, or a new ReorderInput (recorded as its twin).
    fn blocked_input(&mut self, name: &str, channels: usize, p: usize, b: usize) -> Option<String> {
        if let Some(t) = self.twins.get(name) {
            return (t.block == b && t.provider == p).then(|| t.name.clone());
        }
        let blocked = self.fresh(&format!("{name}_nchwc"));
        let reorder = onyx_node(
            "ReorderInput",
            &format!("{name}_reorder_input"),
            vec![name.to_string()],
            blocked.clone(),
            vec![int("block", b as i64)],
        );
        if !self.takes(p, &reorder) {
            return None;
        }
        self.nodes.push(reorder);
        // The NCHW value exists already: readers keep reading it.
        self.restored.insert(name.to_string());
        self.twins.insert(name.to_string(), Twin { name: blocked.clone(), channels, block: b, provider: p });
        Some(blocked)
    }

    /// Conv or FusedConv → NchwcConv.
    fn conv(&mut self, node: &Node) -> bool {
        let Some(plan) = ConvPlan::new(self.view, node) else { return false };
        let Some((p, b)) = self.provider_block(node) else { return false };
        let mut attrs = plan.attributes(b);
        attrs.extend(
            node.attributes.iter().filter(|a| a.name == "activation" || a.name == "activation_params").cloned(),
        );
        let mut new = onyx_node("NchwcConv", &node.name, node.inputs.clone(), String::new(), attrs);
        if !self.takes(p, &new) {
            return false;
        }
        let x = &node.inputs[0];
        let x_in = match self.twins.get(x.as_str()) {
            Some(t) if t.block == b && t.provider == p => t.name.clone(),
            Some(_) => return false,
            None if plan.group == 1 && plan.c_in < b => x.clone(),
            None => {
                let Some(blocked) = self.blocked_input(x, plan.c_in, p, b) else { return false };
                blocked
            }
        };
        let z_in = match node.input(3) {
            Some(z) => match self.blocked_input(z, plan.c_out, p, b) {
                Some(blocked) => blocked,
                None => return false,
            },
            None => String::new(),
        };
        let y = &node.outputs[0];
        let twin = self.fresh(&format!("{y}_nchwc"));
        new.inputs = vec![x_in, node.inputs[1].clone(), node.input(2).unwrap_or_default().to_string(), z_in];
        new.outputs = vec![twin.clone()];
        self.nodes.push(new);
        self.twins.insert(y.clone(), Twin { name: twin, channels: plan.c_out, block: b, provider: p });
        true
    }

    /// The twin of input 0 of `node` when the provider that takes `node` runs its chain.
    fn chain_input(&self, node: &Node) -> Option<Twin> {
        let twin = self.twins.get(node.input(0)?)?.clone();
        (self.view.placement(node, &HashMap::new(), self.providers) == Some(twin.provider)).then_some(twin)
    }

    /// Pushes `new` (the Nchwc form of `node`, output `twin`) when the chain's provider takes
    /// it, and records the twin of `node`'s output.
    fn convert_to(&mut self, node: &Node, mut new: Node, from: &Twin) -> bool {
        let y = &node.outputs[0];
        let twin = self.fresh(&format!("{y}_nchwc"));
        new.outputs = vec![twin.clone()];
        if !self.takes(from.provider, &new) {
            return false;
        }
        self.nodes.push(new);
        self.twins.insert(y.clone(), Twin { name: twin, ..from.clone() });
        true
    }

    /// MaxPool / AveragePool (2-D, explicit pads, Indices unread) of a blocked value.
    fn pool(&mut self, node: &Node) -> bool {
        let Some(from) = self.chain_input(node) else { return false };
        let kernel_2d = node.get_ints("kernel_shape").ok().flatten().is_some_and(|k| k.len() == 2);
        let auto_pad = node.string_or("auto_pad", "NOTSET").ok();
        let explicit = matches!(auto_pad.as_deref(), Some("NOTSET" | "VALID"));
        if !kernel_2d
            || !explicit
            || node.int_or("storage_order", 0).ok() != Some(0)
            || !only_first_output_used(self.view, node)
        {
            return false;
        }
        let mut attrs: Vec<Attribute> = node.attributes.iter().filter(|a| a.name != "auto_pad").cloned().collect();
        attrs.push(int("block", from.block as i64));
        let new =
            onyx_node(&format!("Nchwc{}", node.op_type), &node.name, vec![from.name.clone()], String::new(), attrs);
        self.convert_to(node, new, &from)
    }

    /// GlobalAveragePool / GlobalMaxPool of a blocked value.
    fn global_pool(&mut self, node: &Node) -> bool {
        let Some(from) = self.chain_input(node) else { return false };
        let new = onyx_node(
            &format!("Nchwc{}", node.op_type),
            &node.name,
            vec![from.name.clone()],
            String::new(),
            vec![int("block", from.block as i64)],
        );
        self.convert_to(node, new, &from)
    }

    /// An elementwise op whose tensor inputs are blocked values of one shape.
    fn elementwise(&mut self, node: &Node) -> bool {
        let Some(from) = self.chain_input(node) else { return false };
        let (first, tensors) = (&node.inputs[0], if node.op_type == "Clip" { 1 } else { node.inputs.len() });
        if node.op_type == "Clip"
            && !node.inputs.iter().skip(1).filter(|n| !n.is_empty()).all(|n| self.view.scalar(n).is_some())
        {
            return false;
        }
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (k, name) in node.inputs.iter().enumerate() {
            if k >= tensors {
                inputs.push(name.clone());
                continue;
            }
            match self.twins.get(name.as_str()) {
                Some(t) if t.block == from.block && t.provider == from.provider && self.view.same_type(name, first) => {
                    inputs.push(t.name.clone())
                }
                _ => return false,
            }
        }
        let mut new = node.clone();
        new.inputs = inputs;
        self.convert_to(node, new, &from)
    }
}

/// What a convertible Conv or FusedConv is: sizes and explicit window attributes.
struct ConvPlan {
    c_in: usize,
    c_out: usize,
    group: usize,
    kernel: [usize; 2],
    strides: Vec<i64>,
    dilations: Vec<i64>,
    pads: Vec<i64>,
}

impl ConvPlan {
    /// The plan when `node` can become an NchwcConv: f32 X `[N, C, H, W]` with C known,
    /// constant f32 weights, group 1 or depthwise, 2-D, pads resolvable.
    fn new(view: &View<'_>, node: &Node) -> Option<Self> {
        let x = node.input(0)?;
        let shape = view.shape(x)?;
        let &[_, Dim::Fixed(c_in), ref h, ref w] = shape else { return None };
        if view.dtype(x) != Some(DataType::Float) || node.outputs.len() != 1 {
            return None;
        }
        let weights = view.constant(node.input(1)?)?;
        let &[c_out, per_group, kh, kw] = weights.shape() else { return None };
        if weights.dtype() != DataType::Float || kh == 0 || kw == 0 || per_group == 0 {
            return None;
        }
        let group = usize::try_from(node.int_or("group", 1).ok()?).ok()?;
        let depthwise = group > 1 && group == c_in && group == c_out && per_group == 1;
        if !(group == 1 && per_group == c_in || depthwise) {
            return None;
        }
        if node.get_ints("kernel_shape").ok()?.is_some_and(|k| k != [kh as i64, kw as i64]) {
            return None;
        }
        let two = |name: &str| -> Option<Vec<i64>> {
            match node.get_ints(name).ok()? {
                None => Some(vec![1, 1]),
                Some(v) if v.len() == 2 && v.iter().all(|&s| s >= 1) => Some(v.to_vec()),
                Some(_) => None,
            }
        };
        let (strides, dilations) = (two("strides")?, two("dilations")?);
        let pads = match node.string_or("auto_pad", "NOTSET").ok()?.as_str() {
            "NOTSET" | "" => match node.get_ints("pads").ok()? {
                None => vec![0; 4],
                Some(p) if p.len() == 4 && p.iter().all(|&v| v >= 0) => p.to_vec(),
                Some(_) => return None,
            },
            "VALID" => vec![0; 4],
            mode => same_pads(mode, [h, w], [kh, kw], &strides, &dilations)?,
        };
        Some(ConvPlan { c_in, c_out, group, kernel: [kh, kw], strides, dilations, pads })
    }

    /// NchwcConv's window attributes.
    fn attributes(&self, block: usize) -> Vec<Attribute> {
        vec![
            ints("kernel_shape", self.kernel.iter().map(|&k| k as i64).collect()),
            ints("strides", self.strides.clone()),
            ints("dilations", self.dilations.clone()),
            ints("pads", self.pads.clone()),
            int("group", self.group as i64),
            int("block", block as i64),
        ]
    }
}

/// Explicit pads for SAME_UPPER / SAME_LOWER over known spatial sizes (begin H, W, end H, W).
fn same_pads(mode: &str, dims: [&Dim; 2], kernel: [usize; 2], strides: &[i64], dilations: &[i64]) -> Option<Vec<i64>> {
    let mut begin = Vec::new();
    let mut end = Vec::new();
    for i in 0..2 {
        let Dim::Fixed(input) = *dims[i] else { return None };
        let (s, d) = (strides[i] as usize, dilations[i] as usize);
        let out = input.div_ceil(s);
        let total = ((out.max(1) - 1) * s + (kernel[i] - 1) * d + 1).saturating_sub(input);
        let small = total / 2;
        let (b, e) = match mode {
            "SAME_UPPER" => (small, total - small),
            "SAME_LOWER" => (total - small, small),
            _ => return None,
        };
        begin.push(b as i64);
        end.push(e as i64);
    }
    begin.extend(end);
    Some(begin)
}

#[cfg(test)]
mod tests;
