//! Test helpers for the kernels of this module and its sibling families: build a node by
//! hand, compile it through the family registrations and run it.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, SubgraphRunner, ValueRef};
use onyx_core::ir::{AttrValue, Attribute, Graph, Node, OpsetImports};
use onyx_core::{Element, Error, Result, Tensor, Value};

use crate::Registry;

/// An attribute (re-exported for test tables).
pub(crate) type Attr = Attribute;

/// An attribute.
pub(crate) fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute { name: name.into(), value }
}

/// An INT attribute.
pub(crate) fn int(name: &str, v: i64) -> Attribute {
    attr(name, AttrValue::Int(v))
}

/// An INTS attribute.
pub(crate) fn ints(name: &str, v: &[i64]) -> Attribute {
    attr(name, AttrValue::Ints(v.to_vec()))
}

/// A FLOAT attribute.
pub(crate) fn float(name: &str, v: f32) -> Attribute {
    attr(name, AttrValue::Float(v))
}

/// A FLOATS attribute.
pub(crate) fn floats(name: &str, v: &[f32]) -> Attribute {
    attr(name, AttrValue::Floats(v.to_vec()))
}

/// A STRING attribute.
pub(crate) fn string(name: &str, v: &str) -> Attribute {
    attr(name, AttrValue::String(v.as_bytes().to_vec()))
}

/// A STRINGS attribute.
pub(crate) fn strings_attr(name: &str, v: &[&str]) -> Attribute {
    attr(name, AttrValue::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect()))
}

/// A TENSOR attribute.
pub(crate) fn tensor_attr(name: &str, t: Tensor) -> Attribute {
    attr(name, AttrValue::Tensor(t))
}

/// A tensor of `shape` and `data` (panics on a length mismatch: test data only).
pub(crate) fn t<T: Element>(shape: &[usize], data: Vec<T>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data).unwrap()
}

/// A 1-D int64 tensor.
pub(crate) fn i64s(data: &[i64]) -> Tensor {
    t(&[data.len()], data.to_vec())
}

/// A string tensor.
pub(crate) fn strs(shape: &[usize], data: &[&str]) -> Tensor {
    Tensor::from_strings(shape.to_vec(), data.iter().map(|s| s.to_string()).collect()).unwrap()
}

/// `n` pseudo-random f32 values in [-10, 10), never all zero.
pub(crate) fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| rng.f32() * 20.0 - 10.0).collect()
}

/// `n` distinct-ish pseudo-random i64 values.
pub(crate) fn rand_i64(n: usize, seed: u64) -> Vec<i64> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| rng.i64(-1000..1000)).collect()
}

/// A node of `op` with inputs `x0..` (`""` where `present` is false) and `outputs` outputs.
pub(crate) fn node(op: &str, present: &[bool], outputs: usize, attributes: Vec<Attribute>) -> Node {
    Node {
        name: "n".into(),
        op_type: op.into(),
        inputs: present.iter().enumerate().map(|(i, &p)| if p { format!("x{i}") } else { String::new() }).collect(),
        outputs: (0..outputs).map(|i| format!("y{i}")).collect(),
        attributes,
        ..Default::default()
    }
}

/// The registry tests build nodes through: every family of the crate.
fn registry() -> Registry {
    Registry::with_all_ops()
}

/// A subgraph compiler for tests that have none.
pub(crate) fn no_subgraphs(_: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
    Err(Error::InvalidArgument("no subgraphs in this test".into()))
}

/// Builds `node` at opset `version` with `subgraphs` as the subgraph compiler.
pub(crate) fn build_with(
    node: &Node,
    version: i64,
    subgraphs: &dyn Fn(&Graph) -> Result<Arc<dyn SubgraphRunner>>,
) -> Result<Box<dyn onyx_core::ep::Kernel>> {
    let opsets: OpsetImports = [(String::new(), version)].into();
    let ctx = NodeContext {
        node,
        since_version: version,
        opsets: &opsets,
        input_types: vec![],
        constant_inputs: vec![],
        subgraphs,
    };
    let build = registry().get("", &node.op_type).ok_or_else(|| Error::Unsupported(node.op_type.clone()))?;
    build(&ctx)
}

/// Runs `op` at `version` on `inputs` (`None` = omitted) with `outputs` node outputs.
pub(crate) fn run_n(
    op: &str,
    version: i64,
    attrs: Vec<Attribute>,
    inputs: &[Option<Tensor>],
    outputs: usize,
) -> Result<Vec<Value>> {
    let present: Vec<bool> = inputs.iter().map(Option::is_some).collect();
    let n = node(op, &present, outputs, attrs);
    let kernel = build_with(&n, version, &no_subgraphs)?;
    let values: Vec<Option<Value>> = inputs.iter().map(|t| t.clone().map(Value::Tensor)).collect();
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
    kernel.run(&refs, &vec![true; outputs])
}

/// Runs a one-output `op` and returns its tensor.
pub(crate) fn run1(op: &str, version: i64, attrs: Vec<Attribute>, inputs: &[Option<Tensor>]) -> Result<Tensor> {
    let mut out = run_n(op, version, attrs, inputs, 1)?;
    match out.len() {
        1 => out.remove(0).into_tensor(),
        n => Err(Error::InvalidArgument(format!("expected one output, got {n}"))),
    }
}

/// The f32 elements and shape of a tensor.
pub(crate) fn f32s(t: &Tensor) -> (Vec<usize>, Vec<f32>) {
    (t.shape().to_vec(), t.as_slice::<f32>().unwrap().to_vec())
}

/// The i64 elements and shape of a tensor.
pub(crate) fn i64v(t: &Tensor) -> (Vec<usize>, Vec<i64>) {
    (t.shape().to_vec(), t.as_slice::<i64>().unwrap().to_vec())
}

/// Asserts two f32 slices agree within `tol` (absolute + relative).
pub(crate) fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
    }
}

/// A subgraph whose run is a Rust closure over its inputs (formal inputs, outer values).
pub(crate) struct FnBody<F>(pub F);

impl<F> SubgraphRunner for FnBody<F>
where
    F: Fn(&[ValueRef<'_>], &std::collections::HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>> + Send + Sync,
{
    fn run(
        &self,
        inputs: &[ValueRef<'_>],
        outer: &std::collections::HashMap<&str, ValueRef<'_>>,
    ) -> Result<Vec<Value>> {
        (self.0)(inputs, outer)
    }
}

/// A graph with `inputs` formal inputs and `outputs` outputs of unknown type (a body whose
/// behaviour a [`FnBody`] supplies).
pub(crate) fn graph_io(inputs: usize, outputs: usize) -> Graph {
    use onyx_core::types::{ValueInfo, ValueType};
    Graph {
        inputs: (0..inputs).map(|i| ValueInfo::new(format!("in{i}"), ValueType::Unknown)).collect(),
        outputs: (0..outputs).map(|i| ValueInfo::new(format!("out{i}"), ValueType::Unknown)).collect(),
        ..Default::default()
    }
}

/// Runs a node with a subgraph compiler on values (sequences and optionals included).
pub(crate) fn run_values(
    node: &Node,
    version: i64,
    subgraphs: &dyn Fn(&Graph) -> Result<Arc<dyn SubgraphRunner>>,
    inputs: &[Option<Value>],
) -> Result<Vec<Value>> {
    let kernel = build_with(node, version, subgraphs)?;
    let refs: Vec<Option<ValueRef<'_>>> = inputs.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
    kernel.run(&refs, &vec![true; node.outputs.len()])
}

/// A scalar f32 from a value.
pub(crate) fn scalar_f32(v: &Value) -> f32 {
    v.as_tensor().unwrap().as_slice::<f32>().unwrap()[0]
}
