//! Tensors made from scalars: ConstantOfShape (a fill on the GPU) and Range (computed on the
//! host, uploaded).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use super::layout::{dispatch_elements, elem_size, element_shader, fill_words, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{host_input, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("ConstantOfShape", supports_constant_of_shape, build_constant_of_shape, &[0]);
    r.add_with_host_inputs("Range", supports_range, build_range, &[0, 1, 2]);
}

/// The `value` attribute of ConstantOfShape (float 0 by default).
fn constant_value(ctx: &NodeContext<'_>) -> Result<Tensor> {
    let at = ctx.node.location();
    match ctx.node.get_tensor("value")? {
        Some(t) if t.len() == 1 => Ok(t.clone()),
        Some(t) => Err(Error::attribute(&at, "value", "a one-element tensor", format!("{}{:?}", t.dtype(), t.shape()))),
        None => Ok(Tensor::scalar(0f32)),
    }
}

fn supports_constant_of_shape(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    constant_value(ctx).is_ok_and(|t| elem_size(t.dtype()).is_some() && t.view().is_ok())
}

/// ConstantOfShape: a GPU tensor of the given shape filled with `value`.
struct ConstantOfShape {
    dtype: DataType,
    size: u32,
    fill: [u32; 2],
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_constant_of_shape(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let value = constant_value(ctx)?;
    let dtype = value.dtype();
    let at = ctx.node.location();
    let size = elem_size(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} of {dtype}")))?;
    let fill = fill_words(&value.view()?)?;
    let code = "fn fetch(e: u32) -> E { return fill(); }\n";
    let pipeline = gpu.pipeline(&format!("cast/fill/{size}"), || element_shader("", size, &[], code))?;
    Ok(Box::new(ConstantOfShape { dtype, size, fill, pipeline, at }))
}

impl GpuOp for ConstantOfShape {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let spec = host_input(inputs, 0, &self.at)?;
        if spec.dtype() != DataType::Int64 {
            return Err(Error::input(&self.at, 0, "an int64 shape", spec.dtype().name()));
        }
        let dims = spec.as_slice::<i64>()?;
        let shape: Vec<usize> = dims
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::input(&self.at, 0, "non-negative dims", format!("{dims:?}")))?;
        let y = run.alloc(self.dtype, shape)?;
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()).fill(self.fill),
            &[],
            &[y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

fn supports_range(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let t = input_dtype(ctx, 0);
    matches!(t, Some(DataType::Float | DataType::Int32 | DataType::Int64)) && (1..3).all(|i| input_dtype(ctx, i) == t)
}

/// Range: computed on the host exactly as the CPU EP does (f32 ranges in f64), then uploaded:
/// its inputs are host scalars and its output is small.
struct Range {
    at: Location,
}

fn build_range(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Range { at: ctx.node.location() }))
}

impl Range {
    /// The three scalars as f64 (float) or i64 (integers), all of `dtype`.
    fn scalars(&self, views: &[TensorView<'_>]) -> Result<(DataType, [f64; 3], [i64; 3])> {
        let dtype = views[0].dtype();
        let (mut f, mut n) = ([0f64; 3], [0i64; 3]);
        for (i, v) in views.iter().enumerate() {
            if v.dtype() != dtype || v.len() != 1 {
                return Err(Error::input(
                    &self.at,
                    i,
                    format!("a {dtype} scalar"),
                    format!("{}{:?}", v.dtype(), v.shape()),
                ));
            }
            match dtype {
                DataType::Float => f[i] = f64::from(v.as_slice::<f32>()?[0]),
                DataType::Int32 => n[i] = i64::from(v.as_slice::<i32>()?[0]),
                DataType::Int64 => n[i] = v.as_slice::<i64>()?[0],
                other => return Err(Error::input(&self.at, i, "a float, int32 or int64 scalar", other.name())),
            }
        }
        Ok((dtype, f, n))
    }

    fn floats(&self, [start, limit, delta]: [f64; 3]) -> Result<Vec<f32>> {
        if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
            return Err(Error::node(&self.at, format!("Range({start}, {limit}, {delta}) has no finite length")));
        }
        let n = ((limit - start) / delta).ceil().max(0.0);
        if n > (u32::MAX as f64) {
            return Err(Error::node(&self.at, format!("Range({start}, {limit}, {delta}) is too long")));
        }
        Ok((0..n as usize).map(|i| (start + i as f64 * delta) as f32).collect())
    }

    fn ints(&self, [start, limit, delta]: [i64; 3]) -> Result<Vec<i64>> {
        if delta == 0 {
            return Err(Error::node(&self.at, "Range delta is 0"));
        }
        let span = i128::from(limit) - i128::from(start);
        let d = i128::from(delta);
        let n = if (span > 0) == (d > 0) && span != 0 { (span + d - d.signum()) / d } else { 0 };
        let n = u32::try_from(n).map_err(|_| Error::node(&self.at, "Range is too long"))?;
        Ok((0..i64::from(n)).map(|i| start.wrapping_add(i.wrapping_mul(delta))).collect())
    }
}

impl GpuOp for Range {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let views = (0..3).map(|i| host_input(inputs, i, &self.at)).collect::<Result<Vec<_>>>()?;
        let (dtype, f, n) = self.scalars(&views)?;
        let host = match dtype {
            DataType::Float => {
                let v = self.floats(f)?;
                Tensor::from_vec(vec![v.len()], v)?
            }
            DataType::Int32 => {
                let v: Vec<i32> = self.ints(n)?.into_iter().map(|x| x as i32).collect();
                Tensor::from_vec(vec![v.len()], v)?
            }
            _ => {
                let v = self.ints(n)?;
                Tensor::from_vec(vec![v.len()], v)?
            }
        };
        Ok(vec![Value::Tensor(run.context().upload(host.view()?)?)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use super::super::layout::tests::check_exact;
    use crate::testkit::{attr, i64s, t, Case};

    #[test]
    fn constant_of_shape_fills_on_the_gpu() {
        check_exact(&Case::new("ConstantOfShape", vec![i64s(&[3, 5, 7])]).constants(&[0]));
        for value in [
            t(&[1], vec![-2.5f32]),
            t(&[1], vec![7i64 << 40]),
            t(&[1], vec![half::f16::from_f32(3.0)]),
            t(&[1], vec![9u8]),
        ] {
            let attrs = vec![attr("value", onyx_core::ir::AttrValue::Tensor(value))];
            check_exact(&Case::new("ConstantOfShape", vec![i64s(&[2, 9])]).attrs(attrs.clone()).constants(&[0]));
            check_exact(&Case::new("ConstantOfShape", vec![i64s(&[0, 3])]).attrs(attrs).constants(&[0]));
        }
        let b = Tensor::from_bools(vec![1], vec![true]).unwrap();
        let attrs = vec![attr("value", onyx_core::ir::AttrValue::Tensor(b))];
        check_exact(&Case::new("ConstantOfShape", vec![i64s(&[5, 3])]).attrs(attrs).constants(&[0]));
    }

    #[test]
    fn range_matches_the_cpu() {
        check_exact(&Case::new("Range", vec![t(&[], vec![0.5f32]), t(&[], vec![10.1f32]), t(&[], vec![0.3f32])]));
        check_exact(&Case::new("Range", vec![t(&[], vec![10i64]), t(&[], vec![-7i64]), t(&[], vec![-3i64])]));
        check_exact(&Case::new("Range", vec![t(&[], vec![1i32]), t(&[], vec![2i32]), t(&[], vec![5i32])]));
        check_exact(&Case::new("Range", vec![t(&[], vec![5i64]), t(&[], vec![2i64]), t(&[], vec![1i64])]));
    }
}
