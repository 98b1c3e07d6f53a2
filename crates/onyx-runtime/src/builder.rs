//! Building sessions the way ONNX Runtime and the `ort` crate users expect.

use std::path::Path;
use std::sync::Arc;

use onyx_core::ep::ExecutionProvider;
use onyx_core::ir::Model;
use onyx_core::{OptimizationLevel, Result, Session, SessionOptions, Tensor};
use onyx_cpu::CpuProvider;

use crate::Provider;

/// Configures and creates a [`Session`].
#[derive(Clone)]
pub struct SessionBuilder {
    providers: Vec<Provider>,
    cpu_fallback: bool,
    options: SessionOptions,
}

impl Default for SessionBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionBuilder {
    /// A builder with the CPU EP, optimization level `all` and one thread per core.
    pub fn new() -> Self {
        SessionBuilder { providers: vec![], cpu_fallback: true, options: SessionOptions::default() }
    }

    /// Execution providers in priority order (nodes none takes fall back to the CPU EP).
    pub fn with_providers(mut self, providers: impl IntoIterator<Item = Provider>) -> Self {
        self.providers = providers.into_iter().collect();
        self
    }

    /// Appends a provider instance (e.g. one sharing the application's device).
    pub fn with_provider(mut self, provider: Arc<dyn ExecutionProvider>) -> Self {
        self.providers.push(Provider::Custom(provider));
        self
    }

    /// Graph optimization level.
    pub fn with_optimization_level(mut self, level: OptimizationLevel) -> Self {
        self.options.optimization_level = level;
        self
    }

    /// Threads used inside kernels (0: one per core).
    pub fn with_intra_threads(mut self, threads: usize) -> Self {
        self.options.intra_op_threads = threads;
        self
    }

    /// Fixes a free dimension by its symbolic name (ONNX Runtime's AddFreeDimensionOverrideByName).
    pub fn with_free_dimension_override_by_name(mut self, name: impl Into<String>, value: usize) -> Self {
        self.options.free_dims_by_name.push((name.into(), value));
        self
    }

    /// Replaces the model's initializer `name` by `value` (see
    /// [`onyx_core::session::SessionOptions::initializers`]).
    pub fn with_initializer(mut self, name: impl Into<String>, value: Tensor) -> Self {
        self.options.initializers.push((name.into(), value));
        self
    }

    /// Fixes free dimensions by denotation, e.g. `DATA_BATCH` (ONNX Runtime's AddFreeDimensionOverride).
    pub fn with_free_dimension_override(mut self, denotation: impl Into<String>, value: usize) -> Self {
        self.options.free_dims_by_denotation.push((denotation.into(), value));
        self
    }

    /// Whether nodes no listed provider takes run on the CPU EP (default true). Disabled, session
    /// creation fails with an error listing those nodes (ONNX Runtime's `session.disable_cpu_ep_fallback`).
    pub fn with_cpu_fallback(mut self, enabled: bool) -> Self {
        self.cpu_fallback = enabled;
        self
    }

    /// Most bytes one tensor may take (default 16 GiB): a value over it is an error naming the
    /// value, its size and the limit, raised before it is allocated.
    pub fn with_max_tensor_bytes(mut self, bytes: u64) -> Self {
        self.options.limits.max_tensor_bytes = bytes;
        self
    }

    /// Most bytes the values of one run may hold at once (default 64 GiB); inputs and weights
    /// are not counted.
    pub fn with_max_run_bytes(mut self, bytes: u64) -> Self {
        self.options.limits.max_run_bytes = bytes;
        self
    }

    /// Deepest nesting of subgraphs (If, Loop, Scan) a model may have (default and maximum 64).
    pub fn with_max_subgraph_depth(mut self, depth: usize) -> Self {
        self.options.limits.max_subgraph_depth = depth;
        self
    }

    /// Loads an ONNX file (external data resolved in its folder) and creates the session. The
    /// providers open while the file is decoded (a GPU's driver takes tens of milliseconds to
    /// list its adapters), and a GPU's device opens while the model is optimized.
    pub fn commit_from_file(self, path: impl AsRef<Path>) -> Result<Session> {
        let path = path.as_ref();
        // The providers open on this thread and the file is decoded on a helper: a thread that
        // used the Vulkan driver takes milliseconds to exit, which joining it would add.
        let (model, providers) = std::thread::scope(|s| {
            let model = s.spawn(|| onyx_onnx::load_model(path));
            let providers = self.instantiate_providers();
            let model = model.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (model, providers)
        });
        self.commit(model?, providers?)
    }

    /// Creates the session from the bytes of an ONNX file without external data.
    pub fn commit_from_memory(self, bytes: &[u8]) -> Result<Session> {
        let model = onyx_onnx::load_model_from_bytes(bytes, None)?;
        self.commit_from_model(model)
    }

    /// Creates the session from a loaded model.
    pub fn commit_from_model(self, model: Model) -> Result<Session> {
        let providers = self.instantiate_providers()?;
        self.commit(model, providers)
    }

    /// The listed providers (the CPU EP when none is), opened.
    fn instantiate_providers(&self) -> Result<Vec<Arc<dyn ExecutionProvider>>> {
        if self.providers.is_empty() {
            return Ok(vec![Provider::Cpu.instantiate()?]);
        }
        self.providers.iter().map(Provider::instantiate).collect()
    }

    fn commit(self, model: Model, providers: Vec<Arc<dyn ExecutionProvider>>) -> Result<Session> {
        let mut options = self.options;
        options.providers = providers;
        let existing_cpu = options.providers.iter().find(|p| p.name() == "cpu").cloned();
        options.fallback =
            if self.cpu_fallback { Some(existing_cpu.unwrap_or_else(|| Arc::new(CpuProvider::new()))) } else { None };
        Session::new(model, options)
    }
}
