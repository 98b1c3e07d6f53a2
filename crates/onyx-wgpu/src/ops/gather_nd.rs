//! GatherND on the GPU, for every element size, with int64 indices and batch dims, in one
//! dispatch: each output element finds its slice from its index tuple.
//!
//! Negative indices count from the end. **Out-of-range indices differ from the CPU EP**, as in
//! [`super::gather`]: the CPU kernel fails the run, here the slice is written as zeros.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, input_elem_size, known_size, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, strides, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers GatherND.
pub(crate) fn register(r: &mut Registry) {
    r.add("GatherND", supports_gather_nd, build_gather_nd);
}

/// Movable data, int64 indices, a valid batch_dims.
fn supports_gather_nd(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_elem_size(ctx, 0).is_some()
        && input_dtype(ctx, 1) == Some(DataType::Int64)
        && ctx.node.int_or("batch_dims", 0).is_ok_and(|b| b >= 0)
}

/// `fetch`. Parameters: q (index tuple length), slice (elements per slice), tuples per batch,
/// elements per data batch, then q data dims and q data strides.
const GATHER_ND: &str = "
fn fetch(e: u32) -> E {
    let q = p[3];
    let slice = p[4];
    let t = e / slice;
    let r = e - t * slice;
    var off = (t / p[5]) * p[6] + r;
    for (var k = 0u; k < q; k++) {
        let dim = p[7u + k];
        let v = load_i(t * q + k);
        var j = NONE;
        if (v.y == 0u && v.x < dim) { j = v.x; }
        if (v.y == 0xffffffffu && dim != 0u && v.x >= 0u - dim) { j = v.x + dim; }
        if (j == NONE) { return fill(); }
        off += j * p[7u + q + k];
    }
    return load_x(off);
}
";

/// GatherND: slices of the data picked by index tuples, batch by batch.
struct GatherNd {
    batch_dims: usize,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_gather_nd(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let b = if ctx.since_version >= 12 { ctx.node.int_or("batch_dims", 0)? } else { 0 };
    let batch_dims =
        usize::try_from(b).map_err(|_| Error::attribute(&at, "batch_dims", "a non-negative int", b.to_string()))?;
    let size = known_size(ctx, 0)?;
    let pipeline =
        gpu.pipeline(&format!("gather_nd/{size}"), || element_shader("", size, &[("x", size), ("i", 8)], GATHER_ND))?;
    Ok(Box::new(GatherNd { batch_dims, size, pipeline, at }))
}

impl GpuOp for GatherNd {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let i = gpu_input(run, inputs, 1, at)?;
        if i.dtype() != DataType::Int64 {
            return Err(Error::input(at, 1, "int64 indices", i.dtype().name()));
        }
        let (ds, is, b) = (x.shape(), i.shape(), self.batch_dims);
        let Some(&q) = is.last() else {
            return Err(Error::input(at, 1, "indices of rank 1 or more", "a scalar"));
        };
        if b >= is.len() || b >= ds.len() || ds[..b] != is[..b] || b + q > ds.len() {
            let want = format!(
                "indices [batch {:?}..., q <= {}] for data {ds:?}",
                &ds[..b.min(ds.len())],
                ds.len() - b.min(ds.len())
            );
            return Err(Error::input(at, 1, want, format!("{is:?}")));
        }
        let mut shape = is[..is.len() - 1].to_vec();
        shape.extend_from_slice(&ds[b + q..]);
        let y = run.alloc(x.dtype(), shape)?;
        if !y.is_empty() {
            let slice: usize = ds[b + q..].iter().product();
            let per_batch: usize = is[b..is.len() - 1].iter().product();
            let batch_block: usize = ds[b..].iter().product();
            let st = strides(ds);
            let mut params = vec![q as u32, u32_of(slice, at)?, u32_of(per_batch, at)?, u32_of(batch_block, at)?];
            for &v in ds[b..b + q].iter().chain(&st[b..b + q]) {
                params.push(u32_of(v, at)?);
            }
            u32_of(i.len(), at)?;
            let out = Elements::new(self.size, y.len());
            dispatch_elements(run, &self.pipeline, out, &params, &[x.buffer, i.buffer, y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{int, t, Case};

    /// Index tuples of shape `is` (last dim q) into `dims`, negative ones too.
    fn tuples(is: &[usize], dims: &[usize], seed: u64) -> Vec<i64> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let q = *is.last().unwrap();
        let n: usize = is.iter().product();
        (0..n)
            .map(|e| {
                let d = dims[e % q] as i64;
                rng.i64(-d..d)
            })
            .collect()
    }

    #[test]
    fn gather_nd_matches_the_cpu() {
        // (data shape, indices shape, batch_dims)
        let layouts: &[(&[usize], &[usize], usize)] = &[
            (&[5, 7], &[3, 2], 0),
            (&[5, 7], &[4, 1], 0),
            (&[3, 5, 7], &[2, 3, 2], 0),
            (&[3, 5, 7], &[3, 4, 1], 1),
            (&[2, 3, 5, 7], &[2, 3, 2, 1], 2),
            (&[4, 6], &[0, 2], 0),
        ];
        for (l, (ds, is, b)) in layouts.iter().enumerate() {
            let q = *is.last().unwrap();
            for (k, dtype) in DTYPES.into_iter().enumerate() {
                let x = random(dtype, ds, (l * 10 + k) as u64);
                let idx = t(is, tuples(is, &ds[*b..*b + q], (l * 10 + k) as u64 + 100));
                let case = Case::new("GatherND", vec![x, idx]).attrs(vec![int("batch_dims", *b as i64)]).opset(13);
                check_exact(&case);
            }
        }
    }
}
