//! The wgpu execution provider: which nodes it takes, their kernels, host copies.

use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};

use onyx_core::ep::{DeviceDescription, ExecutionProvider, Kernel, NodeContext, RunState};
use onyx_core::{Device, Error, Result, Tensor, TensorView};

use crate::capabilities::Capabilities;
use crate::context::{adapters, ChosenAdapter, GpuContext};
use crate::kernel::GpuKernel;
use crate::ops::Registry;
use crate::options::WgpuOptions;
use crate::run::GpuRun;

/// Runs ONNX nodes on one GPU through wgpu (Vulkan, Metal or DX12). Share one provider between
/// sessions to share its device, pipelines and tensors.
pub struct WgpuProvider {
    caps: Capabilities,
    device: Device,
    ctx: OpeningContext,
    registry: Registry,
}

/// The provider's GPU context, or the device that a helper thread still opens.
struct OpeningContext {
    opened: OnceLock<std::result::Result<Arc<GpuContext>, String>>,
    opening: Mutex<Option<mpsc::Receiver<Result<Arc<GpuContext>>>>>,
}

impl OpeningContext {
    fn opened(ctx: Arc<GpuContext>) -> OpeningContext {
        OpeningContext { opened: OnceLock::from(Ok(ctx)), opening: Mutex::new(None) }
    }

    /// Opens `adapter`'s device on a helper thread. The thread is never joined: a thread that
    /// opened an NVIDIA Vulkan device takes ~10 ms to exit, which no caller needs to wait for.
    fn open(adapter: ChosenAdapter) -> Result<OpeningContext> {
        let (sender, receiver) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("onyx-wgpu-open".into())
            .spawn(move || {
                // The receiver is gone only when the provider was dropped, and then so is the device.
                let _ = sender.send(adapter.open());
            })
            .map_err(|e| Error::Device(format!("wgpu: cannot start a thread to open the device: {e}")))?;
        Ok(OpeningContext { opened: OnceLock::new(), opening: Mutex::new(Some(receiver)) })
    }

    /// The context, once the device is open (waiting for it), or why it could not be opened.
    fn get(&self) -> Result<&Arc<GpuContext>> {
        let opened = self.opened.get_or_init(|| {
            let receiver = self.opening.lock().unwrap_or_else(PoisonError::into_inner).take();
            match receiver.map(|r| r.recv()) {
                Some(Ok(Ok(ctx))) => Ok(ctx),
                Some(Ok(Err(Error::Device(message)))) => Err(message),
                Some(Ok(Err(other))) => Err(other.to_string()),
                _ => Err("wgpu: the thread opening the device stopped without opening it".into()),
            }
        });
        opened.as_ref().map_err(|message| Error::Device(message.clone()))
    }
}

impl Drop for OpeningContext {
    /// Waits for a device still opening: a process must not exit while a thread is inside the
    /// driver (the NVIDIA driver crashes when torn down under it).
    fn drop(&mut self) {
        let _ = self.get();
    }
}

impl WgpuProvider {
    /// Chooses the adapter `options` ask for and opens its device on a helper thread: a session
    /// is optimized and partitioned meanwhile, and the first use of the device waits for it.
    /// An adapter that cannot be found is an error here; a device that cannot be opened is one
    /// at the first use (for a session, when it is built).
    pub fn new(options: &WgpuOptions) -> Result<WgpuProvider> {
        let adapter = ChosenAdapter::choose(options)?;
        let (caps, device) = (adapter.capabilities().clone(), adapter.onyx_device());
        Ok(WgpuProvider { caps, device, ctx: OpeningContext::open(adapter)?, registry: Registry::with_all_ops() })
    }

    /// Runs on the application's own device and queue (see [`GpuContext::from_device`]).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> WgpuProvider {
        Self::with_context(GpuContext::from_device(device, queue, info))
    }

    /// Runs on an existing context (shared with other providers or the application).
    pub fn with_context(ctx: Arc<GpuContext>) -> WgpuProvider {
        let (caps, device) = (ctx.capabilities().clone(), ctx.onyx_device());
        WgpuProvider { caps, device, ctx: OpeningContext::opened(ctx), registry: Registry::with_all_ops() }
    }

    /// The GPU this provider runs on: allocate, wrap, upload and download tensors through it.
    /// Waits for the device if it is still opening; an error if it could not be opened.
    pub fn context(&self) -> Result<&Arc<GpuContext>> {
        self.ctx.get()
    }

    /// What the GPU can do, known before its device is open.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// Op types this provider has kernels for (it may still decline a node for its dtypes).
    pub fn ops(&self) -> Vec<&'static str> {
        self.registry.ops()
    }
}

/// One line per adapter wgpu finds, for `onyx devices`.
pub fn describe_adapters() -> Vec<DeviceDescription> {
    adapters(&WgpuOptions::default())
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let info = a.get_info();
            let features = a.features();
            let limits = a.limits();
            let has = |f: wgpu::Features| if features.contains(f) { "yes" } else { "no" };
            DeviceDescription {
                device: Device::Wgpu(i as u32),
                name: info.name.clone(),
                details: vec![
                    ("index".into(), i.to_string()),
                    ("vendor_id".into(), info.vendor.to_string()),
                    ("device_type".into(), format!("{:?}", info.device_type)),
                    ("backend".into(), format!("{:?}", info.backend)),
                    ("driver".into(), format!("{} {}", info.driver, info.driver_info).trim().to_string()),
                    ("shader_f16".into(), has(wgpu::Features::SHADER_F16).into()),
                    ("subgroups".into(), has(wgpu::Features::SUBGROUP).into()),
                    ("timestamp_query".into(), has(wgpu::Features::TIMESTAMP_QUERY).into()),
                    ("cooperative_matrix".into(), cooperative_matrices(a)),
                    ("max_buffer_size".into(), limits.max_buffer_size.to_string()),
                    ("max_storage_buffer_binding_size".into(), limits.max_storage_buffer_binding_size.to_string()),
                    (
                        "max_compute_workgroup_storage_size".into(),
                        limits.max_compute_workgroup_storage_size.to_string(),
                    ),
                    (
                        "max_compute_invocations_per_workgroup".into(),
                        limits.max_compute_invocations_per_workgroup.to_string(),
                    ),
                ],
            }
        })
        .collect()
}

/// The adapter's cooperative matrix configurations (tensor cores), as `MxNxK A->C` items.
fn cooperative_matrices(adapter: &wgpu::Adapter) -> String {
    if !adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        return "no".into();
    }
    let configs: Vec<String> = adapter
        .cooperative_matrix_properties()
        .iter()
        .map(|c| format!("{}x{}x{} {:?}->{:?}", c.m_size, c.n_size, c.k_size, c.ab_type, c.cr_type))
        .collect();
    configs.join(", ")
}

impl ExecutionProvider for WgpuProvider {
    fn name(&self) -> &str {
        "wgpu"
    }

    fn device(&self) -> Device {
        self.device
    }

    fn describe_devices(&self) -> Vec<DeviceDescription> {
        describe_adapters()
    }

    fn supports(&self, ctx: &NodeContext<'_>) -> bool {
        self.registry.get(&ctx.node.domain, &ctx.node.op_type).is_some_and(|op| (op.supports)(ctx, &self.caps))
    }

    fn build_kernel(&self, ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
        let op = self
            .registry
            .get(&ctx.node.domain, &ctx.node.op_type)
            .ok_or_else(|| onyx_core::Error::Unsupported(format!("wgpu: no kernel for {}", ctx.node.location())))?;
        let gpu = self.context()?;
        let gpu_op = (op.build)(ctx, gpu).map_err(|e| e.at(&ctx.node.location()))?;
        Ok(Box::new(GpuKernel { ctx: gpu.clone(), op: gpu_op, at: ctx.node.location() }))
    }

    /// No run state when the device could not be opened (then no session has kernels on it).
    fn begin_run(&self) -> Option<Box<dyn RunState>> {
        let gpu = self.context().ok()?;
        Some(Box::new(GpuRun::new(gpu.clone())))
    }

    fn host_inputs(&self, ctx: &NodeContext<'_>) -> Vec<usize> {
        self.registry.get(&ctx.node.domain, &ctx.node.op_type).map(|op| op.host_inputs.to_vec()).unwrap_or_default()
    }

    fn copy_into(&self, run: Option<&mut dyn RunState>, src: &Tensor, dst: &Tensor) -> Result<()> {
        let gpu = self.context()?;
        let (from, to) = (gpu.own_buffer(src)?, gpu.own_buffer(dst)?);
        if from.buffer() == to.buffer() && from.offset() == to.offset() {
            // A kernel wrote the output in place (an updated input bound as the output).
            return Ok(());
        }
        let bytes = onyx_core::device::DeviceStorage::byte_len(from) as u64;
        match run.and_then(|r| r.as_any_mut().downcast_mut::<GpuRun>()) {
            Some(run) => run.copy(from, to, bytes),
            None => {
                let mut run = GpuRun::new(gpu.clone());
                run.copy(from, to, bytes);
                run.flush()?;
            }
        }
        Ok(())
    }

    fn upload(&self, tensor: TensorView<'_>) -> Result<Tensor> {
        self.context()?.upload(tensor)
    }

    fn download(&self, tensor: &Tensor) -> Result<Tensor> {
        self.context()?.download(tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(result: Option<Result<Arc<GpuContext>>>) -> OpeningContext {
        let (sender, receiver) = mpsc::sync_channel(1);
        if let Some(result) = result {
            sender.send(result).unwrap();
        }
        OpeningContext { opened: OnceLock::new(), opening: Mutex::new(Some(receiver)) }
    }

    #[test]
    fn a_device_that_failed_to_open_is_the_same_error_at_every_use() {
        let ctx = opening(Some(Err(Error::Device("wgpu: cannot open Some GPU: out of memory".into()))));
        for _ in 0..2 {
            let e = ctx.get().unwrap_err().to_string();
            assert!(
                e.contains("cannot open Some GPU: out of memory") && !e.contains("device error: device error"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_thread_that_stopped_without_a_device_is_an_error_not_a_hang() {
        let e = opening(None).get().unwrap_err().to_string();
        assert!(e.contains("stopped without opening it"), "{e}");
    }

    #[test]
    fn the_device_opened_in_the_background_has_the_capabilities_nodes_were_chosen_by() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let provider = WgpuProvider::new(&WgpuOptions::default()).unwrap();
        let (before, ctx) = (provider.capabilities().clone(), provider.context().unwrap());
        assert_eq!(ctx.capabilities().features(), before.features());
        assert_eq!(ctx.capabilities().limits(), before.limits());
        assert_eq!(ctx.has_cooperative_matrix(), before.has_cooperative_matrix());
        assert_eq!(ctx.device().features(), before.features(), "the device has what was asked for");
        assert_eq!(provider.device(), ctx.onyx_device());
        assert_ne!(provider.device(), gpu.device(), "each provider has its own device");
    }
}
