//! FusedMatMul(A, B) = alpha * op(A) @ op(B), where op transposes the last two dimensions when
//! transA / transB is set (1-D operands are never transposed); batch dimensions broadcast as in
//! MatMul. The transposes are strides handed to the GEMM, never copies.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{element_count, DataType, Error, Location, Result, TensorView, Value};

use crate::ops::matmul::gemm::{gemm, MatMut, MatRef};
use crate::ops::matmul::real::{compute_type, filled, float_output, float_slice, Real};
use crate::ops::matmul::MatMulPlan;
use crate::ops::util;

/// A decoded FusedMatMul node.
struct FusedMatMul {
    at: Location,
    alpha: f32,
    trans_a: bool,
    trans_b: bool,
}

/// Builds a FusedMatMul kernel.
pub(super) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    for name in ["transBatchA", "transBatchB"] {
        let v = node.int_or(name, 0)?;
        if v != 0 {
            return Err(Error::Unsupported(format!("{at} (FusedMatMul with {name}={v}; only 0 is supported)")));
        }
    }
    let flag = |name: &str| -> Result<bool> {
        match node.int_or(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::attribute(&at, name, "0 or 1", v.to_string())),
        }
    };
    Ok(Box::new(FusedMatMul {
        alpha: node.float_or("alpha", 1.0)?,
        trans_a: flag("transA")?,
        trans_b: flag("transB")?,
        at,
    }))
}

/// The shape an operand has once `op` is applied: the last two dimensions swapped.
pub(crate) fn transposed_shape(shape: &[usize], transpose: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if transpose && s.len() >= 2 {
        let r = s.len();
        s.swap(r - 2, r - 1);
    }
    s
}

impl FusedMatMul {
    fn run_typed<T: Real>(&self, a: &TensorView<'_>, b: &TensorView<'_>) -> Result<Value> {
        let ta = self.trans_a && a.rank() >= 2;
        let tb = self.trans_b && b.rank() >= 2;
        let plan = MatMulPlan::new(&transposed_shape(a.shape(), ta), &transposed_shape(b.shape(), tb), &self.at)?;
        let (m, k, n) = (plan.m, plan.k, plan.n);
        let (av, bv) = (float_slice::<T>(a)?, float_slice::<T>(b)?);
        let mut out = filled(element_count(&plan.out_shape)?, T::ZERO)?;
        if m * n > 0 {
            let alpha = T::from_f32(self.alpha);
            for (c, &(ao, bo)) in out.chunks_mut(m * n).zip(&plan.offsets) {
                let a_data = av.get(ao..).unwrap_or_default();
                let b_data = bv.get(bo..).unwrap_or_default();
                let am = if ta { MatRef::row_major(a_data, k, m).t() } else { MatRef::row_major(a_data, m, k) };
                let bm = if tb { MatRef::row_major(b_data, n, k).t() } else { MatRef::row_major(b_data, k, n) };
                gemm(alpha, am, bm, T::ZERO, MatMut::row_major(c, m, n)).map_err(|e| e.at(&self.at))?;
            }
        }
        float_output(a.dtype(), plan.out_shape, out)
    }
}

impl Kernel for FusedMatMul {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let a = util::input(inputs, 0, at)?;
        let b = util::input(inputs, 1, at)?;
        util::expect_dtype(&a, &[DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16], 0, at)?;
        if b.dtype() != a.dtype() {
            return Err(Error::input(at, 1, format!("{} like A", a.dtype()), b.dtype().name()));
        }
        let y = match compute_type(a.dtype()) {
            Some(DataType::Double) => self.run_typed::<f64>(&a, &b)?,
            _ => self.run_typed::<f32>(&a, &b)?,
        };
        Ok(vec![y])
    }
}
