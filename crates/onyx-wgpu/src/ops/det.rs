//! Det on f32, one dispatch: one invocation per trailing `[M, M]` matrix runs an LU
//! decomposition with partial pivoting (as the CPU EP does, there in f64) on its own copy of
//! the matrix in a scratch buffer.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, grid, u32_of, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers Det.
pub(crate) fn register(r: &mut Registry) {
    r.add("Det", supports_det, build_det);
}

/// f32 input.
fn supports_det(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float)
}

/// Parameters: matrices, M.
fn shader() -> String {
    format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> a: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
{FLAT_INDEX}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {{ return; }}
    let m = p[1];
    let base = i * m * m;
    for (var k = 0u; k < m * m; k++) {{ a[base + k] = x[base + k]; }}
    var det = 1.0;
    for (var c = 0u; c < m; c++) {{
        var pivot = c;
        for (var r = c + 1u; r < m; r++) {{
            if (abs(a[base + r * m + c]) > abs(a[base + pivot * m + c])) {{ pivot = r; }}
        }}
        if (a[base + pivot * m + c] == 0.0) {{ det = 0.0; break; }}
        if (pivot != c) {{
            for (var k = 0u; k < m; k++) {{
                let t = a[base + pivot * m + k];
                a[base + pivot * m + k] = a[base + c * m + k];
                a[base + c * m + k] = t;
            }}
            det = -det;
        }}
        let d = a[base + c * m + c];
        det *= d;
        for (var r = c + 1u; r < m; r++) {{
            let f = a[base + r * m + c] / d;
            for (var k = c; k < m; k++) {{ a[base + r * m + k] -= f * a[base + c * m + k]; }}
        }}
    }}
    y[i] = det;
}}
"
    )
}

/// A Det node.
struct Det {
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_det(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Det { pipeline: gpu.pipeline("det/f32", shader)?, at: ctx.node.location() }))
}

impl GpuOp for Det {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let s = x.shape();
        if x.dtype() != DataType::Float {
            return Err(Error::input(at, 0, "float", x.dtype().name()));
        }
        if s.len() < 2 || s[s.len() - 1] != s[s.len() - 2] {
            return Err(Error::input(at, 0, "square matrices [..., M, M]", format!("{s:?}")));
        }
        let m = s[s.len() - 1];
        let y = run.alloc(DataType::Float, s[..s.len() - 2].to_vec())?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        u32_of(x.len(), at)?;
        // At least one element, so that the scratch binding is never empty.
        let scratch = run.alloc(DataType::Float, vec![x.len().max(1)])?;
        let params = [u32_of(y.len(), at)?, u32_of(m, at)?];
        run.dispatch(&self.pipeline, &params, &[x.buffer, scratch.gpu()?, y.gpu()?], grid(y.len()))?;
        run.release_tensor(scratch);
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{rand, t, Case};

    #[test]
    fn det_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[2, 2], &[3, 1, 1], &[4, 3, 3], &[2, 3, 5, 5], &[7, 7], &[3, 0, 0], &[0, 4, 4]];
        for (s, shape) in shapes.iter().enumerate() {
            let x = rand(shape, -2.0, 2.0, 900 + s as u64);
            Case::new("Det", vec![x]).check(1e-4, 1e-4);
        }
        // A singular matrix and one that needs a row swap.
        Case::new(
            "Det",
            vec![t(&[2, 3, 3], vec![1f32, 2., 3., 2., 4., 6., 1., 0., 1., 0., 1., 2., 3., 4., 5., 1., 1., 0.])],
        )
        .check(1e-5, 1e-5);
    }
}
