//! com.microsoft FusedMatMul: `alpha * op(A) @ op(B)`, the transposes and alpha folded into
//! the product's loads and store (strides and a scale, no copies).

use std::sync::Arc;

use onyx_core::ep::NodeContext;
use onyx_core::{Error, Result};

use super::{rank_in, same_dtypes, MatMul};
use crate::capabilities::Capabilities;
use crate::context::GpuContext;
use crate::kernel::GpuOp;
use crate::ops::float_inputs;

/// Attributes other than 0 the kernel does not take.
const UNSUPPORTED: [&str; 2] = ["transBatchA", "transBatchB"];

/// Whether the node's attributes decode (transBatchA/B 0) and its inputs are float tensors.
pub(super) fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    n.inputs.len() == 2
        && n.float_or("alpha", 1.0).is_ok()
        && n.int_or("transA", 0).is_ok()
        && n.int_or("transB", 0).is_ok()
        && UNSUPPORTED.iter().all(|a| n.int_or(a, 0).is_ok_and(|v| v == 0))
        && float_inputs(ctx, gpu, 0..2)
        && same_dtypes(ctx, 2)
        && rank_in(ctx, 0, 1..=usize::MAX)
        && rank_in(ctx, 1, 1..=usize::MAX)
}

pub(super) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let n = ctx.node;
    let at = n.location();
    for name in UNSUPPORTED {
        let v = n.int_or(name, 0)?;
        if v != 0 {
            return Err(Error::attribute(&at, name, "0 (batch transposes are not supported)", v.to_string()));
        }
    }
    let trans = [n.int_or("transA", 0)? != 0, n.int_or("transB", 0)? != 0];
    Ok(Box::new(MatMul::new(ctx, gpu, n.float_or("alpha", 1.0)?, trans)?))
}

#[cfg(test)]
mod tests {
    use crate::testkit::{float, int, rand, Case};

    /// A FusedMatMul case with A of `a`, B of `b`.
    fn fused(a: &[usize], b: &[usize], trans: (i64, i64), alpha: f32, seed: u64) -> Case {
        let attrs = vec![int("transA", trans.0), int("transB", trans.1), float("alpha", alpha)];
        Case::new("FusedMatMul", vec![rand(a, -1.0, 1.0, seed), rand(b, -1.0, 1.0, seed + 1)])
            .domain("com.microsoft")
            .attrs(attrs)
    }

    #[test]
    fn fused_matmul_transposes_and_scales_like_the_cpu() {
        let (m, k, n) = (37, 53, 71);
        for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let a: &[usize] = if ta == 1 { &[k, m] } else { &[m, k] };
            let b: &[usize] = if tb == 1 { &[n, k] } else { &[k, n] };
            fused(a, b, (ta, tb), 0.125, 1).check(1e-4, 1e-4);
        }
        // Batched and broadcast, a long K (split-K), single rows and columns (GEMV).
        fused(&[2, 3, 300, 37], &[3, 71, 300], (1, 1), -2.0, 3).check(1e-4, 1e-4);
        fused(&[2, 1, 37, 900], &[1, 3, 71, 900], (0, 1), 0.5, 5).check(1e-4, 1e-4);
        fused(&[900, 1], &[900, 71], (1, 0), 1.5, 7).check(1e-4, 1e-4);
        fused(&[37, 900], &[1, 900], (0, 1), 1.5, 9).check(1e-4, 1e-4);
        // 1-D operands are never transposed.
        fused(&[53], &[71, 53], (1, 1), 2.0, 11).check(1e-4, 1e-4);
        fused(&[4, 53, 37], &[53], (1, 1), 2.0, 13).check(1e-4, 1e-4);
    }

    #[test]
    fn fused_matmul_declines_batch_transposes() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let case = fused(&[2, 3, 4], &[2, 4, 5], (0, 0), 1.0, 20);
        let case = Case { attributes: vec![int("transBatchA", 1)], ..case };
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("FusedMatMul"), "{e}");
    }
}
