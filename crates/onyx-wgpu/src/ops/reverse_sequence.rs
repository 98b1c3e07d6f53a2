//! ReverseSequence for every element size, one dispatch: the first `sequence_lens[b]` steps of
//! each batch entry are reversed along the time axis, the rest copied. The lengths are read on
//! the host (checked as the CPU EP checks them) and passed as shader parameters.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, input_elem_size, known_size, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_ints, strides, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Batch entries the lengths may have (they travel in the shader parameters).
const MAX_BATCH: usize = 1 << 14;

/// Registers ReverseSequence.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("ReverseSequence", supports_reverse_sequence, build_reverse_sequence, &[1]);
}

/// Movable data, int64 lengths, valid axes.
fn supports_reverse_sequence(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_elem_size(ctx, 0).is_some() && input_dtype(ctx, 1) == Some(DataType::Int64) && axes(ctx).is_ok()
}

/// (batch_axis, time_axis): 0 and 1 in either order.
fn axes(ctx: &NodeContext<'_>) -> Result<(usize, usize)> {
    let node = ctx.node;
    let at = node.location();
    let (batch, time) = (node.int_or("batch_axis", 1)?, node.int_or("time_axis", 0)?);
    match (batch, time) {
        (0, 1) => Ok((0, 1)),
        (1, 0) => Ok((1, 0)),
        _ => Err(Error::attribute(
            &at,
            "batch_axis",
            "0 or 1, and time_axis the other one",
            format!("{batch} and {time}"),
        )),
    }
}

/// `fetch(e)`: output element `e`. Parameters: batch stride, time stride, batch dim, time dim,
/// then the lengths.
const REVERSE: &str = "
fn fetch(e: u32) -> E {
    let b = (e / p[3]) % p[5];
    let t = (e / p[4]) % p[6];
    let len = p[7u + b];
    if (t < len) { return load_x(e + (len - 1u - t) * p[4] - t * p[4]); }
    return load_x(e);
}
";

/// A ReverseSequence node.
struct ReverseSequence {
    batch: usize,
    time: usize,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_reverse_sequence(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let (batch, time) = axes(ctx)?;
    let size = known_size(ctx, 0)?;
    let pipeline =
        gpu.pipeline(&format!("reverse_sequence/{size}"), || element_shader("", size, &[("x", size)], REVERSE))?;
    Ok(Box::new(ReverseSequence { batch, time, size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for ReverseSequence {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let lens = host_ints(inputs, 1, at)?.ok_or_else(|| Error::input(at, 1, "sequence lengths", "nothing"))?;
        let shape = x.shape();
        if shape.len() < 2 {
            return Err(Error::input(at, 0, "a tensor of rank 2 or more", format!("shape {shape:?}")));
        }
        let (nb, nt) = (shape[self.batch], shape[self.time]);
        if lens.len() != nb || nb > MAX_BATCH {
            return Err(Error::input(
                at,
                1,
                format!("{nb} sequence lengths (the batch dim, at most {MAX_BATCH})"),
                lens.len().to_string(),
            ));
        }
        let s = strides(shape);
        let mut params = vec![u32_of(s[self.batch], at)?, u32_of(s[self.time], at)?, u32_of(nb, at)?, u32_of(nt, at)?];
        for &l in &lens {
            let l = usize::try_from(l).ok().filter(|&l| l <= nt);
            let l =
                l.ok_or_else(|| Error::input(at, 1, format!("sequence lengths in [0, {nt}]"), format!("{lens:?}")))?;
            params.push(l as u32);
        }
        let y = run.alloc(x.dtype(), shape.to_vec())?;
        if !y.is_empty() {
            dispatch_elements(
                run,
                &self.pipeline,
                Elements::new(self.size, y.len()),
                &params,
                &[x.buffer, y.gpu()?],
                at,
            )?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{i64s, int, Case};

    #[test]
    fn reverse_sequence_matches_the_cpu() {
        for (s, dtype) in DTYPES.into_iter().enumerate() {
            for (batch_axis, time_axis) in [(1, 0), (0, 1)] {
                let mut shape = vec![0usize; 2];
                shape[batch_axis] = 3;
                shape[time_axis] = 5;
                for tail in [vec![], vec![2, 3]] {
                    let full: Vec<usize> = shape.iter().chain(&tail).copied().collect();
                    let x = random(dtype, &full, 800 + s as u64);
                    let attrs = vec![int("batch_axis", batch_axis as i64), int("time_axis", time_axis as i64)];
                    for lens in [[5i64, 0, 3], [1, 2, 5]] {
                        let case =
                            Case::new("ReverseSequence", vec![x.clone(), i64s(&lens)]).attrs(attrs.clone()).opset(10);
                        check_exact(&case);
                        check_exact(&case.constants(&[1]));
                    }
                }
            }
        }
    }
}
