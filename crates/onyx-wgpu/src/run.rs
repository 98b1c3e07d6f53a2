//! One run's recording: every kernel of the run adds its dispatches to one compute pass of one
//! command encoder, submitted once when the run ends (or before a value is read back).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use onyx_core::ep::RunState;
use onyx_core::{DataType, Error, Result, Tensor, TensorData, Value};

use crate::buffer::{padded, size_class, GpuBuffer};
use crate::context::{GpuContext, Pipeline};
use crate::profile::Profiler;

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
    /// Buffers of tensors this run released, by size class: reused by later nodes of the run.
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Timestamps around the dispatches, when the context profiles.
    profiler: Option<Box<Profiler>>,
}

impl GpuRun {
    /// An empty recording on `ctx`'s device.
    pub fn new(ctx: Arc<GpuContext>) -> GpuRun {
        let profiler = Profiler::for_run(&ctx).map(Box::new);
        GpuRun { ctx, encoder: None, pass: None, chunks: vec![], dispatches: 0, free: HashMap::new(), profiler }
    }

    /// The GPU this run records for.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Dispatches recorded since the run began.
    pub fn dispatch_count(&self) -> usize {
        self.dispatches
    }

    /// A new tensor for a node's output, in a buffer this run released or one from the pool.
    pub(crate) fn alloc(&mut self, dtype: DataType, shape: Vec<usize>) -> Result<Tensor> {
        let bytes = dtype
            .byte_len(onyx_core::element_count(&shape)?)
            .ok_or_else(|| Error::InvalidArgument(format!("a {dtype:?} tensor of shape {shape:?} is too large")))?;
        let class = size_class(padded(bytes));
        let buffer = match self.free.get_mut(&class).and_then(Vec::pop) {
            Some(b) => b,
            None => self.ctx.pooled_buffer(class)?,
        };
        self.ctx.pooled_tensor(dtype, shape, buffer)
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
        let mut entries =
            vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(params_binding) }];
        for (i, b) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: wgpu::BindingResource::Buffer(b.binding()),
            });
        }
        let bind_group = self.ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.layout,
            entries: &entries,
        });
        let pass = self.pass()?;
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        if let (Some(profiler), Some(pass)) = (self.profiler.as_mut(), self.pass.as_mut()) {
            profiler.dispatched(&self.ctx.device, pass, &pipeline.key, groups);
        }
        self.dispatches += 1;
        Ok(())
    }

    /// Hands back a scratch tensor of this run: later nodes may reuse its buffer.
    pub(crate) fn release_tensor(&mut self, tensor: Tensor) {
        self.release(Value::Tensor(tensor));
    }

    /// Whether this run times its dispatches.
    pub(crate) fn profiling(&self) -> bool {
        self.profiler.is_some()
    }

    /// Marks the start of a node's recording (for profiles).
    pub(crate) fn enter_node(&mut self, at: &onyx_core::Location) {
        if let Some(p) = self.profiler.as_mut() {
            p.enter(at);
        }
    }

    /// Marks the end of a node's recording, with its outputs (for profiles).
    pub(crate) fn leave_node(&mut self, outputs: &[Value]) {
        if let Some(p) = self.profiler.as_mut() {
            p.leave(outputs);
        }
    }

    /// Places `params` in a chunk, at the storage-binding alignment; returns chunk and offset.
    fn push_params(&mut self, params: &[u32]) -> Result<(usize, u64)> {
        let align = self.ctx.device.limits().min_storage_buffer_offset_alignment as usize;
        let bytes: &[u8] = bytemuck::cast_slice(params);
        let need = bytes.len().max(4);
        if need as u64 > PARAMS_CHUNK {
            return Err(Error::Device(format!("wgpu: {} bytes of kernel parameters are too many", bytes.len())));
        }
        let fits =
            self.chunks.last().is_some_and(|c| c.bytes.len().next_multiple_of(align) + need <= PARAMS_CHUNK as usize);
        if !fits {
            let idle = self.ctx.param_buffers.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let buffer = idle.unwrap_or_else(|| {
                self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("onyx params"),
                    size: PARAMS_CHUNK,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
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
            let encoder = self.encoder.get_or_insert_with(|| {
                self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("onyx run") })
            });
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("onyx"), timestamp_writes: None })
                .forget_lifetime();
            if let Some(p) = self.profiler.as_mut() {
                p.pass_opened(&self.ctx.device, &mut pass);
            }
            self.pass = Some(pass);
        }
        self.pass.as_mut().ok_or_else(|| Error::Device("wgpu: no compute pass".into()))
    }

    /// Records a buffer-to-buffer copy (ends the current compute pass; the next dispatch opens
    /// another).
    pub(crate) fn copy(&mut self, src: &GpuBuffer, dst: &GpuBuffer, bytes: u64) {
        self.pass = None;
        let encoder = self.encoder.get_or_insert_with(|| {
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("onyx run") })
        });
        encoder.copy_buffer_to_buffer(
            src.buffer(),
            src.offset(),
            dst.buffer(),
            dst.offset(),
            bytes.next_multiple_of(4),
        );
    }
}

impl RunState for GpuRun {
    fn flush(&mut self) -> Result<()> {
        self.pass = None;
        let Some(mut encoder) = self.encoder.take() else {
            self.ctx.recycle(self.free.drain().flat_map(|(_, v)| v));
            return self.ctx.check_fault();
        };
        let mut params = vec![];
        for chunk in self.chunks.drain(..) {
            self.ctx.queue.write_buffer(&chunk.buffer, 0, &chunk.bytes);
            params.push(chunk.buffer);
        }
        let readback = self.profiler.as_ref().and_then(|p| p.resolve(&self.ctx.device, &mut encoder));
        let record_us = self.profiler.as_ref().map_or(0.0, |p| p.record_us());
        let index = self.ctx.queue.submit([encoder.finish()]);
        if let Some(profiler) = self.profiler.as_mut() {
            profiler.finish(&self.ctx, readback.map(|b| (b, index)), record_us)?;
        }
        // Everything this run released is now used only by submitted work: later submissions
        // are ordered after it, so any run may take these buffers from here on.
        self.ctx.param_buffers.lock().unwrap_or_else(PoisonError::into_inner).extend(params);
        self.ctx.recycle(self.free.drain().flat_map(|(_, v)| v));
        self.ctx.check_fault()
    }

    fn release(&mut self, value: Value) {
        if let Value::Tensor(tensor) = value {
            if let TensorData::Device(storage) = tensor.data() {
                let storage = storage.clone();
                drop(tensor);
                if let Some(buffer) = self.ctx.reclaim(&storage) {
                    self.free.entry(buffer.size()).or_default().push(buffer);
                }
            }
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
