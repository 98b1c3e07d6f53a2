//! Half-precision models on the CPU compute in f32, as ONNX Runtime's CPU EP does (its
//! InsertCastTransformer): the CPU EP's f16 and bf16 kernels convert every element anyway, and
//! its fast paths (packed GEMM weights, the NCHWc layout) are f32 only.
//!
//! The pass finds the half-precision nodes a CPU provider runs whose op computes the same in
//! any float type, groups the ones connected by half values, and converts each group that
//! holds a matrix product or convolution: its constant weights become f32 initializers once,
//! a Cast to f32 brings in each value it reads from outside, and a Cast back to the half type
//! gives each value it makes to an outside reader or a graph output. Results differ from the
//! half-precision graph only by the roundings f32 arithmetic avoids; what a caller sees (names,
//! types, shapes) is unchanged.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ::half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::fresh_name;
use super::view::View;
use crate::ep::ExecutionProvider;
use crate::ir::{AttrValue, Attribute, Model, Node, MS_DOMAIN, ONYX_DOMAIN};
use crate::types::TensorType;
use crate::{DataType, Device, Result, Tensor};

// Default-domain ops whose result in f32, rounded to the half type, is their half-precision
// result up to rounding (no type attribute, no bit-level reading of the values), by family.

/// Products and convolutions: the ops that make a group worth converting.
const PRODUCTS: &[&str] = &["Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"];

/// Normalization, pooling, resampling and reductions.
const NORMALIZATION: &[&str] = &[
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "RMSNormalization",
    "Softmax",
    "LogSoftmax",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Resize",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceL2",
];

/// Elementwise arithmetic and comparisons.
const ELEMENTWISE: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Relu",
    "LeakyRelu",
    "PRelu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Mish",
    "Softplus",
    "Softsign",
    "Erf",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Exp",
    "Log",
    "Sin",
    "Cos",
    "Clip",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "IsNaN",
    "IsInf",
];

/// Layout: moves values, whatever their type. Gather is left out: it mostly reads embedding
/// tables, which would double in f32 for a few rows read per run.
const LAYOUT: &[&str] = &[
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Concat",
    "Split",
    "Slice",
    "Expand",
    "Pad",
    "Tile",
    "Identity",
    "Shape",
    "Size",
    "DepthToSpace",
    "SpaceToDepth",
];

/// `com.microsoft` ops of the same kind.
const MS_OPS: &[&str] = &[
    "FusedConv",
    "FusedMatMul",
    "Attention",
    "MultiHeadAttention",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization",
    "BiasAdd",
];

/// Products of the other domains (fused forms, attention): with [`PRODUCTS`], the ops that make
/// a group worth its Casts, being most of a model's time, and the CPU EP's f32 kernels for them
/// several times faster than its half-precision ones.
const FUSED_PRODUCTS: &[&str] = &["FusedConv", "FusedMatMul", "FusedGemm", "Attention", "MultiHeadAttention"];

/// Converts the groups; returns the number of nodes converted.
pub(super) fn half_in_float(model: &mut Model, providers: &[Arc<dyn ExecutionProvider>]) -> Result<usize> {
    if !providers.iter().any(|p| p.device() == Device::Cpu) {
        return Ok(0);
    }
    let view = View::new(&model.graph, &model.opsets)?;
    let convert = groups(&view, providers);
    if convert.is_empty() {
        return Ok(0);
    }
    let Rewrite { nodes, initializers, .. } = Rewrite::new(&view, &convert).run();
    model.graph.nodes = nodes;
    model.graph.initializers.extend(initializers);
    Ok(convert.len())
}

/// The half type of node `i` when a CPU provider takes it, and takes it again with every value
/// of that type in f32: none for an op outside the lists above, a node with a subgraph, a value
/// of unknown type, or values of two half types.
fn half_type(view: &View<'_>, i: usize, providers: &[Arc<dyn ExecutionProvider>]) -> Option<DataType> {
    let node = view.node(i);
    let listed = match node.domain.as_str() {
        "" | "ai.onnx" => {
            [PRODUCTS, NORMALIZATION, ELEMENTWISE, LAYOUT].iter().any(|family| family.contains(&node.op_type.as_str()))
        }
        MS_DOMAIN => MS_OPS.contains(&node.op_type.as_str()),
        ONYX_DOMAIN => node.op_type == "FusedGemm",
        _ => false,
    };
    if !listed || node.subgraphs().next().is_some() {
        return None;
    }
    let mut half = None;
    for name in node.inputs.iter().chain(&node.outputs).filter(|n| !n.is_empty()) {
        match view.dtype(name)? {
            t @ (DataType::Float16 | DataType::BFloat16) if half.is_none_or(|h| h == t) => half = Some(t),
            DataType::Float16 | DataType::BFloat16 => return None,
            _ => {}
        }
    }
    let half = half?;
    let p = view.placement(node, &HashMap::new(), providers)?;
    if providers[p].device() != Device::Cpu {
        return None;
    }
    let mut new = HashMap::new();
    let renamed = rename(node, |name| {
        let t = view.tensor_type(name).filter(|t| t.dtype == half)?;
        let f32_name = format!("{name}\u{0}f32");
        new.insert(f32_name.clone(), TensorType { dtype: DataType::Float, shape: t.shape.clone() });
        Some(f32_name)
    });
    (view.placement_typed(&renamed, &HashMap::new(), &new, providers) == Some(p)).then_some(half)
}

/// `node` with each input and output that `f32_name` maps renamed.
fn rename(node: &Node, mut f32_name: impl FnMut(&str) -> Option<String>) -> Node {
    let mut new = node.clone();
    for name in new.inputs.iter_mut().chain(new.outputs.iter_mut()).filter(|n| !n.is_empty()) {
        if let Some(to) = f32_name(name) {
            *name = to;
        }
    }
    new
}

/// The nodes to convert: the groups (nodes of one half type joined by the values of that type
/// they share) that hold a product ([`PRODUCTS`], [`FUSED_PRODUCTS`]).
fn groups(view: &View<'_>, providers: &[Arc<dyn ExecutionProvider>]) -> HashSet<usize> {
    let n = view.graph.nodes.len();
    let types: Vec<Option<DataType>> = (0..n).map(|i| half_type(view, i, providers)).collect();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (i, t) in types.iter().enumerate() {
        let Some(t) = t else { continue };
        for name in view.node(i).inputs.iter().filter(|n| !n.is_empty()) {
            let Some(p) = view.producer(name) else { continue };
            if types[p] == Some(*t) && view.dtype(name) == Some(*t) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, p));
                parent[a] = b;
            }
        }
    }
    let heavy: HashSet<usize> = (0..n)
        .filter(|&i| {
            let op = view.node(i).op_type.as_str();
            types[i].is_some() && (PRODUCTS.contains(&op) || FUSED_PRODUCTS.contains(&op))
        })
        .map(|i| root(&mut parent, i))
        .collect();
    (0..n).filter(|&i| types[i].is_some() && heavy.contains(&root(&mut parent, i))).collect()
}

/// The rewrite's state: the new node list and the f32 twin of each half value it touched.
struct Rewrite<'v, 'g> {
    view: &'v View<'g>,
    convert: &'v HashSet<usize>,
    /// The f32 name of each half value converted nodes read or make.
    twins: HashMap<String, String>,
    taken: HashSet<String>,
    nodes: Vec<Node>,
    initializers: Vec<(String, Tensor)>,
}

impl<'v, 'g> Rewrite<'v, 'g> {
    fn new(view: &'v View<'g>, convert: &'v HashSet<usize>) -> Self {
        Rewrite { view, convert, twins: HashMap::new(), taken: HashSet::new(), nodes: vec![], initializers: vec![] }
    }

    fn run(mut self) -> Self {
        let view = self.view;
        for input in &view.graph.inputs {
            self.cast_in(&input.name);
        }
        for i in 0..view.graph.nodes.len() {
            let node = view.node(i);
            if !self.convert.contains(&i) {
                self.nodes.push(node.clone());
                node.outputs.iter().for_each(|o| self.cast_in(o));
                continue;
            }
            for name in &node.inputs {
                self.constant_in(name);
            }
            let renamed = rename(node, |name| self.twin(name));
            self.nodes.push(renamed);
            node.outputs.iter().for_each(|o| self.cast_out(o));
        }
        self
    }

    /// The half type of `name` when it is a value converted nodes read or make in f32.
    fn half(&self, name: &str) -> Option<DataType> {
        let t = self.view.dtype(name).filter(|t| matches!(t, DataType::Float16 | DataType::BFloat16))?;
        let touched = self.view.producer(name).is_some_and(|p| self.convert.contains(&p))
            || self.view.readers(name).iter().any(|r| self.convert.contains(r));
        touched.then_some(t)
    }

    /// The f32 name of half value `name` (made on first use).
    fn twin(&mut self, name: &str) -> Option<String> {
        self.half(name)?;
        if let Some(t) = self.twins.get(name) {
            return Some(t.clone());
        }
        let twin = fresh_name(self.view.graph, &format!("{name}_f32"), &self.taken);
        self.taken.insert(twin.clone());
        self.twins.insert(name.to_string(), twin.clone());
        Some(twin)
    }

    /// A Cast of `from` to type `to`, making `to_name`.
    fn cast(&mut self, from: String, to_name: String, to: DataType) {
        let attr = Attribute { name: "to".into(), value: AttrValue::Int(i64::from(to.onnx_code())) };
        self.nodes.push(Node {
            name: format!("{to_name}_cast"),
            op_type: "Cast".into(),
            inputs: vec![from],
            outputs: vec![to_name],
            attributes: vec![attr],
            ..Default::default()
        });
    }

    /// A value made outside the groups (graph input or other node) that a converted node
    /// reads: cast to f32 once, where it is made.
    fn cast_in(&mut self, name: &str) {
        let converted_reader = self.view.readers(name).iter().any(|r| self.convert.contains(r));
        if name.is_empty() || self.view.constant(name).is_some() || !converted_reader {
            return;
        }
        if let Some(twin) = self.twin(name) {
            self.cast(name.to_string(), twin, DataType::Float);
        }
    }

    /// A constant half input of a converted node: an f32 initializer, once.
    fn constant_in(&mut self, name: &str) {
        if self.twins.contains_key(name) {
            return;
        }
        let Some(values) = self.view.constant(name).and_then(to_f32) else { return };
        if let Some(twin) = self.twin(name) {
            self.initializers.push((twin, values));
        }
    }

    /// A value a converted node made, read outside the groups or a graph output: cast back to
    /// its half type under its own name.
    fn cast_out(&mut self, name: &str) {
        let Some(half) = self.half(name) else { return };
        let outside = self.view.is_output(name) || self.view.readers(name).iter().any(|r| !self.convert.contains(r));
        if let (true, Some(twin)) = (outside, self.twins.get(name).cloned()) {
            self.cast(twin, name.to_string(), half);
        }
    }
}

/// Elements each thread converts at a time.
const CONVERT_CHUNK: usize = 1 << 16;

/// A half-precision constant in f32 (in parallel, with the CPU's conversion instructions where
/// it has them: a model's weights are hundreds of MB).
fn to_f32(t: &Tensor) -> Option<Tensor> {
    let mut values = vec![0f32; t.len()];
    let chunks = values.par_chunks_mut(CONVERT_CHUNK);
    match t.dtype() {
        DataType::Float16 => {
            let src = t.as_slice::<::half::f16>().ok()?.par_chunks(CONVERT_CHUNK);
            chunks.zip(src).for_each(|(d, s)| s.convert_to_f32_slice(d));
        }
        DataType::BFloat16 => {
            let src = t.as_slice::<::half::bf16>().ok()?.par_chunks(CONVERT_CHUNK);
            chunks.zip(src).for_each(|(d, s)| s.convert_to_f32_slice(d));
        }
        _ => return None,
    }
    Tensor::from_vec(t.shape().to_vec(), values).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_convert_exactly_across_chunks() {
        let n = 2 * CONVERT_CHUNK + 5;
        let bits = |i: usize| (i.wrapping_mul(40503) % 0x7c00) as u16 ^ if i.is_multiple_of(3) { 0x8000 } else { 0 };
        let f16s: Vec<::half::f16> = (0..n).map(|i| ::half::f16::from_bits(bits(i))).collect();
        let bf16s: Vec<::half::bf16> = (0..n).map(|i| ::half::bf16::from_bits(bits(i))).collect();
        let want16: Vec<f32> = f16s.iter().map(|x| x.to_f32()).collect();
        let want_bf: Vec<f32> = bf16s.iter().map(|x| x.to_f32()).collect();
        for (t, want) in [(Tensor::from_vec(vec![n], f16s), want16), (Tensor::from_vec(vec![n], bf16s), want_bf)] {
            let t = t.unwrap();
            let got = to_f32(&t).unwrap();
            assert_eq!(got.shape(), [n]);
            assert_eq!(got.as_slice::<f32>().unwrap(), want, "{}", t.dtype());
        }
        assert!(to_f32(&Tensor::from_vec(vec![1], vec![1.0f32]).unwrap()).is_none());
    }
}
