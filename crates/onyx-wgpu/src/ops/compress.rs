//! Compress on the GPU, for every element size: the condition is read on the host (it sets
//! the output's shape), the kept positions go to the kernel as parameters, and one dispatch
//! gathers them along the axis (or over the flattened input when there is no axis).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, input_elem_size, known_size, normalize_axis, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers Compress.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("Compress", supports_compress, build_compress, &[1]);
}

/// Movable data and a bool condition.
fn supports_compress(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_elem_size(ctx, 0).is_some() && input_dtype(ctx, 1) == Some(DataType::Bool)
}

/// `fetch`. Parameters: kept count, axis length, inner, then the kept positions.
const COMPRESS: &str = "
fn fetch(e: u32) -> E {
    let kept = p[3];
    let inner = p[5];
    let r = e % inner;
    let t = e / inner;
    let j = t % kept;
    let o = t / kept;
    return load_x((o * p[4] + p[6u + j]) * inner + r);
}
";

/// Compress: the slices along `axis` (or the elements) whose condition is true.
struct Compress {
    axis: Option<i64>,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_compress(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    let pipeline = gpu.pipeline(&format!("compress/{size}"), || element_shader("", size, &[("x", size)], COMPRESS))?;
    Ok(Box::new(Compress { axis: ctx.node.get_int("axis")?, size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for Compress {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let c = host_input(inputs, 1, at)?;
        if c.dtype() != DataType::Bool || c.shape().len() != 1 {
            return Err(Error::input(at, 1, "a 1-D bool condition", format!("{} {:?}", c.dtype(), c.shape())));
        }
        let (dim, inner, axis) = match self.axis {
            None => (x.len(), 1, None),
            Some(a) => {
                if x.shape().is_empty() {
                    return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
                }
                let axis = normalize_axis(a, x.shape().len(), at)?;
                (x.shape()[axis], x.shape()[axis + 1..].iter().product(), Some(axis))
            }
        };
        let cond = c.bytes()?;
        if let Some(p) = cond.iter().skip(dim).position(|&b| b != 0) {
            let want = format!("a condition with no true entry past the {dim} slices of the axis");
            return Err(Error::input(at, 1, want, format!("true at position {}", dim + p)));
        }
        let kept: Vec<u32> =
            cond.iter().take(dim).enumerate().filter(|(_, &b)| b != 0).map(|(i, _)| i as u32).collect();
        let shape = match axis {
            None => vec![kept.len()],
            Some(a) => {
                let mut s = x.shape().to_vec();
                s[a] = kept.len();
                s
            }
        };
        let y = run.alloc(x.dtype(), shape)?;
        if !y.is_empty() {
            let mut params = vec![u32_of(kept.len(), at)?, u32_of(dim, at)?, u32_of(inner, at)?];
            params.extend_from_slice(&kept);
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
    use onyx_core::Tensor;

    use super::super::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{int, Case};

    #[test]
    fn compress_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[7], &[3, 5], &[2, 7, 3], &[4, 0]];
        for (s, shape) in shapes.iter().enumerate() {
            for (k, dtype) in DTYPES.into_iter().enumerate() {
                let x = random(dtype, shape, (s * 10 + k) as u64);
                let mut rng = fastrand::Rng::with_seed((s * 10 + k) as u64);
                let mut axes: Vec<Option<i64>> = vec![None];
                axes.extend((-(shape.len() as i64)..shape.len() as i64).map(Some));
                for axis in axes {
                    let dim = match axis {
                        None => shape.iter().product(),
                        Some(a) => shape[if a < 0 { (a + shape.len() as i64) as usize } else { a as usize }],
                    };
                    for len in [dim, dim.saturating_sub(1)] {
                        let bits: Vec<bool> = (0..len).map(|_| rng.bool()).collect();
                        let c = Tensor::from_bools(vec![len], bits).unwrap();
                        let mut case = Case::new("Compress", vec![x.clone(), c]).opset(11);
                        if let Some(a) = axis {
                            case = case.attrs(vec![int("axis", a)]);
                        }
                        check_exact(&case);
                    }
                }
            }
        }
    }
}
