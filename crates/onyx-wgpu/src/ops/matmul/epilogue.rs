//! Activations fused into the store of a product or convolution (com.microsoft FusedConv's and
//! Onyx's FusedGemm's `activation` and `activation_params`): a WGSL function `act` baked into
//! the shader.

use onyx_core::ir::Node;
use onyx_core::{Error, Result};

use crate::ops::elementwise::{expression, math_for, UNARY};

/// An activation applied to each output element as it is stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Activation {
    /// None: `v`.
    Identity,
    Relu,
    Tanh,
    Sigmoid,
    /// `v` where positive, `alpha * v` elsewhere.
    LeakyRelu(f32),
    /// `min(max(v, lo), hi)`.
    Clip(f32, f32),
    /// `max(0, min(1, alpha * v + beta))`.
    HardSigmoid(f32, f32),
    /// `0.5 * v * (1 + erf(v / sqrt(2)))`.
    Gelu,
    /// Gelu's tanh approximation.
    GeluTanh,
}

/// A float as an exact WGSL expression (any value, infinities included).
fn lit(x: f32) -> String {
    format!("bitcast<f32>({}u)", x.to_bits())
}

impl Activation {
    /// The activation a node's `activation` and `activation_params` attributes name (none when
    /// absent), or an error naming what is wrong.
    pub fn from_node(node: &Node) -> Result<Activation> {
        let at = node.location();
        let Some(name) = node.get_string("activation")? else { return Ok(Activation::Identity) };
        let params = node.get_floats("activation_params")?.map(<[f32]>::to_vec).unwrap_or_default();
        let want = |n: usize, what: &str| -> Result<()> {
            if params.len() == n {
                Ok(())
            } else {
                Err(Error::attribute(
                    &at,
                    "activation_params",
                    format!("{n} floats ({what}) for {name}"),
                    format!("{params:?}"),
                ))
            }
        };
        Ok(match name.as_str() {
            "Relu" => Activation::Relu,
            "Tanh" => Activation::Tanh,
            "Sigmoid" => Activation::Sigmoid,
            "LeakyRelu" => {
                want(1, "alpha")?;
                Activation::LeakyRelu(params[0])
            }
            "Clip" => {
                want(2, "min, max")?;
                Activation::Clip(params[0], params[1])
            }
            "HardSigmoid" => {
                want(2, "alpha, beta")?;
                Activation::HardSigmoid(params[0], params[1])
            }
            "Gelu" => Activation::Gelu,
            "GeluTanh" => Activation::GeluTanh,
            other => {
                return Err(Error::attribute(
                    &at,
                    "activation",
                    "Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, Gelu or GeluTanh",
                    format!("'{other}'"),
                ))
            }
        })
    }

    /// The WGSL function `act(v: f32) -> f32`, after the math helpers it calls.
    pub fn function(&self) -> String {
        let expr = self.wgsl();
        format!("{}fn act(v: f32) -> f32 {{ return {expr}; }}", math_for(&expr))
    }

    /// The WGSL expression of `v` (an f32).
    fn wgsl(&self) -> String {
        match *self {
            Activation::Identity => "v".into(),
            Activation::Relu => "max(v, 0.0)".into(),
            // tanh through exp of a non-positive argument (no overflow for large |v|).
            Activation::Tanh => "sign(v) * (1.0 - exp(-2.0 * abs(v))) / (1.0 + exp(-2.0 * abs(v)))".into(),
            Activation::Sigmoid => "select(exp(v) / (1.0 + exp(v)), 1.0 / (1.0 + exp(-v)), v >= 0.0)".into(),
            Activation::LeakyRelu(a) => format!("select({} * v, v, v >= 0.0)", lit(a)),
            Activation::Clip(lo, hi) => format!("min(max(v, {}), {})", lit(lo), lit(hi)),
            Activation::HardSigmoid(a, b) => format!("max(0.0, min(1.0, {} * v + {}))", lit(a), lit(b)),
            // Both in UNARY's table, so they cannot be missing.
            Activation::Gelu => expression(UNARY, "Gelu").unwrap_or("v").into(),
            Activation::GeluTanh => expression(UNARY, "GeluTanh").unwrap_or("v").into(),
        }
    }

    /// A short name for pipeline keys (parameters included: they are baked in).
    pub fn key(&self) -> String {
        match *self {
            Activation::Identity => "id".into(),
            Activation::Relu => "relu".into(),
            Activation::Tanh => "tanh".into(),
            Activation::Sigmoid => "sigmoid".into(),
            Activation::LeakyRelu(a) => format!("leaky{:x}", a.to_bits()),
            Activation::Clip(lo, hi) => format!("clip{:x}_{:x}", lo.to_bits(), hi.to_bits()),
            Activation::HardSigmoid(a, b) => format!("hsig{:x}_{:x}", a.to_bits(), b.to_bits()),
            Activation::Gelu => "gelu".into(),
            Activation::GeluTanh => "gelutanh".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{floats, string};

    fn node(attrs: Vec<onyx_core::ir::Attribute>) -> Node {
        Node { op_type: "FusedConv".into(), attributes: attrs, ..Default::default() }
    }

    #[test]
    fn activations_decode_with_their_params() {
        assert_eq!(Activation::from_node(&node(vec![])).unwrap(), Activation::Identity);
        assert_eq!(Activation::from_node(&node(vec![string("activation", "Relu")])).unwrap(), Activation::Relu);
        let clip = node(vec![string("activation", "Clip"), floats("activation_params", &[0.0, 6.0])]);
        assert_eq!(Activation::from_node(&clip).unwrap(), Activation::Clip(0.0, 6.0));
        let bad = node(vec![string("activation", "LeakyRelu")]);
        assert!(Activation::from_node(&bad).unwrap_err().to_string().contains("activation_params"));
        let unknown = node(vec![string("activation", "Swish")]);
        assert!(Activation::from_node(&unknown).unwrap_err().to_string().contains("Swish"));
    }
}
