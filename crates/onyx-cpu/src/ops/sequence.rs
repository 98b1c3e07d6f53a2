//! Sequence kernels: SequenceEmpty, SequenceConstruct, SequenceAt, SequenceInsert,
//! SequenceErase, SequenceLength ([`basic`]); SplitToSequence and ConcatFromSequence
//! ([`join`]); SequenceMap ([`map`]). Sequence elements are shared, never copied.

mod basic;
pub(crate) mod join;
mod map;
#[cfg(test)]
mod tests;

use onyx_core::ep::ValueRef;
use onyx_core::types::{TensorType, ValueType};
use onyx_core::{DataType, Error, Location, Result, Sequence, Tensor, Value};

use crate::ops::layout::elems;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("SequenceEmpty", basic::build_empty);
    r.add("SequenceConstruct", basic::build_construct);
    r.add("SequenceAt", basic::build_at);
    r.add("SequenceInsert", basic::build_insert);
    r.add("SequenceErase", basic::build_erase);
    r.add("SequenceLength", basic::build_length);
    r.add("SplitToSequence", join::build_split_to_sequence);
    r.add("ConcatFromSequence", join::build_concat_from_sequence);
    r.add("SequenceMap", map::build_sequence_map);
}

/// Input `i` as a sequence, or an error naming what was found.
pub(crate) fn seq_input<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, at: &Location) -> Result<&'r Sequence> {
    match inputs.get(i).copied().flatten() {
        Some(ValueRef::Value(Value::Sequence(s))) => Ok(s),
        Some(ValueRef::Value(v)) => Err(Error::input(at, i, "a sequence", v.describe())),
        Some(ValueRef::View(v)) => Err(Error::input(at, i, "a sequence", format!("a {} tensor", v.dtype()))),
        None => Err(Error::input(at, i, "a sequence", "no input")),
    }
}

/// The element type of a sequence of tensors of `dtype`.
pub(crate) fn tensor_type(dtype: DataType) -> ValueType {
    ValueType::Tensor(TensorType { dtype, shape: None })
}

/// The tensors of a sequence, or an error when an element is not a tensor.
pub(crate) fn tensors<'s>(s: &'s Sequence, input: usize, at: &Location) -> Result<Vec<&'s Tensor>> {
    s.items
        .iter()
        .map(|v| v.as_tensor().map_err(|_| Error::input(at, input, "a sequence of tensors", v.describe())))
        .collect()
}

/// A position input (an int32/int64 scalar or 1-element tensor) mapped into `0..=bound` when
/// `inclusive` (insertion points) or `0..bound` otherwise; negative positions count from the end.
pub(crate) fn position(
    inputs: &[Option<ValueRef<'_>>],
    i: usize,
    len: usize,
    inclusive: bool,
    at: &Location,
) -> Result<Option<usize>> {
    let Some(v) = crate::ops::util::opt_input(inputs, i, at)? else { return Ok(None) };
    let p = match elems::int_values(&v, i, &[DataType::Int32, DataType::Int64], at)?.as_slice() {
        &[p] => p,
        _ => return Err(Error::input(at, i, "a scalar position", format!("shape {:?}", v.shape()))),
    };
    let n = len as i64;
    let hi = if inclusive { n } else { n - 1 };
    if p < -n || p > hi {
        return Err(Error::input(
            at,
            i,
            format!("a position in [{}, {hi}]", -n),
            format!("position {p} (sequence of {len})"),
        ));
    }
    Ok(Some(if p < 0 { (p + n) as usize } else { p as usize }))
}
