//! The Gelu family of the contrib domain: Gelu (exact, through erf), BiasGelu (Gelu of A plus a
//! bias along the last axis) and FastGelu (the tanh approximation, with an optional bias).
//! Computed in f64 for double and f32 otherwise (half types rounded once).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::elementwise::{erf_f32, erf_f64, tanh_f32};
use crate::ops::matmul::real::{float_output, float_slice};
use crate::ops::util;

/// Which function a node computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
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
pub(super) fn gelu_f32(kind: Kind, x: f32) -> f32 {
    match kind {
        Kind::Exact => 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)),
        Kind::Tanh => 0.5 * x * (1.0 + tanh_f32(SQRT_2_OVER_PI as f32 * (x + CUBIC as f32 * x * x * x))),
    }
}

pub(super) fn gelu_f64(kind: Kind, x: f64) -> f64 {
    match kind {
        Kind::Exact => 0.5 * x * (1.0 + erf_f64(x * std::f64::consts::FRAC_1_SQRT_2)),
        Kind::Tanh => 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + CUBIC * x * x * x)).tanh()),
    }
}

/// Most elements per parallel chunk.
const CHUNK: usize = 1 << 14;

/// Fewest elements per parallel chunk (smaller chunks when that gives every thread several).
const MIN_CHUNK: usize = 1 << 11;

/// One chunk of [`apply`]: `out = f(x + bias)` row by row (or `f(x)` without a bias), run
/// through [`util::simd_body`] so that the whole body, `f` included, is compiled for the CPU's
/// SIMD level (a plain closure that large stays a baseline function and runs scalar).
struct Chunk<'a, T, F> {
    x: &'a [T],
    out: &'a mut [T],
    bias: Option<&'a [T]>,
    f: F,
}

impl<T: Copy + std::ops::Add<Output = T>, F: Unary<T>> util::SimdBody for Chunk<'_, T, F> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let f = self.f;
        // `for` loops, not `for_each`: the adapter's `fold` may stay an out-of-line baseline
        // function.
        match self.bias {
            Some(b) => {
                for (row, x) in self.out.chunks_exact_mut(b.len()).zip(self.x.chunks_exact(b.len())) {
                    for ((o, &x), &b) in row.iter_mut().zip(x).zip(b) {
                        *o = f.apply(x + b);
                    }
                }
            }
            None => {
                for (o, &x) in self.out.iter_mut().zip(self.x) {
                    *o = f.apply(x);
                }
            }
        }
    }
}

/// A scalar function for [`apply`], whose `apply` is `#[inline(always)]` (a closure's body may
/// stay a baseline function that the SIMD-compiled loop calls per element).
trait Unary<T>: Copy + Sync {
    /// f(x).
    fn apply(self, x: T) -> T;
}

/// Exact Gelu in f32.
#[derive(Clone, Copy)]
struct ExactF32;

impl Unary<f32> for ExactF32 {
    #[inline(always)]
    fn apply(self, x: f32) -> f32 {
        gelu_f32(Kind::Exact, x)
    }
}

/// Tanh-approximated Gelu in f32.
#[derive(Clone, Copy)]
struct TanhF32;

impl Unary<f32> for TanhF32 {
    #[inline(always)]
    fn apply(self, x: f32) -> f32 {
        gelu_f32(Kind::Tanh, x)
    }
}

/// Either Gelu in f64.
#[derive(Clone, Copy)]
struct F64(Kind);

impl Unary<f64> for F64 {
    #[inline(always)]
    fn apply(self, x: f64) -> f64 {
        gelu_f64(self.0, x)
    }
}

/// `out[i] = f(x[i] + bias[i % bias.len()])`, in parallel chunks of whole bias rows, each
/// compiled for the CPU's SIMD level (`f` must be `#[inline(always)]` and branch-free).
fn apply<T: bytemuck::Pod + Send + Sync + std::ops::Add<Output = T>>(
    x: &[T],
    bias: Option<&[T]>,
    f: impl Unary<T>,
) -> Vec<T> {
    let mut out = onyx_core::host_pool::take::<T>(x.len());
    let bias = bias.filter(|b| !b.is_empty());
    let target = (x.len() / (4 * rayon::current_num_threads())).clamp(MIN_CHUNK, CHUNK);
    let chunk = bias.map_or(target, |b| (target / b.len()).max(1) * b.len());
    let body = |(out, x): (&mut [T], &[T])| util::simd_body(Chunk { x, out, bias, f });
    if out.len() >= 2 * CHUNK {
        crate::parallel::for_each_chunk_pair(x, chunk, &mut out, chunk, &|_, x, out| body((out, x)));
    } else {
        out.chunks_mut(chunk).zip(x.chunks(chunk)).for_each(body);
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
        Ok(vec![gelu(&x, bias.map(|(_, b)| b).as_ref(), self.kind)?])
    }
}

/// Gelu of `x` (plus `bias` along the last axis), in x's float dtype: parallel chunks, each
/// compiled for the CPU's SIMD level. FusedGemm's Gelu activations run it too.
pub(crate) fn gelu(x: &TensorView<'_>, bias: Option<&TensorView<'_>>, kind: Kind) -> Result<Value> {
    let shape = x.shape().to_vec();
    if x.dtype() == DataType::Double {
        let b = bias.map(float_slice::<f64>).transpose()?;
        return float_output(x.dtype(), shape, apply(&float_slice::<f64>(x)?, b.as_deref(), F64(kind)));
    }
    let b = bias.map(float_slice::<f32>).transpose()?;
    let (xs, b) = (float_slice::<f32>(x)?, b.as_deref());
    // One monomorphic, branch-free function per kind, so the loops vectorize.
    let y = match kind {
        Kind::Exact => apply(&xs, b, ExactF32),
        Kind::Tanh => apply(&xs, b, TanhF32),
    };
    float_output(x.dtype(), shape, y)
}
