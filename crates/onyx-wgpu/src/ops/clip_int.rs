//! Clip (opset 12+) on 8-, 16- and 32-bit integers, one dispatch: `min(max(x, lo), hi)` (so
//! `lo > hi` gives `hi` everywhere, as on the CPU EP), with the bounds read on the host
//! (absent bounds are the type's limits). The elementwise family hands integer Clip nodes here.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::input_dtype;
use super::layout::{dispatch_elements, element_shader, Elements};
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, host_input, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Bits and signedness of the integer types handled here.
fn int_info(dtype: DataType) -> Option<(u32, bool)> {
    Some(match dtype {
        DataType::Int8 => (8, true),
        DataType::Uint8 => (8, false),
        DataType::Int16 => (16, true),
        DataType::Uint16 => (16, false),
        DataType::Int32 => (32, true),
        DataType::Uint32 => (32, false),
        _ => return None,
    })
}

/// Whether a Clip node is an integer one these kernels take (opset 12+, bounds of its type).
pub(crate) fn supports(ctx: &NodeContext<'_>) -> bool {
    let Some(dtype) = input_dtype(ctx, 0) else { return false };
    let bounds_ok = (1..3).all(|i| ctx.node.input(i).is_none() || input_dtype(ctx, i) == Some(dtype));
    ctx.since_version >= 12 && int_info(dtype).is_some() && bounds_ok
}

/// `fetch(e)`: the clipped element, compared as `T` (`i32` or `u32`). Parameters: shift (32 -
/// bits), lo and hi as `T` bits.
fn code(signed: bool) -> String {
    let (t, extend) = if signed { ("i32", "(i32(load_x(e) << p[3]) >> p[3])") } else { ("u32", "load_x(e)") };
    format!(
        "fn fetch(e: u32) -> E {{
    let v = {extend};
    return bitcast<u32>(min(max(v, bitcast<{t}>(p[4])), bitcast<{t}>(p[5])));
}}
"
    )
}

/// Builds an integer Clip node.
pub(crate) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} has an untyped input")))?;
    let (bits, signed) = int_info(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: integer Clip on {dtype}")))?;
    let size = bits / 8;
    let key = format!("clip_int/{bits}/{}", if signed { "s" } else { "u" });
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("x", size)], &code(signed)))?;
    Ok(Box::new(ClipInt { dtype, bits, signed, pipeline, at }))
}

/// An integer Clip node.
struct ClipInt {
    dtype: DataType,
    bits: u32,
    signed: bool,
    pipeline: Arc<Pipeline>,
    at: Location,
}

impl ClipInt {
    /// Bound `i` as an i64, or `default` when omitted.
    fn bound(&self, inputs: &[Option<ValueRef<'_>>], i: usize, default: i64) -> Result<i64> {
        let at = &self.at;
        if inputs.get(i).copied().flatten().is_none() {
            return Ok(default);
        }
        let t = host_input(inputs, i, at)?;
        if t.dtype() != self.dtype || t.len() != 1 {
            return Err(Error::input(
                at,
                i,
                format!("a {} scalar", self.dtype),
                format!("{} {:?}", t.dtype(), t.shape()),
            ));
        }
        let b = t.bytes()?;
        Ok(match self.dtype {
            DataType::Int8 => b[0] as i8 as i64,
            DataType::Uint8 => b[0] as i64,
            DataType::Int16 => i16::from_le_bytes([b[0], b[1]]) as i64,
            DataType::Uint16 => u16::from_le_bytes([b[0], b[1]]) as i64,
            DataType::Int32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
            _ => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        })
    }
}

impl GpuOp for ClipInt {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        if x.dtype() != self.dtype {
            return Err(Error::input(at, 0, self.dtype.name(), x.dtype().name()));
        }
        let (lo_default, hi_default) = if self.signed {
            (-(1i64 << (self.bits - 1)), (1i64 << (self.bits - 1)) - 1)
        } else {
            (0, (1i64 << self.bits) - 1)
        };
        let lo = self.bound(inputs, 1, lo_default)?;
        let hi = self.bound(inputs, 2, hi_default)?;
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        if !y.is_empty() {
            let params = [32 - self.bits, lo as u32, hi as u32];
            dispatch_elements(
                run,
                &self.pipeline,
                Elements::new(self.bits / 8, y.len()),
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
    use onyx_core::{DataType, Tensor};

    use crate::ops::layout::tests::{check_exact, random};
    use crate::testkit::Case;

    /// A scalar of `dtype` holding `v` (truncated to the type).
    fn scalar(dtype: DataType, v: i64) -> Tensor {
        let bytes = v.to_le_bytes()[..dtype.bit_width() / 8].to_vec();
        Tensor::from_bytes(dtype, vec![], onyx_core::HostBuffer::from_vec(bytes)).unwrap()
    }

    #[test]
    fn integer_clip_matches_the_cpu() {
        let types =
            [DataType::Int8, DataType::Uint8, DataType::Int16, DataType::Uint16, DataType::Int32, DataType::Uint32];
        for (s, dtype) in types.into_iter().enumerate() {
            for shape in [&[3usize, 4, 5][..], &[7], &[0, 3], &[1]] {
                let x = random(dtype, shape, 500 + s as u64);
                for (lo, hi) in
                    [(Some(-5i64), Some(90i64)), (Some(3), None), (None, Some(7)), (None, None), (Some(9), Some(2))]
                {
                    let mut case = Case::new("Clip", vec![x.clone()]).opset(13);
                    case.inputs.push(lo.map(|v| scalar(dtype, v)));
                    case.inputs.push(hi.map(|v| scalar(dtype, v)));
                    check_exact(&case);
                }
            }
        }
    }
}
