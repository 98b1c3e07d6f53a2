//! The plain 2-D product `A @ op(B)` of a node that consumes it in the same kernel
//! (GemmSkipLayerNormalization): where the product splits K, its K slices are handed over
//! unsummed, and the consumer sums them as it reads them, which saves split-K's sum pass.

use super::*;

/// What [`PlainProduct::record`] recorded.
pub(crate) enum Recorded {
    /// The product, `[m, n]`.
    Whole(onyx_core::Tensor),
    /// `slices` f32 partial products of `m * n` elements each, back to back.
    Partials { part: onyx_core::Tensor, slices: usize },
}

/// `A @ B`, or `A @ B^T` with `trans_b`, in A's dtype; A and B 2-D.
pub(crate) struct PlainProduct {
    gemm: Gemm,
}

impl PlainProduct {
    /// The product of node `ctx`'s inputs 0 and 1, its pipelines started for their static
    /// shapes.
    pub fn new(ctx: &NodeContext<'_>, gpu: &GpuContext, trans_b: bool) -> Result<PlainProduct> {
        let b = if trans_b { Walk::K } else { Walk::Outer };
        let pipes = Pipelines::new(node_dtype(ctx)?, Walk::K, b, false, Activation::Identity);
        let at = ctx.node.location();
        let gemm = Gemm { pipes, alpha: 1.0, beta: 0.0, trans_a: false, trans_b, has_c: false, at };
        let product = static_shape(ctx, 0).zip(static_shape(ctx, 1)).and_then(|(a, b)| gemm.product(&a, &b).ok());
        gemm.pipes.prepare(gpu, product.as_ref())?;
        Ok(PlainProduct { gemm })
    }

    /// The product's rows and columns for operands of these shapes (checked as Gemm checks
    /// them).
    pub fn dims(&self, a: &[usize], b: &[usize]) -> Result<[usize; 2]> {
        let p = self.gemm.product(a, b)?;
        Ok([p.m, p.n])
    }

    /// Records the product of `a` and `b` (checked as Gemm checks them): its K slices where it
    /// splits K, else the product itself.
    pub fn record(&self, run: &mut GpuRun, a: GpuTensor<'_>, b: GpuTensor<'_>) -> Result<Recorded> {
        let at = &self.gemm.at;
        check_dtype(a.dtype(), b.dtype(), 1, at)?;
        storage_type(a.dtype()).map_err(|_| Error::input(at, 0, "a float or float16 tensor", a.dtype().name()))?;
        let product = self.gemm.product(a.shape(), b.shape())?;
        let y = run.alloc(a.dtype(), vec![product.m, product.n])?;
        let ops = Operands { a: a.buffer, b: b.buffer, c: None, y: y.gpu()? };
        if product.gemv_walk().is_none() && product.m * product.n > 0 {
            let tiled = product.tiled_kernel(&self.gemm.pipes, run.context(), &ops)?;
            let mut p = product.tiled_params(at)?;
            if let Some((part, slices)) = tiled.record_unsummed(run, &mut p, &ops.buffers(), product.sizes(), at)? {
                drop(ops);
                run.release_tensor(y);
                return Ok(Recorded::Partials { part, slices });
            }
        } else {
            product.record(run, &self.gemm.pipes, &ops, at)?;
        }
        Ok(Recorded::Whole(y))
    }
}
