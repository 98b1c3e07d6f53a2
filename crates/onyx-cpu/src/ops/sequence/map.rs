//! SequenceMap: runs its body once per element of the input sequence; sequence inputs give
//! their i-th element to iteration i, tensor inputs are passed whole to every iteration.

use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, SubgraphRunner, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{Error, Location, Result, Sequence, Value};

use super::seq_input;
use crate::ops::control_flow::outer_values;
use crate::ops::layout::elems;

struct SequenceMap {
    body: Arc<dyn SubgraphRunner>,
    /// Declared types of the body outputs (element types of empty output sequences).
    out_types: Vec<ValueType>,
    formal_inputs: usize,
    implicit: Vec<String>,
    at: Location,
}

pub(super) fn build_sequence_map(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let g = node.get_graph("body")?.ok_or_else(|| Error::attribute(&at, "body", "a graph", "nothing"))?;
    if g.inputs.len() != node.inputs.len() || g.outputs.len() != node.outputs.len() {
        return Err(Error::attribute(
            &at,
            "body",
            format!("a graph of {} inputs and {} outputs (as many as the node)", node.inputs.len(), node.outputs.len()),
            format!("{} inputs and {} outputs", g.inputs.len(), g.outputs.len()),
        ));
    }
    Ok(Box::new(SequenceMap {
        body: (ctx.subgraphs)(g)?,
        out_types: g.outputs.iter().map(|o| o.ty.clone()).collect(),
        formal_inputs: node.inputs.len(),
        implicit: node.implicit_inputs.clone(),
        at,
    }))
}

impl Kernel for SequenceMap {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let outer = outer_values(&self.implicit, self.formal_inputs, inputs, &self.at)?;
        let first = seq_input(inputs, 0, &self.at)?;
        let n = first.items.len();
        let args: Vec<ValueRef<'_>> =
            (0..self.formal_inputs).map(|i| elems::input_ref(inputs, i, &self.at)).collect::<Result<_>>()?;
        for (i, a) in args.iter().enumerate() {
            if let ValueRef::Value(Value::Sequence(s)) = a {
                if s.items.len() != n {
                    return Err(Error::input(
                        &self.at,
                        i,
                        format!("a sequence of {n} elements (as input 0)"),
                        format!("{} elements", s.items.len()),
                    ));
                }
            }
        }
        let mut outs: Vec<Vec<Value>> = vec![vec![]; self.out_types.len()];
        for it in 0..n {
            let step: Vec<ValueRef<'_>> = args
                .iter()
                .map(|a| match a {
                    ValueRef::Value(Value::Sequence(s)) => ValueRef::Value(&s.items[it]),
                    other => *other,
                })
                .collect();
            let res = self.body.run(&step, &outer)?;
            if res.len() != outs.len() {
                return Err(Error::node(
                    &self.at,
                    format!("the body returned {} values, expected {}", res.len(), outs.len()),
                ));
            }
            for (o, v) in outs.iter_mut().zip(res) {
                o.push(v);
            }
        }
        Ok(outs
            .into_iter()
            .zip(&self.out_types)
            .map(|(items, ty)| {
                let elem_type = match items.first() {
                    Some(Value::Tensor(t)) => super::tensor_type(t.dtype()),
                    _ => match ty {
                        ValueType::Sequence(e) => (**e).clone(),
                        other => other.clone(),
                    },
                };
                Value::Sequence(Sequence { elem_type, items })
            })
            .collect())
    }
}
