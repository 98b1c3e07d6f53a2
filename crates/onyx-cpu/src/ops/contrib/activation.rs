//! The activation a FusedConv applies after the convolution, or Onyx's FusedGemm after the
//! product (`activation` and `activation_params` attributes, as ONNX Runtime's fusions write
//! them; FusedGemm also takes `Gelu` and `GeluTanh`).

use onyx_core::ir::Node;
use onyx_core::{Error, Result};

use super::gelu::{gelu_f32, gelu_f64, Kind};
use crate::ops::elementwise::{exp_f32, tanh_f32};
use crate::ops::matmul::real::Real;

/// An activation with its parameters decoded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Activation {
    /// No activation.
    None,
    /// max(x, 0) (NaN stays NaN).
    Relu,
    /// tanh(x).
    Tanh,
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// x for x >= 0, alpha x otherwise.
    LeakyRelu { alpha: f32 },
    /// x clamped to [min, max].
    Clip { min: f32, max: f32 },
    /// max(0, min(1, alpha x + beta)).
    HardSigmoid { alpha: f32, beta: f32 },
    /// 0.5 x (1 + erf(x / sqrt 2)).
    Gelu,
    /// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
    GeluTanh,
}

impl Activation {
    /// Reads `activation` (absent: none) and `activation_params` from a node.
    pub fn from_node(node: &Node) -> Result<Self> {
        let at = node.location();
        let Some(name) = node.get_string("activation")? else {
            return Ok(Activation::None);
        };
        let params = node.get_floats("activation_params")?.unwrap_or_default();
        let want = |n: usize, defaults: &[f32]| -> Result<Vec<f32>> {
            match params.len() {
                0 => Ok(defaults.to_vec()),
                len if len == n => Ok(params.to_vec()),
                _ => Err(Error::attribute(
                    &at,
                    "activation_params",
                    format!("{n} value(s) for activation {name}"),
                    format!("{params:?}"),
                )),
            }
        };
        Ok(match name.as_str() {
            "Relu" => Activation::Relu,
            "Tanh" => Activation::Tanh,
            "Sigmoid" => Activation::Sigmoid,
            "LeakyRelu" => Activation::LeakyRelu { alpha: want(1, &[0.01])?[0] },
            "Clip" => {
                let p = want(2, &[f32::NEG_INFINITY, f32::INFINITY])?;
                Activation::Clip { min: p[0], max: p[1] }
            }
            "HardSigmoid" => {
                let p = want(2, &[0.2, 0.5])?;
                Activation::HardSigmoid { alpha: p[0], beta: p[1] }
            }
            "Gelu" => Activation::Gelu,
            "GeluTanh" => Activation::GeluTanh,
            other => {
                return Err(Error::attribute(
                    &at,
                    "activation",
                    "one of Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, Gelu, GeluTanh",
                    format!("'{other}'"),
                ))
            }
        })
    }

    /// Applies the activation to every element of `xs` in place, exactly as [`Activation::f32`]
    /// (f32) or [`Activation::f64`] (f64) would: the op is matched once, outside the loops, so
    /// that the piecewise-linear ones vectorize (call it inside `util::simd`).
    #[inline(always)]
    pub fn apply<T: Real>(self, xs: &mut [T]) {
        let wide = std::mem::size_of::<T>() == 8;
        let k = |v: f32| T::from_f32(v);
        match self {
            Activation::None => {}
            Activation::Relu => xs.iter_mut().for_each(|x| *x = if *x < T::ZERO { T::ZERO } else { *x }),
            Activation::LeakyRelu { alpha } => {
                let a = k(alpha);
                xs.iter_mut().for_each(|x| *x = if *x < T::ZERO { a * *x } else { *x });
            }
            Activation::Clip { min, max } => {
                let (lo, hi) = (k(min), k(max));
                xs.iter_mut().for_each(|x| {
                    let y = if *x < lo { lo } else { *x };
                    *x = if y > hi { hi } else { y };
                });
            }
            Activation::HardSigmoid { alpha, beta } => {
                let (a, b) = (k(alpha), k(beta));
                xs.iter_mut().for_each(|x| {
                    let y = a * *x + b;
                    let y = if y < T::ZERO { T::ZERO } else { y };
                    *x = if y > T::ONE { T::ONE } else { y };
                });
            }
            Activation::Tanh | Activation::Sigmoid | Activation::Gelu | Activation::GeluTanh if wide => {
                xs.iter_mut().for_each(|x| *x = T::from_f64(self.f64(x.to_f64())))
            }
            Activation::Tanh | Activation::Sigmoid | Activation::Gelu | Activation::GeluTanh => {
                xs.iter_mut().for_each(|x| *x = T::from_f32(self.f32(x.to_f32())))
            }
        }
    }

    /// The activation of one f32 value.
    #[inline]
    pub fn f32(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Activation::Tanh => tanh_f32(x),
            Activation::Sigmoid => {
                let e = exp_f32(-x.abs());
                let r = 1.0 / (1.0 + e);
                if x < 0.0 {
                    e * r
                } else {
                    r
                }
            }
            Activation::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha * x
                } else {
                    x
                }
            }
            Activation::Clip { min, max } => clip(x, min, max),
            Activation::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
            Activation::Gelu => gelu_f32(Kind::Exact, x),
            Activation::GeluTanh => gelu_f32(Kind::Tanh, x),
        }
    }

    /// The activation of one f64 value.
    #[inline]
    pub fn f64(self, x: f64) -> f64 {
        match self {
            Activation::None => x,
            Activation::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => {
                let e = (-x.abs()).exp();
                let r = 1.0 / (1.0 + e);
                if x < 0.0 {
                    e * r
                } else {
                    r
                }
            }
            Activation::LeakyRelu { alpha } => {
                if x < 0.0 {
                    f64::from(alpha) * x
                } else {
                    x
                }
            }
            Activation::Clip { min, max } => {
                let y = if x < f64::from(min) { f64::from(min) } else { x };
                if y > f64::from(max) {
                    f64::from(max)
                } else {
                    y
                }
            }
            Activation::HardSigmoid { alpha, beta } => (f64::from(alpha) * x + f64::from(beta)).clamp(0.0, 1.0),
            Activation::Gelu => gelu_f64(Kind::Exact, x),
            Activation::GeluTanh => gelu_f64(Kind::Tanh, x),
        }
    }
}

/// Clip's semantics: NaN stays NaN, min is applied before max.
#[inline]
fn clip(x: f32, min: f32, max: f32) -> f32 {
    let y = if x < min { min } else { x };
    if y > max {
        max
    } else {
        y
    }
}
