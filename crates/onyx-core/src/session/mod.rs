//! Sessions: a checked model compiled for a list of execution providers, run many times.

mod binding;
mod executor;
mod kernel_cache;
pub mod limits;
mod options;
mod outputs;
mod plan;
mod plan_cache;
mod run_options;
mod spin;
mod validate;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::ep::ValueRef;
use crate::ir::Model;
use crate::ops::infer::Inferred;
use crate::types::{TensorType, ValueInfo, ValueType};
use crate::{Error, InputValue, Result, Tensor};

pub use binding::{IoBinding, OutputTarget};
pub use executor::NodeTime;
use executor::{execute, new_env, Slot};
pub use options::{OptimizationLevel, SessionOptions};
pub use outputs::Outputs;
use plan::{build_plan, Plan, Providers};
pub use plan::{NodeAssignment, FOLDED};
use plan_cache::PlanCache;
pub use run_options::RunOptions;

/// A model ready to run. `Send + Sync`: `run` may be called from many threads at once; each
/// run keeps its own values.
pub struct Session {
    model: Model,
    inputs: Vec<ValueInfo>,
    /// Initializers that are also graph inputs (IR 4 and later): inputs a caller may feed,
    /// with the initializer as the default. The optimizer and the plan see them as inputs, so
    /// nothing folds them.
    overridable: Vec<(ValueInfo, Tensor)>,
    /// `inputs`, then the overridable ones: what a run may be given.
    declared: Vec<ValueInfo>,
    /// The graph plans for new shapes are made from, when it differs from the model's: without
    /// the overridable initializers.
    plan_graph: Option<crate::ir::Graph>,
    outputs: Vec<ValueInfo>,
    /// The plan for the declared input types (free dimensions symbolic): reports, and runs
    /// when every input shape is fixed.
    plan: Arc<Plan>,
    /// Plans for concrete input shapes, when some input dimension is free.
    plans: PlanCache<Plan>,
    providers: Providers,
    pool: rayon::ThreadPool,
    /// Keep the pool's threads awake through a run ([`SessionOptions::intra_op_spinning`]).
    spin: bool,
    /// How long the last run took, in microseconds (`u64::MAX` before the first): whether the
    /// next one is worth watching for interrupts.
    last_run_us: AtomicU64,
}

impl Session {
    /// Compiles a checked model (see [`crate::ir::check_model`]) for the providers in `options`.
    pub fn new(mut model: Model, options: SessionOptions) -> Result<Session> {
        replace_initializers(&mut model, &options.initializers)?;
        crate::ir::check_model(&mut model)?;
        // Free-dimension overrides first, so that the optimizer sees (and folds) fixed shapes.
        for input in model.graph.inputs.iter_mut() {
            *input = validate::apply_free_dims(input, &options)?;
        }
        let defaults = take_overridable(&mut model);
        crate::optimizer::optimize(&mut model, options.optimization_level, &options.provider_list())?;
        let overridable: Vec<(ValueInfo, Tensor)> = defaults
            .into_iter()
            .filter_map(|(name, t)| model.graph.inputs.iter().find(|i| i.name == name).map(|i| (i.clone(), t)))
            .collect();
        let inputs: Vec<ValueInfo> = (model.graph.runtime_inputs())
            .filter(|i| !overridable.iter().any(|(o, _)| o.name == i.name))
            .cloned()
            .collect();
        let declared: Vec<ValueInfo> = inputs.iter().chain(overridable.iter().map(|(i, _)| i)).cloned().collect();
        let mut list = options.providers.clone();
        if let Some(f) = &options.fallback {
            if !list.iter().any(|p| p.name() == f.name()) {
                list.push(f.clone());
            }
        }
        if list.is_empty() {
            return Err(Error::InvalidArgument(
                "no execution provider: add one, or keep the CPU fallback enabled".into(),
            ));
        }
        options.limits.check_nesting(&model.graph)?;
        let providers = Providers {
            list,
            has_fallback: options.fallback.is_some(),
            uploads: Default::default(),
            limits: options.limits,
            host_pool: host_pool_enabled(&options).then(Default::default),
            kernels: Default::default(),
        };
        let known: HashMap<String, Inferred> =
            declared.iter().map(|i| (i.name.clone(), Inferred::of_type(i.ty.clone()))).collect();
        let plan = build_plan(&model.graph, &providers, &model.opsets, known)?;
        // The model keeps its initializers (`Session::model` is what `onyx optimize` saves).
        let plan_graph = (!overridable.is_empty()).then(|| model.graph.clone());
        for (info, tensor) in &overridable {
            model.graph.initializers.insert(info.name.clone(), tensor.clone());
        }
        let outputs = model
            .graph
            .outputs
            .iter()
            .map(|o| {
                let mut o = o.clone();
                if let Some(k) = plan.inferred.get(&o.name) {
                    o.ty = with_inferred(&o.ty, &k.ty);
                }
                o
            })
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.intra_op_threads)
            .thread_name(|i| format!("onyx-intra-{i}"))
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start {} threads: {e}", options.intra_op_threads)))?;
        let plans = PlanCache::new(&declared);
        let spin = spin::wanted(options.intra_op_spinning, providers.list.iter().map(|p| p.device()));
        Ok(Session {
            model,
            inputs,
            overridable,
            declared,
            plan_graph,
            outputs,
            plan: Arc::new(plan),
            plans,
            providers,
            pool,
            spin,
            last_run_us: AtomicU64::new(u64::MAX),
        })
    }

    /// The inputs a caller feeds (initializers excluded), with free dimensions as overridden.
    pub fn inputs(&self) -> &[ValueInfo] {
        &self.inputs
    }

    /// Initializers a run may override by feeding a value of that name (graph inputs that have
    /// an initializer, in models of IR version 4 and later, as ONNX Runtime defines them).
    pub fn overridable_initializers(&self) -> impl Iterator<Item = &ValueInfo> {
        self.overridable.iter().map(|(info, _)| info)
    }

    /// The graph's outputs, typed by inference where the model did not declare them.
    pub fn outputs(&self) -> &[ValueInfo] {
        &self.outputs
    }

    /// The model this session runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Which provider runs each node, in execution order.
    pub fn assignments(&self) -> &[NodeAssignment] {
        &self.plan.assignments
    }

    /// How many device copies of intermediate values a run makes (inputs and outputs on the host).
    pub fn copies_per_run(&self) -> usize {
        self.plan.copy_steps
    }

    /// The inferred type of any value of the main graph, by name.
    pub fn value_type(&self, name: &str) -> Option<&ValueType> {
        self.plan.inferred.get(name).map(|k| &k.ty)
    }

    /// The counters of this session's host buffer pool (`None` when it is disabled): how many
    /// kernel outputs reused a buffer, how many were allocated, how many were written in place.
    pub fn host_pool_stats(&self) -> Option<crate::host_pool::PoolStats> {
        self.providers.host_pool.as_ref().map(|p| p.stats())
    }

    /// Names of the providers this session uses, in priority order.
    pub fn provider_names(&self) -> Vec<&str> {
        self.providers.list.iter().map(|p| p.name()).collect()
    }

    /// Runs the model. `inputs` are (name, value) pairs: owned tensors, or views of the caller's
    /// memory (not copied). Every input without a default must be given; dtypes and fixed
    /// dimensions are checked. Returns every graph output, on the host.
    pub fn run<'a, N, V, I>(&self, inputs: I) -> Result<Outputs>
    where
        N: AsRef<str>,
        V: Into<InputValue<'a>>,
        I: IntoIterator<Item = (N, V)>,
    {
        let (given, wanted) = self.every_output_on_host(inputs);
        self.execute(given, wanted, None, None)
    }

    /// [`Session::run`] under `options`: the run stops with [`Error::Terminated`] when they ask
    /// it to (see [`RunOptions`]).
    pub fn run_with_options<'a, N, V, I>(&self, inputs: I, options: &RunOptions) -> Result<Outputs>
    where
        N: AsRef<str>,
        V: Into<InputValue<'a>>,
        I: IntoIterator<Item = (N, V)>,
    {
        let (given, wanted) = self.every_output_on_host(inputs);
        self.execute(given, wanted, None, Some(options))
    }

    /// [`Session::run`], also timing every kernel call (in execution order; host wall time,
    /// so a device kernel counts only the time to record it). For profiles: each call pays
    /// for reading the clock and naming the node.
    pub fn run_profiled<'a, N, V, I>(&self, inputs: I) -> Result<(Outputs, Vec<NodeTime>)>
    where
        N: AsRef<str>,
        V: Into<InputValue<'a>>,
        I: IntoIterator<Item = (N, V)>,
    {
        let (given, wanted) = self.every_output_on_host(inputs);
        let mut times = Vec::new();
        let outputs = self.execute(given, wanted, Some(&mut times), None)?;
        Ok((outputs, times))
    }

    /// Runs the model with inputs on any device and each bound output left where the binding
    /// says (see [`IoBinding`]): a run whose inputs and outputs are all on the GPU copies nothing
    /// between host and device, and returns once its work is submitted, without waiting for the
    /// GPU. Reading such an output back waits for this run's work only. Only bound outputs are
    /// returned.
    pub fn run_with_binding(&self, binding: IoBinding<'_>) -> Result<Outputs> {
        if binding.outputs.is_empty() {
            return Err(Error::InvalidArgument("the IO binding binds no output".into()));
        }
        let mut wanted = vec![];
        for (name, target) in binding.outputs {
            let i = self.plan.outputs.iter().position(|(n, _)| *n == name).ok_or_else(|| {
                let known: Vec<&str> = self.plan.outputs.iter().map(|(n, _)| n.as_str()).collect();
                Error::UnknownOutput { name: name.clone(), available: known.join(", ") }
            })?;
            wanted.push((i, target));
        }
        self.execute(binding.inputs, wanted, None, binding.options.as_ref())
    }

    /// `inputs` by name, and every graph output wanted on the host.
    #[allow(clippy::type_complexity)]
    fn every_output_on_host<'a, N, V, I>(
        &self,
        inputs: I,
    ) -> (Vec<(String, InputValue<'a>)>, Vec<(usize, OutputTarget)>)
    where
        N: AsRef<str>,
        V: Into<InputValue<'a>>,
        I: IntoIterator<Item = (N, V)>,
    {
        let given = inputs.into_iter().map(|(n, v)| (n.as_ref().to_string(), v.into())).collect();
        let wanted = (0..self.plan.outputs.len()).map(|i| (i, OutputTarget::Host)).collect();
        (given, wanted)
    }

    fn execute(
        &self,
        given: Vec<(String, InputValue<'_>)>,
        wanted: Vec<(usize, OutputTarget)>,
        profile: Option<&mut Vec<NodeTime>>,
        options: Option<&RunOptions>,
    ) -> Result<Outputs> {
        validate::check_inputs(&self.model.graph, &self.declared, &given)?;
        let mut given = given;
        for (info, default) in &self.overridable {
            if !given.iter().any(|(n, _)| *n == info.name) {
                given.push((info.name.clone(), InputValue::View(default.view()?)));
            }
        }
        let plan = self.plan_for(&given)?;
        let mut env = new_env(&plan);
        let slots: HashMap<&str, usize> = plan.inputs.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        for (name, value) in given {
            let slot = slots[name.as_str()];
            env[slot] = Some(match value {
                InputValue::Value(v) => Slot::Owned(v),
                InputValue::View(v) => Slot::Ref(ValueRef::View(v)),
            });
        }
        // An interrupt stops this run only; a terminate flag stops every run sharing it.
        let interrupted = AtomicBool::new(false);
        let stop = || options.is_some_and(RunOptions::is_terminated) || interrupted.load(Ordering::Relaxed);
        let run = || execute(&plan, &self.providers, env, &wanted, profile, &stop);
        let last_us = self.last_run_us.load(Ordering::Relaxed);
        // A run shorter than a thread hand-off: the caller waits for it spinning, and the
        // pool's other threads are not kept awake for it (that costs more than such a run).
        let tiny = last_us < SPIN_WAIT.as_micros() as u64;
        let run = || match self.spin && !tiny {
            true => spin::with_workers_awake(&self.pool, run),
            false => run(),
        };
        // Runs shorter than the check's period are not watched (watching costs a few
        // microseconds of thread hand-offs); an interrupt then shows when they return.
        let short = last_us < RunOptions::INTERRUPT_PERIOD.as_micros() as u64 / 2;
        let started = Instant::now();
        let values = match options.and_then(RunOptions::interrupt_check) {
            Some(check) if !short => self.run_watched(run, &interrupted, check),
            // On one of the pool's own threads `install` runs `run` in place.
            _ if tiny && self.pool.current_thread_index().is_none() => self.run_spin_waiting(run),
            _ => self.pool.install(run),
        };
        self.last_run_us.store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        let values = values?;
        let names = wanted.iter().map(|(i, _)| self.plan.outputs[*i].0.clone());
        Ok(Outputs::new(names.zip(values).collect()))
    }

    /// Runs `run` on the session's threads while this thread spins until it is done (for up to
    /// [`SPIN_WAIT`], then sleeps): a short run's result is then seen without the two thread
    /// wake-ups of `install`, which cost more than such a run.
    fn run_spin_waiting<T: Send>(&self, run: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        let done = AtomicBool::new(false);
        let mut result = None;
        self.pool.in_place_scope(|scope| {
            scope.spawn(|_| {
                result = Some(run());
                done.store(true, Ordering::Release);
            });
            let started = Instant::now();
            let mut rounds = 0u32;
            while !done.load(Ordering::Acquire) {
                rounds += 1;
                if rounds < 64 {
                    std::hint::spin_loop();
                } else {
                    // The run's thread may share this core: let it go on.
                    std::thread::yield_now();
                    // The clock costs more than a round: read it now and then.
                    if rounds.is_multiple_of(8) && started.elapsed() > SPIN_WAIT {
                        break;
                    }
                }
            }
        });
        result.unwrap_or_else(|| Err(Error::Device("the run ended without a result".into())))
    }

    /// Runs `run` on the session's threads while this thread makes the interrupt check every
    /// [`RunOptions::INTERRUPT_PERIOD`], setting `interrupted` (which the run reads before
    /// each node) when it answers true.
    fn run_watched<T: Send>(
        &self,
        run: impl FnOnce() -> Result<T> + Send,
        interrupted: &AtomicBool,
        check: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<T> {
        let done = std::sync::Mutex::new(None);
        let finished = std::sync::Condvar::new();
        self.pool.in_place_scope(|scope| {
            scope.spawn(|_| {
                let result = run();
                *done.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
                finished.notify_all();
            });
            let mut guard = done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            while guard.is_none() {
                guard = finished
                    .wait_timeout(guard, RunOptions::INTERRUPT_PERIOD)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
                if guard.is_none() && check() {
                    interrupted.store(true, Ordering::Relaxed);
                }
            }
        });
        let result = done.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        result.unwrap_or_else(|| Err(Error::Device("the run ended without a result".into())))
    }
}

/// How long the caller spins for a run's result before sleeping, for sessions whose last run
/// was shorter.
const SPIN_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// An output's declared type completed by inference, as ONNX Runtime reports it: an unknown
/// type or shape is the inferred one, and each dimension the declaration leaves free (named or
/// not) takes the inferred size when that is fixed (after free-dimension overrides, say); an
/// unnamed one takes the inferred name too.
fn with_inferred(declared: &ValueType, inferred: &ValueType) -> ValueType {
    use crate::types::Dim;
    match (declared, inferred) {
        (ValueType::Unknown, _) => inferred.clone(),
        (ValueType::Tensor(d), ValueType::Tensor(i)) if d.dtype == i.dtype => {
            let shape = match (&d.shape, &i.shape) {
                (None, inferred) => inferred.clone(),
                (Some(dd), Some(id)) if dd.len() == id.len() => Some(
                    dd.iter()
                        .zip(id)
                        .map(|(d, i)| match (d, i) {
                            (Dim::Symbol(_), Dim::Fixed(_)) | (Dim::Unknown, _) => i.clone(),
                            _ => d.clone(),
                        })
                        .collect(),
                ),
                (declared, _) => declared.clone(),
            };
            ValueType::Tensor(TensorType { dtype: d.dtype, shape })
        }
        _ => declared.clone(),
    }
}

/// Puts the caller's values in place of the model's initializers of those names.
fn replace_initializers(model: &mut Model, values: &[(String, Tensor)]) -> Result<()> {
    for (name, value) in values {
        let Some(slot) = model.graph.initializers.get_mut(name) else { continue };
        if slot.dtype() != value.dtype() || value.device() != crate::Device::Cpu {
            return Err(Error::InvalidArgument(format!(
                "initializer '{name}': expected a host tensor of {} (the model's), got one of {} on {}",
                slot.dtype(),
                value.dtype(),
                value.device()
            )));
        }
        *slot = value.clone();
    }
    Ok(())
}

/// Takes out the initializers that are also graph inputs, in models of IR version 4 and later
/// (earlier versions list every initializer among the inputs, and ONNX Runtime treats them as
/// constants): a caller may override them.
fn take_overridable(model: &mut Model) -> Vec<(String, Tensor)> {
    if model.ir_version < 4 {
        return vec![];
    }
    let graph = &mut model.graph;
    let names: Vec<String> =
        graph.inputs.iter().filter(|i| graph.initializers.contains_key(&i.name)).map(|i| i.name.clone()).collect();
    names.into_iter().filter_map(|n| graph.initializers.remove(&n).map(|t| (n, t))).collect()
}

/// Whether the options (and the environment: `ONYX_HOST_POOL=0` turns it off) want a pool.
fn host_pool_enabled(options: &SessionOptions) -> bool {
    options.enable_host_pool && std::env::var("ONYX_HOST_POOL").map_or(true, |v| v != "0")
}

impl Session {
    /// The plan for the shapes of `given`: the session's plan when no input dimension is free,
    /// else one made for these shapes (shape arithmetic folded, kernels specialized) and cached.
    /// When such a plan cannot be made, the general plan runs and reports any error itself,
    /// except for an exceeded resource limit, which is reported now, before any allocation.
    fn plan_for(&self, given: &[(String, InputValue<'_>)]) -> Result<Arc<Plan>> {
        let Some(key) = self.plans.key(&self.declared, given) else {
            return Ok(self.plan.clone());
        };
        if let Some(plan) = self.plans.get(&key) {
            return Ok(plan);
        }
        let known: HashMap<String, Inferred> = self
            .declared
            .iter()
            .zip(&key)
            .map(|(i, shape)| {
                let ty = match (shape, &i.ty) {
                    (Some(shape), ValueType::Tensor(t)) => ValueType::Tensor(TensorType::fixed(t.dtype, shape)),
                    _ => i.ty.clone(),
                };
                (i.name.clone(), Inferred::of_type(ty))
            })
            .collect();
        let graph = self.plan_graph.as_ref().unwrap_or(&self.model.graph);
        let plan = match build_plan(graph, &self.providers, &self.model.opsets, known) {
            Ok(plan) => Arc::new(plan),
            Err(e @ Error::Limit { .. }) => return Err(e),
            Err(_) => self.plan.clone(),
        };
        self.plans.insert(key, plan.clone());
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn session_is_send_and_sync() {
        assert_send_sync::<Session>();
    }

    #[test]
    fn outputs_take_what_inference_knows_and_the_declaration_leaves_free() {
        use crate::types::Dim::{Fixed, Symbol, Unknown};
        use crate::DataType::{Float, Int64};
        let ty = |dtype, shape: Option<Vec<crate::types::Dim>>| ValueType::Tensor(TensorType { dtype, shape });
        let inferred = ty(Float, Some(vec![Fixed(2), Symbol("n".into()), Fixed(3)]));
        assert_eq!(with_inferred(&ValueType::Unknown, &inferred), inferred);
        assert_eq!(with_inferred(&ty(Float, None), &inferred), inferred);
        let declared = ty(Float, Some(vec![Symbol("batch".into()), Unknown, Fixed(3)]));
        assert_eq!(with_inferred(&declared, &inferred), inferred, "fixed sizes and names fill free dimensions");
        let named = ty(Float, Some(vec![Symbol("b".into()), Symbol("m".into()), Fixed(3)]));
        let want = ty(Float, Some(vec![Fixed(2), Symbol("m".into()), Fixed(3)]));
        assert_eq!(with_inferred(&named, &inferred), want, "a declared name stays unless inference fixes it");
        let other_rank = ty(Float, Some(vec![Unknown]));
        assert_eq!(with_inferred(&other_rank, &inferred), other_rank);
        let other_dtype = ty(Int64, None);
        assert_eq!(with_inferred(&other_dtype, &inferred), other_dtype);
    }
}
