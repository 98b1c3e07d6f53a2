//! What every GPU kernel shares: the [`GpuOp`] trait an op implements, the [`Kernel`] adapter
//! that runs it inside or outside a recorded run, and helpers for inputs and dispatch sizes.

use std::sync::Arc;

use onyx_core::ep::{Kernel, RunState, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use crate::buffer::GpuBuffer;
use crate::context::GpuContext;
use crate::run::GpuRun;

/// Threads per workgroup of the one-dimensional kernels.
pub(crate) const WORKGROUP: u32 = 256;

/// A node compiled for the GPU: records its dispatches into a run and returns its outputs (GPU
/// tensors whose contents are ready once the run is submitted).
pub(crate) trait GpuOp: Send + Sync {
    /// Records the node's work. `inputs` are the node's inputs; GPU inputs are on this run's
    /// device, inputs the EP declared host inputs are on the host.
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>>;
}

/// Adapts a [`GpuOp`] to the core [`Kernel`] trait.
pub(crate) struct GpuKernel {
    pub ctx: Arc<GpuContext>,
    pub op: Box<dyn GpuOp>,
    pub at: Location,
}

/// A session drops its kernels when it is dropped: the pipelines they asked for finish
/// compiling first (see [`GpuContext::wait_for_pipelines`]).
impl Drop for GpuKernel {
    fn drop(&mut self) {
        self.ctx.wait_for_pipelines();
    }
}

impl Kernel for GpuKernel {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let mut run = GpuRun::new(self.ctx.clone());
        run.enter_node(&self.at);
        let outputs = self.op.record(&mut run, inputs)?;
        run.leave_node(&outputs);
        run.flush()?;
        Ok(outputs)
    }

    fn run_in(
        &self,
        state: &mut dyn RunState,
        inputs: &[Option<ValueRef<'_>>],
        _wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let run = state
            .as_any_mut()
            .downcast_mut::<GpuRun>()
            .filter(|r| Arc::ptr_eq(r.context(), &self.ctx))
            .ok_or_else(|| Error::node(&self.at, "wgpu kernel given another EP's run state"))?;
        if !run.profiling() {
            return self.op.record(run, inputs);
        }
        run.enter_node(&self.at);
        let outputs = self.op.record(run, inputs)?;
        run.leave_node(&outputs);
        Ok(outputs)
    }
}

/// A GPU input as kernels read it: its dtype, shape and buffer.
#[derive(Clone, Copy)]
pub(crate) struct GpuTensor<'r> {
    pub tensor: &'r Tensor,
    pub buffer: &'r GpuBuffer,
}

impl<'r> GpuTensor<'r> {
    pub fn shape(&self) -> &'r [usize] {
        self.tensor.shape()
    }

    pub fn dtype(&self) -> DataType {
        self.tensor.dtype()
    }

    pub fn len(&self) -> usize {
        self.tensor.len()
    }
}

/// Input `i`, which must be present and a tensor on `run`'s GPU.
pub(crate) fn gpu_input<'r>(
    run: &GpuRun,
    inputs: &[Option<ValueRef<'r>>],
    i: usize,
    at: &Location,
) -> Result<GpuTensor<'r>> {
    let value = inputs.get(i).copied().flatten().ok_or_else(|| Error::input(at, i, "a tensor", "nothing"))?;
    let tensor = match value {
        ValueRef::Value(Value::Tensor(t)) => t,
        _ => return Err(Error::input(at, i, "a tensor on the GPU", "a host value")),
    };
    let buffer =
        run.context().own_buffer(tensor).map_err(|e| Error::input(at, i, "a tensor on this GPU", e.to_string()))?;
    Ok(GpuTensor { tensor, buffer })
}

/// Optional GPU input `i`: `None` when omitted.
pub(crate) fn opt_gpu_input<'r>(
    run: &GpuRun,
    inputs: &[Option<ValueRef<'r>>],
    i: usize,
    at: &Location,
) -> Result<Option<GpuTensor<'r>>> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(_) => gpu_input(run, inputs, i, at).map(Some),
    }
}

/// Host input `i` (one the EP declared a host input).
pub(crate) fn host_input<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, at: &Location) -> Result<TensorView<'r>> {
    let value = inputs.get(i).copied().flatten().ok_or_else(|| Error::input(at, i, "a tensor", "nothing"))?;
    value.tensor().map_err(|e| Error::input(at, i, "a host tensor", e.to_string()))
}

/// Optional host input `i` read as i64 values (int64 or int32).
pub(crate) fn host_ints(inputs: &[Option<ValueRef<'_>>], i: usize, at: &Location) -> Result<Option<Vec<i64>>> {
    if inputs.get(i).copied().flatten().is_none() {
        return Ok(None);
    }
    let view = host_input(inputs, i, at)?;
    Ok(Some(match view.dtype() {
        DataType::Int64 => view.as_slice::<i64>()?.to_vec(),
        DataType::Int32 => view.as_slice::<i32>()?.iter().map(|&x| x as i64).collect(),
        other => return Err(Error::input(at, i, "int64 or int32", format!("{other:?}"))),
    }))
}

/// Workgroups for `threads` invocations of a one-dimensional kernel of [`WORKGROUP`] threads,
/// spread over x and y when x alone would exceed the dispatch limit. Shaders recover the flat
/// index as `gid.x + gid.y * nwg.x * WORKGROUP`.
pub(crate) fn grid(threads: usize) -> [u32; 3] {
    let groups = threads.div_ceil(WORKGROUP as usize);
    let x = groups.min(65535);
    let y = groups.div_ceil(x.max(1));
    [x as u32, y as u32, 1]
}

/// Converts a size to a shader `u32`, or an error naming the op when it does not fit.
pub(crate) fn u32_of(n: usize, at: &Location) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::node(at, format!("size {n} exceeds what the GPU kernels index (2^32)")))
}

/// WGSL shared by the generated shaders: the flat invocation index.
pub(crate) const FLAT_INDEX: &str =
    "fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }\n";

/// The WGSL scalar type of a dtype the kernels compute in, if any.
pub(crate) fn wgsl_type(dtype: DataType) -> Option<&'static str> {
    match dtype {
        DataType::Float => Some("f32"),
        DataType::Float16 => Some("f16"),
        DataType::Int32 => Some("i32"),
        DataType::Uint32 => Some("u32"),
        _ => None,
    }
}

/// The `enable` lines a shader computing in `dtype` needs.
pub(crate) fn enables(dtype: DataType) -> &'static str {
    if dtype == DataType::Float16 {
        "enable f16;\n"
    } else {
        ""
    }
}

/// The static shape of input `i`, when a constant or shape inference gives every dim.
pub(crate) fn static_shape(ctx: &onyx_core::ep::NodeContext<'_>, i: usize) -> Option<Vec<usize>> {
    known_dims(ctx, i)?.into_iter().collect()
}

/// The dims of input `i` as the session knows them (`None` for a symbolic one, such as a
/// dynamic batch or sequence length), when its rank is known.
pub(crate) fn known_dims(ctx: &onyx_core::ep::NodeContext<'_>, i: usize) -> Option<Vec<Option<usize>>> {
    use onyx_core::types::{Dim, ValueType};
    if let Some(t) = ctx.constant(i) {
        return Some(t.shape().iter().map(|&d| Some(d)).collect());
    }
    match ctx.input_types.get(i)? {
        ValueType::Tensor(t) => {
            Some(t.shape.as_ref()?.iter().map(|d| if let Dim::Fixed(n) = d { Some(*n) } else { None }).collect())
        }
        _ => None,
    }
}

/// Row-major strides of a shape, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides of `shape` broadcast to `out` (right-aligned; 0 where a dim is broadcast).
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len()).map(|d| if d < lead || shape[d - lead] == 1 { 0 } else { own[d - lead] }).collect()
}

/// Access to the GPU buffer of a tensor the EP allocated.
pub(crate) trait OnGpu {
    /// The tensor's GPU buffer, or an error if it is not on a GPU.
    fn gpu(&self) -> Result<&GpuBuffer>;
}

impl OnGpu for Tensor {
    fn gpu(&self) -> Result<&GpuBuffer> {
        crate::buffer::gpu_buffer(self)
            .ok_or_else(|| Error::Device(format!("expected a GPU tensor, found one on {}", self.device())))
    }
}

/// Several inputs broadcast together (numpy rules): the output shape and each input's strides
/// over it, with adjacent dims merged where every input allows, so the shaders loop over as few
/// dims as possible.
pub(crate) struct Broadcast {
    /// The output shape.
    pub out: Vec<usize>,
    /// Merged dims the shaders iterate over.
    dims: Vec<usize>,
    /// Per input, its strides over `dims` (0 where broadcast).
    strides: Vec<Vec<usize>>,
}

impl Broadcast {
    /// The broadcast of `shapes`, or an error naming them.
    pub fn new(shapes: &[&[usize]], at: &Location) -> Result<Broadcast> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut out = vec![1usize; rank];
        for s in shapes {
            for (d, &n) in s.iter().enumerate() {
                let o = &mut out[d + rank - s.len()];
                if *o == 1 {
                    *o = n;
                } else if n != 1 && n != *o {
                    return Err(Error::node(at, format!("shapes {shapes:?} cannot be broadcast together")));
                }
            }
        }
        if out.contains(&0) {
            return Ok(Broadcast { dims: vec![0], strides: shapes.iter().map(|_| vec![0]).collect(), out });
        }
        let all: Vec<Vec<usize>> = shapes.iter().map(|s| broadcast_strides(s, &out)).collect();
        let mut dims: Vec<usize> = vec![];
        let mut strides: Vec<Vec<usize>> = shapes.iter().map(|_| vec![]).collect();
        for d in 0..rank {
            if out[d] == 1 {
                continue;
            }
            // Merge dim d into the previous one when every input is contiguous across them.
            let merge = !dims.is_empty() && all.iter().zip(&strides).all(|(s, m)| m.last() == Some(&(s[d] * out[d])));
            if merge {
                *dims.last_mut().unwrap_or(&mut 0) *= out[d];
                for (m, s) in strides.iter_mut().zip(&all) {
                    if let Some(last) = m.last_mut() {
                        *last = s[d];
                    }
                }
            } else {
                dims.push(out[d]);
                for (m, s) in strides.iter_mut().zip(&all) {
                    m.push(s[d]);
                }
            }
        }
        Ok(Broadcast { out, dims, strides })
    }

    /// Elements of the output.
    pub fn count(&self) -> usize {
        self.out.iter().product()
    }

    /// Shader parameters: element count, rank, dims, then each input's strides.
    pub fn params(&self, at: &Location) -> Result<Vec<u32>> {
        let mut p = vec![u32_of(self.count(), at)?, self.dims.len() as u32];
        for &d in self.dims.iter().chain(self.strides.iter().flatten()) {
            p.push(u32_of(d, at)?);
        }
        Ok(p)
    }
}
