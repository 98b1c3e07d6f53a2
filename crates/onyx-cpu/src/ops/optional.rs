//! Optional values: Optional, OptionalHasElement, OptionalGetElement.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::AttrValue;
use onyx_core::types::{TensorType, ValueType};
use onyx_core::{Error, Location, Optional, Result, Tensor, Value};

use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Optional", build_optional);
    r.add("OptionalHasElement", build_has_element);
    r.add("OptionalGetElement", build_get_element);
}

/// The type of a value, as an optional's element type.
fn type_of(v: &Value) -> ValueType {
    match v {
        Value::Tensor(t) => ValueType::Tensor(TensorType { dtype: t.dtype(), shape: None }),
        Value::Sequence(s) => ValueType::Sequence(Box::new(s.elem_type.clone())),
        Value::Map(m) => ValueType::Map(m.keys.dtype(), Box::new(m.values.elem_type.clone())),
        Value::Optional(o) => ValueType::Optional(Box::new(o.elem_type.clone())),
    }
}

/// Optional: wraps its input, or is empty (of the `type` attribute) without one.
struct MakeOptional {
    ty: Option<ValueType>,
    at: Location,
}

fn build_optional(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let ty = match node.attr("type").map(|a| &a.value) {
        None => None,
        Some(AttrValue::Type(t)) => Some(t.clone()),
        Some(other) => return Err(Error::attribute(&at, "type", "a type", other.type_name())),
    };
    if node.input(0).is_none() && ty.is_none() {
        return Err(Error::attribute(&at, "type", "a type (the node has no input)", "nothing"));
    }
    Ok(Box::new(MakeOptional { ty, at }))
}

impl Kernel for MakeOptional {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let value = inputs.first().copied().flatten().map(|r| r.to_value());
        let elem_type = match (&value, &self.ty) {
            (_, Some(t)) => t.clone(),
            (Some(v), None) => type_of(v),
            (None, None) => return Err(Error::node(&self.at, "an empty Optional needs its 'type' attribute")),
        };
        Ok(vec![Value::Optional(Optional { elem_type, value: value.map(Box::new) })])
    }
}

/// OptionalHasElement: whether the input is a non-empty optional (or any non-optional value);
/// false when the input is omitted.
struct HasElement;

fn build_has_element(_ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(HasElement))
}

impl Kernel for HasElement {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let has = match inputs.first().copied().flatten() {
            None => false,
            Some(ValueRef::Value(Value::Optional(o))) => o.value.is_some(),
            Some(_) => true,
        };
        Ok(vec![Value::Tensor(Tensor::from_bools(vec![], vec![has])?)])
    }
}

/// OptionalGetElement: the value inside an optional (a non-optional input is passed through).
struct GetElement {
    at: Location,
}

fn build_get_element(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GetElement { at: ctx.node.location() }))
}

impl Kernel for GetElement {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        match inputs.first().copied().flatten() {
            None => Err(Error::input(&self.at, 0, "an optional value", "no input")),
            Some(ValueRef::Value(Value::Optional(o))) => match &o.value {
                Some(v) => Ok(vec![(**v).clone()]),
                None => Err(Error::input(
                    &self.at,
                    0,
                    "an optional holding a value",
                    format!("an empty optional({})", o.elem_type),
                )),
            },
            Some(other) => Ok(vec![other.to_value()]),
        }
    }
}
