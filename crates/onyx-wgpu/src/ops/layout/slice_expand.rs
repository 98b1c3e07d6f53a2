//! Slice and Expand: strided gathers.

use onyx_core::ops::layout::{clamp_slice_axis as clamp_axis, AxisSlice};

use super::*;

/// Slice's starts, ends and (optional) axes given as attributes (opset 1).
type SliceAttrs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// Slice: starts/ends/axes attributes before opset 10, host inputs (with steps) from 10 on.
struct Slice {
    attrs: Option<SliceAttrs>,
    size: u32,
    pipeline: Units,
    at: Location,
}

pub(super) fn build_slice(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let attrs = if ctx.since_version < 10 {
        let get = |name: &str| -> Result<Vec<i64>> {
            node.get_ints(name)?
                .map(<[i64]>::to_vec)
                .ok_or_else(|| Error::attribute(&at, name, "a list of ints", "nothing"))
        };
        Some((get("starts")?, get("ends")?, node.get_ints("axes")?.map(<[i64]>::to_vec)))
    } else {
        None
    };
    let size = known_size(ctx, 0)?;
    Ok(Box::new(Slice { attrs, size, pipeline: strided_units(gpu, size)?, at }))
}

impl Slice {
    /// The clamped slice of every axis of `shape`.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<AxisSlice>> {
        let rank = shape.len();
        let (starts, ends, axes, steps) = match &self.attrs {
            Some((s, e, a)) => (s.clone(), e.clone(), a.clone(), None),
            None => {
                let starts =
                    host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "starts", "no input"))?;
                let ends =
                    host_ints(inputs, 2, &self.at)?.ok_or_else(|| Error::input(&self.at, 2, "ends", "no input"))?;
                (starts, ends, host_ints(inputs, 3, &self.at)?, host_ints(inputs, 4, &self.at)?)
            }
        };
        let n = starts.len();
        let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; n]);
        if ends.len() != n || axes.len() != n || steps.len() != n || n > rank {
            return Err(Error::node(
                &self.at,
                format!("starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} must have one length, at most the rank {rank}"),
            ));
        }
        let mut out: Vec<AxisSlice> = shape.iter().map(|&d| AxisSlice { start: 0, step: 1, count: d }).collect();
        let mut seen = vec![false; rank];
        for i in 0..n {
            let axis = normalize_axis(axes[i], rank, &self.at)?;
            if std::mem::replace(&mut seen[axis], true) {
                return Err(Error::node(&self.at, format!("axis {} appears twice in axes {axes:?}", axes[i])));
            }
            if steps[i] == 0 {
                return Err(Error::node(&self.at, format!("step of axis {} is 0", axes[i])));
            }
            out[axis] = clamp_axis(starts[i], ends[i], steps[i], shape[axis]);
        }
        Ok(out)
    }
}

impl GpuOp for Slice {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let slices = self.plan(inputs, x.shape())?;
        let shape: Vec<usize> = slices.iter().map(|s| s.count).collect();
        if shape == x.shape() && slices.iter().all(|s| s.step == 1) {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let in_strides = strides(x.shape());
        let view = Strided {
            base: slices.iter().zip(&in_strides).map(|(s, &st)| s.start * st as i64).sum(),
            dims: shape.clone(),
            strides: slices.iter().zip(&in_strides).map(|(s, &st)| s.step * st as i64).collect(),
        };
        let y = run.alloc(x.dtype(), shape)?;
        view.record(run, &self.pipeline, self.size, x.buffer, y.gpu()?, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// The broadcast of two shapes (numpy rules), or an error naming both.
fn broadcast_shapes(a: &[usize], b: &[usize], at: &Location) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Error::node(at, format!("shapes {a:?} and {b:?} cannot be broadcast together"))),
        })
        .collect()
}

/// Expand: a broadcasting strided gather (stride 0 along expanded dims).
struct Expand {
    size: u32,
    pipeline: Units,
    at: Location,
}

pub(super) fn build_expand(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    Ok(Box::new(Expand { size, pipeline: strided_units(gpu, size)?, at: ctx.node.location() }))
}

impl GpuOp for Expand {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let spec = host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "a shape", "nothing"))?;
        let spec: Vec<usize> = spec
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::input(&self.at, 1, "non-negative dims", format!("{spec:?}")))?;
        let shape = broadcast_shapes(x.shape(), &spec, &self.at)?;
        if shape == x.shape() {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let pad = shape.len() - x.shape().len();
        let own = strides(x.shape());
        let view = Strided {
            base: 0,
            dims: shape.clone(),
            strides: (0..shape.len())
                .map(|d| if d < pad || x.shape()[d - pad] == 1 { 0 } else { own[d - pad] as i64 })
                .collect(),
        };
        let y = run.alloc(x.dtype(), shape)?;
        view.record(run, &self.pipeline, self.size, x.buffer, y.gpu()?, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;

    #[test]
    fn slice_matches_the_cpu() {
        type Args<'a> = (&'a [i64], &'a [i64], Option<&'a [i64]>, Option<&'a [i64]>);
        let slices: &[Args<'_>] = &[
            (&[1, -1, 4], &[3, i64::MIN, 0], Some(&[0, 1, 2]), Some(&[1, -2, -3])),
            (&[0], &[-1], Some(&[-1]), None),
            (&[2], &[100], None, None),
            (&[-100, 1], &[100, 6], Some(&[2, 1]), Some(&[3, 2])),
            (&[5], &[0], Some(&[1]), Some(&[1])),
            (&[i64::MAX], &[i64::MIN], Some(&[1]), Some(&[-1])),
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[3, 6, 7], k as u64);
            for (starts, ends, axes, steps) in slices {
                let mut inputs = vec![x.clone(), i64s(starts), i64s(ends)];
                inputs.extend(axes.map(i64s));
                inputs.extend(steps.map(i64s));
                if steps.is_some() && axes.is_none() {
                    continue;
                }
                let n = inputs.len();
                check_exact(&Case::new("Slice", inputs).constants(&(1..n).collect::<Vec<_>>()));
            }
            let c = Case::new("Slice", vec![x.clone(), t(&[1], vec![1i32]), t(&[1], vec![3i32])]).constants(&[1, 2]);
            check_exact(&c);
            check_exact(&Case::new("Slice", vec![x.clone()]).opset(1).attrs(vec![
                ints("starts", &[1]),
                ints("ends", &[3]),
                ints("axes", &[2]),
            ]));
        }
    }

    #[test]
    fn expand_and_tile_match_the_cpu() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[3, 1, 5], k as u64);
            check_exact(&Case::new("Expand", vec![x.clone(), i64s(&[2, 1, 4, 1])]).constants(&[1]));
            check_exact(&Case::new("Expand", vec![x.clone(), i64s(&[3, 7, 5])]).constants(&[1]));
            check_exact(&Case::new("Expand", vec![x.clone(), i64s(&[1])]).constants(&[1]));
            let s = random(dtype, &[], k as u64 + 50);
            check_exact(&Case::new("Expand", vec![s, i64s(&[3, 3])]).constants(&[1]));
            check_exact(&Case::new("Tile", vec![x.clone(), i64s(&[2, 3, 1])]).constants(&[1]));
            check_exact(&Case::new("Tile", vec![x.clone(), i64s(&[1, 0, 2])]).constants(&[1]));
            let y = random(dtype, &[7, 3], k as u64 + 100);
            check_exact(&Case::new("Tile", vec![y, i64s(&[3, 5])]));
        }
    }
}
