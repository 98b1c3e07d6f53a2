//! Zero-copy shape ops: Reshape, Flatten, Squeeze, Unsqueeze and Identity return views of
//! their input.

use onyx_core::ops::layout::reshape_dims;

use super::*;

/// Reshape: a view of the input's buffer.
struct Reshape {
    allowzero: bool,
    at: Location,
}

pub(super) fn build_reshape(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let allowzero = ctx.since_version >= 14 && ctx.node.int_or("allowzero", 0)? != 0;
    Ok(Box::new(Reshape { allowzero, at: ctx.node.location() }))
}

impl GpuOp for Reshape {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let spec = host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "a shape", "nothing"))?;
        let shape = reshape_dims(x.shape(), &spec, self.allowzero, &self.at)?;
        view_as(x.tensor, shape, &self.at)
    }
}

/// Flatten: `[prod(dims[..axis]), prod(dims[axis..])]`, a view.
struct Flatten {
    axis: i64,
    at: Location,
}

pub(super) fn build_flatten(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Flatten { axis: ctx.node.int_or("axis", 1)?, at: ctx.node.location() }))
}

impl GpuOp for Flatten {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let r = x.shape().len() as i64;
        if self.axis < -r || self.axis > r {
            return Err(Error::attribute(&self.at, "axis", format!("a value in [{}, {r}]", -r), self.axis.to_string()));
        }
        let axis = if self.axis < 0 { self.axis + r } else { self.axis } as usize;
        let shape = vec![x.shape()[..axis].iter().product(), x.shape()[axis..].iter().product()];
        view_as(x.tensor, shape, &self.at)
    }
}

/// Squeeze/Unsqueeze axes: an attribute before opset 13, input 1 from then on.
struct AxesArg {
    attr: Option<Vec<i64>>,
    from_input: bool,
}

impl AxesArg {
    fn build(ctx: &NodeContext<'_>) -> Result<AxesArg> {
        let from_input = ctx.since_version >= 13;
        let attr = if from_input { None } else { ctx.node.get_ints("axes")?.map(<[i64]>::to_vec) };
        Ok(AxesArg { attr, from_input })
    }

    fn get(&self, inputs: &[Option<ValueRef<'_>>], at: &Location) -> Result<Option<Vec<i64>>> {
        if self.from_input {
            host_ints(inputs, 1, at)
        } else {
            Ok(self.attr.clone())
        }
    }
}

/// Normalizes `axes` against `rank`, rejecting repeats.
fn distinct_axes(axes: &[i64], rank: usize, at: &Location) -> Result<Vec<bool>> {
    let mut chosen = vec![false; rank];
    for &a in axes {
        let d = normalize_axis(a, rank, at)?;
        if std::mem::replace(&mut chosen[d], true) {
            return Err(Error::node(at, format!("axis {a} appears twice in axes {axes:?}")));
        }
    }
    Ok(chosen)
}

/// Squeeze (`unsqueeze == false`) or Unsqueeze: views.
struct Squeeze {
    axes: AxesArg,
    unsqueeze: bool,
    at: Location,
}

pub(super) fn build_squeeze(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Squeeze { axes: AxesArg::build(ctx)?, unsqueeze: false, at: ctx.node.location() }))
}

pub(super) fn build_unsqueeze(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let axes = AxesArg::build(ctx)?;
    if !axes.from_input && axes.attr.is_none() {
        return Err(Error::attribute(&ctx.node.location(), "axes", "a list of ints", "nothing"));
    }
    Ok(Box::new(Squeeze { axes, unsqueeze: true, at: ctx.node.location() }))
}

impl Squeeze {
    fn squeezed(&self, input: &[usize], axes: Option<Vec<i64>>) -> Result<Vec<usize>> {
        let Some(axes) = axes else { return Ok(input.iter().copied().filter(|&d| d != 1).collect()) };
        let chosen = distinct_axes(&axes, input.len(), &self.at)?;
        if let Some(d) = (0..input.len()).find(|&d| chosen[d] && input[d] != 1) {
            return Err(Error::input(&self.at, 0, format!("size 1 along squeezed axis {d}"), format!("{input:?}")));
        }
        Ok(input.iter().zip(&chosen).filter(|(_, &c)| !c).map(|(&d, _)| d).collect())
    }

    fn unsqueezed(&self, input: &[usize], axes: Option<Vec<i64>>) -> Result<Vec<usize>> {
        let axes = axes.ok_or_else(|| Error::input(&self.at, 1, "axes", "no input"))?;
        let chosen = distinct_axes(&axes, input.len() + axes.len(), &self.at)?;
        let mut dims = input.iter();
        Ok(chosen.iter().map(|&c| if c { 1 } else { dims.next().copied().unwrap_or(1) }).collect())
    }
}

impl GpuOp for Squeeze {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let axes = self.axes.get(inputs, &self.at)?;
        let shape = if self.unsqueeze { self.unsqueezed(x.shape(), axes)? } else { self.squeezed(x.shape(), axes)? };
        view_as(x.tensor, shape, &self.at)
    }
}

/// Identity: the input tensor itself.
struct Identity {
    at: Location,
}

pub(super) fn build_identity(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Identity { at: ctx.node.location() }))
}

impl GpuOp for Identity {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        Ok(vec![Value::Tensor(x.tensor.clone())])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;
    use onyx_core::DataType;

    #[test]
    fn shape_ops_are_views_with_the_cpu_shapes() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[2, 1, 3, 5], k as u64);
            check_exact(&Case::new("Reshape", vec![x.clone(), i64s(&[0, -1, 5])]).constants(&[1]));
            check_exact(&Case::new("Reshape", vec![x.clone(), i64s(&[30])]).constants(&[1]));
            check_exact(&Case::new("Flatten", vec![x.clone()]).attrs(vec![int("axis", -1)]));
            check_exact(&Case::new("Flatten", vec![x.clone()]).attrs(vec![int("axis", 0)]));
            check_exact(&Case::new("Squeeze", vec![x.clone()]));
            check_exact(&Case::new("Squeeze", vec![x.clone(), i64s(&[-3])]).constants(&[1]));
            check_exact(&Case::new("Squeeze", vec![x.clone()]).opset(11).attrs(vec![ints("axes", &[1])]));
            check_exact(&Case::new("Unsqueeze", vec![x.clone(), i64s(&[0, -1])]).constants(&[1]));
            check_exact(&Case::new("Unsqueeze", vec![x.clone()]).opset(11).attrs(vec![ints("axes", &[2])]));
            check_exact(&Case::new("Identity", vec![x.clone()]));
        }
        let e = random(DataType::Float, &[0, 3], 9);
        check_exact(&Case::new("Reshape", vec![e, i64s(&[3, -1])]).constants(&[1]));
        let Some(gpu) = provider() else { return };
        let err = Case::new("Reshape", vec![random(DataType::Float, &[2, 3], 1), i64s(&[4, -1])])
            .constants(&[1])
            .try_run_gpu(&gpu)
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 1") || err.contains("[4, -1]"), "{err}");
    }
}
