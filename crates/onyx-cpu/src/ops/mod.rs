//! CPU kernels, one module per operator family.

pub mod broadcast;
pub mod cast;
pub mod control_flow;
pub mod conv;
pub mod elementwise;
pub mod gather;
pub mod generate;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod shape;
pub mod softmax;
pub mod util;

use crate::Registry;

/// Registers every family's kernels.
pub fn register_all(r: &mut Registry) {
    broadcast::register(r);
    cast::register(r);
    control_flow::register(r);
    conv::register(r);
    elementwise::register(r);
    gather::register(r);
    generate::register(r);
    layout::register(r);
    matmul::register(r);
    norm::register(r);
    pool::register(r);
    reduce::register(r);
    resize::register(r);
    shape::register(r);
    softmax::register(r);
}
