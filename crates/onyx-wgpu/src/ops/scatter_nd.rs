//! ScatterND with a reduction (add, mul, max, min) on f32 and i32 data, in one dispatch:
//! every output element starts from the data and combines, in order, the update of each index
//! tuple that addresses its slice, so that repeated tuples resolve as the CPU EP's sequential
//! loop does. The cost is one pass over the tuples per output element: fine for the small
//! scatters models do. Reduction "none" is [`super::gather`]'s kernel (one write per update).
//!
//! Negative indices count from the end; a tuple out of range is dropped (the CPU EP fails the
//! run, see [`super::gather`]).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::gather::{build_scatter_nd, supports_scatter_nd};
use super::input_dtype;
use super::layout::{dispatch_elements, element_shader, Elements};
use super::scatter::{combine_fn, reduce_type, reduction, Reduction};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, strides, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Reduction "none": the gather family's kernel; otherwise f32/i32 data, int64 indices.
pub(crate) fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    match reduction(ctx) {
        Some(Reduction::None) => supports_scatter_nd(ctx, gpu),
        Some(_) => {
            let data = input_dtype(ctx, 0);
            data.and_then(reduce_type).is_some()
                && input_dtype(ctx, 2) == data
                && input_dtype(ctx, 1) == Some(DataType::Int64)
        }
        None => false,
    }
}

/// Builds the node: [`build_scatter_nd`] for reduction "none", else [`ScatterNdReduce`].
pub(crate) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let r = reduction(ctx).ok_or_else(|| {
        Error::attribute(&at, "reduction", "none, add, mul (or max, min from opset 18)", "another value")
    })?;
    if r == Reduction::None {
        return build_scatter_nd(ctx, gpu);
    }
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} has an untyped input")))?;
    let t = reduce_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: ScatterND reduction on {dtype}")))?;
    let key = format!("scatter_nd/{r:?}/{t}");
    let code = format!("{}{REDUCE}", combine_fn(r, t));
    let pipeline = gpu.pipeline(&key, || element_shader("", 4, &[("x", 4), ("i", 8), ("u", 4)], &code))?;
    Ok(Box::new(ScatterNdReduce { dtype, pipeline, at }))
}

/// The reduction's `fetch`. Parameters: tuples, slice length, tuple length k, then data dims[k]
/// and data strides[k] (in elements).
const REDUCE: &str = "
fn slice_start(tuple: u32) -> u32 {
    let k = p[5];
    var t = 0u;
    for (var j = 0u; j < k; j++) {
        let dim = p[6u + j];
        let v = load_i(tuple * k + j);
        var q = NONE;
        if (v.y == 0u && v.x < dim) { q = v.x; }
        if (v.y == 0xffffffffu && dim != 0u && v.x >= 0u - dim) { q = v.x + dim; }
        if (q == NONE) { return NONE; }
        t += q * p[6u + k + j];
    }
    return t;
}
fn fetch(e: u32) -> E {
    let slice = p[4];
    let within = e % slice;
    let start = e - within;
    var acc = load_x(e);
    for (var tuple = 0u; tuple < p[3]; tuple++) {
        if (slice_start(tuple) == start) { acc = combine(acc, load_u(tuple * slice + within)); }
    }
    return acc;
}
";

/// ScatterND with a reduction.
struct ScatterNdReduce {
    dtype: DataType,
    pipeline: Arc<Pipeline>,
    at: Location,
}

impl GpuOp for ScatterNdReduce {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let idx = gpu_input(run, inputs, 1, at)?;
        let u = gpu_input(run, inputs, 2, at)?;
        if x.dtype() != self.dtype || u.dtype() != self.dtype {
            return Err(Error::input(at, 2, format!("data and updates of type {}", self.dtype), u.dtype().name()));
        }
        if idx.dtype() != DataType::Int64 {
            return Err(Error::input(at, 1, "int64 indices", idx.dtype().name()));
        }
        let (ds, is) = (x.shape(), idx.shape());
        let k = is.last().copied().unwrap_or(0);
        if ds.is_empty() || is.is_empty() || k > ds.len() {
            return Err(Error::input(at, 1, format!("index tuples of at most {} values", ds.len()), format!("{is:?}")));
        }
        let want: Vec<usize> = is[..is.len() - 1].iter().chain(&ds[k..]).copied().collect();
        if u.shape() != want.as_slice() {
            return Err(Error::input(at, 2, format!("updates of shape {want:?}"), format!("{:?}", u.shape())));
        }
        let y = run.alloc(x.dtype(), ds.to_vec())?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let slice: usize = ds[k..].iter().product();
        let tuples: usize = is[..is.len() - 1].iter().product();
        let mut params = vec![u32_of(tuples, at)?, u32_of(slice, at)?, k as u32];
        for &v in ds[..k].iter().chain(&strides(ds)[..k]) {
            params.push(u32_of(v, at)?);
        }
        u32_of(idx.len().max(u.len()), at)?;
        let buffers = [x.buffer, idx.buffer, u.buffer, y.gpu()?];
        dispatch_elements(run, &self.pipeline, Elements::new(4, y.len()), &params, &buffers, at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::testkit::{rand, string, t, Case};

    /// Index tuples of length `k` into `shape`, with repeats and negative values.
    fn tuples(shape: &[usize], n: usize, k: usize, seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let data: Vec<i64> = (0..n * k)
            .map(|j| {
                let dim = shape[j % k] as i64;
                let v = rng.i64(0..dim);
                if rng.bool() {
                    v - dim
                } else {
                    v
                }
            })
            .collect();
        t(&[n, k], data)
    }

    #[test]
    fn scatter_nd_reductions_match_the_cpu() {
        let shape = [5usize, 3, 7];
        for (s, k) in [1usize, 2, 3].into_iter().enumerate() {
            let n = 9;
            let idx = tuples(&shape, n, k, 400 + s as u64);
            let u_shape: Vec<usize> = [n].iter().chain(&shape[k..]).copied().collect();
            let x = rand(&shape, -2.0, 2.0, 410 + s as u64);
            let u = rand(&u_shape, -2.0, 2.0, 420 + s as u64);
            for r in ["add", "mul", "max", "min"] {
                let case = Case::new("ScatterND", vec![x.clone(), idx.clone(), u.clone()])
                    .attrs(vec![string("reduction", r)])
                    .opset(18);
                case.check(1e-5, 1e-6);
                let xi = t(&shape, (0..x.len()).map(|v| (v as i32 * 7919) % 101 - 50).collect::<Vec<i32>>());
                let ui = t(&u_shape, (0..u.len()).map(|v| (v as i32 * 31) % 13 - 6).collect::<Vec<i32>>());
                let case =
                    Case::new("ScatterND", vec![xi, idx.clone(), ui]).attrs(vec![string("reduction", r)]).opset(18);
                case.check(0.0, 0.0);
            }
        }
    }
}
