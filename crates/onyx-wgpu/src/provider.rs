//! The wgpu execution provider: which nodes it takes, their kernels, host copies.

use std::sync::Arc;

use onyx_core::ep::{DeviceDescription, ExecutionProvider, Kernel, NodeContext, RunState};
use onyx_core::{Device, Result, Tensor, TensorView};

use crate::context::{adapters, GpuContext};
use crate::kernel::GpuKernel;
use crate::ops::Registry;
use crate::options::WgpuOptions;
use crate::run::GpuRun;

/// Runs ONNX nodes on one GPU through wgpu (Vulkan, Metal or DX12). Share one provider between
/// sessions to share its device, pipelines and tensors.
pub struct WgpuProvider {
    ctx: Arc<GpuContext>,
    registry: Registry,
}

impl WgpuProvider {
    /// Opens the adapter `options` choose.
    pub fn new(options: &WgpuOptions) -> Result<WgpuProvider> {
        Ok(Self::with_context(GpuContext::new(options)?))
    }

    /// Runs on the application's own device and queue (see [`GpuContext::from_device`]).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> WgpuProvider {
        Self::with_context(GpuContext::from_device(device, queue, info))
    }

    /// Runs on an existing context (shared with other providers or the application).
    pub fn with_context(ctx: Arc<GpuContext>) -> WgpuProvider {
        WgpuProvider { ctx, registry: Registry::with_all_ops() }
    }

    /// The GPU this provider runs on: allocate, wrap, upload and download tensors through it.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
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
                    ("max_compute_workgroup_storage_size".into(), limits.max_compute_workgroup_storage_size.to_string()),
                    ("max_compute_invocations_per_workgroup".into(), limits.max_compute_invocations_per_workgroup.to_string()),
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
        self.ctx.onyx_device()
    }

    fn describe_devices(&self) -> Vec<DeviceDescription> {
        describe_adapters()
    }

    fn supports(&self, ctx: &NodeContext<'_>) -> bool {
        self.registry.get(&ctx.node.domain, &ctx.node.op_type).is_some_and(|op| (op.supports)(ctx, &self.ctx))
    }

    fn build_kernel(&self, ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
        let op = self.registry.get(&ctx.node.domain, &ctx.node.op_type).ok_or_else(|| {
            onyx_core::Error::Unsupported(format!("wgpu: no kernel for {}", ctx.node.location()))
        })?;
        let gpu_op = (op.build)(ctx, &self.ctx).map_err(|e| e.at(&ctx.node.location()))?;
        Ok(Box::new(GpuKernel { ctx: self.ctx.clone(), op: gpu_op, at: ctx.node.location() }))
    }

    fn begin_run(&self) -> Option<Box<dyn RunState>> {
        Some(Box::new(GpuRun::new(self.ctx.clone())))
    }

    fn host_inputs(&self, ctx: &NodeContext<'_>) -> Vec<usize> {
        self.registry.get(&ctx.node.domain, &ctx.node.op_type).map(|op| op.host_inputs.to_vec()).unwrap_or_default()
    }

    fn copy_into(&self, run: Option<&mut dyn RunState>, src: &Tensor, dst: &Tensor) -> Result<()> {
        let (from, to) = (self.ctx.own_buffer(src)?, self.ctx.own_buffer(dst)?);
        let bytes = onyx_core::device::DeviceStorage::byte_len(from) as u64;
        match run.and_then(|r| r.as_any_mut().downcast_mut::<GpuRun>()) {
            Some(run) => run.copy(from, to, bytes),
            None => {
                let mut run = GpuRun::new(self.ctx.clone());
                run.copy(from, to, bytes);
                run.flush()?;
            }
        }
        Ok(())
    }

    fn upload(&self, tensor: TensorView<'_>) -> Result<Tensor> {
        self.ctx.upload(tensor)
    }

    fn download(&self, tensor: &Tensor) -> Result<Tensor> {
        self.ctx.download(tensor)
    }
}
