//! GPU timings of single dispatches, for `onyx bench --profile`: while a context profiles, each
//! run writes a timestamp when its compute pass opens and after every dispatch (this needs the
//! adapter's TIMESTAMP_QUERY_INSIDE_PASSES), resolves them when it is submitted, waits for them,
//! and files one [`DispatchTime`] per dispatch with the node that recorded it.
//!
//! A dispatch is charged the time between the timestamp before it and the one after it: its
//! own execution plus any wait (barrier) in front of it, so that the charges of a pass add up
//! to the pass's GPU time.

use std::sync::PoisonError;
use std::time::Instant;

use onyx_core::{Error, Location, Result, Value};

use crate::context::GpuContext;

/// Queries per query set (wgpu's maximum).
const SET_QUERIES: u32 = wgpu::QUERY_SET_MAX_QUERIES;

/// The GPU time of one dispatch of a profiled run.
#[derive(Clone, Debug)]
pub struct DispatchTime {
    /// Op type of the node that recorded the dispatch (empty outside a node: copies, tests).
    pub op: String,
    /// Name of that node.
    pub node: String,
    /// The node's output shapes, e.g. `[1, 64, 56, 56]`.
    pub shapes: String,
    /// The shader variant (pipeline key), e.g. `conv/Gemm/f32/3x3/b/relu`.
    pub kernel: String,
    /// Workgroups dispatched.
    pub groups: [u32; 3],
    /// Nanoseconds charged to the dispatch.
    pub ns: f64,
}

/// One submission of a profiled run: its dispatches and what the host spent recording them.
#[derive(Clone, Debug, Default)]
pub struct SubmitProfile {
    /// Every dispatch of the submission, in order.
    pub dispatches: Vec<DispatchTime>,
    /// Microseconds from the run's first recorded command (or the previous submission) to
    /// this submission: the host's recording time, which the GPU waits for.
    pub record_us: f64,
}

/// What a profiled run records beside its commands.
pub(crate) struct Profiler {
    sets: Vec<wgpu::QuerySet>,
    /// Per query written: the dispatch it closes (`None` for the timestamp opening a pass).
    queries: Vec<Option<usize>>,
    dispatches: Vec<DispatchTime>,
    /// The node being recorded (op, name) and the index of its first dispatch.
    node: Option<(Location, usize)>,
    started: Option<Instant>,
}

impl Profiler {
    /// A profiler for a run on `ctx`, if the context is profiling.
    pub fn for_run(ctx: &GpuContext) -> Option<Profiler> {
        ctx.is_profiling().then(|| Profiler {
            sets: vec![],
            queries: vec![],
            dispatches: vec![],
            node: None,
            started: Some(Instant::now()),
        })
    }

    /// The query set and index of the next timestamp (a new set when the last one is full).
    fn next_query(&mut self, device: &wgpu::Device) -> (&wgpu::QuerySet, u32) {
        self.started.get_or_insert_with(Instant::now);
        let index = self.queries.len() as u32;
        if index / SET_QUERIES >= self.sets.len() as u32 {
            self.sets.push(device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("onyx profile"),
                ty: wgpu::QueryType::Timestamp,
                count: SET_QUERIES,
            }));
        }
        (&self.sets[(index / SET_QUERIES) as usize], index % SET_QUERIES)
    }

    /// Writes the timestamp that opens a pass.
    pub fn pass_opened(&mut self, device: &wgpu::Device, pass: &mut wgpu::ComputePass<'static>) {
        let (set, index) = self.next_query(device);
        pass.write_timestamp(set, index);
        self.queries.push(None);
    }

    /// Writes the timestamp after a dispatch of `kernel` over `groups`.
    pub fn dispatched(
        &mut self,
        device: &wgpu::Device,
        pass: &mut wgpu::ComputePass<'static>,
        kernel: &str,
        groups: [u32; 3],
    ) {
        let (set, index) = self.next_query(device);
        pass.write_timestamp(set, index);
        let (op, node) =
            self.node.as_ref().map_or((String::new(), String::new()), |(at, _)| (at.op.clone(), at.node.clone()));
        self.queries.push(Some(self.dispatches.len()));
        self.dispatches.push(DispatchTime {
            op,
            node,
            shapes: String::new(),
            kernel: kernel.to_string(),
            groups,
            ns: 0.0,
        });
    }

    /// Marks the start of a node's recording.
    pub fn enter(&mut self, at: &Location) {
        self.node = Some((at.clone(), self.dispatches.len()));
    }

    /// Marks the end of a node's recording: its dispatches get the output shapes.
    pub fn leave(&mut self, outputs: &[Value]) {
        let Some((_, first)) = self.node.take() else { return };
        let shapes: Vec<String> = outputs
            .iter()
            .map(|v| match v {
                Value::Tensor(t) => format!("{:?}", t.shape()),
                _ => "?".into(),
            })
            .collect();
        let shapes = shapes.join(" ");
        for d in &mut self.dispatches[first..] {
            d.shapes.clone_from(&shapes);
        }
    }

    /// Adds the commands that copy the timestamps to a readable buffer (after the last pass
    /// ended); returns that buffer, or `None` when nothing was timed.
    pub fn resolve(&self, device: &wgpu::Device, encoder: &mut wgpu::CommandEncoder) -> Option<wgpu::Buffer> {
        let count = self.queries.len() as u64;
        if count == 0 {
            return None;
        }
        let bytes = count * wgpu::QUERY_SIZE as u64;
        let resolved = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("onyx profile resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("onyx profile readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        for (i, set) in self.sets.iter().enumerate() {
            let first = i as u64 * SET_QUERIES as u64;
            let n = (count - first).min(SET_QUERIES as u64) as u32;
            encoder.resolve_query_set(set, 0..n, &resolved, first * wgpu::QUERY_SIZE as u64);
        }
        encoder.copy_buffer_to_buffer(&resolved, 0, &readback, 0, bytes);
        Some(readback)
    }

    /// After the submission `index` that resolved into `readback`: waits for it, charges every
    /// dispatch its time and files the submission's profile with the context. Resets the
    /// profiler for the run's next submission.
    pub fn finish(
        &mut self,
        ctx: &GpuContext,
        readback: Option<(wgpu::Buffer, wgpu::SubmissionIndex)>,
        record_us: f64,
    ) -> Result<()> {
        let mut dispatches = std::mem::take(&mut self.dispatches);
        let queries = std::mem::take(&mut self.queries);
        self.started = None;
        if let Some((buffer, index)) = readback {
            let stamps = read_stamps(ctx, &buffer, index)?;
            let period = ctx.queue.get_timestamp_period() as f64;
            for (q, d) in queries.iter().enumerate() {
                if let (Some(d), Some(prev)) = (d, q.checked_sub(1)) {
                    dispatches[*d].ns = stamps[q].saturating_sub(stamps[prev]) as f64 * period;
                }
            }
        }
        ctx.profiles.lock().unwrap_or_else(PoisonError::into_inner).push(SubmitProfile { dispatches, record_us });
        Ok(())
    }

    /// Microseconds since the first timestamp of this submission was recorded.
    pub fn record_us(&self) -> f64 {
        self.started.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e6)
    }
}

/// Maps `buffer` once submission `index` is done and reads its timestamps.
fn read_stamps(ctx: &GpuContext, buffer: &wgpu::Buffer, index: wgpu::SubmissionIndex) -> Result<Vec<u64>> {
    let (tx, rx) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    ctx.device
        .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })
        .map_err(|e| Error::Device(format!("wgpu: waiting for profile timestamps failed: {e}")))?;
    rx.recv()
        .map_err(|_| Error::Device("wgpu: the profile readback's mapping was dropped".into()))?
        .map_err(|e| Error::Device(format!("wgpu: cannot map the profile readback: {e}")))?;
    let stamps = {
        let view = buffer.get_mapped_range(..).map_err(|e| Error::Device(format!("wgpu: {e}")))?;
        view.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect::<Vec<u64>>()
    };
    buffer.unmap();
    Ok(stamps)
}

impl GpuContext {
    /// Whether this device can time single dispatches (TIMESTAMP_QUERY_INSIDE_PASSES).
    pub fn can_profile(&self) -> bool {
        self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
    }

    /// Starts or stops timing every dispatch of the runs that begin from now on. Profiled runs
    /// wait for the GPU at each submission; unprofiled runs are unaffected. An error when the
    /// adapter cannot time dispatches inside a compute pass.
    pub fn set_profiling(&self, on: bool) -> Result<()> {
        if on && !self.can_profile() {
            return Err(Error::Unsupported(format!(
                "wgpu: {} cannot time dispatches inside a compute pass (no TIMESTAMP_QUERY_INSIDE_PASSES)",
                self.adapter_info().name
            )));
        }
        self.profiling.store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Whether runs that begin now are profiled.
    pub(crate) fn is_profiling(&self) -> bool {
        self.profiling.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The profiles of the submissions made since the last call, oldest first.
    pub fn take_profiles(&self) -> Vec<SubmitProfile> {
        std::mem::take(&mut *self.profiles.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
