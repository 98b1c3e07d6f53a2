//! Test helpers: run one node on the wgpu EP (CPU fallback off) and on the CPU EP, and compare.
//!
//! Tests need an adapter. Without one they print a note and pass, except in CI (`CI=true`),
//! where a missing adapter fails them: CI installs Mesa's software Vulkan (lavapipe).

use std::sync::{Arc, OnceLock};

use onyx_core::ir::{AttrValue, Attribute, Graph, Model, Node};
use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx_core::{DataType, Element, InputValue, Session, SessionOptions, Tensor, Value};

use crate::{WgpuOptions, WgpuProvider};

/// The provider every test shares (one device for the whole test binary), or `None` when no
/// adapter exists outside CI. Its runs use the tuned pipelines only (no startup kernels).
pub(crate) fn provider() -> Option<Arc<WgpuProvider>> {
    static PROVIDER: OnceLock<Option<Arc<WgpuProvider>>> = OnceLock::new();
    PROVIDER.get_or_init(|| open(&WgpuOptions { no_startup_kernels: true, ..Default::default() })).clone()
}

/// A second provider (another device) whose runs use the startup kernels of the tiled GEMM
/// and convolutions only, so that tests check those kernels too.
pub(crate) fn startup_provider() -> Option<Arc<WgpuProvider>> {
    static PROVIDER: OnceLock<Option<Arc<WgpuProvider>>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            let p = open(&WgpuOptions::default())?;
            p.context().ok()?.always_startup.store(true, std::sync::atomic::Ordering::Relaxed);
            Some(p)
        })
        .clone()
}

/// A device of the test's own, or `None` when no adapter exists outside CI.
pub(crate) fn private_context() -> Option<Arc<crate::GpuContext>> {
    private_provider().and_then(|p| p.context().ok().cloned())
}

/// A provider with a device of the test's own, or `None` when no adapter exists outside CI.
pub(crate) fn private_provider() -> Option<Arc<WgpuProvider>> {
    open(&WgpuOptions::default())
}

fn open(options: &WgpuOptions) -> Option<Arc<WgpuProvider>> {
    match WgpuProvider::new(options).and_then(|p| p.context().map(|_| ()).map(|()| p)) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI=true and no wgpu adapter: {e}"),
        Err(e) => {
            eprintln!("skipping wgpu tests: {e}");
            None
        }
    }
}

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

/// A tensor of `shape` and `data`.
pub(crate) fn t<T: Element>(shape: &[usize], data: Vec<T>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data).unwrap()
}

/// A random f32 tensor with values in [lo, hi).
pub(crate) fn rand(shape: &[usize], lo: f32, hi: f32, seed: u64) -> Tensor {
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = shape.iter().product();
    t(shape, (0..n).map(|_| lo + rng.f32() * (hi - lo)).collect::<Vec<f32>>())
}

/// `n` random bytes.
pub(crate) fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| rng.u8(..)).collect()
}

/// A 1-D int64 tensor.
pub(crate) fn i64s(data: &[i64]) -> Tensor {
    t(&[data.len()], data.to_vec())
}

/// One node under test: its op, attributes, inputs (`None` for omitted optional ones) and which
/// inputs are initializers (constants) rather than graph inputs.
pub(crate) struct Case {
    pub op: &'static str,
    pub attributes: Vec<Attribute>,
    pub inputs: Vec<Option<Tensor>>,
    /// Inputs given as initializers (weights, shape inputs).
    pub constant: Vec<usize>,
    pub outputs: usize,
    pub opset: i64,
    /// The node's domain (empty: the default ONNX domain; contrib ops get opset 1 of theirs).
    pub domain: &'static str,
}

impl Case {
    /// A case of `op` with these inputs, all graph inputs, one output, opset 21.
    pub fn new(op: &'static str, inputs: Vec<Tensor>) -> Case {
        Case {
            op,
            attributes: vec![],
            inputs: inputs.into_iter().map(Some).collect(),
            constant: vec![],
            outputs: 1,
            opset: 21,
            domain: "",
        }
    }

    pub fn attrs(mut self, attributes: Vec<Attribute>) -> Case {
        self.attributes = attributes;
        self
    }

    pub fn constants(mut self, indices: &[usize]) -> Case {
        self.constant = indices.to_vec();
        self
    }

    pub fn outputs(mut self, n: usize) -> Case {
        self.outputs = n;
        self
    }

    pub fn opset(mut self, v: i64) -> Case {
        self.opset = v;
        self
    }

    /// Puts the node in `domain` (e.g. `com.microsoft`).
    pub fn domain(mut self, domain: &'static str) -> Case {
        self.domain = domain;
        self
    }

    pub fn model(&self) -> Model {
        let mut graph = Graph::default();
        let mut node = Node {
            name: "n".into(),
            op_type: self.op.into(),
            domain: self.domain.into(),
            attributes: self.attributes.clone(),
            ..Default::default()
        };
        for (i, input) in self.inputs.iter().enumerate() {
            let Some(tensor) = input else {
                node.inputs.push(String::new());
                continue;
            };
            let name = format!("x{i}");
            node.inputs.push(name.clone());
            if self.constant.contains(&i) {
                graph.initializers.insert(name, tensor.clone());
            } else {
                let shape = tensor.shape().iter().map(|&d| Dim::Fixed(d)).collect();
                graph.inputs.push(ValueInfo::new(
                    name,
                    ValueType::Tensor(TensorType { dtype: tensor.dtype(), shape: Some(shape) }),
                ));
            }
        }
        for o in 0..self.outputs {
            node.outputs.push(format!("y{o}"));
            graph.outputs.push(ValueInfo::new(format!("y{o}"), ValueType::Unknown));
        }
        graph.nodes.push(node);
        let mut model = Model { ir_version: 10, graph, ..Default::default() };
        model.opsets.insert(String::new(), self.opset);
        if !self.domain.is_empty() {
            model.opsets.insert(self.domain.into(), 1);
        }
        model
    }

    fn feeds(&self) -> Vec<(String, InputValue<'_>)> {
        self.inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.constant.contains(i))
            .filter_map(|(i, t)| t.as_ref().map(|t| (format!("x{i}"), InputValue::Value(Value::Tensor(t.clone())))))
            .collect()
    }

    /// Runs on the CPU EP alone.
    pub fn run_cpu(&self) -> Vec<Tensor> {
        let options = SessionOptions { providers: vec![Arc::new(onyx_cpu::CpuProvider::new())], ..Default::default() };
        run(Session::new(self.model(), options).unwrap(), self.feeds())
    }

    /// Runs on the wgpu EP with CPU fallback off (so the node must run on the GPU); errors are
    /// returned, for tests of bad input.
    pub fn try_run_gpu(&self, gpu: &Arc<WgpuProvider>) -> onyx_core::Result<Vec<Tensor>> {
        let options = SessionOptions { providers: vec![gpu.clone()], ..Default::default() };
        let session = Session::new(self.model(), options)?;
        let outputs = session.run(self.feeds())?;
        Ok(outputs.into_vec().into_iter().map(|(_, v)| v.as_tensor().unwrap().clone()).collect())
    }

    /// Runs on both EPs and asserts that every output matches: same dtype and shape, values
    /// within `atol + rtol * |cpu|`; on wgpu with the tuned kernels and with the startup ones.
    pub fn check(&self, rtol: f32, atol: f32) {
        let want = self.run_cpu();
        for (gpu, kernels) in [(provider(), "tuned"), (startup_provider(), "startup")] {
            let Some(gpu) = gpu else { return };
            let got = self.try_run_gpu(&gpu).unwrap_or_else(|e| panic!("{} on wgpu ({kernels} kernels): {e}", self.op));
            assert_eq!(got.len(), want.len());
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(g, w, rtol, atol, &format!("{} output {o} ({kernels} kernels)", self.op));
            }
        }
    }
}

fn run(session: Session, feeds: Vec<(String, InputValue<'_>)>) -> Vec<Tensor> {
    let outputs = session.run(feeds).unwrap();
    outputs.into_vec().into_iter().map(|(_, v)| v.as_tensor().unwrap().clone()).collect()
}

/// Asserts that two host tensors have the same dtype and shape and close values.
pub(crate) fn assert_close(got: &Tensor, want: &Tensor, rtol: f32, atol: f32, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (as_f32(got), as_f32(want));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
        assert!(ok, "{what}: element {i} is {a}, expected {b} (shape {:?})", want.shape());
    }
}

fn as_f32(t: &Tensor) -> Vec<f32> {
    match t.dtype() {
        DataType::Float => t.as_slice::<f32>().unwrap().to_vec(),
        DataType::Float16 => t.as_slice::<half::f16>().unwrap().iter().map(|h| h.to_f32()).collect(),
        DataType::Int64 => t.as_slice::<i64>().unwrap().iter().map(|&x| x as f32).collect(),
        DataType::Int32 => t.as_slice::<i32>().unwrap().iter().map(|&x| x as f32).collect(),
        DataType::Bool | DataType::Uint8 => t.view().unwrap().bytes().unwrap().iter().map(|&x| x as f32).collect(),
        DataType::Int8 => t.as_slice::<i8>().unwrap().iter().map(|&x| x as f32).collect(),
        d => panic!("compare {d:?}"),
    }
}
