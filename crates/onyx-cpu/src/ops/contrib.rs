//! Microsoft contrib ops (domain `com.microsoft`, ONNX Runtime semantics) that the graph
//! optimizer emits: FusedConv, FusedMatMul, Gelu, BiasGelu, FastGelu and
//! SkipLayerNormalization. Each reuses the CPU EP's own conv, matmul and norm code, so a fused
//! node computes what its unfused pattern computes.

mod activation;
mod fused_conv;
mod fused_matmul;
mod gelu;
mod skip_norm;
#[cfg(test)]
mod tests;

pub(crate) use activation::Activation;
pub(crate) use gelu::{gelu, Kind as GeluKind};

use crate::Registry;

/// The contrib domain.
pub const DOMAIN: &str = "com.microsoft";

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add_in(DOMAIN, "FusedConv", fused_conv::build);
    r.add_in(DOMAIN, "FusedMatMul", fused_matmul::build);
    r.add_in(DOMAIN, "Gelu", gelu::build_gelu);
    r.add_in(DOMAIN, "BiasGelu", gelu::build_bias_gelu);
    r.add_in(DOMAIN, "FastGelu", gelu::build_fast_gelu);
    r.add_in(DOMAIN, "SkipLayerNormalization", skip_norm::build);
}
