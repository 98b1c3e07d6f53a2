//! Test helpers shared by the matmul, conv, pool and norm tests: random data, tolerant
//! comparison, and building and running a kernel from a hand-made node.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::{AttrValue, Attribute, Node, OpsetImports};
use onyx_core::{Error, Result, Tensor, Value};

use crate::BuildFn;

/// A small xorshift generator: deterministic random test data without a dependency.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next raw value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `[-1, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// `n` values in `[-1, 1)`.
    pub fn vec_f64(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.f64()).collect()
    }

    /// An integer in `lo..hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
}

/// Asserts that `got` and `want` have equal lengths and agree within `tol` (relative to the
/// magnitude, absolute near zero); NaNs must match NaNs.
pub(crate) fn assert_close<T: Copy + Into<f64>>(got: &[T], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g: f64 = g.into();
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// A node of `op` with `inputs` input names (empty strings for omitted ones) and attributes.
pub(crate) fn node(op: &str, inputs: &[&str], outputs: usize, attrs: Vec<(&str, AttrValue)>) -> Node {
    Node {
        name: "n".into(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: (0..outputs).map(|i| format!("y{i}")).collect(),
        attributes: attrs.into_iter().map(|(name, value)| Attribute { name: name.into(), value }).collect(),
        ..Default::default()
    }
}

/// An INTS attribute value.
pub(crate) fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

/// A STRING attribute value.
pub(crate) fn string(s: &str) -> AttrValue {
    AttrValue::String(s.as_bytes().to_vec())
}

/// Builds the kernel of `node` as opset `since_version` defines it.
pub(crate) fn build(build: BuildFn, node: &Node, since_version: i64) -> Result<Box<dyn Kernel>> {
    build_with_constants(build, node, since_version, vec![])
}

/// Builds the kernel of `node` with the inputs in `constants` known at build (initializers).
pub(crate) fn build_with_constants(
    build: BuildFn,
    node: &Node,
    since_version: i64,
    constants: Vec<Option<&Tensor>>,
) -> Result<Box<dyn Kernel>> {
    let opsets: OpsetImports = [(String::new(), since_version)].into();
    let no_subgraphs = |_: &onyx_core::ir::Graph| -> Result<std::sync::Arc<dyn onyx_core::ep::SubgraphRunner>> {
        Err(Error::InvalidArgument("no subgraphs".into()))
    };
    let ctx = NodeContext {
        node,
        since_version,
        opsets: &opsets,
        input_types: vec![],
        constant_inputs: constants,
        subgraphs: &no_subgraphs,
    };
    build(&ctx)
}

/// Runs a kernel on owned tensors (`None` for omitted inputs) with every output wanted.
pub(crate) fn run(kernel: &dyn Kernel, inputs: &[Option<Tensor>], outputs: usize) -> Result<Vec<Value>> {
    let values: Vec<Option<Value>> = inputs.iter().map(|t| t.clone().map(Value::Tensor)).collect();
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| v.as_ref().map(ValueRef::Value)).collect();
    kernel.run(&refs, &vec![true; outputs])
}

/// Builds and runs `node` on f32 inputs given as (shape, data); returns output 0 as (shape, data).
pub(crate) fn run_f32(
    build_fn: BuildFn,
    node: &Node,
    since: i64,
    inputs: &[Option<(&[usize], &[f32])>],
) -> Result<(Vec<usize>, Vec<f32>)> {
    let kernel = build(build_fn, node, since)?;
    let tensors: Vec<Option<Tensor>> = inputs
        .iter()
        .map(|i| i.map(|(shape, data)| Tensor::from_vec(shape.to_vec(), data.to_vec())).transpose())
        .collect::<Result<_>>()?;
    let out = run(kernel.as_ref(), &tensors, node.outputs.len())?;
    let t = out.into_iter().next().ok_or_else(|| Error::InvalidArgument("no output".into()))?.into_tensor()?;
    Ok((t.shape().to_vec(), t.as_slice::<f32>()?.to_vec()))
}

/// The f32 tensor `t` as f64 values.
pub(crate) fn to_f64(v: &Value) -> Vec<f64> {
    let t = v.as_tensor().expect("a tensor");
    match t.dtype() {
        onyx_core::DataType::Double => t.as_slice::<f64>().expect("f64").to_vec(),
        _ => t.as_slice::<f32>().expect("f32").iter().map(|&x| x as f64).collect(),
    }
}

/// Every index of `shape`, in row-major order.
pub(crate) fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let count: usize = shape.iter().product();
    (0..count)
        .map(|mut flat| {
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = flat % shape[d];
                flat /= shape[d];
            }
            idx
        })
        .collect()
}
