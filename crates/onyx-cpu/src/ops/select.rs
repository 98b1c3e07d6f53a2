//! Data-dependent selection: TopK, NonZero, Compress and Unique — ops whose output shape
//! depends on the input values (or on a `k` read at run time). Every index and count is
//! checked before an element moves.

mod nonzero;
mod topk;
mod unique;

use std::cmp::Ordering;

use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("TopK", topk::build_topk);
    r.add("NonZero", nonzero::build_nonzero);
    r.add("Compress", nonzero::build_compress);
    r.add("Unique", unique::build_unique);
}

/// A total order on elements: NaN sorts above every number (as numpy sorts), equal values
/// (and two NaNs) compare equal.
#[inline]
#[allow(clippy::eq_op)]
pub(crate) fn total_cmp<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    match a.partial_cmp(b) {
        Some(o) => o,
        None => (a != a).cmp(&(b != b)),
    }
}
