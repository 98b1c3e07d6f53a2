//! BitCast (opset 26): the input's bits as another type of the same width, same shape. One
//! copy dispatch (a tensor cannot change its dtype in place).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, elem_size, element_shader, input_elem_size, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers BitCast.
pub(crate) fn register(r: &mut Registry) {
    r.add("BitCast", supports_bitcast, build_bitcast);
}

/// The `to` attribute as a dtype, if valid.
fn target(ctx: &NodeContext<'_>) -> Option<DataType> {
    let code = ctx.node.get_int("to").ok()??;
    i32::try_from(code).ok().and_then(DataType::from_onnx)
}

/// Movable types of equal width; not to bool (whose bytes the CPU EP checks are 0 or 1).
fn supports_bitcast(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let from = input_dtype(ctx, 0);
    match (from, target(ctx)) {
        (Some(f), Some(t)) => t != DataType::Bool && input_elem_size(ctx, 0).is_some() && elem_size(t) == elem_size(f),
        _ => false,
    }
}

/// BitCast: copies the elements' bits into a tensor of the target type.
struct BitCast {
    to: DataType,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_bitcast(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let to = target(ctx).ok_or_else(|| Error::attribute(&at, "to", "a data type the GPU moves", "another value"))?;
    let size = elem_size(to).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} to {to}")))?;
    let code = "fn fetch(e: u32) -> E { return load_x(e); }\n";
    let pipeline = gpu.pipeline(&format!("bitcast/{size}"), || element_shader("", size, &[("x", size)], code))?;
    Ok(Box::new(BitCast { to, size, pipeline, at }))
}

impl GpuOp for BitCast {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        if elem_size(x.dtype()) != Some(self.size) {
            let want = format!("a tensor of {} bits (as {})", self.to.bit_width(), self.to);
            return Err(Error::input(&self.at, 0, want, format!("a {} tensor", x.dtype())));
        }
        let y = run.alloc(self.to, x.shape().to_vec())?;
        if !y.is_empty() {
            dispatch_elements(
                run,
                &self.pipeline,
                Elements::new(self.size, y.len()),
                &[],
                &[x.buffer, y.gpu()?],
                &self.at,
            )?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::DataType;

    use super::super::layout::tests::{check_exact, random};
    use crate::testkit::{int, Case};

    #[test]
    fn bitcast_matches_the_cpu() {
        let pairs = [
            (DataType::Float, DataType::Int32),
            (DataType::Int32, DataType::Float),
            (DataType::Uint32, DataType::Int32),
            (DataType::Int64, DataType::Double),
            (DataType::Double, DataType::Uint64),
            (DataType::Uint16, DataType::Int16),
            (DataType::Float16, DataType::Uint16),
            (DataType::Int8, DataType::Uint8),
            (DataType::Bool, DataType::Uint8),
        ];
        let shapes: &[&[usize]] = &[&[], &[7], &[3, 5], &[2, 0], &[3, 37]];
        for (p, (from, to)) in pairs.into_iter().enumerate() {
            for (s, shape) in shapes.iter().enumerate() {
                let x = random(from, shape, (p * 10 + s) as u64);
                check_exact(&Case::new("BitCast", vec![x]).attrs(vec![int("to", to as i64)]).opset(26));
            }
        }
    }
}
