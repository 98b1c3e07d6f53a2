//! SkipLayerNormalization(input, skip, gamma, beta?, bias?) -> (output, mean?, inv_std_var?,
//! input_skip_bias_sum?): s = input + skip + bias, then LayerNormalization of s over the last
//! axis (the CPU EP's own `layer_norm`). `skip` has the input's shape or broadcasts over its
//! leading dimensions; gamma, beta and bias are 1-D of the last dimension.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::matmul::real::{compute_type, float_output, float_slice, Real};
use crate::ops::norm::layer_norm;
use crate::ops::util;

/// A decoded SkipLayerNormalization node.
struct SkipLayerNorm {
    at: Location,
    epsilon: f32,
}

/// Builds a SkipLayerNormalization kernel.
pub(super) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    Ok(Box::new(SkipLayerNorm { at: node.location(), epsilon: node.float_or("epsilon", 1e-12)? }))
}

/// True when `skip` has `input`'s shape or broadcasts to it over leading dimensions only: at
/// most `input`'s rank, the same last dimension, and equal to `input`'s trailing dimensions
/// once its leading 1s are dropped.
pub(crate) fn skip_broadcasts(skip: &[usize], input: &[usize]) -> bool {
    let first = skip.iter().position(|&d| d != 1).unwrap_or(skip.len());
    !skip.is_empty() && skip.len() <= input.len() && skip.last() == input.last() && input.ends_with(&skip[first..])
}

impl SkipLayerNorm {
    /// Checks that vector input `i` has X's element type and shape `[len]`.
    fn check_vector(&self, v: &TensorView<'_>, i: usize, x: &TensorView<'_>, len: usize) -> Result<()> {
        if v.dtype() != x.dtype() || v.shape() != [len] {
            return Err(Error::input(
                &self.at,
                i,
                format!("a {}[{len}] vector (the input's last dimension)", x.dtype()),
                format!("{}{:?}", v.dtype(), v.shape()),
            ));
        }
        Ok(())
    }

    fn run_typed<T: Real>(&self, x: &TensorView<'_>, parts: &Parts<'_>, wanted: &[bool]) -> Result<Vec<Value>> {
        let shape = x.shape().to_vec();
        let hidden = *shape.last().unwrap_or(&1);
        let xs = float_slice::<T>(x)?;
        let skip = float_slice::<T>(&parts.skip)?;
        let bias = parts.bias.as_ref().map(float_slice::<T>).transpose()?;
        let mut sum = xs.into_owned();
        if !skip.is_empty() {
            sum.chunks_mut(skip.len()).for_each(|c| c.iter_mut().zip(skip.iter()).for_each(|(s, &k)| *s += k));
        }
        if let Some(b) = bias.as_deref().filter(|b| !b.is_empty()) {
            sum.chunks_mut(b.len()).for_each(|c| c.iter_mut().zip(b).for_each(|(s, &k)| *s += k));
        }
        let gamma = float_slice::<T>(&parts.gamma)?;
        let beta = parts.beta.as_ref().map(float_slice::<T>).transpose()?;
        let (y, means, invs) = layer_norm(&sum, hidden, &gamma, beta.as_deref(), T::from_f32(self.epsilon));
        let mut stat_shape = shape.clone();
        if let Some(last) = stat_shape.last_mut() {
            *last = 1;
        }
        let stat_type = if T::DTYPE == DataType::Double { DataType::Double } else { DataType::Float };
        let mut out = vec![float_output(x.dtype(), shape.clone(), y)?];
        let want = |i: usize| wanted.get(i).copied().unwrap_or(false);
        if (1..4).any(want) {
            out.push(float_output(stat_type, stat_shape.clone(), means)?);
            out.push(float_output(stat_type, stat_shape, invs)?);
        }
        if want(3) {
            out.push(float_output(x.dtype(), shape, sum)?);
        }
        Ok(out)
    }
}

/// The checked inputs besides X.
struct Parts<'r> {
    skip: TensorView<'r>,
    gamma: TensorView<'r>,
    beta: Option<TensorView<'r>>,
    bias: Option<TensorView<'r>>,
}

impl Kernel for SkipLayerNorm {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16], 0, at)?;
        let Some(&hidden) = x.shape().last() else {
            return Err(Error::input(at, 0, "a tensor of rank at least 1", "a scalar"));
        };
        let skip = util::input(inputs, 1, at)?;
        if skip.dtype() != x.dtype() || !skip_broadcasts(skip.shape(), x.shape()) {
            return Err(Error::input(
                at,
                1,
                format!("a {} skip of shape {:?} or broadcastable over its leading dims", x.dtype(), x.shape()),
                format!("{}{:?}", skip.dtype(), skip.shape()),
            ));
        }
        let gamma = util::input(inputs, 2, at)?;
        let beta = util::opt_input(inputs, 3, at)?;
        let bias = util::opt_input(inputs, 4, at)?;
        for (i, v) in [(2, Some(&gamma)), (3, beta.as_ref()), (4, bias.as_ref())] {
            if let Some(v) = v {
                self.check_vector(v, i, &x, hidden)?;
            }
        }
        let parts = Parts { skip, gamma, beta, bias };
        match compute_type(x.dtype()) {
            Some(DataType::Double) => self.run_typed::<f64>(&x, &parts, wanted),
            _ => self.run_typed::<f32>(&x, &parts, wanted),
        }
    }
}
