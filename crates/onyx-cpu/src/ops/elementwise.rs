//! Elementwise kernels: unary math and activations, binary arithmetic and comparisons with
//! broadcasting, variadic Sum/Mean/Max/Min, and Where.

mod math;
pub mod num;

use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    let _ = r;
}
