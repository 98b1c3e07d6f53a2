//! Running a plan: slots filled by inputs and constants, steps in order, values freed after their
//! last use.

use std::collections::HashMap;

use super::plan::{Plan, Providers, StepKind};
use crate::device::Device;
use crate::ep::{RunState, SubgraphRunner, ValueRef};
use crate::{Error, Result, Value};

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
}

impl<'p> RunStates<'p> {
    fn new(providers: &'p Providers) -> Self {
        RunStates { providers, states: providers.list.iter().map(|_| None).collect() }
    }

    /// Provider `p`'s state for this run, made on first use; `None` for EPs that keep none.
    fn get(&mut self, p: usize) -> Option<&mut Box<dyn RunState>> {
        let providers = self.providers;
        self.states[p].get_or_insert_with(|| providers.list[p].begin_run()).as_mut()
    }

    /// Submits what the provider owning `device` recorded so far, before its values are read.
    fn flush_device(&mut self, device: Device) -> Result<()> {
        match self.providers.list.iter().position(|p| p.device() == device) {
            Some(p) => self.states[p].iter_mut().flatten().try_for_each(|s| s.flush()),
            None => Ok(()),
        }
    }

    /// Submits everything recorded in this run.
    fn flush_all(&mut self) -> Result<()> {
        self.states.iter_mut().flatten().flatten().try_for_each(|s| s.flush())
    }
}

/// Executes `plan` with `env` already holding its inputs (and outer values). Returns the plan's
/// outputs in order.
pub(crate) fn execute<'a>(plan: &Plan, providers: &Providers, mut env: Vec<Option<Slot<'a>>>) -> Result<Vec<Value>> {
    let mut states = RunStates::new(providers);
    for (slot, value) in &plan.constants {
        if env[*slot].is_none() {
            env[*slot] = Some(Slot::Owned(value.clone()));
        }
    }
    for step in &plan.steps {
        let produced = {
            let inputs: Vec<Option<ValueRef<'_>>> =
                step.inputs.iter().map(|s| s.and_then(|s| env[s].as_ref().map(Slot::as_ref))).collect();
            match &step.kind {
                StepKind::Kernel { kernel, provider, at, wanted } => {
                    let outs = match states.get(*provider) {
                        Some(state) => kernel.run_in(state.as_mut(), &inputs, wanted),
                        None => kernel.run(&inputs, wanted),
                    };
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
            env[*s] = None;
        }
    }
    states.flush_all()?;
    plan.outputs
        .iter()
        .map(|(name, s)| {
            env[*s]
                .take()
                .map(Slot::into_value)
                .ok_or_else(|| Error::InvalidModel(format!("output '{name}' was not computed")))
        })
        .collect()
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
            let value = outer
                .get(name.as_str())
                .ok_or_else(|| Error::InvalidModel(format!("subgraph reads '{name}', which the enclosing graph did not pass")))?;
            env[*slot] = Some(Slot::Ref(*value));
        }
        execute(&self.plan, &self.providers, env)
    }
}
