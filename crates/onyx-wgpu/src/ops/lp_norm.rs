//! LpNormalization on f32: `x / ‖x‖_p` along one axis for p = 1 or 2 (a zero norm gives 0),
//! one dispatch: each element sums its line (lines along the axis are short in practice).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, normalize_axis, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers LpNormalization.
pub(crate) fn register(r: &mut Registry) {
    r.add("LpNormalization", supports_lp, build_lp);
}

/// f32 input, p of 1 or 2.
fn supports_lp(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float) && matches!(ctx.node.int_or("p", 2), Ok(1 | 2))
}

/// `fetch`: P is the pipeline's norm order. Parameters: axis length n, inner.
const LP: &str = "
fn fetch(e: u32) -> E {
    let n = p[3];
    let inner = p[4];
    let i = e % inner;
    let start = (e / (n * inner)) * n * inner + i;
    var s = 0.0;
    for (var k = 0u; k < n; k++) {
        let v = bitcast<f32>(load_x(start + k * inner));
        if (P == 1u) { s += abs(v); } else { s += v * v; }
    }
    if (P == 2u) { s = sqrt(s); }
    if (s == 0.0) { return 0u; }
    return bitcast<u32>(bitcast<f32>(load_x(e)) / s);
}
";

/// LpNormalization along `axis`.
struct LpNorm {
    axis: i64,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_lp(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let p = ctx.node.int_or("p", 2)?;
    if p != 1 && p != 2 {
        return Err(Error::attribute(&at, "p", "1 or 2", p.to_string()));
    }
    let code = format!("const P: u32 = {p}u;\n{LP}");
    let pipeline = gpu.pipeline(&format!("lp_norm/{p}"), || element_shader("", 4, &[("x", 4)], &code))?;
    Ok(Box::new(LpNorm { axis: ctx.node.int_or("axis", -1)?, pipeline, at }))
}

impl GpuOp for LpNorm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        if x.dtype() != DataType::Float {
            return Err(Error::input(at, 0, "float", x.dtype().name()));
        }
        let s = x.shape();
        if s.is_empty() {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, s.len(), at)?;
        let inner: usize = s[axis + 1..].iter().product();
        let y = run.alloc(DataType::Float, s.to_vec())?;
        if !y.is_empty() {
            let params = [u32_of(s[axis], at)?, u32_of(inner, at)?];
            dispatch_elements(run, &self.pipeline, Elements::new(4, y.len()), &params, &[x.buffer, y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, rand, t, Case};

    #[test]
    fn lp_normalization_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[7], &[3, 5], &[2, 7, 3], &[4, 1, 9], &[2, 0, 3]];
        for (s, shape) in shapes.iter().enumerate() {
            let x = rand(shape, -3.0, 3.0, 30 + s as u64);
            for axis in -(shape.len() as i64)..shape.len() as i64 {
                for p in [1, 2] {
                    let case =
                        Case::new("LpNormalization", vec![x.clone()]).attrs(vec![int("axis", axis), int("p", p)]);
                    case.opset(22).check(1e-5, 1e-6);
                }
            }
            Case::new("LpNormalization", vec![x.clone()]).opset(22).check(1e-5, 1e-6);
        }
        let zeros = t(&[2, 3], vec![0f32, 0.0, 0.0, 3.0, -4.0, 0.0]);
        for p in [1, 2] {
            Case::new("LpNormalization", vec![zeros.clone()]).attrs(vec![int("p", p)]).opset(22).check(1e-6, 0.0);
        }
    }
}
