//! resize kernels.

use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    let _ = r;
}
