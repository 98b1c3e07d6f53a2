//! Session options, named after ONNX Runtime's.

use std::sync::Arc;

use crate::ep::ExecutionProvider;
use crate::{Error, Result};

/// How much the graph is rewritten before it runs (ONNX Runtime's `GraphOptimizationLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum OptimizationLevel {
    /// Run the graph as written.
    Disable,
    /// Semantics-preserving clean-ups (constant folding, dead nodes, Identity removal).
    Basic,
    /// Basic plus fusions.
    Extended,
    /// Everything, including per-EP layout choices. The default, as in ONNX Runtime.
    #[default]
    All,
}

impl std::str::FromStr for OptimizationLevel {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "disable" | "disabled" | "none" => Ok(OptimizationLevel::Disable),
            "basic" => Ok(OptimizationLevel::Basic),
            "extended" => Ok(OptimizationLevel::Extended),
            "all" => Ok(OptimizationLevel::All),
            other => Err(Error::InvalidArgument(format!(
                "optimization level: expected disable, basic, extended or all, found '{other}'"
            ))),
        }
    }
}

/// Options of a session. Build with [`SessionOptions::default`] and the `with_*` methods.
#[derive(Clone)]
pub struct SessionOptions {
    /// Execution providers in priority order; the first that supports a node takes it.
    pub providers: Vec<Arc<dyn ExecutionProvider>>,
    /// Takes the nodes no provider took (normally the CPU EP); `None` disables CPU fallback,
    /// like ONNX Runtime's `session.disable_cpu_ep_fallback`.
    pub fallback: Option<Arc<dyn ExecutionProvider>>,
    /// Graph optimization level.
    pub optimization_level: OptimizationLevel,
    /// Threads for parallel work inside a kernel; 0 means one per core.
    pub intra_op_threads: usize,
    /// Free dimensions fixed by name (`batch` = 1), as ONNX Runtime's AddFreeDimensionOverrideByName.
    pub free_dims_by_name: Vec<(String, usize)>,
    /// Free dimensions fixed by denotation (`DATA_BATCH` = 1), as AddFreeDimensionOverride.
    pub free_dims_by_denotation: Vec<(String, usize)>,
    /// Resource limits (bytes of one tensor, of a run, subgraph nesting): safe defaults.
    pub limits: super::limits::Limits,
    /// Reuse host buffers across nodes and runs, and write elementwise outputs over inputs the
    /// run no longer needs (see `onyx_core::host_pool`); on by default, like ONNX Runtime's CPU
    /// memory arena. The environment variable `ONYX_HOST_POOL=0` turns it off too.
    pub enable_host_pool: bool,
    /// Keep the intra-op threads looking for work through a run instead of sleeping between
    /// parallel kernels (and paying tens of microseconds to wake each time), like ONNX
    /// Runtime's `session.intra_op.allow_spinning`; on by default. A thread that finds no work
    /// for 2 ms sleeps for the rest of the run; sessions with a GPU provider never spin.
    pub intra_op_spinning: bool,
    /// Values that replace the model's initializers of those names before the session is
    /// made (ONNX Runtime's `AddInitializer`: weights shared between sessions, or supplied by
    /// the application). Each must have the dtype of the initializer it replaces; a name the
    /// model has no initializer of is ignored, as in ONNX Runtime.
    pub initializers: Vec<(String, crate::Tensor)>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            providers: vec![],
            fallback: None,
            optimization_level: OptimizationLevel::default(),
            intra_op_threads: 0,
            free_dims_by_name: vec![],
            free_dims_by_denotation: vec![],
            limits: super::limits::Limits::default(),
            enable_host_pool: true,
            intra_op_spinning: true,
            initializers: vec![],
        }
    }
}

impl SessionOptions {
    /// Sets the resource limits (see [`super::limits::Limits`]).
    pub fn with_limits(mut self, limits: super::limits::Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Turns the host buffer pool on or off (see [`SessionOptions::enable_host_pool`]).
    pub fn with_host_pool(mut self, enable: bool) -> Self {
        self.enable_host_pool = enable;
        self
    }

    /// Turns intra-op spinning on or off (see [`SessionOptions::intra_op_spinning`]).
    pub fn with_intra_op_spinning(mut self, spin: bool) -> Self {
        self.intra_op_spinning = spin;
        self
    }

    /// The providers a session uses, in priority order: [`SessionOptions::providers`], then the
    /// fallback unless a provider of the same name is already listed.
    pub fn provider_list(&self) -> Vec<Arc<dyn ExecutionProvider>> {
        let mut list = self.providers.clone();
        if let Some(f) = &self.fallback {
            if !list.iter().any(|p| p.name() == f.name()) {
                list.push(f.clone());
            }
        }
        list
    }
}

impl std::fmt::Display for OptimizationLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OptimizationLevel::Disable => "disable",
            OptimizationLevel::Basic => "basic",
            OptimizationLevel::Extended => "extended",
            OptimizationLevel::All => "all",
        })
    }
}

impl std::fmt::Debug for SessionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOptions")
            .field("providers", &self.providers.iter().map(|p| p.name().to_string()).collect::<Vec<_>>())
            .field("fallback", &self.fallback.as_ref().map(|p| p.name().to_string()))
            .field("optimization_level", &self.optimization_level)
            .field("intra_op_threads", &self.intra_op_threads)
            .field("free_dims_by_name", &self.free_dims_by_name)
            .field("free_dims_by_denotation", &self.free_dims_by_denotation)
            .field("limits", &self.limits)
            .field("enable_host_pool", &self.enable_host_pool)
            .finish()
    }
}
