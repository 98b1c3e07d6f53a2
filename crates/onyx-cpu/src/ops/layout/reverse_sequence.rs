//! ReverseSequence: reverses the first `sequence_lens[b]` steps of every batch entry along the
//! time axis.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::elems::{self, with_elem, Elem};
use crate::ops::util;

struct ReverseSequence {
    batch_axis: i64,
    time_axis: i64,
    at: Location,
}

pub(super) fn build_reverse_sequence(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let (batch_axis, time_axis) = (node.int_or("batch_axis", 1)?, node.int_or("time_axis", 0)?);
    for (name, v) in [("batch_axis", batch_axis), ("time_axis", time_axis)] {
        if !(0..=1).contains(&v) {
            return Err(Error::attribute(&at, name, "0 or 1", v.to_string()));
        }
    }
    if batch_axis == time_axis {
        return Err(Error::attribute(&at, "time_axis", "an axis other than batch_axis", time_axis.to_string()));
    }
    Ok(Box::new(ReverseSequence { batch_axis, time_axis, at }))
}

/// `data` with the first `lens[b]` steps along the time axis reversed for every batch entry
/// `b` (`lens` already checked against the time dim).
pub(crate) fn reverse_sequence<T: Elem>(
    data: &[T],
    shape: &[usize],
    batch: usize,
    time: usize,
    lens: &[usize],
) -> Vec<T> {
    let strides = util::strides(shape);
    let (sb, st, nb, nt) = (strides[batch], strides[time], shape[batch], shape[time]);
    let mut out = data.to_vec();
    for (i, o) in out.iter_mut().enumerate() {
        let (b, t) = ((i / sb) % nb, (i / st) % nt);
        let len = lens[b];
        if t < len {
            *o = data[i + (len - 1 - t) * st - t * st].clone();
        }
    }
    out
}

impl Kernel for ReverseSequence {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let lv = util::input(inputs, 1, &self.at)?;
        if x.rank() < 2 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 2 or more", format!("shape {:?}", x.shape())));
        }
        let (batch, time) = (self.batch_axis as usize, self.time_axis as usize);
        let (nb, nt) = (x.shape()[batch], x.shape()[time]);
        let lens = elems::int_values(&lv, 1, &[DataType::Int64], &self.at)?;
        if lv.rank() != 1 || lens.len() != nb {
            return Err(Error::input(
                &self.at,
                1,
                format!("{nb} sequence lengths (the batch dim)"),
                format!("shape {:?}", lv.shape()),
            ));
        }
        let lens = lens
            .iter()
            .map(|&l| {
                usize::try_from(l).ok().filter(|&l| l <= nt).ok_or_else(|| {
                    Error::input(&self.at, 1, format!("sequence lengths in [0, {nt}]"), format!("length {l}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        with_elem!(x.dtype(), &self.at, T => {
            let out = reverse_sequence(&T::read(&x)?, x.shape(), batch, time, &lens);
            Ok(vec![elems::value(x.dtype(), x.shape().to_vec(), out)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::layout::testkit::*;

    #[test]
    fn matches_the_reference() {
        // The ONNX spec's two examples.
        let x = t(&[4, 4], (0..16).map(|v| v as f32).collect());
        let y = run1(
            "ReverseSequence",
            10,
            vec![int("time_axis", 0), int("batch_axis", 1)],
            &[Some(x.clone()), Some(i64s(&[4, 3, 2, 1]))],
        )
        .unwrap();
        assert_eq!(f32s(&y).1, vec![12., 9., 6., 3., 8., 5., 2., 7., 4., 1., 10., 11., 0., 13., 14., 15.]);
        let y = run1(
            "ReverseSequence",
            10,
            vec![int("time_axis", 1), int("batch_axis", 0)],
            &[Some(x), Some(i64s(&[1, 2, 3, 4]))],
        )
        .unwrap();
        assert_eq!(f32s(&y).1, vec![0., 1., 2., 3., 5., 4., 6., 7., 10., 9., 8., 11., 15., 14., 13., 12.]);
        // Rank 3 with strings: [time=3, batch=2, 2].
        let s = strs(&[3, 2, 2], &["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]);
        let y = run1("ReverseSequence", 10, vec![], &[Some(s), Some(i64s(&[3, 0]))]).unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["i", "j", "c", "d", "e", "f", "g", "h", "a", "b", "k", "l"]);
    }

    #[test]
    fn invalid_lengths_and_attributes_are_errors() {
        let x = t(&[3, 2], rand_f32(6, 2));
        let err = run1("ReverseSequence", 10, vec![], &[Some(x.clone()), Some(i64s(&[1, 4]))]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("length 4"), "{err}");
        let err =
            run1("ReverseSequence", 10, vec![], &[Some(x.clone()), Some(i64s(&[-1, 0]))]).unwrap_err().to_string();
        assert!(err.contains("length -1"), "{err}");
        let err = run1("ReverseSequence", 10, vec![], &[Some(x.clone()), Some(i64s(&[1]))]).unwrap_err().to_string();
        assert!(err.contains("2 sequence lengths"), "{err}");
        let err = run1("ReverseSequence", 10, vec![int("batch_axis", 0)], &[Some(x.clone()), Some(i64s(&[1, 1]))])
            .unwrap_err();
        assert!(err.to_string().contains("time_axis"), "{err}");
        let err = run1("ReverseSequence", 10, vec![int("batch_axis", 2)], &[Some(x), Some(i64s(&[1, 1]))]).unwrap_err();
        assert!(err.to_string().contains("batch_axis"), "{err}");
    }
}
