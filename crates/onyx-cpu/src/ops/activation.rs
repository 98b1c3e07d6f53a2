//! Shrink and Swish: activations that the elementwise family does not cover.
//!
//! Shrink: `x + bias` below `−lambd`, `x − bias` above `lambd`, 0 between (any numeric type;
//! integers are computed in f64 and converted back). Swish (opset 24): `x · sigmoid(alpha · x)`
//! (float types). Both compute in f64 and write the input's type.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, TensorView, Value};

use super::elementwise::num::Num;
use super::elementwise::{dispatch_int, dtype_error, FLOAT_TYPES, INT_TYPES};
use super::matmul::real::{compute_type, float_output, float_slice};
use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Shrink", build_shrink);
    r.add("Swish", build_swish);
}

/// Shrink or Swish with its attributes decoded.
struct Activation {
    kind: Kind,
    at: Location,
}

/// Which activation, with its parameters.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Shrink { lambd: f64, bias: f64 },
    Swish { alpha: f64 },
}

impl Kind {
    fn apply(self, x: f64) -> f64 {
        match self {
            Kind::Shrink { lambd, bias } if x < -lambd => x + bias,
            Kind::Shrink { lambd, bias } if x > lambd => x - bias,
            Kind::Shrink { .. } => 0.0,
            Kind::Swish { alpha } => x / (1.0 + (-alpha * x).exp()),
        }
    }
}

fn build_shrink(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let lambd = ctx.node.float_or("lambd", 0.5)? as f64;
    if lambd.is_nan() || lambd < 0.0 {
        return Err(Error::attribute(&at, "lambd", "a value >= 0", lambd.to_string()));
    }
    let bias = ctx.node.float_or("bias", 0.0)? as f64;
    Ok(Box::new(Activation { kind: Kind::Shrink { lambd, bias }, at }))
}

fn build_swish(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let alpha = ctx.node.float_or("alpha", 1.0)? as f64;
    Ok(Box::new(Activation { kind: Kind::Swish { alpha }, at: ctx.node.location() }))
}

/// Applies `kind` to every element of an integer slice through f64.
fn map_int<T: Num>(x: &[T], kind: Kind) -> Vec<T> {
    x.iter().map(|&v| T::from_f64(kind.apply(v.to_f64()))).collect()
}

impl Activation {
    fn compute(&self, x: &TensorView<'_>) -> Result<Value> {
        let shape = x.shape().to_vec();
        let kind = self.kind;
        if compute_type(x.dtype()).is_some() {
            let y: Vec<f64> = float_slice::<f64>(x)?.iter().map(|&v| kind.apply(v)).collect();
            return float_output(x.dtype(), shape, y);
        }
        let expected = match kind {
            Kind::Shrink { .. } => [FLOAT_TYPES, INT_TYPES].concat(),
            Kind::Swish { .. } => FLOAT_TYPES.to_vec(),
        };
        match kind {
            Kind::Shrink { .. } => dispatch_int!(x.dtype(), T => util::out(shape, map_int(x.as_slice::<T>()?, kind)),
                _ => Err(dtype_error(&self.at, 0, &expected, x.dtype()))),
            Kind::Swish { .. } => Err(dtype_error(&self.at, 0, &expected, x.dtype())),
        }
    }
}

impl Kernel for Activation {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        Ok(vec![self.compute(&x).map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testing::{assert_close, floats, ints, random_f32, tensor};
    use crate::ops::matmul::test_support::{build, node, run};
    use onyx_core::ir::AttrValue;
    use onyx_core::Tensor;

    fn apply(f: crate::BuildFn, op: &str, attrs: Vec<(&str, AttrValue)>, x: Tensor) -> Result<Tensor> {
        let k = build(f, &node(op, &["x"], 1, attrs), 24)?;
        run(k.as_ref(), &[Some(x)], 1)?.remove(0).into_tensor()
    }

    #[test]
    fn shrink_and_swish_match_their_formulas() {
        let mut rng = fastrand::Rng::with_seed(11);
        let x = random_f32(&mut rng, 37, -3.0, 3.0);
        let attrs = vec![("lambd", AttrValue::Float(1.25)), ("bias", AttrValue::Float(0.5))];
        let y = apply(build_shrink, "Shrink", attrs.clone(), tensor(&[37], x.clone())).unwrap();
        let want: Vec<f64> = x
            .iter()
            .map(|&v| v as f64)
            .map(|v| {
                if v < -1.25 {
                    v + 0.5
                } else if v > 1.25 {
                    v - 0.5
                } else {
                    0.0
                }
            })
            .collect();
        assert_close(&floats(&y), &want, 1e-6, 1e-7, "shrink");
        let xi: Vec<i32> = (-5..6).collect();
        let y = apply(build_shrink, "Shrink", attrs, tensor(&[11], xi)).unwrap();
        assert_eq!(ints(&y), vec![-4, -3, -2, -1, 0, 0, 0, 1, 2, 3, 4]);
        let y = apply(build_swish, "Swish", vec![("alpha", AttrValue::Float(1.5))], tensor(&[37], x.clone())).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| v as f64).map(|v| v * (1.0 / (1.0 + (-1.5 * v).exp()))).collect();
        assert_close(&floats(&y), &want, 1e-6, 1e-7, "swish");
        let h = tensor(&[2], vec![half::f16::from_f32(2.0), half::f16::from_f32(-1.0)]);
        let y = apply(build_swish, "Swish", vec![], h).unwrap();
        assert_close(&floats(&y), &[2.0 / (1.0 + (-2f64).exp()), -1.0 / (1.0 + 1f64.exp())], 1e-3, 0.0, "swish f16");
    }

    #[test]
    fn invalid_activations_are_errors() {
        assert!(apply(build_shrink, "Shrink", vec![("lambd", AttrValue::Float(-1.0))], Tensor::scalar(1f32))
            .unwrap_err()
            .to_string()
            .contains("lambd"));
        let e = apply(build_swish, "Swish", vec![], tensor(&[1], vec![1i32])).unwrap_err().to_string();
        assert!(e.contains("input 0") && e.contains("int32"), "{e}");
        let e = apply(build_shrink, "Shrink", vec![], Tensor::from_bools(vec![1], vec![true]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("bool"), "{e}");
    }
}
