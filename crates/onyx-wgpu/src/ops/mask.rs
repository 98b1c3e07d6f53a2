//! Ops that keep or zero elements by position, on any element size: Trilu (the upper or lower
//! triangle of the last two dims, shifted by `k`) and Dropout in inference (its output is its
//! input, its mask all true).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, input_elem_size, known_size, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_input, host_ints, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers Trilu and Dropout.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("Trilu", supports_trilu, build_trilu, &[1]);
    r.add_with_host_inputs("Dropout", supports_dropout, build_dropout, &[1, 2]);
}

// ---------------------------------------------------------------------------------------------
// Trilu

fn supports_trilu(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_elem_size(ctx, 0).is_some() && ctx.node.int_or("upper", 1).is_ok_and(|u| u == 0 || u == 1)
}

/// Trilu: element (i, j) of each matrix is kept where `j - i >= k` (upper) or `j - i <= k`
/// (lower), else zero.
struct Trilu {
    upper: bool,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

/// `fetch`: p[3] rows, p[4] columns, p[5] k (an i32, clamped), p[6] 1 for upper.
const TRILU: &str = "
fn fetch(e: u32) -> E {
    let cols = p[4];
    let j = i32(e % cols);
    let i = i32((e / cols) % p[3]);
    let k = bitcast<i32>(p[5]);
    let keep = select(j - i <= k, j - i >= k, p[6] == 1u);
    if (keep) { return load_x(e); }
    return E();
}
";

fn build_trilu(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    let pipeline = gpu.pipeline(&format!("trilu/{size}"), || element_shader("", size, &[("x", size)], TRILU))?;
    Ok(Box::new(Trilu { upper: ctx.node.int_or("upper", 1)? == 1, size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for Trilu {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let shape = x.shape();
        if shape.len() < 2 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 2 or more", format!("shape {shape:?}")));
        }
        let k = match host_ints(inputs, 1, &self.at)? {
            None => 0,
            Some(v) if v.len() == 1 => v[0],
            Some(v) => return Err(Error::input(&self.at, 1, "a scalar k", format!("{} values", v.len()))),
        };
        let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        // Every |j - i| is below rows + cols, so clamping k there changes nothing.
        let bound = (rows + cols) as i64;
        let k = k.clamp(-bound, bound);
        let y = run.alloc(x.dtype(), shape.to_vec())?;
        if rows > 0 && cols > 0 {
            let k32 = i32::try_from(k).map_err(|_| Error::node(&self.at, "matrix too large"))?;
            let params = [u32_of(rows, &self.at)?, u32_of(cols, &self.at)?, k32 as u32, u32::from(self.upper)];
            dispatch_elements(
                run,
                &self.pipeline,
                Elements::new(self.size, y.len()),
                &params,
                &[x.buffer, y.gpu()?],
                &self.at,
            )?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// Dropout

/// Any movable element type. Training mode is checked when the node runs: it is taken only
/// where it changes nothing (ratio 0).
fn supports_dropout(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let training_attr = ctx.node.int_or("is_test", 1).is_ok_and(|t| t == 1);
    input_elem_size(ctx, 0).is_some() && training_attr
}

/// Dropout at inference: Y is X (no copy), the mask (if asked for) all true.
struct Dropout {
    fill: Arc<Pipeline>,
    mask: bool,
    at: Location,
}

fn build_dropout(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let code = "fn fetch(e: u32) -> E { return fill(); }\n";
    let fill = gpu.pipeline("cast/fill/1", || element_shader("", 1, &[], code))?;
    let mask = ctx.node.outputs.get(1).is_some_and(|o| !o.is_empty());
    if input_dtype(ctx, 0).is_none() {
        return Err(Error::input(&ctx.node.location(), 0, "a typed tensor", "an unknown type"));
    }
    Ok(Box::new(Dropout { fill, mask, at: ctx.node.location() }))
}

impl Dropout {
    /// Whether the run drops anything: training mode on with a ratio above 0.
    fn drops(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<bool> {
        if inputs.get(2).copied().flatten().is_none() {
            return Ok(false);
        }
        let t = host_input(inputs, 2, &self.at)?;
        let training = t.len() == 1 && t.bytes()?.first().is_some_and(|&b| b != 0);
        if !training {
            return Ok(false);
        }
        if inputs.get(1).copied().flatten().is_none() {
            return Ok(true);
        }
        let r = host_input(inputs, 1, &self.at)?;
        let ratio = match r.dtype() {
            DataType::Float => r.as_slice::<f32>()?.first().map(|&v| f64::from(v)),
            DataType::Double => r.as_slice::<f64>()?.first().copied(),
            DataType::Float16 => r.as_slice::<half::f16>()?.first().map(|v| f64::from(v.to_f32())),
            _ => None,
        };
        Ok(ratio != Some(0.0))
    }
}

impl GpuOp for Dropout {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        if self.drops(inputs)? {
            return Err(Error::Unsupported(format!(
                "wgpu: {} in training mode with a ratio above 0 (random masks are not drawn on the GPU)",
                self.at
            )));
        }
        let mut out = vec![Value::Tensor(x.tensor.clone())];
        if self.mask {
            let m = run.alloc(DataType::Bool, x.shape().to_vec())?;
            dispatch_elements(run, &self.fill, Elements::new(1, m.len()).fill([1, 0]), &[], &[m.gpu()?], &self.at)?;
            out.push(Value::Tensor(m));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::{DataType, Tensor};

    use super::super::layout::tests::{check_exact, random};
    use crate::testkit::{int, t, Case};

    #[test]
    fn trilu_matches_the_cpu() {
        let shapes: &[&[usize]] = &[&[4, 5], &[5, 4], &[3, 1, 7], &[2, 3, 9, 6], &[1, 1], &[37, 41], &[2, 0, 3]];
        for (s, shape) in shapes.iter().enumerate() {
            for dtype in [DataType::Float, DataType::Int64, DataType::Float16, DataType::Uint8] {
                let x = random(dtype, shape, 3 + s as u64);
                for upper in [0, 1] {
                    check_exact(&Case::new("Trilu", vec![x.clone()]).attrs(vec![int("upper", upper)]));
                    for k in [-100i64, -3, -1, 0, 2, 7, 1 << 40] {
                        let case =
                            Case::new("Trilu", vec![x.clone(), t(&[], vec![k])]).attrs(vec![int("upper", upper)]);
                        check_exact(&case.constants(&[1]));
                    }
                }
            }
        }
    }

    #[test]
    fn dropout_at_inference_is_identity_with_a_true_mask() {
        let x = random(DataType::Float, &[3, 7, 5], 1);
        check_exact(&Case::new("Dropout", vec![x.clone()]).opset(22));
        check_exact(&Case::new("Dropout", vec![x.clone()]).opset(22).outputs(2));
        check_exact(&Case::new("Dropout", vec![x.clone()]).opset(11));
        check_exact(&Case::new("Dropout", vec![x.clone(), t(&[], vec![0.3f32])]).opset(22).outputs(2));
        let training = Tensor::from_bools(vec![], vec![true]).unwrap();
        let zero = Case::new("Dropout", vec![x.clone(), t(&[], vec![0f32]), training.clone()]).opset(22).outputs(2);
        check_exact(&zero);
        let Some(gpu) = crate::testkit::provider() else { return };
        let random = Case::new("Dropout", vec![x, t(&[], vec![0.5f32]), training]).opset(22);
        let e = random.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("Dropout") && e.contains("training"), "{e}");
    }
}
