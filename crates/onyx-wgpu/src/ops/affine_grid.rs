//! AffineGrid (opset 20) on f32, one dispatch: each output value is one row of `theta[n]` times
//! the homogeneous normalized coordinates `(x, y[, z], 1)` of its grid point. The `size` input
//! (`[N, C, H, W]` or `[N, C, D, H, W]`) is read on the host.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_ints, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers AffineGrid.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("AffineGrid", supports_affine_grid, build_affine_grid, &[1]);
}

/// f32 theta and an `align_corners` of 0 or 1.
fn supports_affine_grid(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float) && ctx.node.int_or("align_corners", 0).is_ok_and(|a| a == 0 || a == 1)
}

/// `fetch(e)`: coordinate `row` of a grid point. Parameters: r (2 or 3), align_corners, points
/// per batch, then the spatial sizes W, H[, D] (x, y, z order).
const AFFINE: &str = "
fn coord(i: u32, n: u32) -> f32 {
    if (p[4] == 1u) {
        if (n == 1u) { return -1.0; }
        return -1.0 + 2.0 * f32(i) / f32(n - 1u);
    }
    return f32(2u * i + 1u) / f32(n) - 1.0;
}
fn fetch(e: u32) -> E {
    let r = p[3];
    let row = e % r;
    let pt = e / r;
    let b = pt / p[5];
    var rem = pt % p[5];
    let base = (b * r + row) * (r + 1u);
    var acc = bitcast<f32>(load_t(base + r));
    for (var k = 0u; k < r; k++) {
        let n = p[6u + k];
        acc += bitcast<f32>(load_t(base + k)) * coord(rem % n, n);
        rem = rem / n;
    }
    return bitcast<u32>(acc);
}
";

/// An AffineGrid node.
struct AffineGrid {
    align_corners: bool,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_affine_grid(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let pipeline = gpu.pipeline("affine_grid/f32", || element_shader("", 4, &[("t", 4)], AFFINE))?;
    Ok(Box::new(AffineGrid {
        align_corners: ctx.node.int_or("align_corners", 0)? != 0,
        pipeline,
        at: ctx.node.location(),
    }))
}

impl GpuOp for AffineGrid {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let theta = gpu_input(run, inputs, 0, at)?;
        let size = host_ints(inputs, 1, at)?.ok_or_else(|| Error::input(at, 1, "a size", "nothing"))?;
        if theta.dtype() != DataType::Float {
            return Err(Error::input(at, 0, "float", theta.dtype().name()));
        }
        let dims: Vec<usize> = size
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| Error::input(at, 1, "non-negative sizes", format!("{size:?}"))))
            .collect::<Result<_>>()?;
        let r = match dims.len() {
            4 => 2,
            5 => 3,
            _ => return Err(Error::input(at, 1, "a size [N, C, H, W] or [N, C, D, H, W]", format!("{size:?}"))),
        };
        let n = dims[0];
        if theta.shape() != [n, r, r + 1] {
            return Err(Error::input(
                at,
                0,
                format!("theta of shape [{n}, {r}, {}]", r + 1),
                format!("{:?}", theta.shape()),
            ));
        }
        let spatial = &dims[2..];
        let shape: Vec<usize> = [n].iter().chain(spatial).chain(&[r]).copied().collect();
        let y = run.alloc(DataType::Float, shape)?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let mut params = vec![r as u32, self.align_corners as u32, u32_of(spatial.iter().product(), at)?];
        for k in 0..r {
            params.push(u32_of(spatial[r - 1 - k], at)?);
        }
        dispatch_elements(run, &self.pipeline, Elements::new(4, y.len()), &params, &[theta.buffer, y.gpu()?], at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{i64s, int, rand, Case};

    #[test]
    fn affine_grid_matches_the_cpu() {
        let sizes: &[&[i64]] = &[&[2, 3, 5, 7], &[1, 1, 1, 4], &[3, 2, 3, 1, 6], &[1, 1, 4, 3, 2], &[2, 1, 0, 3]];
        for (s, &size) in sizes.iter().enumerate() {
            let r = size.len() - 2;
            let theta = rand(&[size[0] as usize, r, r + 1], -2.0, 2.0, 700 + s as u64);
            for align in [0, 1] {
                let case = Case::new("AffineGrid", vec![theta.clone(), i64s(size)])
                    .attrs(vec![int("align_corners", align)])
                    .opset(20);
                case.constants(&[1]).check(1e-5, 1e-5);
                let case = Case::new("AffineGrid", vec![theta.clone(), i64s(size)])
                    .attrs(vec![int("align_corners", align)])
                    .opset(20);
                case.check(1e-5, 1e-5);
            }
        }
    }
}
