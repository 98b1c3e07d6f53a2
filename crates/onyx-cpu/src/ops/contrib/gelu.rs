//! The Gelu family of the contrib domain: Gelu (exact, through erf), BiasGelu (Gelu of A plus a
//! bias along the last axis) and FastGelu (the tanh approximation, with an optional bias).
//! Computed in f64 for double and f32 otherwise (half types rounded once).

use rayon::prelude::*;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::elementwise::{erf_f32, erf_f64, tanh_f32};
use crate::ops::matmul::real::{float_output, float_slice};
use crate::ops::util;

/// Which function a node computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// 0.5 x (1 + erf(x / sqrt 2)).
    Exact,
    /// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
    Tanh,
}

/// A Gelu-family node: the function, and which input holds the bias (if any).
struct GeluOp {
    at: Location,
    kind: Kind,
    /// Index of the bias input: required for BiasGelu, optional for FastGelu.
    bias: Option<usize>,
    bias_required: bool,
}

/// Builds a contrib Gelu kernel.
pub(super) fn build_gelu(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GeluOp { at: ctx.node.location(), kind: Kind::Exact, bias: None, bias_required: false }))
}

/// Builds a BiasGelu kernel.
pub(super) fn build_bias_gelu(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GeluOp { at: ctx.node.location(), kind: Kind::Exact, bias: Some(1), bias_required: true }))
}

/// Builds a FastGelu kernel.
pub(super) fn build_fast_gelu(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GeluOp { at: ctx.node.location(), kind: Kind::Tanh, bias: Some(1), bias_required: false }))
}

/// sqrt(2 / pi), as ONNX Runtime writes it.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh approximation.
const CUBIC: f64 = 0.044_715;

#[inline(always)]
fn gelu_f32(kind: Kind, x: f32) -> f32 {
    match kind {
        Kind::Exact => 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)),
        Kind::Tanh => 0.5 * x * (1.0 + tanh_f32(SQRT_2_OVER_PI as f32 * (x + CUBIC as f32 * x * x * x))),
    }
}

fn gelu_f64(kind: Kind, x: f64) -> f64 {
    match kind {
        Kind::Exact => 0.5 * x * (1.0 + erf_f64(x * std::f64::consts::FRAC_1_SQRT_2)),
        Kind::Tanh => 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + CUBIC * x * x * x)).tanh()),
    }
}

/// Elements per parallel chunk.
const CHUNK: usize = 1 << 14;

/// `out[i] = f(x[i] + bias[i % bias.len()])`, in parallel chunks of whole bias rows, each
/// compiled for the CPU's SIMD level (`f` must be inlinable and branch-free to vectorize).
fn apply<T: Copy + Send + Sync + std::ops::Add<Output = T>>(
    x: &[T],
    bias: Option<&[T]>,
    f: impl Fn(T) -> T + Sync + Copy,
) -> Vec<T> {
    let mut out = x.to_vec();
    let parallel = out.len() >= 2 * CHUNK;
    match bias.filter(|b| !b.is_empty()) {
        Some(b) => {
            let chunk = (CHUNK / b.len()).max(1) * b.len();
            let body = |o: &mut [T]| {
                util::simd(|| {
                    for row in o.chunks_exact_mut(b.len()) {
                        row.iter_mut().zip(b).for_each(|(o, &b)| *o = f(*o + b));
                    }
                })
            };
            if parallel {
                out.par_chunks_mut(chunk).for_each(body);
            } else {
                out.chunks_mut(chunk).for_each(body);
            }
        }
        None => {
            let body = |o: &mut [T]| util::simd(|| o.iter_mut().for_each(|o| *o = f(*o)));
            if parallel {
                out.par_chunks_mut(CHUNK).for_each(body);
            } else {
                out.chunks_mut(CHUNK).for_each(body);
            }
        }
    }
    out
}

impl GeluOp {
    /// Checks the bias: the input's type, 1-D of the input's last dimension.
    fn check_bias(&self, x: &TensorView<'_>, b: &TensorView<'_>, index: usize) -> Result<()> {
        let last = x.shape().last().copied();
        if b.dtype() != x.dtype() || b.rank() != 1 || Some(b.shape()[0]) != last {
            let want = match last {
                Some(n) => format!("a 1-D {} bias of the input's last dimension, [{n}]", x.dtype()),
                None => "an input of rank at least 1 for a bias".to_string(),
            };
            return Err(Error::input(&self.at, index, want, format!("{}{:?}", b.dtype(), b.shape())));
        }
        Ok(())
    }
}

impl Kernel for GeluOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16], 0, at)?;
        let bias = match self.bias {
            Some(i) if self.bias_required => Some((i, util::input(inputs, i, at)?)),
            Some(i) => util::opt_input(inputs, i, at)?.map(|b| (i, b)),
            None => None,
        };
        if let Some((i, b)) = &bias {
            self.check_bias(&x, b, *i)?;
        }
        let kind = self.kind;
        let shape = x.shape().to_vec();
        let y = if x.dtype() == DataType::Double {
            let b = bias.map(|(_, b)| float_slice::<f64>(&b)).transpose()?;
            float_output(x.dtype(), shape, apply(&float_slice::<f64>(&x)?, b.as_deref(), |v| gelu_f64(kind, v)))?
        } else {
            let b = bias.map(|(_, b)| float_slice::<f32>(&b)).transpose()?;
            let (xs, b) = (float_slice::<f32>(&x)?, b.as_deref());
            // One monomorphic, branch-free function per kind, so the loops vectorize.
            let y = match kind {
                Kind::Exact => apply(&xs, b, |v| gelu_f32(Kind::Exact, v)),
                Kind::Tanh => apply(&xs, b, |v| gelu_f32(Kind::Tanh, v)),
            };
            float_output(x.dtype(), shape, y)?
        };
        Ok(vec![y])
    }
}
