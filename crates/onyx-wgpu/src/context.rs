//! The GPU one wgpu EP runs on: the adapter it chose (or the application's device and queue),
//! the compute pipelines made so far, and what the device reported (errors, loss).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use onyx_core::{Device, Error, Result};

use crate::bind_cache::BindCache;
use crate::capabilities::Capabilities;
use crate::compile::{Compiler, Priority};
use crate::options::WgpuOptions;
use crate::pipeline_cache::{DiskCache, PipelineCacheStatus};
use crate::profile::SubmitProfile;
use crate::recycle::Recycler;

pub(crate) use crate::compile::Pipeline;

/// A device and queue with everything the EP shares between sessions and runs on them.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    id: u32,
    /// Pipelines by key, and by shader source (variants with equal sources share one).
    pipelines: Mutex<HashMap<String, Arc<Pipeline>>>,
    sources: Mutex<HashMap<String, Arc<Pipeline>>>,
    /// Compiles pipelines in the background.
    compiler: Compiler,
    /// Idle tensor buffers by size class, reused by later runs.
    pub(crate) pool: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    /// Idle parameter buffers of runs.
    pub(crate) param_buffers: Mutex<Vec<wgpu::Buffer>>,
    /// Bind groups by what they bind, reused from run to run.
    pub(crate) bind_groups: BindCache,
    /// Open runs, and the buffers of dropped tensors waiting for them before the pool.
    pub(crate) recycler: Recycler,
    /// What runs and pipeline compilations cost so far.
    pub(crate) stats: Stats,
    /// Host-to-device and device-to-host copies made so far.
    pub(crate) uploads: AtomicU64,
    pub(crate) downloads: AtomicU64,
    /// Bytes written through the queue since it was last submitted (see `buffer.rs`).
    pub(crate) staged: AtomicU64,
    /// Bytes written through the queue after which it is submitted (see `buffer.rs`).
    pub(crate) submit_after_staged: u64,
    /// Whether runs beginning now time their dispatches (see `profile.rs`).
    pub(crate) profiling: AtomicBool,
    /// Profiles of the submissions of profiled runs, until taken.
    pub(crate) profiles: Mutex<Vec<SubmitProfile>>,
    /// Set once the device is lost: every later call fails.
    pub(crate) lost: Arc<Mutex<Option<String>>>,
    /// The first error the device reported outside an error scope since the last check.
    error: Arc<Mutex<Option<String>>>,
    /// What the device can do.
    caps: Capabilities,
    /// Whether kernels made from now on get startup pipelines (see [`GpuContext::set_startup_kernels`]).
    startup_kernels: AtomicBool,
    /// How long opening the adapter and the device took (zero for the application's device).
    opened_in: std::time::Duration,
    /// Tests: runs use the startup pipelines even once the tuned ones are compiled.
    #[cfg(test)]
    pub(crate) always_startup: AtomicBool,
}

/// Counters of host work, for `onyx bench`.
#[derive(Default)]
pub(crate) struct Stats {
    /// Runs submitted (a run flushed several times counts once per submission).
    pub submissions: AtomicU64,
    /// Host nanoseconds from a submission's first recorded command to its submit.
    pub record_ns: AtomicU64,
    /// Dispatches recorded.
    pub dispatches: AtomicU64,
}

/// What this context's runs and pipelines cost the host so far (see [`GpuContext::host_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostStats {
    /// Submissions made by runs.
    pub submissions: u64,
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Host milliseconds spent recording submissions (first command to submit).
    pub record_ms: f64,
    /// Bind groups reused from earlier dispatches.
    pub bind_groups_reused: u64,
    /// Bind groups made.
    pub bind_groups_made: u64,
    /// Pipelines made.
    pub pipelines: usize,
    /// Host milliseconds spent making them (summed over the compiler threads).
    pub compile_ms: f64,
    /// Bytes of device memory held by buffers on this device now (wgpu's own count; 0 on
    /// backends that do not count). Onyx's pool keeps the buffers runs needed, so after runs
    /// this is their peak device memory.
    pub device_buffer_bytes: u64,
}

/// Features Onyx uses when the adapter has them.
const WANTED_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// Whether Onyx's cooperative GEMM can run on `adapter`: f16 shaders, subgroups of exactly 32
/// invocations (the kernel gives each subgroup of its 256 invocations two output fragments) and
/// a 16x16x16 f16 x f16 + f32 configuration.
fn has_f16_tensor_cores(adapter: &wgpu::Adapter) -> bool {
    let needed =
        wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    let info = adapter.get_info();
    adapter.features().contains(needed)
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && adapter.cooperative_matrix_properties().iter().any(|c| {
            use wgpu::CooperativeScalarType::{F16, F32};
            (c.m_size, c.n_size, c.k_size) == (16, 16, 16) && c.ab_type == F16 && c.cr_type == F32
        })
}

/// How the device suballocates memory: blocks that start at 8 MiB (host-visible ones at 4 MiB)
/// and double up to 256 MiB. wgpu's default starts host-visible blocks at 64 MiB, and the
/// first download of a session then waits ~15 ms for the driver to allocate and pin them.
const MEMORY_BLOCKS: wgpu::MemoryHints =
    wgpu::MemoryHints::Manual { suballocated_device_memory_block_size: (8 << 20)..(256 << 20) };

/// Bytes written through the queue after which it is submitted: the GPU then copies a large
/// model's weights while the rest are written, and their staging memory is freed as it goes
/// instead of all of it being held until the first run.
const STAGED_BYTES_PER_SUBMIT: u64 = 256 << 20;

/// Each context gets its own `Device::Wgpu` number.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext").field("adapter", &self.info.name).field("id", &self.id).finish()
    }
}

/// The adapters wgpu finds for `backends` (all compiled-in backends when empty), in the order
/// the EP prefers them for `options`, with those the filters reject left out.
pub fn adapters(options: &WgpuOptions) -> Vec<wgpu::Adapter> {
    let backends = if options.backends.is_empty() { wgpu::Backends::all() } else { options.backends };
    let instance = shared_instance(backends);
    let mut found: Vec<wgpu::Adapter> = pollster::block_on(instance.enumerate_adapters(backends))
        .into_iter()
        .filter(|a| options.accepts(&a.get_info()))
        .collect();
    found.sort_by_key(|a| options.rank(&a.get_info()));
    found
}

/// One wgpu instance per set of backends for the whole process: devices of one instance can
/// tell each other's resources apart (wrapping a buffer of another device is then a clean
/// error); resources of another instance make wgpu itself panic, so Onyx never mixes them.
fn shared_instance(backends: wgpu::Backends) -> wgpu::Instance {
    static INSTANCES: Mutex<Vec<(wgpu::Backends, wgpu::Instance)>> = Mutex::new(vec![]);
    let mut instances = INSTANCES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, i)) = instances.iter().find(|(b, _)| *b == backends) {
        return i.clone();
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    // Onyx dispatches no indirect calls, and wgpu's validation of them compiles pipelines when
    // each device opens: ~40 ms of a cold start on the H200's driver.
    desc.flags.remove(wgpu::InstanceFlags::VALIDATION_INDIRECT_CALL);
    let instance = wgpu::Instance::new(desc);
    instances.push((backends, instance.clone()));
    instance
}

/// The adapter a context will open, chosen, with what its device will be able to do.
pub(crate) struct ChosenAdapter {
    adapter: wgpu::Adapter,
    caps: Capabilities,
    id: u32,
    startup_kernels: bool,
    pipeline_cache_dir: Option<std::path::PathBuf>,
    started: std::time::Instant,
}

impl ChosenAdapter {
    /// Chooses the adapter `options` ask for. This is the quick half of opening a GPU (the
    /// driver's instance and its adapters); [`ChosenAdapter::open`] is the slow one.
    pub(crate) fn choose(options: &WgpuOptions) -> Result<ChosenAdapter> {
        let started = std::time::Instant::now();
        let found = adapters(options);
        let index = options.adapter_index.unwrap_or(0);
        let count = found.len();
        let adapter = found.into_iter().nth(index).ok_or_else(|| {
            Error::Device(if count == 0 {
                "wgpu: no adapter found (is a Vulkan, Metal or DX12 driver installed? on Linux without a GPU, \
                 Mesa's lavapipe: package mesa-vulkan-drivers)"
                    .to_string()
            } else {
                format!("wgpu: adapter index {index} asked for, but only {count} adapter(s) match the options")
            })
        })?;
        let cooperative = !options.no_cooperative_matrix && has_f16_tensor_cores(&adapter);
        let mut features = adapter.features() & WANTED_FEATURES;
        if cooperative {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let caps = Capabilities::new(features, adapter.limits(), cooperative);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (startup_kernels, pipeline_cache_dir) = (!options.no_startup_kernels, options.pipeline_cache_dir.clone());
        Ok(ChosenAdapter { adapter, caps, id, startup_kernels, pipeline_cache_dir, started })
    }

    /// What the device will be able to do.
    pub(crate) fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The [`Device`] values on the GPU will carry.
    pub(crate) fn onyx_device(&self) -> Device {
        Device::Wgpu(self.id)
    }

    /// Creates the device with every limit the adapter offers and the optional features Onyx
    /// uses, and its pipeline cache on disk if the options ask for one.
    pub(crate) fn open(self) -> Result<Arc<GpuContext>> {
        let ChosenAdapter { adapter, caps, id, startup_kernels, pipeline_cache_dir, started } = self;
        let cache_feature = match pipeline_cache_dir {
            Some(_) => adapter.features() & wgpu::Features::PIPELINE_CACHE,
            None => wgpu::Features::empty(),
        };
        let mut desc = wgpu::DeviceDescriptor {
            label: Some("onyx"),
            required_features: caps.features() | cache_feature,
            required_limits: caps.limits().clone(),
            memory_hints: MEMORY_BLOCKS,
            ..Default::default()
        };
        if caps.has_cooperative_matrix() {
            // SAFETY: the token only unlocks wgpu's experimental features, and the one
            // requested is the cooperative matrix feature. Onyx uses it in one kernel (the f16
            // tiled GEMM of ops/matmul/tiled.rs), only with the 16x16x16 f16 -> f32
            // configuration the adapter reported (see `has_f16_tensor_cores`), loading and
            // storing fragments in workgroup arrays at offsets that stay inside them (checked
            // by that kernel's tests on a GPU that has them).
            desc.experimental_features = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| Error::Device(format!("wgpu: cannot open {}: {e}", adapter.get_info().name)))?;
        let (info, opened_in) = (adapter.get_info(), started.elapsed());
        let gpu = GpuContext::build(device, queue, info, caps, id, pipeline_cache_dir.as_deref(), opened_in);
        gpu.set_startup_kernels(startup_kernels);
        Ok(gpu)
    }
}

impl GpuContext {
    /// Opens the adapter `options` choose and creates a device on it with every limit the
    /// adapter offers and the optional features Onyx uses.
    pub fn new(options: &WgpuOptions) -> Result<Arc<GpuContext>> {
        ChosenAdapter::choose(options)?.open()
    }

    /// Uses the application's own device and queue: all of Onyx's work is submitted on that
    /// queue, ordered with the application's own submissions. `info` describes the adapter for
    /// reports (`adapter.get_info()`).
    /// Onyx's f16 products use cooperative matrices only on a device it opens itself (it must
    /// know the adapter's configurations).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> Arc<GpuContext> {
        Self::from_device_with_pipeline_cache(device, queue, info, None)
    }

    /// [`GpuContext::from_device`] with Onyx's compiled pipelines kept in `dir` between
    /// processes (as the `pipeline_cache_dir` option does for a device Onyx opens). The device
    /// must have been created with [`wgpu::Features::PIPELINE_CACHE`] (Vulkan); without it, or
    /// with `dir` `None`, no cache is kept.
    pub fn from_device_with_pipeline_cache(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        dir: Option<&std::path::Path>,
    ) -> Arc<GpuContext> {
        let caps = Capabilities::of_device(&device);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Self::build(device, queue, info, caps, id, dir, std::time::Duration::ZERO)
    }

    fn build(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        caps: Capabilities,
        id: u32,
        pipeline_cache_dir: Option<&std::path::Path>,
        opened_in: std::time::Duration,
    ) -> Arc<GpuContext> {
        let (lost, error) = (Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None)));
        let on_error = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| record_fault(&on_error, e.to_string())));
        let on_lost = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            record_fault(&on_lost, format!("device lost ({reason:?}): {message}"))
        });
        // After the handlers: errors outside the cache's own scopes are recorded, not panics.
        let disk = pipeline_cache_dir.and_then(|dir| DiskCache::open(&device, &info, dir));
        Arc::new(GpuContext {
            device,
            queue,
            info,
            id,
            pipelines: Mutex::new(HashMap::new()),
            sources: Mutex::new(HashMap::new()),
            compiler: Compiler::new(disk),
            pool: Mutex::new(HashMap::new()),
            param_buffers: Mutex::new(vec![]),
            bind_groups: BindCache::default(),
            recycler: Recycler::default(),
            stats: Stats::default(),
            uploads: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            submit_after_staged: STAGED_BYTES_PER_SUBMIT,
            downloads: AtomicU64::new(0),
            profiling: AtomicBool::new(false),
            profiles: Mutex::new(vec![]),
            lost,
            error,
            caps,
            startup_kernels: AtomicBool::new(true),
            opened_in,
            #[cfg(test)]
            always_startup: AtomicBool::new(false),
        })
    }

    /// The wgpu device.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The queue all of the EP's work goes to.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The adapter the device belongs to.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The [`Device`] values on this GPU carry.
    pub fn onyx_device(&self) -> Device {
        Device::Wgpu(self.id)
    }

    /// What the device can do (f16, tensor cores, limits).
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// Whether f16 matrix products run on cooperative matrices (16x16x16 fragments, f32
    /// accumulators, subgroups of 32).
    pub fn has_cooperative_matrix(&self) -> bool {
        self.caps.has_cooperative_matrix()
    }

    /// Whether the GEMM, convolution and attention kernels made from now on (when sessions are
    /// built) also get a startup pipeline (default: yes; attention's is its row kernel). A startup pipeline is a simple kernel that the
    /// driver compiles in a fraction of the time of the tuned one; runs use it until the tuned
    /// pipeline is compiled, so that a session's first runs do not wait for the driver's
    /// compiler (the tuned convolution kernels take 0.1-0.3 s each on a cold NVIDIA driver).
    /// The startup kernels sum in another order: outputs of the first runs may differ from
    /// later ones in the last bits. Off, runs wait for the tuned pipelines and are
    /// reproducible from the first.
    pub fn set_startup_kernels(&self, enabled: bool) {
        self.startup_kernels.store(enabled, Ordering::Relaxed);
    }

    /// Milliseconds from choosing the adapter to the device being open (0 for the
    /// application's device): the part of a cold start that is the driver's.
    pub fn open_ms(&self) -> f64 {
        self.opened_in.as_secs_f64() * 1e3
    }

    /// See [`GpuContext::set_startup_kernels`].
    pub fn startup_kernels(&self) -> bool {
        self.startup_kernels.load(Ordering::Relaxed)
    }

    /// Whether runs take the startup kernels even where the tuned ones are compiled (tests of
    /// the startup kernels; always false outside tests).
    pub(crate) fn forces_startup(&self) -> bool {
        #[cfg(test)]
        return self.always_startup.load(Ordering::Relaxed);
        #[cfg(not(test))]
        false
    }

    /// Whether shaders may use `f16`.
    pub fn has_f16(&self) -> bool {
        self.caps.has_f16()
    }

    /// An error if the device was lost (always, from then on) or reported an error nobody
    /// caught since the last check.
    pub(crate) fn check_fault(&self) -> Result<()> {
        let lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let error = lost.or_else(|| self.error.lock().unwrap_or_else(PoisonError::into_inner).take());
        match error {
            Some(message) => Err(Error::Device(format!("wgpu ({}): {message}", self.info.name))),
            None => Ok(()),
        }
    }

    /// The pipeline of `key`, compiled from `source()` the first time it is asked for. Nodes
    /// sharing a shader variant share one pipeline, and so do variants with the same source.
    /// The compilation runs in the background (see `compile.rs`): a shader that does not
    /// compile is an error when a run first dispatches it.
    pub(crate) fn pipeline(&self, key: &str, source: impl FnOnce() -> String) -> Result<Arc<Pipeline>> {
        self.pipeline_with(key, source, Priority::Urgent)
    }

    /// [`GpuContext::pipeline`] compiled with `priority` when it is new.
    pub(crate) fn pipeline_with(
        &self,
        key: &str,
        source: impl FnOnce() -> String,
        priority: Priority,
    ) -> Result<Arc<Pipeline>> {
        if let Some(p) = self.pipelines.lock().unwrap_or_else(PoisonError::into_inner).get(key) {
            return Ok(p.clone());
        }
        let source = source();
        let p = {
            let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
            match sources.get(&source) {
                Some(p) => p.clone(),
                None => {
                    let p = self.compiler.request(&self.device, key, source.clone(), priority);
                    sources.insert(source, p.clone());
                    p
                }
            }
        };
        self.pipelines.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_string(), p.clone());
        Ok(p)
    }

    /// Host-to-device and device-to-host tensor copies made on this GPU so far: (uploads,
    /// downloads). A run bound entirely to GPU values leaves both unchanged.
    pub fn transfer_counts(&self) -> (u64, u64) {
        (self.uploads.load(Ordering::Relaxed), self.downloads.load(Ordering::Relaxed))
    }

    /// What runs and pipelines on this GPU cost the host so far.
    pub fn host_stats(&self) -> HostStats {
        let (reused, made) = self.bind_groups.counts();
        let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
        HostStats {
            submissions: self.stats.submissions.load(Ordering::Relaxed),
            dispatches: self.stats.dispatches.load(Ordering::Relaxed),
            record_ms: ms(&self.stats.record_ns),
            bind_groups_reused: reused,
            bind_groups_made: made,
            pipelines: self.pipeline_count(),
            compile_ms: self.compiler.ms(),
            device_buffer_bytes: self.device.get_internal_counters().hal.buffer_memory.read().max(0) as u64,
        }
    }

    /// Drops the bind groups kept for reuse (and the buffers only they hold). Onyx also drops
    /// those no run used for a while; call this to free an application buffer at once after
    /// dropping its tensors.
    pub fn clear_bind_groups(&self) {
        self.bind_groups.clear();
    }

    /// Every distinct pipeline made so far, by key, with the milliseconds its compilation took
    /// (0 while it compiles), slowest first: what a cold start waits for.
    pub fn compile_times(&self) -> Vec<(String, f64)> {
        let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        let mut times: Vec<(String, f64)> = sources.values().map(|p| (p.key.clone(), p.compile_ms())).collect();
        times.sort_by(|a, b| b.1.total_cmp(&a.1));
        times
    }

    /// Blocks until every pipeline requested so far has compiled (or failed). Sessions wait
    /// for this when dropped: a process must not exit while compiler threads are inside the
    /// driver (the NVIDIA driver crashes when torn down under them).
    pub fn wait_for_pipelines(&self) {
        self.compiler.wait();
    }

    /// What the pipeline cache on disk (option `pipeline_cache_dir`) loaded and wrote so far;
    /// `None` without one (no directory given, an application's device without
    /// [`wgpu::Features::PIPELINE_CACHE`], or not Vulkan).
    pub fn pipeline_cache(&self) -> Option<PipelineCacheStatus> {
        self.compiler.disk_status()
    }

    /// Number of distinct pipelines made so far.
    pub fn pipeline_count(&self) -> usize {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

fn record_fault(fault: &Mutex<Option<String>>, message: String) {
    fault.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(message);
}
