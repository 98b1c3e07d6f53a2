//! ConvInteger, QLinearMatMul and QLinearConv: integer products of zero-point-shifted 8-bit
//! operands (exact in i32 or f64), requantized as the ONNX reference does.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::{int_range, wide_values};
use crate::ops::conv::WideConv;
use crate::ops::elementwise::{widen, FLOAT_TYPES};
use crate::ops::matmul::{matmul_int, subtract_zero_point, widen_8bit, MatMulPlan};
use crate::ops::util;

/// The 8-bit types these ops take.
const INT8S: &[DataType] = &[DataType::Int8, DataType::Uint8];

/// An optional zero point of input `i`: its values widened, checked to be `dtype` with
/// `count` values (or one).
fn zero_points(
    inputs: &[Option<ValueRef<'_>>],
    i: usize,
    dtype: DataType,
    counts: &[usize],
    at: &Location,
) -> Result<Option<Vec<f64>>> {
    let Some(z) = util::opt_input(inputs, i, at)? else { return Ok(None) };
    if z.dtype() != dtype {
        return Err(Error::input(at, i, format!("a {dtype} zero point"), z.dtype().name()));
    }
    if z.len() != 1 && !counts.contains(&z.len()) {
        return Err(Error::input(at, i, format!("1 or {counts:?} zero points"), format!("shape {:?}", z.shape())));
    }
    wide_values(&z, i, at).map(Some)
}

/// Input `i` as f64 values of an int8/uint8 tensor, with its zero point (per output channel
/// when `per_channel` is set: `[channels, ...]` data) subtracted.
fn shifted(v: &TensorView<'_>, zp: Option<&[f64]>, per_channel: bool) -> Result<Vec<f64>> {
    let xs: Vec<f64> = util::to_i64(v)?.into_iter().map(|x| x as f64).collect();
    Ok(match zp {
        None => xs,
        Some([z]) => xs.into_iter().map(|x| x - z).collect(),
        Some(z) => {
            let per = if per_channel { xs.len() / z.len().max(1) } else { 1 };
            xs.into_iter().enumerate().map(|(i, x)| x - z[(i / per.max(1)) % z.len()]).collect()
        }
    })
}

/// ConvInteger: `conv(x - x_zero_point, w - w_zero_point)` in int32.
struct ConvInteger {
    conv: WideConv,
    at: Location,
}

pub(super) fn build_conv_integer(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(ConvInteger { conv: WideConv::from_node(ctx.node)?, at: ctx.node.location() }))
}

impl Kernel for ConvInteger {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (x, w) = (util::input(inputs, 0, at)?, util::input(inputs, 1, at)?);
        util::expect_dtype(&x, INT8S, 0, at)?;
        util::expect_dtype(&w, INT8S, 1, at)?;
        let m = w.shape().first().copied().unwrap_or(0);
        let xz = zero_points(inputs, 2, x.dtype(), &[], at)?;
        let wz = zero_points(inputs, 3, w.dtype(), &[m], at)?;
        let (xs, ws) = (shifted(&x, xz.as_deref(), false)?, shifted(&w, wz.as_deref(), true)?);
        let (shape, y) = self.conv.run(&xs, x.shape(), &ws, w.shape(), None)?;
        Ok(vec![util::out(shape, y.into_iter().map(|v| v as i32).collect::<Vec<i32>>())?])
    }
}

/// A scale input: float values, one or `counts` of them.
fn scales(inputs: &[Option<ValueRef<'_>>], i: usize, counts: &[usize], at: &Location) -> Result<Vec<f32>> {
    let s = util::input(inputs, i, at)?;
    util::expect_dtype(&s, FLOAT_TYPES, i, at)?;
    if s.len() != 1 && !counts.contains(&s.len()) {
        return Err(Error::input(at, i, format!("1 or {counts:?} scales"), format!("shape {:?}", s.shape())));
    }
    widen(&s)
}

/// Requantizes `acc` (i32 sums) with `multiplier(i)` and the output zero point into `dtype`.
fn requantize(
    acc: &[f64],
    multiplier: impl Fn(usize) -> f64,
    zp: f64,
    dtype: DataType,
    shape: Vec<usize>,
) -> Result<Value> {
    let (lo, hi) = int_range(dtype).unwrap_or((0, 255));
    let q: Vec<i64> = acc
        .iter()
        .enumerate()
        .map(|(i, &a)| (a * multiplier(i) + zp).clamp(lo as f64, hi as f64).round_ties_even() as i64)
        .collect();
    match dtype {
        DataType::Int8 => util::out(shape, q.into_iter().map(|v| v as i8).collect::<Vec<_>>()),
        _ => util::out(shape, q.into_iter().map(|v| v as u8).collect::<Vec<_>>()),
    }
}

/// QLinearMatMul: a quantized MatMul (scalar scales, or one per column of B).
struct QLinearMatMul {
    at: Location,
}

pub(super) fn build_qlinear_matmul(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(QLinearMatMul { at: ctx.node.location() }))
}

impl Kernel for QLinearMatMul {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (a, b) = (util::input(inputs, 0, at)?, util::input(inputs, 3, at)?);
        util::expect_dtype(&a, INT8S, 0, at)?;
        util::expect_dtype(&b, INT8S, 3, at)?;
        let plan = MatMulPlan::new(a.shape(), b.shape(), at)?;
        let mut a32 = widen_8bit(&a, 0, at)?;
        let mut b32 = widen_8bit(&b, 3, at)?;
        if let Some(z) = util::opt_input(inputs, 2, at)? {
            subtract_zero_point(&mut a32, &widen_8bit(&z, 2, at)?, plan.m, plan.k, true, 2, at)?;
        }
        if let Some(z) = util::opt_input(inputs, 5, at)? {
            subtract_zero_point(&mut b32, &widen_8bit(&z, 5, at)?, plan.k, plan.n, false, 5, at)?;
        }
        let acc: Vec<f64> =
            matmul_int::<i32>(&a32, &b32, &plan).map_err(|e| e.at(at))?.into_iter().map(f64::from).collect();
        let (sa, sb, sy) =
            (scales(inputs, 1, &[], at)?, scales(inputs, 4, &[plan.n], at)?, scales(inputs, 6, &[], at)?);
        let out = util::opt_input(inputs, 7, at)?.map_or(a.dtype(), |z| z.dtype());
        let yz = zero_points(inputs, 7, out, &[], at)?.map_or(0.0, |z| z[0]);
        let n = plan.n.max(1);
        let mult = |i: usize| f64::from(sa[0] * sb[if sb.len() == 1 { 0 } else { i % n }] / sy[0]);
        Ok(vec![requantize(&acc, mult, yz, out, plan.out_shape)?])
    }
}

/// QLinearConv: a quantized Conv (scalar scales, or one weight scale per output channel),
/// with an optional int32 bias.
struct QLinearConv {
    conv: WideConv,
    at: Location,
}

pub(super) fn build_qlinear_conv(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(QLinearConv { conv: WideConv::from_node(ctx.node)?, at: ctx.node.location() }))
}

impl Kernel for QLinearConv {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let (x, w) = (util::input(inputs, 0, at)?, util::input(inputs, 3, at)?);
        util::expect_dtype(&x, INT8S, 0, at)?;
        util::expect_dtype(&w, INT8S, 3, at)?;
        let m = w.shape().first().copied().unwrap_or(0);
        let xz = zero_points(inputs, 2, x.dtype(), &[], at)?;
        let wz = zero_points(inputs, 5, w.dtype(), &[m], at)?;
        let (sx, sw, sy) = (scales(inputs, 1, &[], at)?, scales(inputs, 4, &[m], at)?, scales(inputs, 6, &[], at)?);
        let bias = match util::opt_input(inputs, 8, at)? {
            Some(b) => {
                util::expect_dtype(&b, &[DataType::Int32], 8, at)?;
                Some(util::to_i64(&b)?.into_iter().map(|v| v as f64).collect::<Vec<f64>>())
            }
            None => None,
        };
        let (xs, ws) = (shifted(&x, xz.as_deref(), false)?, shifted(&w, wz.as_deref(), true)?);
        let (shape, acc) = self.conv.run(&xs, x.shape(), &ws, w.shape(), bias.as_deref())?;
        let out = util::opt_input(inputs, 7, at)?.map_or(x.dtype(), |z| z.dtype());
        let yz = zero_points(inputs, 7, out, &[], at)?.map_or(0.0, |z| z[0]);
        let plane: usize = shape[2..].iter().product::<usize>().max(1);
        let c_out = shape.get(1).copied().unwrap_or(1).max(1);
        let mult = |i: usize| f64::from(sx[0] * sw[if sw.len() == 1 { 0 } else { (i / plane) % c_out }] / sy[0]);
        Ok(vec![requantize(&acc, mult, yz, out, shape)?])
    }
}
