//! Slice: starts/ends/axes as attributes before opset 10, inputs (with steps) from 10 on.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

pub(crate) use onyx_core::ops::layout::{clamp_slice_axis as clamp_axis, AxisSlice};

use super::elems::{self, with_elem, Elem};
use super::index_map::gather_axes;
use crate::ops::util;

/// The slice of every axis given `starts`, `ends`, `axes` and `steps` (equal lengths, already
/// checked) on `shape`.
pub(crate) fn plan(
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
    at: &Location,
) -> Result<Vec<AxisSlice>> {
    let mut out: Vec<AxisSlice> = shape.iter().map(|&d| AxisSlice { start: 0, step: 1, count: d }).collect();
    let mut seen = vec![false; shape.len()];
    for i in 0..starts.len() {
        let axis = util::normalize_axis(axes[i], shape.len(), at)?;
        if std::mem::replace(&mut seen[axis], true) {
            return Err(Error::node(at, format!("axis {} appears twice in axes {axes:?}", axes[i])));
        }
        if steps[i] == 0 {
            return Err(Error::node(at, format!("step of axis {} is 0", axes[i])));
        }
        out[axis] = clamp_axis(starts[i], ends[i], steps[i], shape[axis]);
    }
    Ok(out)
}

/// The input index each output index reads, per axis.
pub(crate) fn maps(slices: &[AxisSlice]) -> Vec<Vec<Option<usize>>> {
    slices.iter().map(|s| (0..s.count as i64).map(|o| Some((s.start + o * s.step) as usize)).collect()).collect()
}

/// starts, ends and (optional) axes given as attributes (opset 1).
type SliceAttrs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// Slice.
pub(crate) struct Slice {
    /// Arguments from attributes (before opset 10).
    attrs: Option<SliceAttrs>,
    at: Location,
}

pub(crate) fn build_slice(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
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
    Ok(Box::new(Slice { attrs, at }))
}

impl Slice {
    /// starts, ends, axes and steps, all of one length.
    fn arguments(&self, inputs: &[Option<ValueRef<'_>>], rank: usize) -> Result<[Vec<i64>; 4]> {
        let ints = [DataType::Int32, DataType::Int64];
        let (starts, ends, axes, steps) = match &self.attrs {
            Some((s, e, a)) => (s.clone(), e.clone(), a.clone(), None),
            None => {
                let read = |i: usize| -> Result<Option<Vec<i64>>> {
                    util::opt_input(inputs, i, &self.at)?.map(|v| elems::int_values(&v, i, &ints, &self.at)).transpose()
                };
                let starts = read(1)?.ok_or_else(|| Error::input(&self.at, 1, "starts", "no input"))?;
                let ends = read(2)?.ok_or_else(|| Error::input(&self.at, 2, "ends", "no input"))?;
                (starts, ends, read(3)?, read(4)?)
            }
        };
        let n = starts.len();
        let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; n]);
        if ends.len() != n || axes.len() != n || steps.len() != n || n > rank {
            return Err(Error::node(&self.at, format!(
                "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} must have one length, at most the rank {rank}"
            )));
        }
        Ok([starts, ends, axes, steps])
    }
}

impl Kernel for Slice {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let [starts, ends, axes, steps] = self.arguments(inputs, x.rank())?;
        let slices = plan(x.shape(), &starts, &ends, &axes, &steps, &self.at)?;
        let shape: Vec<usize> = slices.iter().map(|s| s.count).collect();
        if shape == x.shape() && slices.iter().all(|s| s.step == 1) {
            return Ok(vec![elems::input_ref(inputs, 0, &self.at)?.to_value()]);
        }
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let out = gather_axes(&data, x.shape(), &maps(&slices), &T::default(), &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    #[test]
    fn clamping_follows_the_spec() {
        // (start, end, step, dim) -> (start, count), values from Python's range(*slice(...).indices(dim))
        let cases = [
            (0, 3, 1, 5, 0, 3),
            (-2, i64::MAX, 1, 5, 3, 2),
            (1, 1000, 2, 7, 1, 3),
            (i64::MAX, i64::MIN, -1, 6, 5, 6),
            (-1, -7, -2, 6, 5, 3),
            (4, 1, 1, 6, 4, 0),
            (10, 2, -3, 6, 5, 1),
            (0, 5, 1, 0, 0, 0),
            (-100, 100, 3, 10, 0, 4),
        ];
        for (s, e, st, dim, want_start, want_count) in cases {
            let got = clamp_axis(s, e, st, dim);
            assert_eq!((got.start, got.count), (want_start, want_count), "{s}:{e}:{st} of {dim}");
        }
    }

    #[test]
    fn slices_like_numpy() {
        let data: Vec<f32> = rand_f32(3 * 4 * 5, 7);
        let x = t(&[3, 4, 5], data.clone());
        // x[1:3, ::-2, 4:0:-3]
        let y = run1(
            "Slice",
            13,
            vec![],
            &[
                Some(x.clone()),
                Some(i64s(&[1, -1, 4])),
                Some(i64s(&[3, i64::MIN, 0])),
                Some(i64s(&[0, 1, 2])),
                Some(i64s(&[1, -2, -3])),
            ],
        )
        .unwrap();
        let mut want = Vec::new();
        for a in 1..3 {
            for b in [3, 1] {
                for c in [4, 1] {
                    want.push(data[a * 20 + b * 5 + c]);
                }
            }
        }
        assert_eq!(f32s(&y), (vec![2, 2, 2], want));
        // opset 1: attributes; x[:, 1:3] via axes [-2]... axes negative from opset 11 only, positive here
        let y =
            run1("Slice", 1, vec![ints("starts", &[1]), ints("ends", &[3]), ints("axes", &[1])], &[Some(x.clone())])
                .unwrap();
        assert_eq!(y.shape(), &[3, 2, 5]);
        assert_eq!(f32s(&y).1[..5], data[5..10]);
        // int32 starts/ends, no axes: leading axes
        let y = run1("Slice", 10, vec![], &[Some(x.clone()), Some(t(&[1], vec![2i32])), Some(t(&[1], vec![3i32]))])
            .unwrap();
        assert_eq!(f32s(&y), (vec![1, 4, 5], data[40..].to_vec()));
        let s = strs(&[4], &["a", "b", "c", "d"]);
        let y = run1("Slice", 13, vec![], &[Some(s), Some(i64s(&[-1])), Some(i64s(&[-5])), None, Some(i64s(&[-1]))])
            .unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["d", "c", "b", "a"]);
    }

    #[test]
    fn slice_errors() {
        let x = t(&[3, 4], vec![1f32; 12]);
        let run = |inputs: &[Option<onyx_core::Tensor>]| run1("Slice", 13, vec![], inputs).unwrap_err().to_string();
        let err = run(&[Some(x.clone()), Some(i64s(&[0])), Some(i64s(&[1])), Some(i64s(&[0])), Some(i64s(&[0]))]);
        assert!(err.contains("step"), "{err}");
        let err = run(&[Some(x.clone()), Some(i64s(&[0, 0])), Some(i64s(&[1, 1])), Some(i64s(&[1, -1]))]);
        assert!(err.contains("twice"), "{err}");
        let err = run(&[Some(x.clone()), Some(i64s(&[0])), Some(i64s(&[1])), Some(i64s(&[2]))]);
        assert!(err.contains("axis 2"), "{err}");
        let err = run(&[Some(x.clone()), Some(i64s(&[0, 1])), Some(i64s(&[1]))]);
        assert!(err.contains("one length"), "{err}");
        let err = run(&[Some(x.clone()), Some(t(&[1], vec![0f32])), Some(i64s(&[1]))]);
        assert!(err.contains("input 1") && err.contains("float"), "{err}");
        let err = run(&[Some(x)]);
        assert!(err.contains("input 1"), "{err}");
    }
}
