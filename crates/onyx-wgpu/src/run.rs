//! One run's recording: every kernel of the run adds its dispatches to one compute pass of one
//! command encoder, submitted when the run ends (or before a value is read back). Long runs are
//! submitted in growing segments as they are recorded, so that the GPU works on the first
//! kernels while the host records the rest.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use onyx_core::ep::RunState;
use onyx_core::{DataType, Error, Result, Tensor, TensorData, Value};

use crate::bind_cache::BindKey;
use crate::buffer::{padded, size_class, GpuBuffer};
use crate::context::{GpuContext, Pipeline};
use crate::profile::Profiler;

/// Bytes of one parameter chunk; a run grows more chunks as its kernels need them.
const PARAMS_CHUNK: u64 = 64 * 1024;

/// Dispatches of a run's first segment: submitted as soon as recorded, to start the GPU.
const FIRST_SEGMENT: usize = 16;

/// Most dispatches of one segment; each segment doubles the one before up to this.
const MAX_SEGMENT: usize = 128;

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
    /// Dispatches of earlier submissions of this run (counted in the context's stats).
    submitted: usize,
    /// Dispatches after which the segment being recorded is submitted.
    segment: usize,
    /// Buffers of tensors this run released, by size class: reused by later nodes of the run.
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Timestamps around the dispatches, when the context profiles.
    profiler: Option<Box<Profiler>>,
    /// This run's number with the context's recycler.
    id: u64,
    /// The bind group being looked up (kept to reuse its allocation).
    key: BindKey,
    /// When the first command of the submission being recorded was recorded.
    started: Option<Instant>,
    /// The buffers (and offsets) of the caller's tensors this run's bound outputs go into.
    bound: Vec<(wgpu::Buffer, u64)>,
}

impl GpuRun {
    /// An empty recording on `ctx`'s device.
    pub fn new(ctx: Arc<GpuContext>) -> GpuRun {
        let profiler = Profiler::for_run(&ctx).map(Box::new);
        let (id, ready) = ctx.recycler.begin();
        ctx.recycle(ready);
        GpuRun {
            ctx,
            encoder: None,
            pass: None,
            chunks: vec![],
            dispatches: 0,
            submitted: 0,
            segment: FIRST_SEGMENT,
            free: HashMap::new(),
            profiler,
            id,
            key: BindKey::default(),
            started: None,
            bound: vec![],
        }
    }

    /// Whether `buffer` is one the caller bound an output of this run to: a kernel may then
    /// update it in place (see [`RunState::bind_outputs`]).
    pub(crate) fn is_bound_output(&self, buffer: &GpuBuffer) -> bool {
        self.bound.iter().any(|(b, offset)| b == buffer.buffer() && *offset == buffer.offset())
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
        let compiled = pipeline.compiled()?;
        let (chunk, offset) = self.push_params(params)?;
        self.key.reset(&compiled.layout);
        self.key.push(&self.chunks[chunk].buffer, offset, 4 * params.len().max(1) as u64);
        for b in buffers {
            self.key.push(b.buffer(), b.offset(), padded(onyx_core::device::DeviceStorage::byte_len(*b)));
        }
        let bind_group = self
            .ctx
            .bind_groups
            .get(&self.ctx.device, &self.key)
            .ok_or_else(|| Error::Device("wgpu: a bind group without a layout".into()))?;
        let pass = self.pass()?;
        pass.set_pipeline(&compiled.pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        if let (Some(profiler), Some(pass)) = (self.profiler.as_mut(), self.pass.as_mut()) {
            profiler.dispatched(&self.ctx.device, pass, &pipeline.key, groups);
        }
        self.dispatches += 1;
        // Profiled runs stay whole: their timestamps are resolved once per submission.
        if self.dispatches - self.submitted >= self.segment && self.profiler.is_none() {
            self.segment = (self.segment * 2).min(MAX_SEGMENT);
            self.flush()?;
        }
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

    /// The command encoder of the submission being recorded (made by the first command).
    fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.started.get_or_insert_with(Instant::now);
        self.encoder.get_or_insert_with(|| {
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("onyx run") })
        })
    }

    fn pass(&mut self) -> Result<&mut wgpu::ComputePass<'static>> {
        if self.pass.is_none() {
            let encoder = self.encoder();
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
        self.encoder().copy_buffer_to_buffer(
            src.buffer(),
            src.offset(),
            dst.buffer(),
            dst.offset(),
            bytes.next_multiple_of(4),
        );
    }
}

impl Drop for GpuRun {
    /// Ends the run: work it recorded and did not submit is dropped unsubmitted (an abandoned
    /// run), so its buffers and parameter chunks are idle either way.
    fn drop(&mut self) {
        self.pass = None;
        self.encoder = None;
        let chunks = self.chunks.drain(..).map(|c| c.buffer).rev();
        self.ctx.param_buffers.lock().unwrap_or_else(PoisonError::into_inner).extend(chunks);
        self.ctx.recycle(self.free.drain().flat_map(|(_, v)| v));
        let ready = self.ctx.recycler.end(self.id);
        self.ctx.recycle(ready);
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
        self.ctx.staged.store(0, Ordering::Relaxed);
        let stats = &self.ctx.stats;
        stats.submissions.fetch_add(1, Ordering::Relaxed);
        stats.dispatches.fetch_add((self.dispatches - self.submitted) as u64, Ordering::Relaxed);
        self.submitted = self.dispatches;
        let record_ns = self.started.take().map_or(0, |s| s.elapsed().as_nanos() as u64);
        stats.record_ns.fetch_add(record_ns, Ordering::Relaxed);
        self.ctx.bind_groups.run_submitted();
        if let Some(profiler) = self.profiler.as_mut() {
            profiler.finish(&self.ctx, readback.map(|b| (b, index)), record_us)?;
        }
        // Everything this run released is now used only by submitted work: later submissions
        // are ordered after it, so any run may take these buffers from here on. The chunks go
        // back so that the next run takes them in the same order (and reuses bind groups).
        self.ctx.param_buffers.lock().unwrap_or_else(PoisonError::into_inner).extend(params.into_iter().rev());
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

    fn bind_outputs(&mut self, targets: &[Tensor]) {
        let ours = targets.iter().filter_map(|t| self.ctx.own_buffer(t).ok());
        self.bound = ours.map(|b| (b.buffer().clone(), b.offset())).collect();
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use onyx_core::ir::{Graph, Model, Node};
    use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
    use onyx_core::{DataType, IoBinding, Session, SessionOptions, Tensor, Value};

    use crate::testkit::{assert_close, rand};
    use crate::{WgpuOptions, WgpuProvider};

    /// y = sigmoid((relu(x) + w) * x) + relu(x), over an awkward shape, `blocks` times over
    /// (each block's y the next one's x).
    fn chain(blocks: usize) -> Model {
        let mut graph = Graph::default();
        let shape = vec![Dim::Fixed(3), Dim::Fixed(37)];
        graph
            .inputs
            .push(ValueInfo::new("x", ValueType::Tensor(TensorType { dtype: DataType::Float, shape: Some(shape) })));
        graph.initializers.insert("w".into(), rand(&[37], -1.0, 1.0, 7));
        let node = |op: &str, inputs: &[&str], output: &str| Node {
            name: output.into(),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            ..Default::default()
        };
        for i in 0..blocks {
            let name = |n: &str| match n {
                "x" if i == 0 => n.to_string(),
                "x" => format!("y{}", i - 1),
                _ => format!("{n}{i}"),
            };
            let y = if i + 1 == blocks { "y".to_string() } else { name("y") };
            graph.nodes.extend([
                node("Relu", &[&name("x")], &name("a")),
                node("Add", &[&name("a"), "w"], &name("b")),
                node("Mul", &[&name("b"), &name("x")], &name("c")),
                node("Sigmoid", &[&name("c")], &name("d")),
                node("Add", &[&name("d"), &name("a")], &y),
            ]);
        }
        graph.outputs.push(ValueInfo::new("y", ValueType::Unknown));
        let mut model = Model { ir_version: 10, graph, ..Default::default() };
        model.opsets.insert(String::new(), 21);
        model
    }

    fn sessions() -> Option<(Arc<WgpuProvider>, Session, Session)> {
        sessions_of(1)
    }

    fn sessions_of(blocks: usize) -> Option<(Arc<WgpuProvider>, Session, Session)> {
        crate::testkit::provider()?;
        // A device of its own, so that other tests' runs leave its counters alone.
        let gpu = Arc::new(WgpuProvider::new(&WgpuOptions::default()).ok()?);
        let options = SessionOptions { providers: vec![gpu.clone()], ..Default::default() };
        let on_gpu = Session::new(chain(blocks), options).unwrap();
        let options = SessionOptions { providers: vec![Arc::new(onyx_cpu::CpuProvider::new())], ..Default::default() };
        Some((gpu, on_gpu, Session::new(chain(blocks), options).unwrap()))
    }

    fn run(session: &Session, x: &Tensor) -> Tensor {
        let outputs = session.run([("x", Value::Tensor(x.clone()))]).unwrap();
        outputs.get("y").unwrap().as_tensor().unwrap().clone()
    }

    #[test]
    fn long_runs_are_submitted_in_segments() {
        let Some((gpu, session, cpu)) = sessions_of(40) else { return };
        for seed in 0..3 {
            run(&session, &rand(&[3, 37], -2.0, 2.0, seed));
        }
        let warm = gpu.context().unwrap().host_stats();
        let runs = 3;
        for seed in 0..runs {
            let x = rand(&[3, 37], -2.0, 2.0, 20 + seed);
            assert_close(&run(&session, &x), &run(&cpu, &x), 1e-4, 1e-5, "40 blocks");
        }
        let after = gpu.context().unwrap().host_stats();
        let dispatches = ((after.dispatches - warm.dispatches) / runs) as usize;
        let submissions = (after.submissions - warm.submissions) / runs;
        // Segments of 16, 32, 64, 128, 128, ... dispatches, then the rest.
        let (mut left, mut segment, mut expected) = (dispatches, super::FIRST_SEGMENT, 0);
        while left > 0 {
            left = left.saturating_sub(segment);
            segment = (segment * 2).min(super::MAX_SEGMENT);
            expected += 1;
        }
        assert!(dispatches > 3 * super::FIRST_SEGMENT, "{dispatches} dispatches per run");
        assert_eq!(submissions, expected, "{dispatches} dispatches per run");
        assert_eq!(after.bind_groups_made, warm.bind_groups_made, "a warm plan made new bind groups");
    }

    #[test]
    fn runs_of_a_plan_reuse_their_bind_groups() {
        let Some((gpu, session, cpu)) = sessions() else { return };
        for seed in 0..3 {
            run(&session, &rand(&[3, 37], -2.0, 2.0, seed));
        }
        let warm = gpu.context().unwrap().host_stats();
        for seed in 10..15 {
            let x = rand(&[3, 37], -2.0, 2.0, seed);
            assert_close(&run(&session, &x), &run(&cpu, &x), 1e-5, 1e-6, "chain");
        }
        let after = gpu.context().unwrap().host_stats();
        assert_eq!(after.bind_groups_made, warm.bind_groups_made, "a warm plan made new bind groups");
        let dispatches = after.dispatches - warm.dispatches;
        assert!(dispatches >= 5, "{dispatches} dispatches in 5 runs");
        assert_eq!(after.bind_groups_reused - warm.bind_groups_reused, dispatches, "one reuse per dispatch");
        assert!(gpu.context().unwrap().bind_groups.len() as u64 >= dispatches / 5);
        gpu.context().unwrap().clear_bind_groups();
        assert_eq!(gpu.context().unwrap().bind_groups.len(), 0);
        let x = rand(&[3, 37], -2.0, 2.0, 99);
        assert_close(&run(&session, &x), &run(&cpu, &x), 1e-5, 1e-6, "chain after clearing");
    }

    #[test]
    fn an_output_the_caller_keeps_on_the_device_is_not_reused() {
        let Some((gpu, session, cpu)) = sessions() else { return };
        let device_run = |x: &Tensor| {
            let mut binding = IoBinding::new();
            binding
                .bind_input("x", Value::Tensor(x.clone()))
                .bind_output_to_device("y", gpu.context().unwrap().onyx_device());
            session.run_with_binding(binding).unwrap().get("y").unwrap().as_tensor().unwrap().clone()
        };
        let xs: Vec<Tensor> = (0..4).map(|s| rand(&[3, 37], -2.0, 2.0, 20 + s)).collect();
        let kept: Vec<Tensor> = xs.iter().map(device_run).collect();
        // Runs after the first three dropped nothing; more runs must not write into them.
        for x in &xs {
            drop(device_run(x));
        }
        for (x, y) in xs.iter().zip(&kept) {
            assert_close(&gpu.context().unwrap().download(y).unwrap(), &run(&cpu, x), 1e-5, 1e-6, "kept output");
        }
        drop(kept);
        let x = rand(&[3, 37], -2.0, 2.0, 30);
        assert_close(&run(&session, &x), &run(&cpu, &x), 1e-5, 1e-6, "after dropping the kept outputs");
    }
}
