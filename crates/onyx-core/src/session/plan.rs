//! Planning: partition nodes over execution providers, build their kernels, insert copies at
//! device boundaries, and decide when each intermediate value can be freed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::ep::{ExecutionProvider, Kernel, NodeContext, SubgraphRunner};
use crate::error::Location;
use crate::ir::{Graph, OpsetImports};
use crate::ops::infer::{infer_graph, Inferred};
use crate::ops::registry;
use crate::types::ValueType;
use crate::{Error, Result, Tensor, TensorData, Value};

use super::executor::SubgraphPlan;

/// The providers a plan may use, in priority order; the fallback (if any) is last.
#[derive(Clone)]
pub(crate) struct Providers {
    pub list: Vec<Arc<dyn ExecutionProvider>>,
    pub has_fallback: bool,
    /// Initializers already copied to a device, shared by every plan of a session so that plans
    /// made for other input shapes do not upload the weights again.
    pub uploads: Arc<DeviceConstants>,
    /// The session's resource limits, checked by every plan and applied to its runs.
    pub limits: super::limits::Limits,
    /// The session's pool of host buffers, which CPU kernels take their outputs from (`None`
    /// when disabled).
    pub host_pool: Option<crate::host_pool::HostPool>,
    /// Kernels shared by the plans made for other input shapes.
    pub kernels: Arc<super::kernel_cache::KernelCache>,
}

/// Device copies of a model's initializers, keyed by the address and length of their host
/// bytes (which the session's model keeps alive) and the device.
#[derive(Default)]
pub(crate) struct DeviceConstants {
    copies: Mutex<HashMap<(usize, usize, Device), Value>>,
}

impl DeviceConstants {
    /// The copy of initializer `value` on `device`, made once.
    fn get_or_copy(&self, value: &Value, device: Device, providers: &Providers) -> Result<Value> {
        let Some(key) = host_key(value, device) else {
            return super::executor::copy_value(value, device, providers);
        };
        if let Some(v) = self.lock().get(&key) {
            // Constants sharing bytes may differ in shape (a folded Reshape of a weight that
            // another node reads as it is): the same device bytes, viewed in this shape.
            match (v, value) {
                (Value::Tensor(d), Value::Tensor(h)) if d.dtype() == h.dtype() && d.shape() == h.shape() => {
                    return Ok(v.clone())
                }
                (Value::Tensor(d), Value::Tensor(h)) if d.dtype() == h.dtype() => {
                    return Ok(Value::Tensor(d.reshaped(h.shape().to_vec())?))
                }
                _ => return super::executor::copy_value(value, device, providers),
            }
        }
        let copied = super::executor::copy_value(value, device, providers)?;
        self.lock().insert(key, copied.clone());
        Ok(copied)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, usize, Device), Value>> {
        // A panic while holding the lock leaves the map consistent (inserts are atomic).
        self.copies.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The cache key of a non-empty host tensor.
fn host_key(value: &Value, device: Device) -> Option<(usize, usize, Device)> {
    match value {
        Value::Tensor(t) => match t.data() {
            TensorData::Host(h) if !h.bytes().is_empty() => {
                Some((h.bytes().as_ptr() as usize, h.bytes().len(), device))
            }
            _ => None,
        },
        _ => None,
    }
}

impl Providers {
    /// The provider whose device is `device`.
    pub fn for_device(&self, device: Device) -> Result<&Arc<dyn ExecutionProvider>> {
        self.list
            .iter()
            .find(|p| p.device() == device)
            .ok_or_else(|| Error::Device(format!("no execution provider of this session owns {device}")))
    }
}

/// What a step does.
pub(crate) enum StepKind {
    /// Runs a node's kernel.
    /// `provider` is the index of the kernel's provider in [`Providers::list`].
    Kernel { kernel: Arc<dyn Kernel>, provider: usize, at: Location, wanted: Vec<bool> },
    /// Moves its one input to `to` (a no-op if it is already there).
    Copy { to: Device },
}

/// One step of a plan: reads `inputs` slots, writes `outputs` slots, then frees `free_after`.
/// `donatable` lists the positions in `inputs` whose value the run may hand over to the kernel
/// for an in-place output (see [`plan_donations`]).
pub(crate) struct Step {
    pub kind: StepKind,
    pub inputs: Vec<Option<usize>>,
    pub outputs: Vec<Option<usize>>,
    pub free_after: Vec<usize>,
    pub donatable: Vec<usize>,
}

/// Which provider runs a node, for reports such as `onyx info`.
#[derive(Debug, Clone)]
pub struct NodeAssignment {
    /// Node name.
    pub node: String,
    /// Op type.
    pub op: String,
    /// Name of the provider that runs it.
    pub provider: String,
}

/// A graph compiled for a list of providers.
pub(crate) struct Plan {
    pub slot_count: usize,
    /// Formal inputs: name and slot.
    pub inputs: Vec<(String, usize)>,
    /// Values of enclosing graphs read here: name and slot.
    pub outer: Vec<(String, usize)>,
    /// Slots filled before every run (initializers, constants already on their device).
    pub constants: Vec<(usize, Value)>,
    pub steps: Vec<Step>,
    /// Graph outputs: name and slot (on the device that computes them; the run copies them to
    /// where the caller wants them).
    pub outputs: Vec<(String, usize)>,
    pub assignments: Vec<NodeAssignment>,
    /// Copies per run with host inputs and outputs: device boundaries crossed by intermediate
    /// values, plus outputs computed on a device.
    pub copy_steps: usize,
    /// Everything inference found, for reports.
    pub inferred: HashMap<String, Inferred>,
    /// The most bytes of known size a run holds at once (see [`super::limits`]).
    pub peak_bytes: u64,
}

struct Builder {
    slots: HashMap<String, usize>,
    home: Vec<Device>,
    copies: HashMap<(usize, Device), usize>,
    constants: Vec<(usize, Value)>,
    steps: Vec<Step>,
    outer: Vec<(String, usize)>,
    /// Slots of graph inputs: never treated as constants, even when they have a default.
    input_slots: HashSet<usize>,
    /// Slots of initializers, whose device copies are shared across plans.
    initializer_slots: HashSet<usize>,
    /// Constants to copy to a device, all together while the kernels are built.
    pending: Vec<PendingCopy>,
}

/// A constant's copy to a device, to be made by [`copy_constants`].
struct PendingCopy {
    /// The slot the copy fills.
    slot: usize,
    value: Value,
    device: Device,
    /// Whether the value is an initializer, whose copies the session's plans share.
    initializer: bool,
}

impl Builder {
    fn new_slot(&mut self, device: Device) -> usize {
        self.home.push(device);
        self.home.len() - 1
    }

    fn define(&mut self, name: &str, device: Device) -> usize {
        let s = self.new_slot(device);
        self.slots.insert(name.to_string(), s);
        s
    }

    /// The slot of `name`, or a new outer-scope slot when the graph does not define it.
    fn lookup(&mut self, name: &str) -> usize {
        if let Some(&s) = self.slots.get(name) {
            return s;
        }
        let s = self.define(name, Device::Cpu);
        self.outer.push((name.to_string(), s));
        s
    }

    /// The slot holding `slot`'s value on `device`, inserting a copy once per (value, device).
    /// Constants are copied once, when the plan is made, instead of at every run.
    fn on_device(&mut self, slot: usize, device: Device) -> Result<usize> {
        if self.home[slot] == device {
            return Ok(slot);
        }
        if let Some(&s) = self.copies.get(&(slot, device)) {
            return Ok(s);
        }
        let dst = self.new_slot(device);
        let constant = self.constants.iter().find(|(s, _)| *s == slot).map(|(_, v)| v.clone());
        if let Some(value) = constant.filter(|_| !self.input_slots.contains(&slot)) {
            let initializer = self.initializer_slots.contains(&slot);
            self.pending.push(PendingCopy { slot: dst, value, device, initializer });
        } else {
            self.steps.push(Step {
                kind: StepKind::Copy { to: device },
                inputs: vec![Some(slot)],
                outputs: vec![Some(dst)],
                free_after: vec![],
                donatable: vec![],
            });
        }
        self.copies.insert((slot, device), dst);
        Ok(dst)
    }
}

/// Compiles `graph`. `known` holds what is known of values before the graph runs (inputs with
/// free dimensions applied, outer-scope values for subgraphs).
pub(crate) fn build_plan(
    graph: &Graph,
    providers: &Providers,
    opsets: &OpsetImports,
    known: HashMap<String, Inferred>,
) -> Result<Plan> {
    build_graph_plan(graph, providers, opsets, known, true)
}

/// [`build_plan`] for the model's graph (`top`) or a subgraph. Only the model's graph inputs can
/// be donated: a subgraph's inputs are values its runner (a Loop, a Scan, an If) still holds.
fn build_graph_plan(
    graph: &Graph,
    providers: &Providers,
    opsets: &OpsetImports,
    mut known: HashMap<String, Inferred>,
    top: bool,
) -> Result<Plan> {
    infer_graph(graph, opsets, &mut known)?;
    providers.limits.check_values(graph, &known)?;
    let mut b = Builder {
        slots: HashMap::new(),
        home: vec![],
        copies: HashMap::new(),
        constants: vec![],
        steps: vec![],
        outer: vec![],
        input_slots: HashSet::new(),
        initializer_slots: HashSet::new(),
        pending: vec![],
    };
    let mut inputs = vec![];
    for input in &graph.inputs {
        let s = b.define(&input.name, Device::Cpu);
        inputs.push((input.name.clone(), s));
        b.input_slots.insert(s);
    }
    for (name, tensor) in &graph.initializers {
        let s = match b.slots.get(name) {
            Some(&s) => s, // an input with a default value
            None => b.define(name, Device::Cpu),
        };
        b.constants.push((s, Value::Tensor(tensor.clone())));
        if !b.input_slots.contains(&s) {
            b.initializer_slots.insert(s);
        }
    }
    let known_ref = &known;
    let subgraphs = |g: &Graph| -> Result<Arc<dyn SubgraphRunner>> {
        let plan = build_graph_plan(g, providers, opsets, known_ref.clone(), false)?;
        Ok(Arc::new(SubgraphPlan::new(plan, providers.clone())))
    };
    let contexts = Contexts { opsets, known: known_ref, subgraphs: &subgraphs };
    let folded: Vec<Option<Vec<Tensor>>> = graph.nodes.iter().map(|n| folded_outputs(n, known_ref)).collect();
    // Each node's context, made once (a plan per decode step makes them for every node).
    let ctxs = (graph.nodes.iter().zip(&folded))
        .map(|(node, folded)| folded.is_none().then(|| contexts.of(node)).transpose())
        .collect::<Result<Vec<_>>>()?;
    let mut choice = vec![];
    let mut unsupported = vec![];
    for ((node, folded), ctx) in graph.nodes.iter().zip(&folded).zip(&ctxs) {
        let (None, Some(ctx)) = (folded, ctx) else {
            choice.push(0); // never read: the node becomes constants
            continue;
        };
        match providers.list.iter().position(|p| p.supports(ctx)) {
            Some(p) => choice.push(p),
            None => unsupported.push(node.location().to_string()),
        }
    }
    if !unsupported.is_empty() {
        let names: Vec<&str> = providers.list.iter().map(|p| p.name()).collect();
        let fallback = if providers.has_fallback { "" } else { "; CPU fallback is disabled" };
        return Err(Error::Unsupported(format!(
            "{} node(s) (providers: {}{fallback}): {}",
            unsupported.len(),
            names.join(", "),
            unsupported.join(", ")
        )));
    }
    let mut host = vec![];
    for (&p, ctx) in choice.iter().zip(&ctxs) {
        host.push(ctx.as_ref().map(|ctx| host_inputs(&*providers.list[p], ctx)).unwrap_or_default());
    }
    prefer_host_for_shape_nodes(graph, providers, &contexts, &mut choice, &mut host)?;
    let mut assignments = vec![];
    let mut kernel_steps = vec![];
    for (index, (((node, &p), host), folded)) in graph.nodes.iter().zip(&choice).zip(&host).zip(folded).enumerate() {
        // The node was folded into constants.
        if let Some(values) = folded {
            for (name, value) in node.outputs.iter().zip(values) {
                if !name.is_empty() {
                    let s = b.define(name, Device::Cpu);
                    b.constants.push((s, Value::Tensor(value)));
                }
            }
            assignments.push(NodeAssignment {
                node: node.name.clone(),
                op: node.op_type.clone(),
                provider: FOLDED.to_string(),
            });
            continue;
        }
        let provider = &providers.list[p];
        let device = provider.device();
        let mut step_inputs = vec![];
        for (i, name) in node.inputs.iter().enumerate() {
            step_inputs.push(if name.is_empty() {
                None
            } else {
                let s = b.lookup(name);
                let target = if host.contains(&i) { Device::Cpu } else { device };
                Some(if target == Device::Cpu && reads_metadata_only(node, i) { s } else { b.on_device(s, target)? })
            });
        }
        // Outer-scope values a subgraph reads: its plan expects them on the host (`lookup`
        // makes outer slots host slots), so a value made on a device is copied first.
        for name in &node.implicit_inputs {
            let s = b.lookup(name);
            step_inputs.push(Some(b.on_device(s, Device::Cpu)?));
        }
        let outputs = node.outputs.iter().map(|o| (!o.is_empty()).then(|| b.define(o, device))).collect();
        assignments.push(NodeAssignment {
            node: node.name.clone(),
            op: node.op_type.clone(),
            provider: provider.name().to_string(),
        });
        kernel_steps.push(KernelStep {
            node,
            index,
            provider: p,
            inputs: step_inputs,
            outputs,
            copies_before: b.steps.len(),
        });
    }
    // The kernels are built while the constants are copied: a GPU EP's kernels make their
    // shaders and start compiling them while the weights are uploaded.
    let pending = std::mem::take(&mut b.pending);
    let build_kernels = || -> Result<Vec<Arc<dyn Kernel>>> {
        kernel_steps
            .iter()
            .map(|k| {
                let ctx = match &ctxs[k.index] {
                    Some(ctx) => ctx,
                    None => &contexts.of(k.node)?,
                };
                providers.kernels.get_or_build(k.provider, &*providers.list[k.provider], ctx)
            })
            .collect()
    };
    let (kernels, copied) = if pending.is_empty() {
        (build_kernels(), Ok(vec![]))
    } else {
        std::thread::scope(|s| {
            let copies = s.spawn(|| copy_constants(pending, providers));
            (build_kernels(), copies.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        })
    };
    let (kernels, copied) = (kernels?, copied?);
    b.constants.extend(copied);
    b.steps = merge_steps(std::mem::take(&mut b.steps), kernel_steps, kernels);
    let mut outputs = vec![];
    for out in &graph.outputs {
        let s = b.lookup(&out.name);
        outputs.push((out.name.clone(), s));
    }
    let copy_steps = b.steps.iter().filter(|s| matches!(s.kind, StepKind::Copy { .. })).count()
        + outputs.iter().filter(|(_, s)| b.home[*s] != Device::Cpu).count();
    let slot_count = b.home.len();
    let mut steps = b.steps;
    plan_lifetimes(&mut steps, &outputs, slot_count);
    let donatable_inputs = if top { b.input_slots.clone() } else { HashSet::new() };
    plan_donations(&mut steps, slot_count, &donatable_inputs);
    let sizes = super::limits::slot_bytes(slot_count, &b.slots, &b.copies, &known);
    let peak_bytes = providers.limits.check_peak(&steps, &sizes, &graph.name)?;
    Ok(Plan {
        slot_count,
        inputs,
        outer: b.outer,
        constants: b.constants,
        steps,
        outputs,
        assignments,
        copy_steps,
        inferred: known,
        peak_bytes,
    })
}

/// A node's step, placed before its kernel is built.
struct KernelStep<'g> {
    node: &'g crate::ir::Node,
    /// The node's index in the graph.
    index: usize,
    /// Index in [`Providers::list`].
    provider: usize,
    inputs: Vec<Option<usize>>,
    outputs: Vec<Option<usize>>,
    /// How many copy steps the plan had when the node was placed (they run before it).
    copies_before: usize,
}

/// The plan's steps in order: each node's kernel step after the copy steps placed before it.
fn merge_steps(copies: Vec<Step>, nodes: Vec<KernelStep<'_>>, kernels: Vec<Arc<dyn Kernel>>) -> Vec<Step> {
    let mut steps = Vec::with_capacity(copies.len() + nodes.len());
    let mut copies = copies.into_iter();
    let mut merged = 0;
    for (node, kernel) in nodes.into_iter().zip(kernels) {
        steps.extend(copies.by_ref().take(node.copies_before - merged));
        merged = node.copies_before;
        steps.push(Step {
            kind: StepKind::Kernel { kernel, provider: node.provider, at: node.node.location(), wanted: vec![] },
            inputs: node.inputs,
            outputs: node.outputs,
            free_after: vec![],
            donatable: vec![],
        });
    }
    steps.extend(copies);
    steps
}

/// Makes the constants' device copies, several at once, largest first. A copy to a GPU is
/// mostly the driver's work on fresh staging memory (a page fault per 4 KiB), which threads do
/// in parallel: resnet50's 100 MB of weights on an H200 take ~22 ms on one thread.
fn copy_constants(mut pending: Vec<PendingCopy>, providers: &Providers) -> Result<Vec<(usize, Value)>> {
    use rayon::prelude::*;
    let copy = |p: &PendingCopy| -> Result<(usize, Value)> {
        let copied = if p.initializer {
            providers.uploads.get_or_copy(&p.value, p.device, providers)?
        } else {
            super::executor::copy_value(&p.value, p.device, providers)?
        };
        Ok((p.slot, copied))
    };
    if pending.len() < 2 {
        return pending.iter().map(copy).collect();
    }
    pending.sort_by_key(|p| std::cmp::Reverse(element_count(&p.value)));
    pending.par_iter().with_max_len(1).map(copy).collect()
}

/// The elements of a tensor value (0 for other values), to order copies by.
fn element_count(value: &Value) -> usize {
    match value {
        Value::Tensor(t) => t.len(),
        _ => 0,
    }
}

/// The provider name [`NodeAssignment`] gives a node whose outputs were computed when the plan
/// was made (shape arithmetic on known shapes, Constant nodes): it runs on no provider.
pub const FOLDED: &str = "folded";

/// The outputs of a node when inference computed all of them, so that the plan keeps them as
/// constants instead of running the node. Nodes with subgraphs and random ops never fold.
fn folded_outputs(node: &crate::ir::Node, known: &HashMap<String, Inferred>) -> Option<Vec<Tensor>> {
    let random = matches!(
        node.op_type.as_str(),
        "RandomNormal" | "RandomNormalLike" | "RandomUniform" | "RandomUniformLike" | "Multinomial" | "Bernoulli"
    );
    let has_subgraph = node.subgraphs().next().is_some();
    if random || has_subgraph || node.outputs.iter().all(String::is_empty) {
        return None;
    }
    node.outputs.iter().filter(|o| !o.is_empty()).map(|o| known.get(o).and_then(|k| k.constant.clone())).collect()
}

/// Makes the [`NodeContext`] of each node of one graph.
struct Contexts<'a> {
    opsets: &'a OpsetImports,
    known: &'a HashMap<String, Inferred>,
    subgraphs: &'a dyn Fn(&Graph) -> Result<Arc<dyn SubgraphRunner>>,
}

impl<'a> Contexts<'a> {
    fn of(&self, node: &'a crate::ir::Node) -> Result<NodeContext<'a>> {
        let known = self.known;
        Ok(NodeContext {
            node,
            since_version: registry::since_version(node, self.opsets)?,
            opsets: self.opsets,
            input_types: node
                .inputs
                .iter()
                .map(|n| known.get(n).map(|k| k.ty.clone()).unwrap_or(ValueType::Unknown))
                .collect(),
            constant_inputs: node.inputs.iter().map(|n| known.get(n).and_then(|k| k.constant.as_ref())).collect(),
            subgraphs: self.subgraphs,
        })
    }
}

/// The inputs a node's kernel reads on the host: all of them on the CPU, else what the EP says.
fn host_inputs(provider: &dyn ExecutionProvider, ctx: &NodeContext<'_>) -> Vec<usize> {
    if provider.device() == Device::Cpu {
        (0..ctx.node.inputs.len()).collect()
    } else {
        provider.host_inputs(ctx)
    }
}

/// Whether a node reads only the shape of input `i`, so a value on any device will do.
fn reads_metadata_only(node: &crate::ir::Node, i: usize) -> bool {
    node.domain.is_empty() && i == 0 && matches!(node.op_type.as_str(), "Shape" | "Size")
}

/// Moves to the CPU the device nodes that compute small integer tensors read only on the host
/// (Shape→Gather→Concat chains feeding Reshape's `shape`), so that they cost no device round
/// trip. Visits nodes from last to first so that whole chains move.
fn prefer_host_for_shape_nodes(
    graph: &Graph,
    providers: &Providers,
    contexts: &Contexts<'_>,
    choice: &mut [usize],
    host: &mut [Vec<usize>],
) -> Result<()> {
    let Some(cpu) = providers.list.iter().position(|p| p.device() == Device::Cpu) else {
        return Ok(());
    };
    let mut readers: HashMap<&str, Vec<(usize, Option<usize>)>> = HashMap::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        for (i, name) in node.inputs.iter().enumerate() {
            readers.entry(name.as_str()).or_default().push((n, Some(i)));
        }
        for name in &node.implicit_inputs {
            readers.entry(name.as_str()).or_default().push((n, None));
        }
    }
    let integer = |name: &str| {
        matches!(contexts.known.get(name).map(|k| &k.ty), Some(ValueType::Tensor(t))
            if matches!(t.dtype, crate::DataType::Int64 | crate::DataType::Int32))
    };
    for n in (0..graph.nodes.len()).rev() {
        let node = &graph.nodes[n];
        if choice[n] == cpu || node.outputs.is_empty() || !node.outputs.iter().all(|o| o.is_empty() || integer(o)) {
            continue;
        }
        let read_on_host = node
            .outputs
            .iter()
            .flat_map(|o| readers.get(o.as_str()).into_iter().flatten())
            .all(|&(r, i)| choice[r] == cpu || i.is_some_and(|i| host[r].contains(&i)));
        if read_on_host && providers.list[cpu].supports(&contexts.of(node)?) {
            choice[n] = cpu;
            host[n] = (0..node.inputs.len()).collect();
        }
    }
    Ok(())
}

/// Frees each slot right after its last reader, and tells kernels which outputs someone reads.
fn plan_lifetimes(steps: &mut [Step], outputs: &[(String, usize)], slot_count: usize) {
    let kept: HashSet<usize> = outputs.iter().map(|(_, s)| *s).collect();
    let mut last_use: Vec<Option<usize>> = vec![None; slot_count];
    for (i, step) in steps.iter().enumerate() {
        for s in step.inputs.iter().flatten() {
            last_use[*s] = Some(i);
        }
    }
    for (slot, last) in last_use.iter().enumerate() {
        if let Some(i) = last {
            if !kept.contains(&slot) {
                steps[*i].free_after.push(slot);
            }
        }
    }
    for step in steps.iter_mut() {
        let wanted: Vec<bool> =
            step.outputs.iter().map(|o| o.is_some_and(|s| kept.contains(&s) || last_use[s].is_some())).collect();
        // Outputs nobody reads are dropped as soon as they are made.
        let unread = step.outputs.iter().zip(&wanted).filter_map(|(o, w)| if *w { None } else { *o });
        step.free_after.extend(unread.collect::<Vec<_>>());
        if let StepKind::Kernel { wanted: w, .. } = &mut step.kind {
            *w = wanted;
        }
    }
}

/// Marks the inputs a kernel step may take over for an in-place output: values a step of this
/// plan computed, or graph inputs (not outer-scope values, initializers or constants), read for
/// the last time by this step (so not graph outputs, which are never freed), and read once by
/// it (`Mul(x, x)` must not overwrite `x` while reading it). Whether the buffer is really free
/// (no other value shares it: a caller that handed a graph input over and kept no reference)
/// and fits the output is checked at run time.
fn plan_donations(steps: &mut [Step], slot_count: usize, graph_inputs: &HashSet<usize>) {
    let mut ours = vec![false; slot_count];
    steps.iter().flat_map(|st| st.outputs.iter().flatten()).for_each(|&s| ours[s] = true);
    graph_inputs.iter().filter(|&&s| s < slot_count).for_each(|&s| ours[s] = true);
    for step in steps.iter_mut() {
        if !matches!(step.kind, StepKind::Kernel { .. }) {
            continue;
        }
        let reads = |slot: usize| step.inputs.iter().flatten().filter(|&&s| s == slot).count();
        step.donatable = step
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| (i, s)))
            .filter(|&(_, s)| ours[s] && step.free_after.contains(&s) && reads(s) == 1)
            .map(|(i, _)| i)
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ep::ValueRef;

    struct NoKernel;

    impl Kernel for NoKernel {
        fn run(&self, _: &[Option<ValueRef<'_>>], _: &[bool]) -> Result<Vec<Value>> {
            Ok(vec![])
        }
    }

    fn copy_of(slot: usize) -> Step {
        Step {
            kind: StepKind::Copy { to: Device::Cpu },
            inputs: vec![Some(slot)],
            outputs: vec![Some(slot + 1000)],
            free_after: vec![],
            donatable: vec![],
        }
    }

    /// Two constants sharing bytes in different shapes (a folded Reshape of a weight another
    /// node reads as it is) each get their own shape from the cache of device copies.
    #[test]
    fn device_copies_of_shared_bytes_keep_each_constant_shape() {
        let providers = Providers {
            list: vec![],
            has_fallback: false,
            uploads: Default::default(),
            limits: Default::default(),
            host_pool: None,
            kernels: Default::default(),
        };
        let w = crate::Tensor::from_vec(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        let reshaped = w.reshaped(vec![3, 2]).unwrap();
        let cache = DeviceConstants::default();
        for (t, shape) in [(&w, [2, 3]), (&reshaped, [3, 2]), (&w, [2, 3])] {
            let copy = cache.get_or_copy(&Value::Tensor(t.clone()), Device::Cpu, &providers).unwrap();
            assert_eq!(copy.as_tensor().unwrap().shape(), shape);
        }
    }

    #[test]
    fn each_kernel_step_runs_after_the_copies_placed_before_it() {
        let node = crate::ir::Node::default();
        let placed = |input: usize, copies_before: usize| KernelStep {
            node: &node,
            index: 0,
            provider: 0,
            inputs: vec![Some(input)],
            outputs: vec![],
            copies_before,
        };
        // Copies 0 and 1 before node 100, none between 100 and 101, copy 2 before 102, copy 3 after.
        let nodes = vec![placed(100, 2), placed(101, 2), placed(102, 3)];
        let kernels: Vec<Arc<dyn Kernel>> = (0..3).map(|_| Arc::new(NoKernel) as Arc<dyn Kernel>).collect();
        let steps = merge_steps((0..4).map(copy_of).collect(), nodes, kernels);
        let order: Vec<String> = steps
            .iter()
            .map(|s| {
                let kind = if matches!(s.kind, StepKind::Copy { .. }) { "copy" } else { "node" };
                format!("{kind} {}", s.inputs[0].unwrap_or(usize::MAX))
            })
            .collect();
        assert_eq!(order, ["copy 0", "copy 1", "node 100", "node 101", "copy 2", "node 102", "copy 3"]);
    }
}
