//! Type and shape inference with symbolic dimensions.
//!
//! Runs over a graph in topological order. Besides types it tracks the *values* of small
//! integer tensors where they are known symbolically (the output of `Shape`, and what
//! `Gather`/`Concat`/`Slice`/arithmetic make of it), so that `Reshape` targets computed from
//! input shapes in exported models still give symbolic output shapes.

mod rules;

use std::collections::HashMap;

use crate::ir::{Graph, OpsetImports};
use crate::ops::registry;
use crate::types::{TensorType, ValueType};
use crate::{Result, Tensor};

pub use rules::infer_node;

/// One element of a symbolically known integer tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymInt {
    /// A known value.
    Known(i64),
    /// The value of a named free dimension.
    Symbol(String),
    /// Not known.
    Unknown,
}

/// What inference knows about one value.
#[derive(Debug, Clone)]
pub struct Inferred {
    /// Its type.
    pub ty: ValueType,
    /// Its constant value, when known (initializers, Constant nodes, folded shape arithmetic).
    pub constant: Option<Tensor>,
    /// Its elements as symbolic integers, for small 0-D/1-D integer tensors.
    pub sym_value: Option<Vec<SymInt>>,
}

impl Inferred {
    /// Knows only a type.
    pub fn of_type(ty: ValueType) -> Self {
        Inferred { ty, constant: None, sym_value: None }
    }

    /// The tensor type, when this is a tensor.
    pub fn tensor_type(&self) -> Option<&TensorType> {
        self.ty.as_tensor()
    }
}

/// Infers the type of every value of `graph`. `known` holds what is known beforehand (graph
/// inputs, possibly with free dimensions overridden, and outer-scope values for subgraphs);
/// initializers are added here. Values inference cannot type are `ValueType::Unknown`.
/// Errors only where the model is certainly inconsistent (e.g. MatMul inner dimensions 3 vs 4).
pub fn infer_graph(graph: &Graph, opsets: &OpsetImports, known: &mut HashMap<String, Inferred>) -> Result<()> {
    for input in &graph.inputs {
        known.entry(input.name.clone()).or_insert_with(|| Inferred::of_type(input.ty.clone()));
    }
    for (name, t) in &graph.initializers {
        known.insert(name.clone(), rules::from_constant(t));
    }
    let declared: HashMap<&str, &ValueType> = graph
        .value_info
        .iter()
        .chain(&graph.outputs)
        .map(|v| (v.name.as_str(), &v.ty))
        .collect();
    for node in &graph.nodes {
        let since = registry::since_version(node, opsets)?;
        let inputs: Vec<Option<&Inferred>> =
            node.inputs.iter().map(|n| if n.is_empty() { None } else { known.get(n) }).collect();
        let outputs = infer_node(node, since, &inputs)?;
        for (i, name) in node.outputs.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let mut out = outputs.get(i).cloned().unwrap_or_else(|| Inferred::of_type(ValueType::Unknown));
            if let Some(decl) = declared.get(name.as_str()) {
                out.ty = rules::merge(&out.ty, decl);
            }
            known.insert(name.clone(), out);
        }
    }
    Ok(())
}
