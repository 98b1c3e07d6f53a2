//! Small `ai.onnx.ml` operators: ArrayFeatureExtractor (columns of the last axis by index),
//! Binarizer (1 above a threshold, else 0) and LabelEncoder (a key-to-value map with a default,
//! opsets 2 and 4). TreeEnsemble lives in [`tree_ensemble`].

pub mod tree_ensemble;

use std::collections::HashMap;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, TensorView, Value};

use super::elementwise::to_f64_vec;
use super::layout::elems::{with_elem, Elem};
use super::util;
use crate::Registry;

/// The domain of these operators.
pub(crate) const ML: &str = "ai.onnx.ml";

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add_in(ML, "ArrayFeatureExtractor", build_feature_extractor);
    r.add_in(ML, "Binarizer", build_binarizer);
    r.add_in(ML, "LabelEncoder", build_label_encoder);
    r.add_in(ML, "TreeEnsemble", tree_ensemble::build_tree_ensemble);
}

/// ArrayFeatureExtractor: `X[..., indices]`, shaped `[...X.shape[:-1], len(indices)]`
/// (`[1, len]` for a 1-D `X`).
struct FeatureExtractor {
    at: Location,
}

fn build_feature_extractor(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(FeatureExtractor { at: ctx.node.location() }))
}

/// Gathers `indices` from every row of length `width`.
fn gather_last<T: Elem>(x: &TensorView<'_>, width: usize, indices: &[usize]) -> Result<Vec<T>> {
    let data = T::read(x)?;
    Ok(data.chunks(width.max(1)).flat_map(|row| indices.iter().map(|&i| row[i].clone())).collect())
}

impl Kernel for FeatureExtractor {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let y = util::input(inputs, 1, at)?;
        util::expect_dtype(&y, &[DataType::Int64], 1, at)?;
        let Some((&width, outer)) = x.shape().split_last() else {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        };
        let indices = util::to_i64(&y)?
            .into_iter()
            .map(|i| {
                usize::try_from(i)
                    .ok()
                    .filter(|&i| i < width)
                    .ok_or_else(|| Error::input(at, 1, format!("indices in 0..{width}"), i.to_string()))
            })
            .collect::<Result<Vec<usize>>>()?;
        let mut shape = if outer.is_empty() { vec![1] } else { outer.to_vec() };
        shape.push(indices.len());
        let out = with_elem!(x.dtype(), at, T => T::tensor(x.dtype(), shape, gather_last::<T>(&x, width, &indices)?))?;
        Ok(vec![Value::Tensor(out)])
    }
}

/// Binarizer: 1 where `x > threshold`, else 0 (NaN gives 0), in X's type.
struct Binarizer {
    threshold: f64,
    at: Location,
}

fn build_binarizer(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Binarizer { threshold: ctx.node.float_or("threshold", 0.0)? as f64, at: ctx.node.location() }))
}

impl Kernel for Binarizer {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Float, DataType::Double, DataType::Int64, DataType::Int32], 0, at)?;
        let bits: Vec<bool> = to_f64_vec(&x)?.into_iter().map(|v| v > self.threshold).collect();
        let shape = x.shape().to_vec();
        let y = match x.dtype() {
            DataType::Float => util::out(shape, bits.iter().map(|&b| b as u8 as f32).collect()),
            DataType::Double => util::out(shape, bits.iter().map(|&b| b as u8 as f64).collect()),
            DataType::Int64 => util::out(shape, bits.iter().map(|&b| b as i64).collect()),
            _ => util::out(shape, bits.iter().map(|&b| b as i32).collect()),
        };
        Ok(vec![y?])
    }
}

/// A LabelEncoder key: integers, strings and floats (by their f64 bits, every NaN alike).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Int(i64),
    Str(String),
    Float(u64),
}

impl Key {
    fn float(v: f64) -> Key {
        Key::Float(if v.is_nan() { f64::NAN.to_bits() } else { (v + 0.0).to_bits() })
    }
}

/// The keys held by a tensor (the input, or `keys_tensor`).
fn keys_of(t: &TensorView<'_>) -> Result<Vec<Key>> {
    Ok(match t.dtype() {
        DataType::String => t.strings()?.iter().cloned().map(Key::Str).collect(),
        DataType::Float | DataType::Double | DataType::Float16 => to_f64_vec(t)?.into_iter().map(Key::float).collect(),
        _ => util::to_i64(t)?.into_iter().map(Key::Int).collect(),
    })
}

/// LabelEncoder: each element of X mapped through `keys → values`, or to the default.
struct LabelEncoder {
    map: HashMap<Key, usize>,
    /// The values, then the default as the last element (1-D, the output type).
    values: Tensor,
    /// The input type the keys were given for.
    key_type: DataType,
    at: Location,
}

/// The keys and the input type they are for, from whichever keys attribute the node has.
fn label_keys(ctx: &NodeContext<'_>, at: &Location) -> Result<(Vec<Key>, DataType)> {
    let n = ctx.node;
    let strs = |v: &[Vec<u8>]| -> Vec<String> { v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect() };
    if let Some(v) = n.get_strings("keys_strings")? {
        return Ok((strs(v).into_iter().map(Key::Str).collect(), DataType::String));
    }
    if let Some(v) = n.get_ints("keys_int64s")? {
        return Ok((v.iter().map(|&i| Key::Int(i)).collect(), DataType::Int64));
    }
    if let Some(v) = n.get_floats("keys_floats")? {
        return Ok((v.iter().map(|&f| Key::float(f as f64)).collect(), DataType::Float));
    }
    if let Some(t) = n.get_tensor("keys_tensor")? {
        return Ok((keys_of(&t.view()?)?, t.dtype()));
    }
    Err(Error::attribute(at, "keys_strings", "one of keys_strings, keys_int64s, keys_floats, keys_tensor", "none"))
}

/// The values followed by the default, as one 1-D tensor of the output type.
fn label_values(ctx: &NodeContext<'_>, at: &Location) -> Result<Tensor> {
    let n = ctx.node;
    let strs = |v: &[Vec<u8>]| -> Vec<String> { v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect() };
    let with_default = |values: Tensor, default: Tensor| -> Result<Tensor> {
        if default.len() != 1 || default.dtype() != values.dtype() {
            let want = format!("one {} element", values.dtype());
            return Err(Error::attribute(
                at,
                "default_tensor",
                want,
                format!("{}{:?}", default.dtype(), default.shape()),
            ));
        }
        let (v, d) = (values.view()?, default.view()?);
        with_elem!(values.dtype(), at, T => {
            let mut all = T::read(&v)?.into_owned();
            all.extend(T::read(&d)?.iter().cloned());
            T::tensor(values.dtype(), vec![all.len()], all)
        })
    };
    let default_tensor = n.get_tensor("default_tensor")?.cloned();
    let default_string = n.string_or("default_string", "_Unused")?;
    let default_int = n.int_or("default_int64", -1)?;
    let default_float = n.float_or("default_float", -0.0)?;
    let values = if let Some(v) = n.get_strings("values_strings")? {
        Tensor::from_strings(vec![v.len()], strs(v))?
    } else if let Some(v) = n.get_ints("values_int64s")? {
        Tensor::from_vec(vec![v.len()], v.to_vec())?
    } else if let Some(v) = n.get_floats("values_floats")? {
        Tensor::from_vec(vec![v.len()], v.to_vec())?
    } else if let Some(t) = n.get_tensor("values_tensor")? {
        t.reshaped(vec![t.len()])?
    } else {
        return Err(Error::attribute(
            at,
            "values_strings",
            "one of values_strings, values_int64s, values_floats, values_tensor",
            "none",
        ));
    };
    let default = match (default_tensor, values.dtype()) {
        (Some(t), _) => t,
        (None, DataType::String) => Tensor::from_strings(vec![1], vec![default_string])?,
        (None, DataType::Float) => Tensor::from_vec(vec![1], vec![default_float])?,
        (None, DataType::Int64) => Tensor::from_vec(vec![1], vec![default_int])?,
        (None, other) => {
            return Err(Error::attribute(at, "default_tensor", format!("a default {other} value"), "nothing"))
        }
    };
    with_default(values, default)
}

fn build_label_encoder(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    if ctx.since_version < 2 {
        // LabelEncoder-1 (classes_strings, direction chosen by the input type) is not implemented.
        return Err(Error::Unsupported(format!(
            "{at}: LabelEncoder-1 (classes_strings); opsets 2 and 4 are supported"
        )));
    }
    let (keys, key_type) = label_keys(ctx, &at)?;
    let values = label_values(ctx, &at)?;
    if keys.len() + 1 != values.len() {
        return Err(Error::attribute(
            &at,
            "values",
            format!("{} values (one per key)", keys.len()),
            (values.len() - 1).to_string(),
        ));
    }
    let map = keys.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
    Ok(Box::new(LabelEncoder { map, values, key_type, at }))
}

impl Kernel for LabelEncoder {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let is_string = |d: DataType| d == DataType::String;
        if is_string(x.dtype()) != is_string(self.key_type) {
            return Err(Error::input(
                at,
                0,
                format!("a {} tensor (the type of the keys)", self.key_type),
                x.dtype().name(),
            ));
        }
        let default = self.values.len() - 1;
        let picks: Vec<usize> = keys_of(&x)?.iter().map(|k| self.map.get(k).copied().unwrap_or(default)).collect();
        let v = self.values.view()?;
        let out = with_elem!(v.dtype(), at, T => {
            let all = T::read(&v)?;
            T::tensor(v.dtype(), x.shape().to_vec(), picks.iter().map(|&i| all[i].clone()).collect())
        })?;
        Ok(vec![Value::Tensor(out)])
    }
}

#[cfg(test)]
mod tests;
