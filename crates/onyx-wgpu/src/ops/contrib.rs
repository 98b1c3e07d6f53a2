//! The com.microsoft elementwise Gelu family: Gelu (exact, through erf), BiasGelu (Gelu of A
//! plus a bias along the last axis) and FastGelu (the tanh approximation, optional bias),
//! computed in f32 whatever the storage type (f32, or f16 where the adapter has SHADER_F16).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, Value};

use super::elementwise::{expression, math_for, UNARY};
use super::{float_inputs, input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, opt_gpu_input, u32_of, wgsl_type, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// The contrib domain.
const DOMAIN: &str = "com.microsoft";

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    r.add_in(DOMAIN, "Gelu", supports, build);
    r.add_in(DOMAIN, "BiasGelu", supports, build);
    r.add_in(DOMAIN, "FastGelu", supports, build);
}

/// Float inputs of one type: X alone (Gelu), X and a required (BiasGelu) or optional
/// (FastGelu) bias.
fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node.inputs.len();
    let arity = match ctx.node.op_type.as_str() {
        "Gelu" => n == 1,
        "BiasGelu" => n == 2,
        _ => (1..=2).contains(&n),
    };
    let bias_ok = ctx.node.input(1).is_none() || input_dtype(ctx, 1) == input_dtype(ctx, 0);
    arity && bias_ok && float_inputs(ctx, gpu, 0..n)
}

/// A Gelu-family node: one pass reading X and the bias (X again when there is none).
struct GeluOp {
    pipeline: Arc<Pipeline>,
    /// The bias input's index, if the op has one.
    bias: Option<usize>,
    at: Location,
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at}: untyped input")))?;
    let ty = wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype}")))?;
    let op = ctx.node.op_type.as_str();
    let expr = expression(UNARY, if op == "FastGelu" { "GeluTanh" } else { "Gelu" })?;
    let key = format!("contrib/{op}/{ty}");
    let pipeline = gpu.pipeline(&key, || shader(ty, enables(dtype), expr))?;
    let bias = (op != "Gelu").then_some(1);
    Ok(Box::new(GeluOp { pipeline, bias, at }))
}

/// y = f(x + b[i % p[1]]) for `n = p[0]` elements; no bias when `p[1]` is 0.
fn shader(ty: &str, enable: &str, expr: &str) -> String {
    let math = math_for(expr);
    format!(
        "{enable}{FLAT_INDEX}{math}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read> bias: array<{ty}>;
@group(0) @binding(3) var<storage, read_write> y: array<{ty}>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {{ return; }}
    var v = f32(x[i]);
    if (p[1] > 0u) {{ v += f32(bias[i % p[1]]); }}
    y[i] = {ty}({expr});
}}
"
    )
}

impl GpuOp for GeluOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let bias = match self.bias {
            Some(i) => opt_gpu_input(run, inputs, i, &self.at)?.map(|b| (i, b)),
            None => None,
        };
        let mut blen = 0;
        if let Some((i, b)) = &bias {
            let last = x.shape().last().copied();
            if b.dtype() != x.dtype() || b.shape().len() != 1 || Some(b.shape()[0]) != last {
                return Err(Error::input(
                    &self.at,
                    *i,
                    format!("a 1-D {} bias of the input's last dimension ({last:?})", x.dtype()),
                    format!("{}{:?}", b.dtype(), b.shape()),
                ));
            }
            blen = b.len();
        }
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        let b = bias.map_or(x.buffer, |(_, b)| b.buffer);
        let params = [u32_of(x.len(), &self.at)?, u32_of(blen, &self.at)?];
        run.dispatch(&self.pipeline, &params, &[x.buffer, b, y.gpu()?], grid(x.len()))?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{provider, rand, Case};

    #[test]
    fn gelu_family_matches_the_cpu_contrib_kernels() {
        let x = rand(&[3, 5, 67], -5.0, 5.0, 1);
        let b = rand(&[67], -1.0, 1.0, 2);
        Case::new("Gelu", vec![x.clone()]).domain("com.microsoft").check(1e-5, 1e-5);
        Case::new("BiasGelu", vec![x.clone(), b.clone()]).domain("com.microsoft").check(1e-5, 1e-5);
        Case::new("FastGelu", vec![x.clone(), b.clone()]).domain("com.microsoft").check(1e-5, 1e-5);
        Case::new("FastGelu", vec![x.clone()]).domain("com.microsoft").check(1e-5, 1e-5);
        let Some(gpu) = provider() else { return };
        let bad = rand(&[5], -1.0, 1.0, 3);
        let e = Case::new("BiasGelu", vec![x, bad]).domain("com.microsoft").try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("input 1") && e.contains("[5]"), "{e}");
    }
}
