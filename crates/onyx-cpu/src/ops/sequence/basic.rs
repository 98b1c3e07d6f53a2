//! SequenceEmpty, SequenceConstruct, SequenceAt, SequenceInsert, SequenceErase and
//! SequenceLength.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Sequence, Tensor, Value};

use super::{position, seq_input, tensor_type};
use crate::ops::layout::elems;
use crate::ops::util;

/// SequenceEmpty: an empty sequence of tensors of the `dtype` attribute (float by default).
struct Empty {
    dtype: DataType,
}

pub(super) fn build_empty(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let code = ctx.node.int_or("dtype", DataType::Float.onnx_code() as i64)?;
    let dtype = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| Error::attribute(&at, "dtype", "an ONNX data type code", code.to_string()))?;
    Ok(Box::new(Empty { dtype }))
}

impl Kernel for Empty {
    fn run(&self, _inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        Ok(vec![Value::Sequence(Sequence { elem_type: tensor_type(self.dtype), items: vec![] })])
    }
}

/// SequenceConstruct: a sequence of its inputs, which must share an element type.
struct Construct {
    at: Location,
}

pub(super) fn build_construct(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Construct { at: ctx.node.location() }))
}

impl Kernel for Construct {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let mut items = Vec::with_capacity(inputs.len());
        let mut dtype = None;
        for i in 0..inputs.len() {
            let v = util::input(inputs, i, &self.at)?;
            let d = *dtype.get_or_insert(v.dtype());
            if v.dtype() != d {
                return Err(crate::ops::elementwise::same_dtype_error(&self.at, i, d, v.dtype()));
            }
            items.push(elems::input_ref(inputs, i, &self.at)?.to_value());
        }
        let dtype = dtype.ok_or_else(|| Error::input(&self.at, 0, "at least one tensor", "no inputs"))?;
        Ok(vec![Value::Sequence(Sequence { elem_type: tensor_type(dtype), items })])
    }
}

/// SequenceAt: the element at a position (negative counts from the end).
struct At {
    at: Location,
}

pub(super) fn build_at(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(At { at: ctx.node.location() }))
}

impl Kernel for At {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let s = seq_input(inputs, 0, &self.at)?;
        let p = position(inputs, 1, s.items.len(), false, &self.at)?
            .ok_or_else(|| Error::input(&self.at, 1, "a position", "no input"))?;
        Ok(vec![s.items[p].clone()])
    }
}

/// SequenceInsert: the sequence with a tensor inserted at a position (the end by default).
struct Insert {
    at: Location,
}

pub(super) fn build_insert(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Insert { at: ctx.node.location() }))
}

impl Kernel for Insert {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let s = seq_input(inputs, 0, &self.at)?;
        let t = util::input(inputs, 1, &self.at)?;
        if let onyx_core::types::ValueType::Tensor(tt) = &s.elem_type {
            if tt.dtype != t.dtype() {
                let want = format!("a {} tensor (the sequence's element type)", tt.dtype);
                return Err(Error::input(&self.at, 1, want, format!("a {} tensor", t.dtype())));
            }
        }
        let p = position(inputs, 2, s.items.len(), true, &self.at)?.unwrap_or(s.items.len());
        let mut items = s.items.clone();
        items.insert(p, elems::input_ref(inputs, 1, &self.at)?.to_value());
        Ok(vec![Value::Sequence(Sequence { elem_type: tensor_type(t.dtype()), items })])
    }
}

/// SequenceErase: the sequence without the element at a position (the last by default).
struct Erase {
    at: Location,
}

pub(super) fn build_erase(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Erase { at: ctx.node.location() }))
}

impl Kernel for Erase {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let s = seq_input(inputs, 0, &self.at)?;
        if s.items.is_empty() {
            return Err(Error::input(&self.at, 0, "a non-empty sequence", "an empty sequence"));
        }
        let p = position(inputs, 1, s.items.len(), false, &self.at)?.unwrap_or(s.items.len() - 1);
        let mut items = s.items.clone();
        items.remove(p);
        Ok(vec![Value::Sequence(Sequence { elem_type: s.elem_type.clone(), items })])
    }
}

/// SequenceLength: the number of elements, as an int64 scalar.
struct Length {
    at: Location,
}

pub(super) fn build_length(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Length { at: ctx.node.location() }))
}

impl Kernel for Length {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let s = seq_input(inputs, 0, &self.at)?;
        Ok(vec![Value::Tensor(Tensor::scalar(s.items.len() as i64))])
    }
}
