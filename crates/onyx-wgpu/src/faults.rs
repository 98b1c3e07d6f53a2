//! Errors of failed wgpu calls, named after their cause when the device is lost.

use std::sync::PoisonError;

use onyx_core::Error;

use crate::context::GpuContext;

impl GpuContext {
    /// The error for a wgpu call that failed with `message`: the device's loss when that is the
    /// cause. wgpu reports a loss (or `Device::destroy`) on its next poll, so this polls once,
    /// without waiting.
    pub(crate) fn device_error(&self, message: String) -> Error {
        let _ = self.device.poll(wgpu::PollType::Poll);
        match self.lost.lock().unwrap_or_else(PoisonError::into_inner).clone() {
            Some(lost) => Error::Device(format!("wgpu ({}): {lost} ({message})", self.adapter_info().name)),
            None => Error::Device(message),
        }
    }
}
