//! Whether an application's buffer belongs to this context's device, checked when it is wrapped
//! (wgpu buffers do not say which device made them).

use onyx_core::{Error, Result};

use crate::context::GpuContext;

impl GpuContext {
    /// Fails when `buffer` was made by another device: binding it to a throwaway bind group of
    /// this device is a validation error then, caught in an error scope. Buffers shorter than
    /// one word hold no element and are not checked.
    pub(crate) fn check_buffer_device(&self, buffer: &wgpu::Buffer, offset: u64) -> Result<()> {
        if buffer.size() < offset.saturating_add(4) {
            return Ok(());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("onyx wrap check"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: true },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }],
        });
        let _ = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("onyx wrap check"),
            layout: &layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset,
                    size: wgpu::BufferSize::new(4),
                }),
            }],
        });
        match pollster::block_on(scope.pop()) {
            None => Ok(()),
            Some(e) => Err(Error::InvalidArgument(format!(
                "wgpu: the buffer cannot be used by this session's device (was it made by another device?): {e}"
            ))),
        }
    }
}
