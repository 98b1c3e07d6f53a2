//! CenterCropPad (opset 18) for every element size, one dispatch: each output element reads the
//! input element shifted by the axis's centring offset, or zero outside the input. Cropping
//! drops `(dim - size) / 2` elements at the start, padding adds `(size - dim) / 2` there (the
//! extra element of an odd difference goes to the end). The target `shape` is read on the host.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, input_elem_size, known_size, normalize_axis, Elements};
use super::Registry;
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_ints, strides, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers CenterCropPad.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("CenterCropPad", supports_center_crop_pad, build_center_crop_pad, &[1]);
}

/// Input 0 of an element size the kernels move.
fn supports_center_crop_pad(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_elem_size(ctx, 0).is_some() && ctx.node.get_ints("axes").is_ok()
}

/// `fetch(e)`: output element `e`. Parameters: rank, then per axis: output dim, input stride,
/// input dim, shift (i32 bits: input index = output index - shift).
const CENTER: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    var rem = e;
    var src = 0u;
    for (var d = rank; d > 0u; d--) {
        let q = 4u + 4u * (d - 1u);
        let o = rem % p[q];
        rem = rem / p[q];
        let i = i32(o) - bitcast<i32>(p[q + 3u]);
        if (i < 0 || u32(i) >= p[q + 2u]) { return fill(); }
        src += u32(i) * p[q + 1u];
    }
    return load_x(src);
}
";

/// A CenterCropPad node.
struct CenterCropPad {
    axes: Option<Vec<i64>>,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_center_crop_pad(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    let pipeline =
        gpu.pipeline(&format!("center_crop_pad/{size}"), || element_shader("", size, &[("x", size)], CENTER))?;
    let axes = ctx.node.get_ints("axes")?.map(<[i64]>::to_vec);
    Ok(Box::new(CenterCropPad { axes, size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for CenterCropPad {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let target = host_ints(inputs, 1, at)?.ok_or_else(|| Error::input(at, 1, "a 1-D int64 shape", "nothing"))?;
        let rank = x.shape().len();
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a.iter().map(|&a| normalize_axis(a, rank, at)).collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if axes.len() != target.len() {
            return Err(Error::input(at, 1, format!("{} sizes (one per axis)", axes.len()), target.len().to_string()));
        }
        let mut out_shape = x.shape().to_vec();
        let mut shift = vec![0i64; rank];
        for (&a, &t) in axes.iter().zip(&target) {
            let t = usize::try_from(t).map_err(|_| Error::input(at, 1, "sizes >= 0", t.to_string()))?;
            let dim = x.shape()[a];
            shift[a] = if t < dim { -(((dim - t) / 2) as i64) } else { ((t - dim) / 2) as i64 };
            out_shape[a] = t;
        }
        let y = run.alloc(x.dtype(), out_shape.clone())?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let in_strides = strides(x.shape());
        let mut params = vec![rank as u32];
        for d in 0..rank {
            let s = i32::try_from(shift[d]).map_err(|_| Error::node(at, format!("shift {} is too large", shift[d])))?;
            params.extend([u32_of(out_shape[d], at)?, u32_of(in_strides[d], at)?, u32_of(x.shape()[d], at)?, s as u32]);
        }
        u32_of(x.len(), at)?;
        dispatch_elements(run, &self.pipeline, Elements::new(self.size, y.len()), &params, &[x.buffer, y.gpu()?], at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{i64s, ints, Case};

    #[test]
    fn center_crop_pad_matches_the_cpu() {
        for (s, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[5, 8, 3], 600 + s as u64);
            let cases: &[(&[i64], Option<&[i64]>)] = &[
                (&[3, 11, 3], None),
                (&[6, 5, 1], None),
                (&[7, 8], Some(&[0, 1])),
                (&[2, 9], Some(&[-1, 0])),
                (&[4], Some(&[1])),
                (&[5, 8, 3], None),
                (&[0, 8, 3], None),
            ];
            for &(shape, axes) in cases {
                let mut case = Case::new("CenterCropPad", vec![x.clone(), i64s(shape)]).opset(18);
                if let Some(a) = axes {
                    case = case.attrs(vec![ints("axes", a)]);
                }
                check_exact(&case.constants(&[1]));
            }
            let case = Case::new("CenterCropPad", vec![x, i64s(&[2, 10, 4])]).opset(18);
            check_exact(&case);
        }
    }
}
