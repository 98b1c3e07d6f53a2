//! Shrink and Swish on f32, one elementwise dispatch each: the activations the elementwise
//! family does not cover.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers Shrink and Swish.
pub(crate) fn register(r: &mut Registry) {
    r.add("Shrink", supports_f32, build_shrink);
    r.add("Swish", supports_f32, build_swish);
}

/// An f32 input.
fn supports_f32(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float)
}

/// Shrink's `fetch`. Parameters: lambd, bias (f32 bits).
const SHRINK: &str = "
fn fetch(e: u32) -> E {
    let x = bitcast<f32>(load_x(e));
    let lambd = bitcast<f32>(p[3]);
    let bias = bitcast<f32>(p[4]);
    if (x < -lambd) { return bitcast<u32>(x + bias); }
    if (x > lambd) { return bitcast<u32>(x - bias); }
    return 0u;
}
";

/// Swish's `fetch`: `x / (1 + exp(-alpha x))`. Parameter: alpha (f32 bits).
const SWISH: &str = "
fn fetch(e: u32) -> E {
    let x = bitcast<f32>(load_x(e));
    let alpha = bitcast<f32>(p[3]);
    return bitcast<u32>(x / (1.0 + exp(-alpha * x)));
}
";

/// An f32 activation with its parameters.
struct Activation {
    params: Vec<u32>,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_shrink(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let lambd = ctx.node.float_or("lambd", 0.5)?;
    if lambd.is_nan() || lambd < 0.0 {
        return Err(Error::attribute(&at, "lambd", "a value >= 0", lambd.to_string()));
    }
    let bias = ctx.node.float_or("bias", 0.0)?;
    let pipeline = gpu.pipeline("activation/shrink", || element_shader("", 4, &[("x", 4)], SHRINK))?;
    Ok(Box::new(Activation { params: vec![lambd.to_bits(), bias.to_bits()], pipeline, at }))
}

fn build_swish(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let alpha = ctx.node.float_or("alpha", 1.0)?;
    let pipeline = gpu.pipeline("activation/swish", || element_shader("", 4, &[("x", 4)], SWISH))?;
    Ok(Box::new(Activation { params: vec![alpha.to_bits()], pipeline, at: ctx.node.location() }))
}

impl GpuOp for Activation {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        if x.dtype() != DataType::Float {
            return Err(Error::input(&self.at, 0, "float", x.dtype().name()));
        }
        let y = run.alloc(DataType::Float, x.shape().to_vec())?;
        if !y.is_empty() {
            let out = Elements::new(4, y.len());
            dispatch_elements(run, &self.pipeline, out, &self.params, &[x.buffer, y.gpu()?], &self.at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{float, rand, Case};

    #[test]
    fn shrink_and_swish_match_the_cpu() {
        for (s, shape) in [&[7usize][..], &[3, 37], &[2, 0], &[]].into_iter().enumerate() {
            let x = rand(shape, -4.0, 4.0, 40 + s as u64);
            Case::new("Shrink", vec![x.clone()]).opset(9).check(0.0, 0.0);
            for (lambd, bias) in [(1.5f32, 0.0f32), (0.5, 1.5), (0.0, -0.25)] {
                let attrs = vec![float("lambd", lambd), float("bias", bias)];
                Case::new("Shrink", vec![x.clone()]).attrs(attrs).opset(9).check(0.0, 0.0);
            }
            Case::new("Swish", vec![x.clone()]).opset(24).check(1e-5, 1e-6);
            Case::new("Swish", vec![x]).attrs(vec![float("alpha", -0.7)]).opset(24).check(1e-5, 1e-6);
        }
    }
}
