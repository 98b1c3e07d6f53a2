//! One run's recording: every kernel of the run adds its dispatches to one compute pass of one
//! command encoder, submitted once when the run ends (or before a value is read back).

use std::any::Any;
use std::sync::Arc;

use onyx_core::ep::RunState;
use onyx_core::{Error, Result};

use crate::buffer::GpuBuffer;
use crate::context::{GpuContext, Pipeline};

/// Bytes of one parameter chunk; a run grows more chunks as its kernels need them.
const PARAMS_CHUNK: u64 = 64 * 1024;

/// The parameters (shapes, strides, scalars) of a run's dispatches, packed into a few storage
/// buffers that are written once, just before the run is submitted.
struct ParamChunk {
    buffer: wgpu::Buffer,
    bytes: Vec<u8>,
}

/// The state the wgpu EP keeps for one run.
pub struct GpuRun {
    ctx: Arc<GpuContext>,
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    chunks: Vec<ParamChunk>,
    dispatches: usize,
}

impl GpuRun {
    /// An empty recording on `ctx`'s device.
    pub fn new(ctx: Arc<GpuContext>) -> GpuRun {
        GpuRun { ctx, encoder: None, pass: None, chunks: vec![], dispatches: 0 }
    }

    /// The GPU this run records for.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Dispatches recorded since the run began.
    pub fn dispatch_count(&self) -> usize {
        self.dispatches
    }

    /// Records one dispatch of `pipeline` over `groups` workgroups. Binding 0 of the shader is
    /// `params` (a read-only `array<u32>`), bindings 1.. are `buffers` in order.
    pub(crate) fn dispatch(
        &mut self,
        pipeline: &Pipeline,
        params: &[u32],
        buffers: &[&GpuBuffer],
        groups: [u32; 3],
    ) -> Result<()> {
        let max = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max) {
            return Err(Error::Device(format!("wgpu: dispatch of {groups:?} workgroups exceeds the limit {max}")));
        }
        if groups.contains(&0) {
            return Ok(());
        }
        let (chunk, offset) = self.push_params(params)?;
        let params_binding = wgpu::BufferBinding {
            buffer: &self.chunks[chunk].buffer,
            offset,
            size: wgpu::BufferSize::new(4 * params.len().max(1) as u64),
        };
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(params_binding) }];
        for (i, b) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: wgpu::BindingResource::Buffer(b.binding()) });
        }
        let bind_group =
            self.ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipeline.layout, entries: &entries });
        let pass = self.pass()?;
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        self.dispatches += 1;
        Ok(())
    }

    /// Places `params` in a chunk, at the storage-binding alignment; returns chunk and offset.
    fn push_params(&mut self, params: &[u32]) -> Result<(usize, u64)> {
        let align = self.ctx.device.limits().min_storage_buffer_offset_alignment as usize;
        let bytes: &[u8] = bytemuck::cast_slice(params);
        let need = bytes.len().max(4);
        if need as u64 > PARAMS_CHUNK {
            return Err(Error::Device(format!("wgpu: {} bytes of kernel parameters are too many", bytes.len())));
        }
        let fits = self.chunks.last().is_some_and(|c| c.bytes.len().next_multiple_of(align) + need <= PARAMS_CHUNK as usize);
        if !fits {
            let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("onyx params"),
                size: PARAMS_CHUNK,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.chunks.push(ParamChunk { buffer, bytes: Vec::with_capacity(4096) });
        }
        let index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[index];
        let offset = chunk.bytes.len().next_multiple_of(align);
        chunk.bytes.resize(offset, 0);
        chunk.bytes.extend_from_slice(bytes);
        chunk.bytes.resize(offset + need, 0);
        Ok((index, offset as u64))
    }

    fn pass(&mut self) -> Result<&mut wgpu::ComputePass<'static>> {
        if self.pass.is_none() {
            let encoder = self
                .encoder
                .get_or_insert_with(|| self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("onyx run") }));
            let pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("onyx"), timestamp_writes: None });
            self.pass = Some(pass.forget_lifetime());
        }
        self.pass.as_mut().ok_or_else(|| Error::Device("wgpu: no compute pass".into()))
    }

    /// Records a buffer-to-buffer copy (ends the current compute pass; the next dispatch opens
    /// another).
    pub(crate) fn copy(&mut self, src: &GpuBuffer, dst: &GpuBuffer, bytes: u64) {
        self.pass = None;
        let encoder = self
            .encoder
            .get_or_insert_with(|| self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("onyx run") }));
        encoder.copy_buffer_to_buffer(src.buffer(), src.offset(), dst.buffer(), dst.offset(), bytes.next_multiple_of(4));
    }
}

impl RunState for GpuRun {
    fn flush(&mut self) -> Result<()> {
        self.pass = None;
        let Some(encoder) = self.encoder.take() else {
            return self.ctx.check_fault();
        };
        for chunk in self.chunks.drain(..) {
            self.ctx.queue.write_buffer(&chunk.buffer, 0, &chunk.bytes);
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.ctx.check_fault()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
