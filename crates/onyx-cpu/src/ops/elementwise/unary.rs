//! Unary kernels: math functions and activations, Clip, IsNaN/IsInf, Not and BitwiseNot.

use half::{bf16, f16};
use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::num::{Int, Num, Real};
use super::{
    bool_out, dispatch_int, dtype_error, each, map_chunks, map_float, same_dtype_error, FloatChunks, FLOAT_TYPES,
};
use crate::ops::util;
use crate::Registry;

/// Ops of [`UnaryOp`], by ONNX name.
const UNARY_OPS: &[&str] = &[
    "Abs",
    "Neg",
    "Sign",
    "Relu",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "HardSwish",
    "Mish",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "ThresholdedRelu",
    "HardSigmoid",
    "Gelu",
];

/// Registers the unary kernels.
pub(super) fn register(r: &mut Registry) {
    for &op in UNARY_OPS {
        r.add(op, build_unary);
    }
    r.add("Clip", build_clip);
    r.add("IsNaN", build_is_nan);
    r.add("IsInf", build_is_inf);
    r.add("Not", build_not);
    r.add("BitwiseNot", build_not);
}

/// A unary function applied to every element, with its attributes decoded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnaryOp {
    Abs,
    Neg,
    Sign,
    Relu,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Floor,
    Ceil,
    Round,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Erf,
    Tanh,
    Sigmoid,
    Softplus,
    Softsign,
    HardSwish,
    Mish,
    LeakyRelu { alpha: f32 },
    Elu { alpha: f32 },
    Selu { alpha: f32, gamma: f32 },
    Celu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Gelu,
    GeluTanh,
}

impl UnaryOp {
    /// Decodes the node's op type and attributes.
    fn from_node(node: &onyx_core::ir::Node) -> Result<Self> {
        use UnaryOp::*;
        let simple = [
            ("Abs", Abs),
            ("Neg", Neg),
            ("Sign", Sign),
            ("Relu", Relu),
            ("Exp", Exp),
            ("Log", Log),
            ("Sqrt", Sqrt),
            ("Reciprocal", Reciprocal),
            ("Floor", Floor),
            ("Ceil", Ceil),
            ("Round", Round),
            ("Sin", Sin),
            ("Cos", Cos),
            ("Tan", Tan),
            ("Asin", Asin),
            ("Acos", Acos),
            ("Atan", Atan),
            ("Sinh", Sinh),
            ("Cosh", Cosh),
            ("Asinh", Asinh),
            ("Acosh", Acosh),
            ("Atanh", Atanh),
            ("Erf", Erf),
            ("Tanh", Tanh),
            ("Sigmoid", Sigmoid),
            ("Softplus", Softplus),
            ("Softsign", Softsign),
            ("HardSwish", HardSwish),
            ("Mish", Mish),
        ];
        if let Some(&(_, op)) = simple.iter().find(|(name, _)| *name == node.op_type) {
            return Ok(op);
        }
        Ok(match node.op_type.as_str() {
            "LeakyRelu" => LeakyRelu { alpha: node.float_or("alpha", 0.01)? },
            "Elu" => Elu { alpha: node.float_or("alpha", 1.0)? },
            "Selu" => Selu { alpha: node.float_or("alpha", 1.673_263_2)?, gamma: node.float_or("gamma", 1.050_701)? },
            "Celu" => Celu { alpha: node.float_or("alpha", 1.0)? },
            "ThresholdedRelu" => ThresholdedRelu { alpha: node.float_or("alpha", 1.0)? },
            "HardSigmoid" => HardSigmoid { alpha: node.float_or("alpha", 0.2)?, beta: node.float_or("beta", 0.5)? },
            "Gelu" => match node.string_or("approximate", "none")?.as_str() {
                "none" => Gelu,
                "tanh" => GeluTanh,
                other => {
                    return Err(Error::attribute(
                        &node.location(),
                        "approximate",
                        "\"none\" or \"tanh\"",
                        format!("\"{other}\""),
                    ))
                }
            },
            other => return Err(Error::node(&node.location(), format!("{other} is not a unary op"))),
        })
    }

    /// True for ops defined on integer types too (Erf is, through f64, since opset 9).
    fn takes_integers(self) -> bool {
        matches!(self, UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Relu | UnaryOp::Erf)
    }
}

#[inline]
fn hard_sigmoid<T: Real>(x: T, alpha: T, beta: T) -> T {
    (alpha * x + beta).min_of(T::ONE).max_of(T::ZERO)
}

/// 1/(1 + e^−x), evaluated through e^−|x| so that neither side overflows or flushes early.
#[inline]
fn sigmoid<T: Real>(x: T) -> T {
    let e = (-x.abs()).exp();
    let r = T::ONE / (T::ONE + e);
    if x < T::ZERO {
        e * r
    } else {
        r
    }
}

#[inline]
fn softplus<T: Real>(x: T) -> T {
    // ln(1 + e^x) without overflow for large x and without losing small results.
    if x > T::ZERO {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

impl FloatChunks for UnaryOp {
    #[inline(always)]
    fn apply<T: Real>(&self, s: &[T], d: &mut [T]) {
        use UnaryOp::*;
        let half = T::from_f32(0.5);
        match *self {
            Abs => each(s, d, |x| x.abs()),
            Neg => each(s, d, |x| -x),
            Sign => each(s, d, |x| x.sign()),
            Relu => each(s, d, |x| if x < T::ZERO { T::ZERO } else { x }),
            Exp => each(s, d, |x| x.exp()),
            Log => each(s, d, |x| x.ln()),
            Sqrt => each(s, d, |x| x.sqrt()),
            Reciprocal => each(s, d, |x| T::ONE / x),
            Floor => each(s, d, |x| x.floor()),
            Ceil => each(s, d, |x| x.ceil()),
            Round => each(s, d, |x| x.round_even()),
            Sin => each(s, d, |x| x.sin()),
            Cos => each(s, d, |x| x.cos()),
            Tan => each(s, d, |x| x.tan()),
            Asin => each(s, d, |x| x.asin()),
            Acos => each(s, d, |x| x.acos()),
            Atan => each(s, d, |x| x.atan()),
            Sinh => each(s, d, |x| x.sinh()),
            Cosh => each(s, d, |x| x.cosh()),
            Asinh => each(s, d, |x| x.asinh()),
            Acosh => each(s, d, |x| x.acosh()),
            Atanh => each(s, d, |x| x.atanh()),
            Erf => each(s, d, |x| x.erf()),
            Tanh => each(s, d, |x| x.tanh()),
            Sigmoid => each(s, d, sigmoid),
            Softplus => each(s, d, softplus),
            Softsign => each(s, d, |x| x / (T::ONE + x.abs())),
            HardSwish => {
                let sixth = T::from_f64(1.0 / 6.0);
                each(s, d, |x| x * hard_sigmoid(x, sixth, half))
            }
            Mish => each(s, d, |x| x * softplus(x).tanh()),
            LeakyRelu { alpha } => {
                let a = T::from_f32(alpha);
                each(s, d, |x| if x < T::ZERO { a * x } else { x })
            }
            Elu { alpha } => {
                let a = T::from_f32(alpha);
                each(s, d, |x| if x < T::ZERO { a * x.exp_m1() } else { x })
            }
            Selu { alpha, gamma } => {
                let (a, g) = (T::from_f32(alpha), T::from_f32(gamma));
                each(s, d, |x| if x > T::ZERO { g * x } else { g * (a * x.exp() - a) })
            }
            Celu { alpha } => {
                let a = T::from_f32(alpha);
                each(s, d, |x| x.max_of(T::ZERO) + (a * (x / a).exp_m1()).min_of(T::ZERO))
            }
            ThresholdedRelu { alpha } => {
                let a = T::from_f32(alpha);
                each(s, d, |x| if x > a { x } else { T::ZERO })
            }
            HardSigmoid { alpha, beta } => {
                let (a, b) = (T::from_f32(alpha), T::from_f32(beta));
                each(s, d, |x| hard_sigmoid(x, a, b))
            }
            Gelu => {
                let r = T::from_f64(std::f64::consts::FRAC_1_SQRT_2);
                each(s, d, |x| half * x * (T::ONE + (x * r).erf()))
            }
            GeluTanh => {
                // The constants of Gelu's ONNX function body: f32 values cast to T.
                let k = T::from_f32(0.636_619_75).sqrt();
                let c = T::from_f32(0.044_715);
                each(s, d, |x| half * x * (T::ONE + (k * (x + c * x * x * x)).tanh()))
            }
        }
    }
}

/// Applies one of the integer-capable ops to integers.
fn apply_int<T: Num>(op: UnaryOp, s: &[T], d: &mut [T]) {
    match op {
        UnaryOp::Abs => each(s, d, Num::abs),
        UnaryOp::Neg => each(s, d, Num::neg),
        UnaryOp::Sign => each(s, d, Num::sign),
        UnaryOp::Relu => each(s, d, |x| if x < T::ZERO { T::ZERO } else { x }),
        _ => each(s, d, |x| T::from_f64(super::math::erf_f64(x.to_f64()))),
    }
}

/// A unary math op or activation.
struct Unary {
    op: UnaryOp,
    at: Location,
}

fn build_unary(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Unary { op: UnaryOp::from_node(ctx.node)?, at: ctx.node.location() }))
}

impl Kernel for Unary {
    fn in_place_inputs(&self) -> &[usize] {
        &[0]
    }

    fn run_donated(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        mut donated: Vec<(usize, Value)>,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let Some((i, x)) = onyx_core::ep::take_largest(&mut donated) else { return self.run(inputs, wanted) };
        let inputs = &onyx_core::ep::with_inputs(inputs, &donated);
        let x = match super::map_float_in_place(x, &self.op) {
            Ok(y) => return Ok(vec![y.map_err(|e| e.at(&self.at))?]),
            Err(x) => x,
        };
        self.run(&onyx_core::ep::with_input(inputs, i, &x), wanted)
    }

    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let y = if INT_TYPES.contains(&x.dtype()) && self.op.takes_integers() {
            let shape = x.shape().to_vec();
            dispatch_int!(x.dtype(),
                T => util::out(shape, map_chunks(x.as_slice::<T>()?, |s, d| apply_int::<T>(self.op, s, d))),
                _ => return Err(dtype_error(&self.at, 0, INT_TYPES, x.dtype())))
        } else {
            let mut expected = FLOAT_TYPES.to_vec();
            if self.op.takes_integers() {
                expected.extend(INT_TYPES);
            }
            if !FLOAT_TYPES.contains(&x.dtype()) {
                return Err(dtype_error(&self.at, 0, &expected, x.dtype()));
            }
            map_float(&x, &self.op, &self.at, 0)
        };
        Ok(vec![y.map_err(|e| e.at(&self.at))?])
    }
}

/// Every integer type (the packed 4-bit and 2-bit ones excluded).
pub(crate) const INT_TYPES: &[DataType] = &[
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];

/// Clip: bounds from attributes before opset 11, from optional scalar inputs since.
struct Clip {
    /// Attribute bounds (opset 6); `None` from opset 11 or where not given.
    attr_bounds: Option<(Option<f32>, Option<f32>)>,
    at: Location,
}

fn build_clip(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let attr_bounds =
        if ctx.since_version < 11 { Some((node.get_float("min")?, node.get_float("max")?)) } else { None };
    Ok(Box::new(Clip { attr_bounds, at: node.location() }))
}

impl Clip {
    /// The bound given as input `index` (a one-element tensor of the input's type), if any.
    fn bound_input<T: onyx_core::Element>(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        index: usize,
        dtype: DataType,
    ) -> Result<Option<T>> {
        let Some(v) = util::opt_input(inputs, index, &self.at)? else { return Ok(None) };
        if v.dtype() != dtype {
            return Err(same_dtype_error(&self.at, index, dtype, v.dtype()));
        }
        match v.as_slice::<T>()? {
            [b] => Ok(Some(*b)),
            other => Err(Error::input(
                &self.at,
                index,
                "a scalar",
                format!("{} elements of shape {:?}", other.len(), v.shape()),
            )),
        }
    }
}

/// Clamps to `[lo, hi]` (`hi` wins when `lo > hi`, as the spec says); NaN stays NaN.
fn clip_slice<T: bytemuck::Pod + PartialOrd + Send + Sync>(x: &[T], lo: Option<T>, hi: Option<T>) -> Vec<T> {
    map_chunks(x, |s, d| {
        util::simd(|| match (lo, hi) {
            (Some(l), Some(h)) => each(s, d, |v| {
                let v = if v < l { l } else { v };
                if v > h {
                    h
                } else {
                    v
                }
            }),
            (Some(l), None) => each(s, d, |v| if v < l { l } else { v }),
            (None, Some(h)) => each(s, d, |v| if v > h { h } else { v }),
            (None, None) => d.copy_from_slice(s),
        })
    })
}

impl Clip {
    /// Clip of an f32 tensor over its own elements (see [`Kernel::run_donated`]); `Err` with `x`
    /// when its buffer cannot be taken.
    fn in_place(&self, inputs: &[Option<ValueRef<'_>>], x: Value) -> std::result::Result<Result<Value>, Value> {
        if !matches!(&x, Value::Tensor(t) if t.dtype() == DataType::Float) {
            return Err(x);
        }
        let bounds = match self.attr_bounds {
            Some((lo, hi)) => Ok((lo, hi)),
            None => self
                .bound_input::<f32>(inputs, 1, DataType::Float)
                .and_then(|lo| Ok((lo, self.bound_input::<f32>(inputs, 2, DataType::Float)?))),
        };
        let Ok((lo, hi)) = bounds else { return Err(x) }; // the ordinary run reports it
        let (shape, mut v) = onyx_core::host_pool::reclaim::<f32>(x)?;
        crate::ops::broadcast::par_chunks_in_place(&mut v, |d| {
            util::simd(|| match (lo, hi) {
                (Some(l), Some(h)) => d.iter_mut().for_each(|e| {
                    let v = if *e < l { l } else { *e };
                    *e = if v > h { h } else { v };
                }),
                (Some(l), None) => d.iter_mut().for_each(|e| *e = if *e < l { l } else { *e }),
                (None, Some(h)) => d.iter_mut().for_each(|e| *e = if *e > h { h } else { *e }),
                (None, None) => {}
            })
        });
        Ok(util::out(shape, v))
    }
}

impl Kernel for Clip {
    fn in_place_inputs(&self) -> &[usize] {
        &[0]
    }

    fn run_donated(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        mut donated: Vec<(usize, Value)>,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        let Some((i, x)) = onyx_core::ep::take_largest(&mut donated) else { return self.run(inputs, wanted) };
        let inputs = &onyx_core::ep::with_inputs(inputs, &donated);
        let x = match self.in_place(inputs, x) {
            Ok(y) => return Ok(vec![y.map_err(|e| e.at(&self.at))?]),
            Err(x) => x,
        };
        self.run(&onyx_core::ep::with_input(inputs, i, &x), wanted)
    }

    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let dtype = x.dtype();
        let shape = x.shape().to_vec();
        let y = crate::dispatch_numeric!(dtype, T => {
            let (lo, hi): (Option<T>, Option<T>) = match self.attr_bounds {
                Some((lo, hi)) => (lo.map(from_attr), hi.map(from_attr)),
                None => (self.bound_input::<T>(inputs, 1, dtype)?, self.bound_input::<T>(inputs, 2, dtype)?),
            };
            util::out(shape, clip_slice(x.as_slice::<T>()?, lo, hi))
        }, _ => {
            let mut expected = FLOAT_TYPES.to_vec();
            expected.extend(INT_TYPES);
            return Err(dtype_error(&self.at, 0, &expected, dtype));
        });
        Ok(vec![y.map_err(|e| e.at(&self.at))?])
    }
}

/// An f32 attribute converted to element type `T` (floats round, integers truncate).
fn from_attr<T: FromF32>(v: f32) -> T {
    T::from_attr(v)
}

/// Conversion of f32 attribute values to every numeric element type.
trait FromF32 {
    fn from_attr(v: f32) -> Self;
}

macro_rules! from_f32_via_num {
    ($($t:ty),*) => {$(impl FromF32 for $t { fn from_attr(v: f32) -> Self { <$t as Num>::from_f64(f64::from(v)) } })*};
}
from_f32_via_num!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);
impl FromF32 for f16 {
    fn from_attr(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl FromF32 for bf16 {
    fn from_attr(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// IsNaN and IsInf (with which infinities to detect).
struct FloatTest {
    /// `None` for IsNaN; `(negative, positive)` for IsInf.
    inf: Option<(bool, bool)>,
    at: Location,
}

fn build_is_nan(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(FloatTest { inf: None, at: ctx.node.location() }))
}

fn build_is_inf(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let inf = (node.int_or("detect_negative", 1)? != 0, node.int_or("detect_positive", 1)? != 0);
    Ok(Box::new(FloatTest { inf: Some(inf), at: node.location() }))
}

impl FloatTest {
    fn test(&self, x: f64) -> bool {
        match self.inf {
            None => x.is_nan(),
            Some((neg, pos)) => x.is_infinite() && if x > 0.0 { pos } else { neg },
        }
    }

    fn run_typed<T: Copy + Sync>(
        &self,
        x: &TensorView<'_>,
        data: &[T],
        to_f64: impl Fn(T) -> f64 + Sync,
    ) -> Result<Value> {
        bool_out(x.shape().to_vec(), map_chunks(data, |s, d| each(s, d, |v| u8::from(self.test(to_f64(v))))))
    }
}

impl Kernel for FloatTest {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let y = match x.dtype() {
            DataType::Float => self.run_typed(&x, x.as_slice::<f32>()?, f64::from),
            DataType::Double => self.run_typed(&x, x.as_slice::<f64>()?, |v| v),
            DataType::Float16 => self.run_typed(&x, x.as_slice::<f16>()?, f64::from),
            DataType::BFloat16 => self.run_typed(&x, x.as_slice::<bf16>()?, f64::from),
            other => return Err(dtype_error(&self.at, 0, FLOAT_TYPES, other)),
        };
        Ok(vec![y.map_err(|e| e.at(&self.at))?])
    }
}

/// Not (bool) and BitwiseNot (integers).
struct Not {
    bitwise: bool,
    at: Location,
}

fn build_not(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Not { bitwise: ctx.node.op_type == "BitwiseNot", at: ctx.node.location() }))
}

impl Kernel for Not {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let shape = x.shape().to_vec();
        let y = if self.bitwise {
            dispatch_int!(x.dtype(),
                T => util::out(shape, map_chunks(x.as_slice::<T>()?, |s, d| each(s, d, Int::not))),
                _ => return Err(dtype_error(&self.at, 0, INT_TYPES, x.dtype())))
        } else {
            if x.dtype() != DataType::Bool {
                return Err(dtype_error(&self.at, 0, &[DataType::Bool], x.dtype()));
            }
            bool_out(shape, map_chunks(x.bytes()?, |s, d| each(s, d, |v| u8::from(v == 0))))
        };
        Ok(vec![y.map_err(|e| e.at(&self.at))?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use onyx_core::Tensor;

    type Reference = fn(f64) -> f64;

    fn softplus_ref(x: f64) -> f64 {
        (1.0 + x.exp()).ln()
    }

    /// (op, attributes, naive f64 reference, input range).
    fn float_cases() -> Vec<(&'static str, Vec<onyx_core::ir::Attribute>, Reference, f32, f32)> {
        vec![
            ("Abs", vec![], f64::abs, -5.0, 5.0),
            ("Neg", vec![], |x| -x, -5.0, 5.0),
            ("Sign", vec![], f64::signum, -5.0, 5.0),
            ("Relu", vec![], |x| x.max(0.0), -5.0, 5.0),
            ("Exp", vec![], f64::exp, -10.0, 10.0),
            ("Log", vec![], f64::ln, 0.01, 100.0),
            ("Sqrt", vec![], f64::sqrt, 0.0, 50.0),
            ("Reciprocal", vec![], |x| 1.0 / x, 0.5, 9.0),
            ("Floor", vec![], f64::floor, -9.0, 9.0),
            ("Ceil", vec![], f64::ceil, -9.0, 9.0),
            ("Round", vec![], f64::round_ties_even, -9.0, 9.0),
            ("Sin", vec![], f64::sin, -6.0, 6.0),
            ("Cos", vec![], f64::cos, -6.0, 6.0),
            ("Tan", vec![], f64::tan, -1.4, 1.4),
            ("Asin", vec![], f64::asin, -0.99, 0.99),
            ("Acos", vec![], f64::acos, -0.99, 0.99),
            ("Atan", vec![], f64::atan, -9.0, 9.0),
            ("Sinh", vec![], f64::sinh, -5.0, 5.0),
            ("Cosh", vec![], f64::cosh, -5.0, 5.0),
            ("Asinh", vec![], f64::asinh, -9.0, 9.0),
            ("Acosh", vec![], f64::acosh, 1.01, 9.0),
            ("Atanh", vec![], f64::atanh, -0.95, 0.95),
            ("Erf", vec![], erf_f64_ref, -3.0, 3.0),
            ("Tanh", vec![], f64::tanh, -6.0, 6.0),
            ("Sigmoid", vec![], |x| 1.0 / (1.0 + (-x).exp()), -12.0, 12.0),
            ("Softplus", vec![], softplus_ref, -12.0, 12.0),
            ("Softsign", vec![], |x| x / (1.0 + x.abs()), -9.0, 9.0),
            ("HardSwish", vec![], |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0), -5.0, 5.0),
            ("Mish", vec![], |x| x * softplus_ref(x).tanh(), -9.0, 9.0),
            ("LeakyRelu", vec![attr_f("alpha", 0.3)], |x| if x < 0.0 { 0.3f32 as f64 * x } else { x }, -5.0, 5.0),
            ("LeakyRelu", vec![], |x| if x < 0.0 { 0.01f32 as f64 * x } else { x }, -5.0, 5.0),
            ("Elu", vec![attr_f("alpha", 0.5)], |x| if x < 0.0 { 0.5 * (x.exp() - 1.0) } else { x }, -5.0, 5.0),
            (
                "Selu",
                vec![],
                |x| 1.050_701_022_148_132_3 * if x > 0.0 { x } else { 1.673_263_192_176_818_8 * (x.exp() - 1.0) },
                -5.0,
                5.0,
            ),
            ("Celu", vec![attr_f("alpha", 2.0)], |x| x.max(0.0) + (2.0 * ((x / 2.0).exp() - 1.0)).min(0.0), -5.0, 5.0),
            ("ThresholdedRelu", vec![attr_f("alpha", 1.5)], |x| if x > 1.5 { x } else { 0.0 }, -5.0, 5.0),
            (
                "HardSigmoid",
                vec![attr_f("alpha", 0.25), attr_f("beta", 0.375)],
                |x| (0.25 * x + 0.375).clamp(0.0, 1.0),
                -5.0,
                5.0,
            ),
            ("Gelu", vec![], |x| 0.5 * x * (1.0 + erf_f64_ref(x / 2f64.sqrt())), -3.0, 3.0),
            (
                "Gelu",
                vec![attr_s("approximate", "tanh")],
                |x| {
                    let (k, c) = ((0.636_619_75f32 as f64).sqrt(), 0.044_715f32 as f64);
                    0.5 * x * (1.0 + (k * (x + c * x * x * x)).tanh())
                },
                -6.0,
                6.0,
            ),
        ]
    }

    /// erf by plain Taylor series (cancellation costs ~e^{x²} ulp: accurate to 1e-12 below 3).
    fn erf_f64_ref(x: f64) -> f64 {
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn float_ops_match_naive_references_in_every_float_type() {
        let mut rng = fastrand::Rng::with_seed(7);
        for (op, attrs, reference, lo, hi) in float_cases() {
            for n in [37usize, 70_001] {
                let x = random_f32(&mut rng, n, lo, hi);
                let shape = [n];
                // f32 and f64 against the reference on the same values.
                let got = floats(&run(op, 22, attrs.clone(), &[&tensor(&shape, x.clone())]).unwrap());
                let want: Vec<f64> = x.iter().map(|&v| reference(v as f64)).collect();
                assert_close(&got, &want, 3e-6, 1e-6, &format!("{op} f32 n={n}"));
                let x64: Vec<f64> = x.iter().map(|&v| v as f64 * 1.000_000_1).collect();
                let got = floats(&run(op, 22, attrs.clone(), &[&tensor(&shape, x64.clone())]).unwrap());
                let want: Vec<f64> = x64.iter().map(|&v| reference(v)).collect();
                assert_close(&got, &want, 1e-11, 1e-14, &format!("{op} f64 n={n}"));
            }
            // f16 and bf16 are computed in f32 and rounded once.
            let x = random_f32(&mut rng, 53, lo, hi);
            let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
            let got = floats(&run(op, 22, attrs.clone(), &[&tensor(&[53], h.clone())]).unwrap());
            let want: Vec<f64> = h.iter().map(|v| reference(v.to_f64())).collect();
            assert_close(&got, &want, 1e-3, 1e-3, &format!("{op} f16"));
            let b: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let got = floats(&run(op, 22, attrs.clone(), &[&tensor(&[53], b.clone())]).unwrap());
            let want: Vec<f64> = b.iter().map(|v| reference(v.to_f64())).collect();
            assert_close(&got, &want, 8e-3, 8e-3, &format!("{op} bf16"));
        }
    }

    #[test]
    fn spot_values_match_numpy() {
        let x = [-3.7, -1.25, -0.5, -1e-3, 0.3, 0.5, 1.5, 2.5, 4.2, 20.0];
        // Computed with Python's math module and numpy.
        let cases: &[(&str, Vec<onyx_core::ir::Attribute>, &[f64])] = &[
            (
                "Gelu",
                vec![],
                &[
                    -0.000398859013866415,
                    -0.13206221708356913,
                    -0.15426876936299344,
                    -0.000499601057786089,
                    0.18537342665668577,
                    0.34573123063700656,
                    1.399789198096713,
                    2.4844758366855597,
                    4.199943947854133,
                    20.0,
                ],
            ),
            // (tanh: with the f32 constants of Gelu's function body, as ONNX Runtime computes it)
            (
                "Gelu",
                vec![attr_s("approximate", "tanh")],
                &[
                    -0.00027180610754204973,
                    -0.13228580269210546,
                    -0.1542859919438359,
                    -0.0004996010577944651,
                    0.18537092285132223,
                    0.3457140080561641,
                    1.3995715712204786,
                    2.4849157317882877,
                    4.199973902921961,
                    20.0,
                ],
            ),
            (
                "Softplus",
                vec![],
                &[
                    0.024422845933779157,
                    0.2519290813453729,
                    0.4740769841801067,
                    0.6926473055599401,
                    0.8543552444685272,
                    0.9740769841801067,
                    1.7014132779827524,
                    2.5788897342925496,
                    4.214884254671919,
                    20.000000002061153,
                ],
            ),
            (
                "Mish",
                vec![],
                &[
                    -0.09034656750081307,
                    -0.30841396114152775,
                    -0.22074377465173,
                    -0.0005996799840458665,
                    0.20800137234811503,
                    0.3752452113048951,
                    1.4033782663958028,
                    2.471392304557881,
                    4.198166915206327,
                    20.0,
                ],
            ),
            (
                "Selu",
                vec![],
                &[
                    -1.7146329252564503,
                    -1.2543954463378648,
                    -0.6917581878028713,
                    -0.0017572205841202171,
                    0.31521029620664415,
                    0.5253504936777402,
                    1.5760514810332207,
                    2.626752468388701,
                    4.412944146893018,
                    21.014019747109607,
                ],
            ),
            (
                "Celu",
                vec![attr_f("alpha", 2.0)],
                &[
                    -1.6855256673727448,
                    -0.9294771429620194,
                    -0.44239843385719024,
                    -0.000999750041661418,
                    0.3,
                    0.5,
                    1.5,
                    2.5,
                    4.2,
                    20.0,
                ],
            ),
            ("Round", vec![], &[-4.0, -1.0, -0.0, -0.0, 0.0, 0.0, 2.0, 2.0, 4.0, 20.0]),
            (
                "HardSwish",
                vec![],
                &[
                    -0.0,
                    -0.36458333333333326,
                    -0.20833333333333334,
                    -0.0004998333333333334,
                    0.165,
                    0.2916666666666667,
                    1.125,
                    2.291666666666667,
                    4.2,
                    20.0,
                ],
            ),
            (
                "Sigmoid",
                vec![],
                &[
                    0.024127021417669196,
                    0.22270013882530884,
                    0.3775406687981454,
                    0.4997500000208333,
                    0.574442516811659,
                    0.6224593312018546,
                    0.8175744761936437,
                    0.9241418199787566,
                    0.9852259683067269,
                    0.9999999979388463,
                ],
            ),
        ];
        for (op, attrs, want) in cases {
            let got = floats(&run(op, 22, attrs.clone(), &[&tensor(&[2, 5], x.to_vec())]).unwrap());
            assert_close(&got, want, 1e-7, 1e-12, op);
        }
    }

    #[test]
    fn special_values() {
        let x = tensor(&[6], vec![f32::NAN, -0.0, f32::INFINITY, f32::NEG_INFINITY, -100.0, 100.0]);
        let cases: &[(&str, &[f32])] = &[
            ("Relu", &[f32::NAN, -0.0, f32::INFINITY, 0.0, 0.0, 100.0]),
            ("Sigmoid", &[f32::NAN, 0.5, 1.0, 0.0, 3.8e-44, 1.0]),
            ("Softplus", &[f32::NAN, std::f32::consts::LN_2, f32::INFINITY, 0.0, 3.8e-44, 100.0]),
            ("Tanh", &[f32::NAN, -0.0, 1.0, -1.0, -1.0, 1.0]),
            ("Erf", &[f32::NAN, -0.0, 1.0, -1.0, -1.0, 1.0]),
            ("Sign", &[f32::NAN, 0.0, 1.0, -1.0, -1.0, 1.0]),
        ];
        for (op, want) in cases {
            let got = floats(&run(op, 22, vec![], &[&x]).unwrap());
            let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
            assert_close(&got, &want, 1e-6, 0.0, op);
        }
    }

    #[test]
    fn integer_ops_wrap_like_onnx_runtime() {
        let x = tensor(&[5], vec![-128i8, -5, 0, 7, 127]);
        let cases: &[(&str, &[i64])] = &[
            ("Abs", &[-128, 5, 0, 7, 127]),
            ("Neg", &[-128, 5, 0, -7, -127]),
            ("Sign", &[-1, -1, 0, 1, 1]),
            ("Relu", &[0, 0, 0, 7, 127]),
            ("BitwiseNot", &[127, 4, -1, -8, -128]),
        ];
        for (op, want) in cases {
            let y = run(op, 18, vec![], &[&x]).unwrap();
            assert_eq!(y.dtype(), DataType::Int8, "{op}");
            assert_eq!(ints(&y), want.to_vec(), "{op}");
        }
        let u = tensor(&[3], vec![0u32, 5, u32::MAX]);
        assert_eq!(ints(&run("Sign", 13, vec![], &[&u]).unwrap()), vec![0, 1, 1]);
        assert_eq!(
            ints(&run("BitwiseNot", 18, vec![], &[&u]).unwrap()),
            vec![u32::MAX as i64, (u32::MAX - 5) as i64, 0]
        );
        let e = tensor(&[3], vec![0i64, 1, 9]);
        assert_eq!(ints(&run("Erf", 9, vec![], &[&e]).unwrap()), vec![0, 0, 1]);
    }

    #[test]
    fn wrong_types_and_attributes_are_errors() {
        let i = tensor(&[2], vec![1i32, 2]);
        let err = run("Exp", 13, vec![], &[&i]).unwrap_err().to_string();
        assert!(err.contains("Exp node 'n'") && err.contains("input 0") && err.contains("int32"), "{err}");
        let f = tensor(&[2], vec![1f32, 2.0]);
        let err = run("BitwiseNot", 18, vec![], &[&f]).unwrap_err().to_string();
        assert!(err.contains("int8") && err.contains("float"), "{err}");
        assert!(run("Not", 1, vec![], &[&f]).unwrap_err().to_string().contains("bool"));
        let err = build("Gelu", 20, vec![attr_s("approximate", "fast")]).err().unwrap().to_string();
        assert!(err.contains("approximate") && err.contains("fast"), "{err}");
        let err = build("LeakyRelu", 16, vec![attr_s("alpha", "big")]).err().unwrap().to_string();
        assert!(err.contains("alpha"), "{err}");
        // Integer attributes are read as floats (exporters write both).
        let y = run("LeakyRelu", 16, vec![attr_i("alpha", 2)], &[&tensor(&[2], vec![-1.5f32, 3.0])]).unwrap();
        assert_eq!(floats(&y), vec![-3.0, 3.0]);
        assert!(run_opt("Abs", 13, vec![], &[None]).is_err());
    }

    #[test]
    fn clip_with_attributes_and_inputs() {
        let x = tensor(&[2, 3], vec![-3.5f32, -1.0, 0.25, 2.0, 7.5, f32::NAN]);
        let old = run("Clip", 6, vec![attr_f("min", -1.5), attr_f("max", 2.0)], &[&x]).unwrap();
        assert_close(&floats(&old), &[-1.5, -1.0, 0.25, 2.0, 2.0, f64::NAN], 0.0, 0.0, "Clip-6");
        let only_max = run("Clip", 6, vec![attr_f("max", 0.0)], &[&x]).unwrap();
        assert_close(&floats(&only_max), &[-3.5, -1.0, 0.0, 0.0, 0.0, f64::NAN], 0.0, 0.0, "Clip-6 max");
        let (lo, hi) = (Tensor::scalar(-1.5f32), Tensor::scalar(2.0f32));
        let new = run_opt("Clip", 13, vec![], &[Some(&x), Some(&lo), Some(&hi)]).unwrap();
        assert_close(&floats(&new[0]), &[-1.5, -1.0, 0.25, 2.0, 2.0, f64::NAN], 0.0, 0.0, "Clip-13");
        let no_min = run_opt("Clip", 13, vec![], &[Some(&x), None, Some(&hi)]).unwrap();
        assert_close(&floats(&no_min[0]), &[-3.5, -1.0, 0.25, 2.0, 2.0, f64::NAN], 0.0, 0.0, "Clip-13 no min");
        // min > max: everything becomes max.
        let swapped = run_opt("Clip", 13, vec![], &[Some(&x), Some(&hi), Some(&lo)]).unwrap();
        assert_close(&floats(&swapped[0]), &[-1.5, -1.5, -1.5, -1.5, -1.5, f64::NAN], 0.0, 0.0, "Clip-13 swapped");
        let xi = tensor(&[4], vec![-300i16, 5, 90, 1000]);
        let (li, hi16) = (Tensor::scalar(0i16), tensor(&[1], vec![100i16]));
        let yi = run_opt("Clip", 13, vec![], &[Some(&xi), Some(&li), Some(&hi16)]).unwrap();
        assert_eq!(ints(&yi[0]), vec![0, 5, 90, 100]);
        let h: Vec<half::f16> = [-3.0f32, 0.5, 4.0].iter().map(|&v| half::f16::from_f32(v)).collect();
        let (lh, hh) = (Tensor::scalar(half::f16::from_f32(-1.0)), Tensor::scalar(half::f16::from_f32(1.0)));
        let yh = run_opt("Clip", 13, vec![], &[Some(&tensor(&[3], h)), Some(&lh), Some(&hh)]).unwrap();
        assert_eq!(floats(&yh[0]), vec![-1.0, 0.5, 1.0]);
        // Bounds of another type, or not scalars, are errors naming the input.
        let err =
            run_opt("Clip", 13, vec![], &[Some(&x), Some(&Tensor::scalar(1.0f64)), None]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("double"), "{err}");
        let two = tensor(&[2], vec![0f32, 1.0]);
        let err = run_opt("Clip", 13, vec![], &[Some(&x), None, Some(&two)]).unwrap_err().to_string();
        assert!(err.contains("input 2") && err.contains("scalar"), "{err}");
    }

    #[test]
    fn nan_inf_and_not() {
        let x = tensor(&[5], vec![1.0f64, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0]);
        assert_eq!(bool_values(&run("IsNaN", 13, vec![], &[&x]).unwrap()), [false, true, false, false, false]);
        assert_eq!(bool_values(&run("IsInf", 10, vec![], &[&x]).unwrap()), [false, false, true, true, false]);
        let neg_only = vec![attr_i("detect_positive", 0)];
        assert_eq!(bool_values(&run("IsInf", 10, neg_only, &[&x]).unwrap()), [false, false, false, true, false]);
        let pos_only = vec![attr_i("detect_negative", 0)];
        let h: Vec<half::bf16> = [1.0f32, f32::INFINITY, f32::NAN].iter().map(|&v| half::bf16::from_f32(v)).collect();
        assert_eq!(bool_values(&run("IsInf", 20, pos_only, &[&tensor(&[3], h)]).unwrap()), [false, true, false]);
        let b = bools(&[2, 2], &[true, false, false, true]);
        assert_eq!(bool_values(&run("Not", 1, vec![], &[&b]).unwrap()), [false, true, true, false]);
        assert!(run("IsNaN", 13, vec![], &[&tensor(&[1], vec![1i32])]).is_err());
    }
}
