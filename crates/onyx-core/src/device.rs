//! Devices and device storage: the part of a value that an execution provider owns.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// Where a value's elements live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// A GPU reached through wgpu, by the EP's device index.
    Wgpu(u32),
    /// A CUDA device, by ordinal.
    Cuda(u32),
    /// Any other EP's device, by an id it picks (used by out-of-tree and test EPs).
    Other(u32),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Other(i) => write!(f, "device:{i}"),
        }
    }
}

/// Memory an execution provider allocated on its device. EPs implement this for their native
/// buffer type and downcast through [`DeviceStorage::as_any`] to get it back.
pub trait DeviceStorage: Send + Sync + fmt::Debug + 'static {
    /// The device holding the memory.
    fn device(&self) -> Device;
    /// Size in bytes of the tensor's elements.
    fn byte_len(&self) -> usize;
    /// For downcasting to the EP's buffer type.
    fn as_any(&self) -> &dyn Any;
}

/// A shared handle to device storage.
pub type DeviceBuffer = Arc<dyn DeviceStorage>;
