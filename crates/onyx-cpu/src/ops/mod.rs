//! CPU kernels, one module per operator family.

pub mod control_flow;
pub mod conv;
pub mod elementwise;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod shape;
pub mod util;

use crate::Registry;

/// Registers every family's kernels.
pub fn register_all(r: &mut Registry) {
    control_flow::register(r);
    conv::register(r);
    elementwise::register(r);
    matmul::register(r);
    norm::register(r);
    pool::register(r);
    reduce::register(r);
    shape::register(r);
}
