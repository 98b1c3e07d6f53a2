//! The CPU execution provider.

use onyx_core::ep::{DeviceDescription, ExecutionProvider, Kernel, NodeContext};
use onyx_core::{Device, Error, Result, Tensor, TensorView};

use crate::Registry;

/// Runs nodes on the host with the kernels of [`crate::ops`].
pub struct CpuProvider {
    registry: Registry,
}

impl CpuProvider {
    /// A CPU provider with every kernel registered.
    pub fn new() -> Self {
        CpuProvider { registry: Registry::with_all_ops() }
    }

    /// The kernel registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl Default for CpuProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl ExecutionProvider for CpuProvider {
    fn name(&self) -> &str {
        "cpu"
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn describe_devices(&self) -> Vec<DeviceDescription> {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        vec![DeviceDescription {
            device: Device::Cpu,
            name: format!("host CPU ({} {})", std::env::consts::ARCH, std::env::consts::OS),
            details: vec![("threads".into(), threads.to_string())],
        }]
    }

    fn supports(&self, ctx: &NodeContext<'_>) -> bool {
        self.registry.get(&ctx.node.domain, &ctx.node.op_type).is_some()
    }

    fn build_kernel(&self, ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
        let build = self
            .registry
            .get(&ctx.node.domain, &ctx.node.op_type)
            .ok_or_else(|| Error::Unsupported(format!("{} (no CPU kernel)", ctx.node.location())))?;
        build(ctx)
    }

    fn nchwc_block(&self) -> Option<usize> {
        crate::ops::nchwc::preferred_block()
    }

    fn upload(&self, tensor: TensorView<'_>) -> Result<Tensor> {
        Ok(tensor.to_tensor())
    }

    fn download(&self, tensor: &Tensor) -> Result<Tensor> {
        match tensor.device() {
            Device::Cpu => Ok(tensor.clone()),
            other => Err(Error::Device(format!("the CPU EP cannot read a tensor on {other}"))),
        }
    }
}
