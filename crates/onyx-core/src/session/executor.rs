//! Running a plan: slots filled by inputs and constants, steps in order, values freed after their
//! last use.

use std::collections::HashMap;

use super::binding::OutputTarget;
use super::plan::{Plan, Providers, StepKind};
use crate::device::Device;
use crate::ep::{RunState, SubgraphRunner, ValueRef};
use crate::{Error, Result, Tensor, Value};

/// A slot's content during a run: borrowed from the caller (or an enclosing graph), or owned.
pub(crate) enum Slot<'a> {
    Ref(ValueRef<'a>),
    Owned(Value),
}

impl Slot<'_> {
    fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Slot::Ref(r) => *r,
            Slot::Owned(v) => ValueRef::Value(v),
        }
    }

    fn into_value(self) -> Value {
        match self {
            Slot::Ref(r) => r.to_value(),
            Slot::Owned(v) => v,
        }
    }
}

/// Copies a value to `to` through the provider that owns the source or the target device.
pub(crate) fn copy_value(value: &Value, to: Device, providers: &Providers) -> Result<Value> {
    copy_ref(ValueRef::Value(value), to, providers)
}

fn copy_ref(value: ValueRef<'_>, to: Device, providers: &Providers) -> Result<Value> {
    let from = value.device();
    if from == to {
        return Ok(value.to_value());
    }
    let host = if from == Device::Cpu {
        None
    } else {
        let tensor = value.value().map(Value::as_tensor).transpose()?;
        let tensor = tensor.ok_or_else(|| Error::Device(format!("cannot copy a borrowed value from {from}")))?;
        Some(providers.for_device(from)?.download(tensor)?)
    };
    if to == Device::Cpu {
        return Ok(Value::Tensor(host.ok_or_else(|| Error::Device("copy of a host value to the host".into()))?));
    }
    let view = match &host {
        Some(t) => t.view()?,
        None => value.tensor()?,
    };
    Ok(Value::Tensor(providers.for_device(to)?.upload(view)?))
}

/// The per-run states of the providers that record work, made at each one's first step.
struct RunStates<'p> {
    providers: &'p Providers,
    states: Vec<Option<Option<Box<dyn RunState>>>>,
    /// The caller's tensors the bound outputs go into (see [`RunState::bind_outputs`]).
    bound: Vec<Tensor>,
}

impl<'p> RunStates<'p> {
    fn new(providers: &'p Providers, bound: Vec<Tensor>) -> Self {
        RunStates { providers, states: providers.list.iter().map(|_| None).collect(), bound }
    }

    /// Provider `p`'s state for this run, made on first use; `None` for EPs that keep none.
    fn get(&mut self, p: usize) -> Option<&mut Box<dyn RunState>> {
        let (providers, bound) = (self.providers, &self.bound);
        let made = || {
            let mut state = providers.list[p].begin_run();
            if let Some(s) = state.as_mut().filter(|_| !bound.is_empty()) {
                s.bind_outputs(bound);
            }
            state
        };
        self.states[p].get_or_insert_with(made).as_mut()
    }

    /// Submits what the provider owning `device` recorded so far, before its values are read.
    fn flush_device(&mut self, device: Device) -> Result<()> {
        match self.providers.list.iter().position(|p| p.device() == device) {
            Some(p) => self.states[p].iter_mut().flatten().try_for_each(|s| s.flush()),
            None => Ok(()),
        }
    }

    /// Hands a value the run no longer reads to the run state of its device's EP, if any.
    fn release(&mut self, value: Value) {
        let device = match &value {
            Value::Tensor(t) => t.device(),
            _ => Device::Cpu,
        };
        let p = self.providers.list.iter().position(|p| p.device() == device);
        match p.and_then(|p| self.states[p].as_mut()).and_then(|s| s.as_mut()) {
            Some(state) if device != Device::Cpu => state.release(value),
            _ => drop(value),
        }
    }

    /// Submits everything recorded in this run.
    fn flush_all(&mut self) -> Result<()> {
        self.states.iter_mut().flatten().flatten().try_for_each(|s| s.flush())
    }
}

/// A tensor's element type and shape.
pub type TypedShape = (crate::DataType, Vec<usize>);

/// The wall time of one kernel step of a profiled run (see `Session::run_profiled`).
#[derive(Clone, Debug)]
pub struct NodeTime {
    /// Node name (may be empty).
    pub node: String,
    /// Op type, e.g. `Conv`.
    pub op: String,
    /// Name of the provider that ran it.
    pub provider: String,
    /// Shapes of its tensor inputs, e.g. `[1,64,56,56] [64,64,3,3]`.
    pub shapes: String,
    /// Element type and shape of each tensor input and output (other values left out), as
    /// ONNX Runtime's profiles list them.
    pub io_types: [Vec<TypedShape>; 2],
    /// Wall time of the kernel call in microseconds (device work it only records is not in it).
    pub us: f64,
}

/// The shapes of a step's tensor inputs (the donated ones included) as profiles print them
/// (`[1,64,56,56] [64,64,3,3]`, `_` for an absent input, `-` for another value), and the
/// element type and shape of each tensor input.
fn input_shapes(inputs: &[Option<ValueRef<'_>>], donated: &[(usize, Value)]) -> (String, Vec<TypedShape>) {
    let mut typed = vec![];
    let mut shape = |(i, v): (usize, &Option<ValueRef<'_>>)| {
        let v = match donated.iter().find(|(d, _)| *d == i) {
            Some((_, value)) => Some(ValueRef::Value(value)),
            None => *v,
        };
        match v.map(|v| v.tensor()) {
            Some(Ok(t)) => {
                typed.push((t.dtype(), t.shape().to_vec()));
                format!("{:?}", t.shape()).replace(' ', "")
            }
            Some(Err(_)) => "-".into(),
            None => "_".into(),
        }
    };
    let printed = inputs.iter().enumerate().map(&mut shape).collect::<Vec<_>>().join(" ");
    (printed, typed)
}

/// Takes out of `env` the inputs a kernel step may overwrite with its outputs (see
/// `plan_donations`): the positions the plan marked and the kernel accepts that hold a host
/// tensor the run owns.
fn donations(step: &super::plan::Step, env: &mut [Option<Slot<'_>>]) -> Vec<(usize, Value)> {
    let StepKind::Kernel { kernel, .. } = &step.kind else { return vec![] };
    if step.donatable.is_empty() {
        return vec![];
    }
    let accepts = kernel.in_place_inputs();
    let mut donated = vec![];
    for &i in step.donatable.iter().filter(|i| accepts.contains(i)) {
        let Some(slot) = step.inputs[i] else { continue };
        let owned_host = matches!(
            &env[slot],
            Some(Slot::Owned(Value::Tensor(t))) if matches!(t.data(), crate::TensorData::Host(_))
        );
        // Only an owned host tensor is taken: a view or a device value stays where it is.
        if owned_host {
            if let Some(Slot::Owned(value)) = env[slot].take() {
                donated.push((i, value));
            }
        }
    }
    donated
}

/// Executes `plan` with `env` already holding its inputs (and outer values). Returns the outputs
/// `wanted` asks for (indices into the plan's outputs, each with its target), in that order.
/// With `profile`, the wall time of every kernel step is appended to it (no cost without). The
/// run stops with [`Error::Terminated`] before the first node at which `stop` answers true.
pub(crate) fn execute<'a>(
    plan: &Plan,
    providers: &Providers,
    mut env: Vec<Option<Slot<'a>>>,
    wanted: &[(usize, OutputTarget)],
    mut profile: Option<&mut Vec<NodeTime>>,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Vec<Value>> {
    let _limits = super::limits::enter_run(providers.limits, plan.peak_bytes);
    let _pool = providers.host_pool.as_ref().map(|pool| {
        pool.raise_cap(pool_cap(plan.peak_bytes));
        crate::host_pool::enter(pool)
    });
    let bound = wanted
        .iter()
        .filter_map(|(_, t)| if let OutputTarget::Into(dst) = t { Some(dst.clone()) } else { None })
        .collect();
    let mut states = RunStates::new(providers, bound);
    for (slot, value) in &plan.constants {
        if env[*slot].is_none() {
            env[*slot] = Some(Slot::Owned(value.clone()));
        }
    }
    for step in &plan.steps {
        if stop() {
            return Err(Error::Terminated);
        }
        let donated = donations(step, &mut env);
        let produced = {
            let inputs: Vec<Option<ValueRef<'_>>> =
                step.inputs.iter().map(|s| s.and_then(|s| env[s].as_ref().map(Slot::as_ref))).collect();
            match &step.kind {
                StepKind::Kernel { kernel, provider, at, wanted } => {
                    let start = profile.is_some().then(std::time::Instant::now);
                    let shapes = profile.is_some().then(|| input_shapes(&inputs, &donated));
                    let outs = match states.get(*provider) {
                        Some(state) => kernel.run_in(state.as_mut(), &inputs, wanted),
                        None if !donated.is_empty() => kernel.run_donated(&inputs, donated, wanted),
                        None => kernel.run(&inputs, wanted),
                    };
                    if let (Some(times), Some(start), Some(shapes)) = (profile.as_deref_mut(), start, shapes) {
                        let us = start.elapsed().as_secs_f64() * 1e6;
                        let typed = |v: &Value| v.as_tensor().ok().map(|t| (t.dtype(), t.shape().to_vec()));
                        let outputs = outs.as_ref().map(|o| o.iter().filter_map(typed).collect()).unwrap_or_default();
                        let (shapes, inputs) = shapes;
                        times.push(NodeTime {
                            us,
                            node: at.node.clone(),
                            op: at.op.clone(),
                            provider: providers.list[*provider].name().to_string(),
                            shapes,
                            io_types: [inputs, outputs],
                        });
                    }
                    let outs = outs.map_err(|e| e.at(at))?;
                    if let Some(i) = wanted.iter().enumerate().skip(outs.len()).find(|(_, w)| **w).map(|(i, _)| i) {
                        return Err(Error::node(at, format!("kernel produced no output {i}, which the graph reads")));
                    }
                    outs
                }
                StepKind::Copy { to } => {
                    let src = inputs.first().copied().flatten();
                    let src = src.ok_or_else(|| Error::Device("copy step without a source value".into()))?;
                    states.flush_device(src.device())?;
                    vec![copy_ref(src, *to, providers)?]
                }
            }
        };
        for (slot, value) in step.outputs.iter().zip(produced) {
            if let Some(s) = slot {
                env[*s] = Some(Slot::Owned(value));
            }
        }
        for s in &step.free_after {
            if let Some(Slot::Owned(value)) = env[*s].take() {
                states.release(value);
            }
        }
    }
    let mut produced = vec![];
    for (i, _) in wanted {
        let (name, slot) = &plan.outputs[*i];
        let value =
            env[*slot].take().ok_or_else(|| Error::InvalidModel(format!("output '{name}' was not computed")))?;
        produced.push(value.into_value());
    }
    // Device-to-device copies first, recorded into the runs; then one flush; then host copies.
    for (value, (i, target)) in produced.iter_mut().zip(wanted) {
        if let OutputTarget::Into(dst) = target {
            copy_into(value, dst, &plan.outputs[*i].0, &mut states)?;
            *value = Value::Tensor(dst.clone());
        }
    }
    states.flush_all()?;
    for (value, (_, target)) in produced.iter_mut().zip(wanted) {
        let to = match target {
            OutputTarget::Host => Device::Cpu,
            OutputTarget::Device(d) => *d,
            OutputTarget::Into(_) => continue,
        };
        if matches!(value, Value::Tensor(t) if t.device() != to) {
            *value = copy_value(value, to, providers)?;
        }
    }
    Ok(produced)
}

/// Idle bytes the host pool may keep for a plan whose runs hold `peak_bytes` at once (of the
/// values whose size the plan knows): 4x that, at least [`MIN_POOL_CAP`]. A run reuses buffers
/// of exact sizes only, so the buffers it needs in all add up to more than its peak (2.5x for
/// resnet18, 3x for mobilenet_v2: measured), and sizes computed at run time are not in it.
fn pool_cap(peak_bytes: u64) -> usize {
    usize::try_from(peak_bytes.saturating_mul(4)).unwrap_or(usize::MAX).max(MIN_POOL_CAP)
}

/// The least cap of the host pool: 64 MiB.
const MIN_POOL_CAP: usize = 64 << 20;

/// Writes an output into the caller's preallocated tensor through the EP of its device.
fn copy_into(value: &Value, dst: &Tensor, name: &str, states: &mut RunStates<'_>) -> Result<()> {
    let src = value.as_tensor()?;
    if src.dtype() != dst.dtype() || src.shape() != dst.shape() {
        return Err(Error::InvalidArgument(format!(
            "output '{name}' is {:?} {:?}, but the tensor bound to it is {:?} {:?}",
            src.dtype(),
            src.shape(),
            dst.dtype(),
            dst.shape()
        )));
    }
    if src.device() != dst.device() {
        return Err(Error::InvalidArgument(format!(
            "output '{name}' is computed on {}, but the tensor bound to it is on {}: bind it to {} or to the host",
            src.device(),
            dst.device(),
            src.device()
        )));
    }
    let p = states.providers.list.iter().position(|p| p.device() == dst.device());
    let p = p.ok_or_else(|| Error::Device(format!("no execution provider of this session owns {}", dst.device())))?;
    let provider = states.providers.list[p].clone();
    match states.get(p) {
        Some(state) => provider.copy_into(Some(state.as_mut()), src, dst),
        None => provider.copy_into(None, src, dst),
    }
}

/// Creates the empty slot table of a plan.
pub(crate) fn new_env<'a>(plan: &Plan) -> Vec<Option<Slot<'a>>> {
    std::iter::repeat_with(|| None).take(plan.slot_count).collect()
}

/// A compiled subgraph that kernels such as If and Loop run.
pub(crate) struct SubgraphPlan {
    plan: Plan,
    providers: Providers,
}

impl SubgraphPlan {
    pub fn new(plan: Plan, providers: Providers) -> Self {
        SubgraphPlan { plan, providers }
    }
}

impl SubgraphRunner for SubgraphPlan {
    fn run(&self, inputs: &[ValueRef<'_>], outer: &HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>> {
        if inputs.len() != self.plan.inputs.len() {
            return Err(Error::InvalidArgument(format!(
                "subgraph expects {} inputs, got {}",
                self.plan.inputs.len(),
                inputs.len()
            )));
        }
        let mut env = new_env(&self.plan);
        for ((_, slot), value) in self.plan.inputs.iter().zip(inputs) {
            env[*slot] = Some(Slot::Ref(*value));
        }
        for (name, slot) in &self.plan.outer {
            let value = outer.get(name.as_str()).ok_or_else(|| {
                Error::InvalidModel(format!("subgraph reads '{name}', which the enclosing graph did not pass"))
            })?;
            env[*slot] = Some(Slot::Ref(*value));
        }
        let wanted: Vec<(usize, OutputTarget)> =
            (0..self.plan.outputs.len()).map(|i| (i, OutputTarget::Host)).collect();
        execute(&self.plan, &self.providers, env, &wanted, None, &|| false)
    }
}
