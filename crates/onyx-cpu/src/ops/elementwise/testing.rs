//! Test helpers shared by the elementwise, cast, reduce and softmax tests: attributes, building
//! a node's kernel through the registry, running it on tensors, random data and comparisons.

use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, SubgraphRunner, ValueRef};
use onyx_core::ir::{AttrValue, Attribute, Graph, Node, OpsetImports};
use onyx_core::{Element, Error, Result, Tensor, Value};

use crate::Registry;

/// An INT attribute.
pub(crate) fn attr_i(name: &str, v: i64) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Int(v) }
}

/// A FLOAT attribute.
pub(crate) fn attr_f(name: &str, v: f32) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Float(v) }
}

/// A STRING attribute.
pub(crate) fn attr_s(name: &str, v: &str) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::String(v.as_bytes().to_vec()) }
}

/// An INTS attribute.
pub(crate) fn attr_ints(name: &str, v: &[i64]) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Ints(v.to_vec()) }
}

fn no_subgraphs(_: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
    Err(Error::InvalidArgument("no subgraphs in these tests".into()))
}

/// The registry of the families under test.
fn registry() -> Registry {
    let mut r = Registry::default();
    crate::ops::elementwise::register(&mut r);
    crate::ops::cast::register(&mut r);
    crate::ops::reduce::register(&mut r);
    crate::ops::softmax::register(&mut r);
    r
}

/// Builds the kernel of a node `op` (named "n") with `attrs` for opset version `since`.
pub(crate) fn build(op: &str, since: i64, attrs: Vec<Attribute>) -> Result<Box<dyn Kernel>> {
    let node = Node { name: "n".into(), op_type: op.into(), attributes: attrs, ..Default::default() };
    let opsets = OpsetImports::from([(String::new(), since)]);
    let ctx = NodeContext {
        node: &node,
        since_version: since,
        opsets: &opsets,
        input_types: vec![],
        constant_inputs: vec![],
        subgraphs: &no_subgraphs,
    };
    let build = registry().get("", op).ok_or_else(|| Error::Unsupported(format!("{op} is not registered")))?;
    build(&ctx)
}

/// Builds and runs `op` on `inputs` (`None` for omitted ones); returns every output tensor.
pub(crate) fn run_opt(op: &str, since: i64, attrs: Vec<Attribute>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let kernel = build(op, since, attrs)?;
    let views = inputs.iter().map(|t| t.map(|t| t.view()).transpose()).collect::<Result<Vec<_>>>()?;
    let refs: Vec<Option<ValueRef<'_>>> = views.into_iter().map(|v| v.map(ValueRef::View)).collect();
    kernel.run(&refs, &[true])?.into_iter().map(Value::into_tensor).collect()
}

/// Builds and runs `op` on `inputs`; returns the first output.
pub(crate) fn run(op: &str, since: i64, attrs: Vec<Attribute>, inputs: &[&Tensor]) -> Result<Tensor> {
    let opt: Vec<Option<&Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
    run_opt(op, since, attrs, &opt)?.into_iter().next().ok_or_else(|| Error::InvalidArgument("no output".into()))
}

/// A tensor of `shape` holding `data`.
pub(crate) fn tensor<T: Element>(shape: &[usize], data: Vec<T>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data).expect("test tensor shape and data agree")
}

/// A boolean tensor.
pub(crate) fn bools(shape: &[usize], data: &[bool]) -> Tensor {
    Tensor::from_bools(shape.to_vec(), data.to_vec()).expect("test tensor shape and data agree")
}

/// The elements of a boolean tensor.
pub(crate) fn bool_values(t: &Tensor) -> Vec<bool> {
    t.view().and_then(|v| v.bytes().map(|b| b.iter().map(|&x| x != 0).collect())).expect("a host bool tensor")
}

/// `n` uniform random values in `lo..hi`, never exactly 0.
pub(crate) fn random_f32(rng: &mut fastrand::Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v = lo + (hi - lo) * rng.f32();
            if v == 0.0 {
                0.375
            } else {
                v
            }
        })
        .collect()
}

/// `n` random integers in `lo..=hi`.
pub(crate) fn random_i64(rng: &mut fastrand::Rng, n: usize, lo: i64, hi: i64) -> Vec<i64> {
    (0..n).map(|_| rng.i64(lo..=hi)).collect()
}

/// Asserts `|got - want| <= atol + rtol * |want|` elementwise (NaNs must match NaNs).
pub(crate) fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() { g.is_nan() } else { g == w || (g - w).abs() <= atol + rtol * w.abs() };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// The elements of a float tensor of any float type, as f64.
pub(crate) fn floats(t: &Tensor) -> Vec<f64> {
    let v = t.view().expect("a host tensor");
    match v.dtype() {
        onyx_core::DataType::Double => v.as_slice::<f64>().expect("f64").to_vec(),
        _ => crate::ops::util::to_f32(&v).expect("a float tensor").into_iter().map(f64::from).collect(),
    }
}

/// The elements of an integer tensor as i64.
pub(crate) fn ints(t: &Tensor) -> Vec<i64> {
    crate::ops::util::to_i64(&t.view().expect("a host tensor")).expect("an integer tensor")
}

/// The multi-index of flat position `flat` in `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

/// The flat position in an operand of `shape` read at output multi-index `index` under numpy
/// broadcasting (size-1 and missing dimensions repeat).
pub(crate) fn broadcast_source(index: &[usize], shape: &[usize]) -> usize {
    let pad = index.len() - shape.len();
    shape.iter().enumerate().fold(0, |acc, (d, &s)| acc * s + if s == 1 { 0 } else { index[d + pad] })
}

/// Naive numpy broadcasting of `f` over operands (as f64), output shape given.
pub(crate) fn naive_broadcast(
    operands: &[(&[f64], &[usize])],
    out_shape: &[usize],
    f: impl Fn(&[f64]) -> f64,
) -> Vec<f64> {
    let n: usize = out_shape.iter().product();
    (0..n)
        .map(|i| {
            let idx = unravel(i, out_shape);
            let args: Vec<f64> = operands.iter().map(|(x, s)| x[broadcast_source(&idx, s)]).collect();
            f(&args)
        })
        .collect()
}
