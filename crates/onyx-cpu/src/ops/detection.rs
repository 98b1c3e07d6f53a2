//! Object-detection kernels: NonMaxSuppression.

mod nms;

use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("NonMaxSuppression", nms::build_nms);
}
