//! Compute pipelines compiled in the background.
//!
//! Making a pipeline (WGSL translated by naga, then compiled by the driver) costs milliseconds,
//! and a model needs dozens. Kernels ask for their pipelines while the session is built, one
//! node after another; each request queues the shader for a few compiler threads and returns at
//! once, so the compilations overlap each other and the rest of session creation (weights
//! upload, other nodes). A run waits for a pipeline only when it records the pipeline's first
//! dispatch; a shader that does not compile is an error there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use onyx_core::{Error, Result};

/// Compiler threads at most.
const MAX_THREADS: usize = 8;

/// A compute pipeline (compiled, being compiled or failed) and the layout of its one bind group.
pub(crate) struct Pipeline {
    compiled: OnceLock<std::result::Result<Compiled, String>>,
    /// The shader variant's key (names the kernel in profiles).
    pub key: String,
}

/// A pipeline ready to dispatch.
pub(crate) struct Compiled {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

impl Pipeline {
    /// The compiled pipeline, once its compilation is done (waits for it); an error naming
    /// the shader when it does not compile.
    pub fn compiled(&self) -> Result<&Compiled> {
        self.compiled.wait().as_ref().map_err(|e| Error::Device(e.clone()))
    }

    /// Compiles `source` into this pipeline on the calling thread; returns the nanoseconds spent.
    fn compile(&self, device: &wgpu::Device, source: String) -> u64 {
        let start = Instant::now();
        let key = self.key.as_str();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile(device, key, source)))
            .unwrap_or_else(|_| Err(format!("wgpu: compiling shader '{key}' panicked")));
        let _ = self.compiled.set(outcome);
        start.elapsed().as_nanos() as u64
    }
}

/// Translates and compiles one shader (inside its own error scope: scopes are per thread).
fn compile(device: &wgpu::Device, key: &str, source: String) -> std::result::Result<Compiled, String> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(key),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(key),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(format!("wgpu: shader '{key}' does not compile: {e}"));
    }
    let layout = pipeline.get_bind_group_layout(0);
    Ok(Compiled { pipeline, layout })
}

type Job = (Arc<Pipeline>, String);

/// The compiler threads of one device (started with the first request) and what they spent.
#[derive(Default)]
pub(crate) struct Compiler {
    jobs: Mutex<Option<Sender<Job>>>,
    /// Nanoseconds of compilation so far, all threads together.
    ns: Arc<AtomicU64>,
}

impl Compiler {
    /// A pipeline for `key` whose compilation from `source` has been queued (or, without
    /// compiler threads, is done).
    pub fn request(&self, device: &wgpu::Device, key: &str, source: String) -> Arc<Pipeline> {
        let pipeline = Arc::new(Pipeline { compiled: OnceLock::new(), key: key.to_string() });
        let job = (pipeline.clone(), source);
        let unsent = match self.sender(device) {
            Some(jobs) => jobs.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        if let Some((p, source)) = unsent {
            self.ns.fetch_add(p.compile(device, source), Ordering::Relaxed);
        }
        pipeline
    }

    /// Milliseconds of compilation so far (summed over threads).
    pub fn ms(&self) -> f64 {
        self.ns.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// The queue of the compiler threads, started on first use; `None` if no thread starts.
    fn sender(&self, device: &wgpu::Device) -> Option<Sender<Job>> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if jobs.is_none() {
            let (tx, rx) = channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_THREADS);
            let started = (0..threads)
                .filter(|i| {
                    let (rx, device, ns) = (rx.clone(), device.clone(), self.ns.clone());
                    let worker = std::thread::Builder::new().name(format!("onyx-wgpu-compile-{i}"));
                    worker.spawn(move || work(&rx, &device, &ns)).is_ok()
                })
                .count();
            if started == 0 {
                return None;
            }
            *jobs = Some(tx);
        }
        jobs.clone()
    }
}

/// A compiler thread: compiles queued shaders until the device's context is dropped.
fn work(jobs: &Mutex<Receiver<Job>>, device: &wgpu::Device, ns: &AtomicU64) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((pipeline, source)) = job else { return };
        ns.fetch_add(pipeline.compile(device, source), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use crate::{GpuContext, WgpuOptions};

    const GOOD: &str = "@group(0) @binding(0) var<storage, read> p: array<u32>;\n\
        @group(0) @binding(1) var<storage, read_write> y: array<u32>;\n\
        @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if g.x < p[0] { y[g.x] = g.x; } }\n";

    #[test]
    fn pipelines_compile_in_the_background_and_errors_surface_at_first_use() {
        if crate::testkit::provider().is_none() {
            return;
        }
        let ctx = GpuContext::new(&WgpuOptions::default()).unwrap();
        let many: Vec<_> = (0..6)
            .map(|i| ctx.pipeline(&format!("test/good/{i}"), || GOOD.replace("64", &(32 * (i + 1)).to_string())).unwrap())
            .collect();
        for p in &many {
            assert!(p.compiled().is_ok(), "{}", p.key);
        }
        let bad = ctx.pipeline("test/bad", || "fn main( {".to_string()).unwrap();
        let e = bad.compiled().err().expect("a broken shader compiled").to_string();
        assert!(e.contains("test/bad") && e.contains("does not compile"), "{e}");
        assert!(ctx.check_fault().is_ok(), "the error scope of the compiler thread caught it");
        // Same key: the same pipeline; same source under another key: shared too.
        assert!(std::sync::Arc::ptr_eq(&many[0], &ctx.pipeline("test/good/0", String::new).unwrap()));
        let alias = ctx.pipeline("test/alias", || GOOD.replace("64", "32")).unwrap();
        assert!(std::sync::Arc::ptr_eq(&many[0], &alias));
        assert_eq!(ctx.pipeline_count(), 7);
    }
}
