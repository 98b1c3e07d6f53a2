//! CPU kernels, one module per operator family.

pub mod broadcast;
pub mod cast;
pub mod control_flow;
pub mod conv;
pub mod detection;
pub mod elementwise;
pub mod gather;
pub mod generate;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod optional;
pub mod pool;
pub mod quant;
pub mod rec;
pub mod reduce;
pub mod resize;
pub mod select;
pub mod sequence;
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
    detection::register(r);
    elementwise::register(r);
    gather::register(r);
    generate::register(r);
    layout::register(r);
    matmul::register(r);
    norm::register(r);
    optional::register(r);
    pool::register(r);
    quant::register(r);
    rec::register(r);
    reduce::register(r);
    resize::register(r);
    select::register(r);
    sequence::register(r);
    shape::register(r);
    softmax::register(r);
}
