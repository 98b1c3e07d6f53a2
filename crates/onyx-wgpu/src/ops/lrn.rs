//! LRN (local response normalization across channels) on f32, one dispatch: each element
//! sums the squares of its channel window.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers LRN.
pub(crate) fn register(r: &mut Registry) {
    r.add("LRN", supports_lrn, build_lrn);
}

/// f32 input and a positive size.
fn supports_lrn(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float) && ctx.node.int_or("size", 0).is_ok_and(|s| s > 0 && s < 1 << 20)
}

/// `y = x / (bias + alpha / size * sum(x_c^2 over the window)) ^ beta`. Parameters: channels,
/// inner, before, after, then alpha / size, beta and bias (f32 bits).
const LRN: &str = "
fn fetch(e: u32) -> E {
    let channels = p[3];
    let inner = p[4];
    let i = e % inner;
    let c = (e / inner) % channels;
    let image = e - c * inner - i;
    let lo = select(0u, c - p[5], c >= p[5]);
    let hi = min(c + p[6] + 1u, channels);
    var acc = 0.0;
    for (var k = lo; k < hi; k++) {
        let v = bitcast<f32>(load_x(image + k * inner + i));
        acc += v * v;
    }
    let x = bitcast<f32>(load_x(e));
    return bitcast<u32>(x / pow(bitcast<f32>(p[9]) + bitcast<f32>(p[7]) * acc, bitcast<f32>(p[8])));
}
";

/// LRN with its attributes.
struct Lrn {
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_lrn(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let size = match node.get_int("size")? {
        Some(s) if s > 0 => s as usize,
        Some(s) => return Err(Error::attribute(&at, "size", "a positive integer", s.to_string())),
        None => return Err(Error::attribute(&at, "size", "an int", "no attribute")),
    };
    let pipeline = gpu.pipeline("lrn/f32", || element_shader("", 4, &[("x", 4)], LRN))?;
    let (alpha, beta, bias) =
        (node.float_or("alpha", 1e-4)?, node.float_or("beta", 0.75)?, node.float_or("bias", 1.0)?);
    Ok(Box::new(Lrn { size, alpha, beta, bias, pipeline, at }))
}

impl GpuOp for Lrn {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        if x.dtype() != DataType::Float {
            return Err(Error::input(at, 0, "float", x.dtype().name()));
        }
        if x.shape().len() < 2 {
            return Err(Error::input(
                at,
                0,
                "a tensor of rank 2 or more ([N, C, ...])",
                format!("shape {:?}", x.shape()),
            ));
        }
        let inner: usize = x.shape()[2..].iter().product();
        let y = run.alloc(DataType::Float, x.shape().to_vec())?;
        if !y.is_empty() {
            let scale = self.alpha / self.size as f32;
            let (before, after) = ((self.size - 1) / 2, self.size / 2);
            let params = [
                u32_of(x.shape()[1], at)?,
                u32_of(inner, at)?,
                u32_of(before, at)?,
                u32_of(after, at)?,
                scale.to_bits(),
                self.beta.to_bits(),
                self.bias.to_bits(),
            ];
            dispatch_elements(run, &self.pipeline, Elements::new(4, y.len()), &params, &[x.buffer, y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{float, int, rand, Case};

    #[test]
    fn lrn_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[2, 7, 3, 5], &[1, 5], &[3, 1, 4], &[1, 9, 17]];
        for (s, shape) in shapes.iter().enumerate() {
            let x = rand(shape, -2.0, 2.0, 60 + s as u64);
            for size in [1, 2, 3, 5, 12] {
                Case::new("LRN", vec![x.clone()]).attrs(vec![int("size", size)]).opset(13).check(1e-5, 1e-6);
                let attrs = vec![int("size", size), float("alpha", 0.3), float("beta", 0.5), float("bias", 2.0)];
                Case::new("LRN", vec![x.clone()]).attrs(attrs).opset(13).check(1e-5, 1e-6);
            }
        }
    }
}
