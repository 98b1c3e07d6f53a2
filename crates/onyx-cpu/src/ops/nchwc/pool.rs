//! NCHWc pool kernels (being written).

use crate::Registry;

/// Registers the kernels of this file.
pub fn register(r: &mut Registry) {
    let _ = r;
}
