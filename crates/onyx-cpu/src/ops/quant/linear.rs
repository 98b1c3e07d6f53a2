//! QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, computed as the ONNX reference
//! computes them: `x / scale` in the promoted type of the two inputs (or `precision`), rounded
//! half to even, plus the zero point, saturated; `(x - zero_point) * scale` in f32.

use half::{bf16, f16};
use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use super::{int_range, wide_values, Params};
use crate::ops::cast::small::{self, RoundMode};
use crate::ops::elementwise::{narrow, widen, FLOAT_TYPES};
use crate::ops::util;

/// The types QuantizeLinear produces.
fn is_quant_type(d: DataType) -> bool {
    int_range(d).is_some()
        || matches!(
            d,
            DataType::Float8E4M3FN
                | DataType::Float8E4M3FNUZ
                | DataType::Float8E5M2
                | DataType::Float8E5M2FNUZ
                | DataType::Float4E2M1
        )
}

fn dtype_attr(ctx: &NodeContext<'_>, name: &str, at: &Location) -> Result<Option<DataType>> {
    match ctx.node.get_int(name)? {
        None | Some(0) => Ok(None),
        Some(code) => i32::try_from(code)
            .ok()
            .and_then(DataType::from_onnx)
            .map(Some)
            .ok_or_else(|| Error::attribute(at, name, "an ONNX data type code", code.to_string())),
    }
}

/// A float view as f64 values (exact).
fn floats(v: &TensorView<'_>) -> Result<Vec<f64>> {
    crate::ops::elementwise::to_f64_vec(v)
}

/// Rounds `v` to the precision of float type `t` (the type a numpy division would give).
fn round_to(t: DataType, v: f64) -> f64 {
    match t {
        DataType::Float => f64::from(v as f32),
        DataType::Float16 => f16::from_f64(v).to_f64(),
        DataType::BFloat16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

struct Quantize {
    axis: i64,
    saturate: bool,
    block: i64,
    output_dtype: Option<DataType>,
    precision: Option<DataType>,
    at: Location,
}

pub(super) fn build_quantize(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let v = ctx.since_version;
    let output_dtype = if v >= 21 { dtype_attr(ctx, "output_dtype", &at)? } else { None };
    if let Some(d) = output_dtype.filter(|&d| !is_quant_type(d)) {
        return Err(Error::attribute(&at, "output_dtype", "a quantized type", d.name()));
    }
    let precision = if v >= 23 { dtype_attr(ctx, "precision", &at)? } else { None };
    if let Some(p) = precision.filter(|p| !FLOAT_TYPES.contains(p)) {
        return Err(Error::attribute(&at, "precision", "a float type", p.name()));
    }
    Ok(Box::new(Quantize {
        axis: node.int_or("axis", 1)?,
        saturate: node.int_or("saturate", 1)? != 0,
        block: if v >= 21 { node.int_or("block_size", 0)? } else { 0 },
        output_dtype,
        precision,
        at,
    }))
}

impl Kernel for Quantize {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let s = util::input(inputs, 1, at)?;
        let zp = util::opt_input(inputs, 2, at)?;
        util::expect_dtype(&x, &[FLOAT_TYPES, &[DataType::Int32]].concat(), 0, at)?;
        util::expect_dtype(&s, &[FLOAT_TYPES, &[DataType::Int32]].concat(), 1, at)?;
        let out = match (&zp, self.output_dtype) {
            (Some(z), Some(d)) if z.dtype() != d => {
                return Err(Error::input(at, 2, format!("a {d} zero point (output_dtype)"), z.dtype().name()));
            }
            (Some(z), _) => z.dtype(),
            (None, d) => d.unwrap_or(DataType::Uint8),
        };
        if !is_quant_type(out) {
            return Err(Error::input(at, 2, "a zero point of a quantized type", out.name()));
        }
        let params = Params::new(x.shape(), s.shape(), self.axis, self.block, 1, at)?;
        if let Some(z) = &zp {
            if z.shape() != s.shape() && !(z.len() == 1 && s.len() == 1) {
                return Err(Error::input(
                    at,
                    2,
                    format!("the shape of the scale {:?}", s.shape()),
                    format!("shape {:?}", z.shape()),
                ));
            }
        }
        let xs = if x.dtype() == DataType::Int32 {
            util::to_i64(&x)?.into_iter().map(|v| v as f64).collect()
        } else {
            floats(&x)?
        };
        let scales = if s.dtype() == DataType::Int32 {
            util::to_i64(&s)?.into_iter().map(|v| v as f64).collect()
        } else {
            floats(&s)?
        };
        let zps = match &zp {
            Some(z) => wide_values(z, 2, at)?,
            None => vec![0.0],
        };
        let zp_of = |i: usize| if zps.len() == 1 { zps[0] } else { zps[params.index(i)] };
        // The type of x / scale: `precision`, else numpy's promotion of the two.
        let div_type = self.precision.unwrap_or(match (x.dtype(), s.dtype()) {
            (DataType::Int32, _) | (_, DataType::Int32) | (DataType::Double, _) | (_, DataType::Double) => {
                DataType::Double
            }
            (a, b) if a == b => a,
            _ => DataType::Float,
        });
        let q: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (v, sc) = (round_to(div_type, v), round_to(div_type, scales[params.index(i)]));
                let quotient = if div_type == DataType::Double { v / sc } else { f64::from(v as f32 / sc as f32) };
                round_to(div_type, quotient)
            })
            .collect();
        let shape = x.shape().to_vec();
        let t = if let Some((lo, hi)) = int_range(out) {
            let ints: Vec<i64> = q
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let r = v.round_ties_even();
                    let r = if r.is_nan() { 0.0 } else { r.clamp(-1e18, 1e18) };
                    (r as i64 + zp_of(i) as i64).clamp(lo, hi)
                })
                .collect();
            int_tensor(out, shape, &ints)?
        } else if out == DataType::Float4E2M1 {
            let v: Vec<f64> = q.iter().enumerate().map(|(i, &v)| v + zp_of(i)).collect();
            small::from_f64s(out, shape, &v, true, RoundMode::Up)?
        } else {
            small::from_f64s(out, shape, &q, self.saturate, RoundMode::Up)?
        };
        Ok(vec![Value::Tensor(t)])
    }
}

/// A tensor of integer quantized type `dtype` from in-range values.
fn int_tensor(dtype: DataType, shape: Vec<usize>, v: &[i64]) -> Result<Tensor> {
    match dtype {
        DataType::Int8 => Tensor::from_vec(shape, v.iter().map(|&x| x as i8).collect()),
        DataType::Uint8 => Tensor::from_vec(shape, v.iter().map(|&x| x as u8).collect()),
        DataType::Int16 => Tensor::from_vec(shape, v.iter().map(|&x| x as i16).collect()),
        DataType::Uint16 => Tensor::from_vec(shape, v.iter().map(|&x| x as u16).collect()),
        other => small::from_ints(other, shape, v),
    }
}

struct Dequantize {
    axis: i64,
    block: i64,
    output_dtype: Option<DataType>,
    at: Location,
}

pub(super) fn build_dequantize(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let v = ctx.since_version;
    let output_dtype = if v >= 23 { dtype_attr(ctx, "output_dtype", &at)? } else { None };
    if let Some(d) = output_dtype.filter(|d| !FLOAT_TYPES.contains(d)) {
        return Err(Error::attribute(&at, "output_dtype", "a float type", d.name()));
    }
    Ok(Box::new(Dequantize {
        axis: node.int_or("axis", 1)?,
        block: if v >= 21 { node.int_or("block_size", 0)? } else { 0 },
        output_dtype,
        at,
    }))
}

impl Kernel for Dequantize {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let s = util::input(inputs, 1, at)?;
        let zp = util::opt_input(inputs, 2, at)?;
        util::expect_dtype(&s, FLOAT_TYPES, 1, at)?;
        let xs = wide_values(&x, 0, at)?;
        let params = Params::new(x.shape(), s.shape(), self.axis, self.block, 1, at)?;
        let float_x = x.dtype().is_float();
        let zps: Vec<f64> = match &zp {
            Some(z) if !float_x => {
                if z.dtype() != x.dtype() {
                    return Err(Error::input(
                        at,
                        2,
                        format!("a {} zero point (the type of x)", x.dtype()),
                        z.dtype().name(),
                    ));
                }
                if z.shape() != s.shape() && !(z.len() == 1 && s.len() == 1) {
                    return Err(Error::input(
                        at,
                        2,
                        format!("the shape of the scale {:?}", s.shape()),
                        format!("shape {:?}", z.shape()),
                    ));
                }
                wide_values(z, 2, at)?
            }
            Some(z) if x.dtype() != DataType::Float4E2M1 && wide_values(z, 2, at)?.iter().any(|&v| v != 0.0) => {
                return Err(Error::input(at, 2, "a zero point of 0 for float8 data", "a non-zero zero point"));
            }
            _ => vec![0.0],
        };
        let scales = widen(&s)?;
        let y: Vec<f32> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let p = params.index(i);
                let z = if zps.len() == 1 { zps[0] } else { zps[p] };
                (v as f32 - z as f32) * scales[p]
            })
            .collect();
        let dtype = self.output_dtype.unwrap_or(s.dtype());
        Ok(vec![narrow(dtype, x.shape().to_vec(), y)?])
    }
}

/// DynamicQuantizeLinear: uint8 quantization with a scale and zero point computed from the
/// input's range (which always includes 0).
struct DynamicQuantize {
    at: Location,
}

pub(super) fn build_dynamic_quantize(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(DynamicQuantize { at: ctx.node.location() }))
}

impl Kernel for DynamicQuantize {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        util::expect_dtype(&x, FLOAT_TYPES, 0, &self.at)?;
        let xs = widen(&x)?;
        let max = xs.iter().fold(0f32, |a, &v| if v > a || v.is_nan() { v } else { a });
        let min = xs.iter().fold(0f32, |a, &v| if v < a || v.is_nan() { v } else { a });
        let scale = (if max == min { 1.0 } else { max - min }) / 255.0;
        let zp = (0.0 - min / scale).clamp(0.0, 255.0).round_ties_even();
        let y: Vec<u8> = xs.iter().map(|&v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8).collect();
        Ok(vec![
            util::out(x.shape().to_vec(), y)?,
            narrow(x.dtype(), vec![], vec![scale])?,
            Value::Tensor(Tensor::scalar(zp as u8)),
        ])
    }
}
