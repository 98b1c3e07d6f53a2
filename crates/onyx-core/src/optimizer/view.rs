//! What passes read of a graph: inferred types and constants, who produces and who reads each
//! value, and which provider would take a node.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::ep::{ExecutionProvider, NodeContext, SubgraphRunner};
use crate::ir::{Graph, Node, OpsetImports, MS_DOMAIN, ONYX_DOMAIN};
use crate::ops::infer::{infer_graph, Inferred};
use crate::ops::registry;
use crate::types::{Dim, TensorType, ValueType};
use crate::{DataType, Error, Result, Tensor};

/// A snapshot of one graph for pattern matching. Rebuilt after every pass.
pub(crate) struct View<'g> {
    pub graph: &'g Graph,
    /// The model's opset imports plus `com.microsoft` 1, so contrib candidates resolve.
    pub opsets: OpsetImports,
    known: HashMap<String, Inferred>,
    producer: HashMap<&'g str, usize>,
    /// Node indices reading each value (once per read, subgraph reads included).
    readers: HashMap<&'g str, Vec<usize>>,
    outputs: HashSet<&'g str>,
    /// Graph inputs: never constants, even with an initializer as their default.
    inputs: HashSet<&'g str>,
}

fn no_subgraphs(_: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
    Err(Error::Unsupported("subgraphs are not compiled while optimizing".into()))
}

impl<'g> View<'g> {
    /// Infers the graph and indexes its values.
    pub fn new(graph: &'g Graph, opsets: &OpsetImports) -> Result<Self> {
        let inputs: HashSet<&str> = graph.inputs.iter().map(|i| i.name.as_str()).collect();
        let mut opsets = opsets.clone();
        opsets.entry(MS_DOMAIN.to_string()).or_insert(1);
        opsets.entry(ONYX_DOMAIN.to_string()).or_insert(1);
        let opsets_in = &opsets;
        let mut known = HashMap::new();
        if graph.initializers.keys().any(|k| inputs.contains(k.as_str())) {
            // Initializers that are also inputs are defaults a caller may override: infer
            // without their values.
            let mut g = graph.clone();
            g.initializers.retain(|k, _| !inputs.contains(k.as_str()));
            infer_graph(&g, opsets_in, &mut known)?;
        } else {
            infer_graph(graph, opsets_in, &mut known)?;
        }
        let mut producer = HashMap::new();
        let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            for o in node.outputs.iter().filter(|o| !o.is_empty()) {
                producer.insert(o.as_str(), i);
            }
            for name in node.inputs.iter().chain(&node.implicit_inputs).filter(|n| !n.is_empty()) {
                readers.entry(name.as_str()).or_default().push(i);
            }
        }
        Ok(View {
            graph,
            opsets,
            known,
            producer,
            readers,
            outputs: graph.outputs.iter().map(|o| o.name.as_str()).collect(),
            inputs,
        })
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &'g Node {
        &self.graph.nodes[i]
    }

    /// The default-domain op type of node `i` (`""` for other domains).
    pub fn op(&self, i: usize) -> &'g str {
        let n = self.node(i);
        if n.domain.is_empty() || n.domain == "ai.onnx" {
            &n.op_type
        } else {
            ""
        }
    }

    /// The imported version of the default domain.
    pub fn graph_opset(&self) -> i64 {
        self.opsets.get("").or_else(|| self.opsets.get("ai.onnx")).copied().unwrap_or(0)
    }

    /// The index of the node producing `value`.
    pub fn producer(&self, value: &str) -> Option<usize> {
        self.producer.get(value).copied()
    }

    /// The producer of `value` when it is a default-domain `op` node.
    pub fn produced_by(&self, value: &str, op: &str) -> Option<usize> {
        self.producer(value).filter(|&p| self.op(p) == op)
    }

    /// Every read of `value` (node indices, repeated when a node reads it twice).
    pub fn readers(&self, value: &str) -> &[usize] {
        self.readers.get(value).map_or(&[], Vec::as_slice)
    }

    /// True for a graph output.
    pub fn is_output(&self, value: &str) -> bool {
        self.outputs.contains(value)
    }

    /// True for a graph input (an initializer with the same name is only its default).
    pub fn is_input(&self, value: &str) -> bool {
        self.inputs.contains(value)
    }

    /// The one node that reads `value`, once, when it is not a graph output: an intermediate
    /// a fusion may swallow.
    pub fn sole_reader(&self, value: &str) -> Option<usize> {
        match self.readers(value) {
            [r] if !self.is_output(value) => Some(*r),
            _ => None,
        }
    }

    /// The constant value of `value` (initializers that are not inputs, Constant outputs,
    /// shape arithmetic inference folded).
    pub fn constant(&self, value: &str) -> Option<&Tensor> {
        if self.is_input(value) {
            return None;
        }
        self.known.get(value)?.constant.as_ref()
    }

    /// The value of a one-element float or integer constant, as f64.
    pub fn scalar(&self, value: &str) -> Option<f64> {
        let t = self.constant(value)?;
        if t.len() != 1 {
            return None;
        }
        Some(match t.dtype() {
            DataType::Float => f64::from(t.as_slice::<f32>().ok()?[0]),
            DataType::Double => t.as_slice::<f64>().ok()?[0],
            DataType::Float16 => t.as_slice::<half::f16>().ok()?[0].to_f64(),
            DataType::BFloat16 => t.as_slice::<half::bf16>().ok()?[0].to_f64(),
            DataType::Int64 => t.as_slice::<i64>().ok()?[0] as f64,
            DataType::Int32 => f64::from(t.as_slice::<i32>().ok()?[0]),
            _ => return None,
        })
    }

    /// True when `value` is a one-element constant within a relative `1e-3` of `want`.
    pub fn is_scalar(&self, value: &str, want: f64) -> bool {
        self.scalar(value).is_some_and(|v| (v - want).abs() <= 1e-3 * want.abs().max(1e-6))
    }

    /// What inference knows of `value`.
    pub fn inferred(&self, value: &str) -> Option<&Inferred> {
        self.known.get(value)
    }

    /// The tensor type of `value`.
    pub fn tensor_type(&self, value: &str) -> Option<&TensorType> {
        self.known.get(value)?.tensor_type()
    }

    /// The element type of `value`.
    pub fn dtype(&self, value: &str) -> Option<DataType> {
        self.tensor_type(value).map(|t| t.dtype)
    }

    /// The inferred dims of `value`, when its rank is known.
    pub fn shape(&self, value: &str) -> Option<&[Dim]> {
        self.tensor_type(value)?.shape.as_deref()
    }

    /// The dims of `value`, when every one is known and fixed.
    pub fn fixed_shape(&self, value: &str) -> Option<Vec<usize>> {
        self.shape(value)?.iter().map(Dim::fixed).collect()
    }

    /// True when `a` and `b` certainly have the same type and shape: known rank, and every
    /// dimension equal and fixed or the same symbol.
    pub fn same_type(&self, a: &str, b: &str) -> bool {
        match (self.tensor_type(a), self.tensor_type(b)) {
            (Some(x), Some(y)) => x == y && x.shape.as_ref().is_some_and(|s| !s.contains(&Dim::Unknown)),
            _ => false,
        }
    }

    /// True when `value` is a float tensor (f32, f64, f16, bf16).
    pub fn is_float(&self, value: &str) -> bool {
        matches!(self.dtype(value), Some(DataType::Float | DataType::Double | DataType::Float16 | DataType::BFloat16))
    }

    /// The context an EP sees for `node`, with `extra` constants (new initializers of a rewrite).
    pub fn context<'a>(&'a self, node: &'a Node, extra: &'a HashMap<String, Tensor>) -> Result<NodeContext<'a>> {
        self.context_typed(node, extra, &HashMap::new())
    }

    /// [`View::context`], with the types of `new` values (made by the nodes a rewrite adds).
    pub fn context_typed<'a>(
        &'a self,
        node: &'a Node,
        extra: &'a HashMap<String, Tensor>,
        new: &HashMap<String, TensorType>,
    ) -> Result<NodeContext<'a>> {
        let typed = |n: &String| -> ValueType {
            if let Some(t) = extra.get(n) {
                return ValueType::Tensor(TensorType::fixed(t.dtype(), t.shape()));
            }
            if let Some(t) = new.get(n) {
                return ValueType::Tensor(t.clone());
            }
            self.known.get(n).map_or(ValueType::Unknown, |k| k.ty.clone())
        };
        Ok(NodeContext {
            node,
            since_version: registry::since_version(node, &self.opsets)?,
            opsets: &self.opsets,
            input_types: node.inputs.iter().map(typed).collect(),
            constant_inputs: node.inputs.iter().map(|n| extra.get(n).or_else(|| self.constant(n))).collect(),
            subgraphs: &no_subgraphs,
        })
    }

    /// Index of the first provider (priority order) that takes `node`.
    pub fn placement(
        &self,
        node: &Node,
        extra: &HashMap<String, Tensor>,
        providers: &[Arc<dyn ExecutionProvider>],
    ) -> Option<usize> {
        self.placement_typed(node, extra, &HashMap::new(), providers)
    }

    /// [`View::placement`], with the types of `new` values.
    pub fn placement_typed(
        &self,
        node: &Node,
        extra: &HashMap<String, Tensor>,
        new: &HashMap<String, TensorType>,
        providers: &[Arc<dyn ExecutionProvider>],
    ) -> Option<usize> {
        let ctx = self.context_typed(node, extra, new).ok()?;
        providers.iter().position(|p| p.supports(&ctx))
    }
}

/// The elements of a float tensor as f64.
pub(crate) fn to_f64s(t: &Tensor) -> Option<Vec<f64>> {
    Some(match t.dtype() {
        DataType::Float => t.as_slice::<f32>().ok()?.iter().map(|&x| f64::from(x)).collect(),
        DataType::Double => t.as_slice::<f64>().ok()?.to_vec(),
        DataType::Float16 => t.as_slice::<half::f16>().ok()?.iter().map(|x| x.to_f64()).collect(),
        DataType::BFloat16 => t.as_slice::<half::bf16>().ok()?.iter().map(|x| x.to_f64()).collect(),
        _ => return None,
    })
}

/// A float tensor of `dtype` from f64 values (rounded once).
pub(crate) fn from_f64s(dtype: DataType, shape: Vec<usize>, v: Vec<f64>) -> Option<Tensor> {
    match dtype {
        DataType::Float => Tensor::from_vec(shape, v.into_iter().map(|x| x as f32).collect::<Vec<_>>()).ok(),
        DataType::Double => Tensor::from_vec(shape, v).ok(),
        DataType::Float16 => Tensor::from_vec(shape, v.into_iter().map(half::f16::from_f64).collect::<Vec<_>>()).ok(),
        DataType::BFloat16 => Tensor::from_vec(shape, v.into_iter().map(half::bf16::from_f64).collect::<Vec<_>>()).ok(),
        _ => None,
    }
}
