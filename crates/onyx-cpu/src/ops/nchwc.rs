//! The blocked NCHWc layout the optimizer's `all` level moves convolution chains into
//! (`ai.onyx` ops; see `onyx_core::optimizer::nchwc`).
//!
//! A blocked tensor of logical shape `[N, C, H, W]` with block `b` has the shape
//! `[N, ceil(C/b), H, W, b]`: element `(n, c, h, w)` sits at `[n][c / b][h][w][c % b]`, so the
//! `b` channels of one pixel are one SIMD vector (16 f32 for AVX-512, 8 for AVX2). Channels past
//! `C` in the last block are padding: zero after ReorderInput, anything after an elementwise op
//! (0/0 is NaN), and never read into a real channel: NchwcConv reads only the real input
//! channels, every other kernel works lane by lane.
//!
//! - [`reorder`]: ReorderInput (NCHW → blocked) and ReorderOutput (blocked → NCHW);
//! - [`conv`]: NchwcConv (direct, pointwise, depthwise and NCHW-input convolutions, with the
//!   FusedConv epilogue);
//! - [`pool`]: NchwcMaxPool, NchwcAveragePool, NchwcGlobalAveragePool, NchwcGlobalMaxPool.

pub mod conv;
pub mod pool;
pub mod reorder;

use crate::Registry;

/// The block size the CPU EP asks the optimizer for: 16 with AVX-512F, 8 with AVX2 and FMA, none
/// otherwise or when the environment variable `ONYX_NCHWC` is `0`.
pub fn preferred_block() -> Option<usize> {
    if std::env::var("ONYX_NCHWC").is_ok_and(|v| v == "0") {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Some(16);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return Some(8);
        }
    }
    None
}

/// Registers the NCHWc kernels.
pub fn register(r: &mut Registry) {
    conv::register(r);
    pool::register(r);
    reorder::register(r);
}
