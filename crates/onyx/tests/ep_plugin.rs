//! A second execution provider plugs in through the public seam: it takes some nodes, gets
//! copies inserted at the device boundaries, and the results match a CPU-only session.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use onyx::ep::{DeviceDescription, ExecutionProvider, Kernel, NodeContext, ValueRef};
use onyx::ir::{Graph, Model, Node};
use onyx::types::{TensorType, ValueInfo, ValueType};
use onyx::{DataType, Device, Error, Result, SessionBuilder, Tensor, TensorData, TensorView, Value};
use onyx_core::device::DeviceStorage;

const DEVICE: Device = Device::Other(7);

/// "Device memory" of the test EP: bytes the host cannot read directly.
#[derive(Debug)]
struct TestBuffer(Vec<u8>);

impl DeviceStorage for TestBuffer {
    fn device(&self) -> Device {
        DEVICE
    }
    fn byte_len(&self) -> usize {
        self.0.len()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn device_f32(t: &Tensor) -> Result<Vec<f32>> {
    let TensorData::Device(buf) = t.data() else { return Err(Error::Device("expected a device tensor".into())) };
    let buf = buf.as_any().downcast_ref::<TestBuffer>().ok_or_else(|| Error::Device("foreign buffer".into()))?;
    Ok(buf.0.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

fn to_device(shape: Vec<usize>, data: &[f32]) -> Result<Value> {
    let bytes = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    Ok(Value::Tensor(Tensor::from_device(DataType::Float, shape, Arc::new(TestBuffer(bytes)))?))
}

#[derive(Default)]
struct TestEp {
    uploads: AtomicUsize,
    downloads: AtomicUsize,
    /// The node of every kernel built, in order.
    builds: std::sync::Mutex<Vec<String>>,
    /// The name of the thread of every kernel run.
    run_threads: Arc<std::sync::Mutex<Vec<String>>>,
}

struct Elementwise {
    op: String,
    run_threads: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Kernel for Elementwise {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        self.run_threads.lock().unwrap().push(thread);
        let tensor = |i: usize| -> Result<&Tensor> {
            let v = inputs[i].and_then(|v| v.value()).ok_or_else(|| Error::Device("input not on device".into()))?;
            v.as_tensor()
        };
        let a = tensor(0)?;
        let x = device_f32(a)?;
        let y: Vec<f32> = match self.op.as_str() {
            "Relu" => x.iter().map(|v| v.max(0.0)).collect(),
            _ => {
                // Add with a bias broadcast along the last axis.
                let b = device_f32(tensor(1)?)?;
                x.iter().enumerate().map(|(i, v)| v + b[i % b.len()]).collect()
            }
        };
        Ok(vec![to_device(a.shape().to_vec(), &y)?])
    }
}

impl ExecutionProvider for TestEp {
    fn name(&self) -> &str {
        "test"
    }
    fn device(&self) -> Device {
        DEVICE
    }
    fn describe_devices(&self) -> Vec<DeviceDescription> {
        vec![DeviceDescription { device: DEVICE, name: "test device".into(), details: vec![] }]
    }
    fn supports(&self, ctx: &NodeContext<'_>) -> bool {
        matches!(ctx.node.op_type.as_str(), "Relu" | "Add")
    }
    fn build_kernel(&self, ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
        self.builds.lock().unwrap().push(ctx.node.name.clone());
        Ok(Box::new(Elementwise { op: ctx.node.op_type.clone(), run_threads: self.run_threads.clone() }))
    }
    fn upload(&self, tensor: TensorView<'_>) -> Result<Tensor> {
        self.uploads.fetch_add(1, Ordering::SeqCst);
        to_device(tensor.shape().to_vec(), tensor.as_slice::<f32>()?)?.into_tensor()
    }
    fn download(&self, tensor: &Tensor) -> Result<Tensor> {
        self.downloads.fetch_add(1, Ordering::SeqCst);
        Tensor::from_vec(tensor.shape().to_vec(), device_f32(tensor)?)
    }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> Node {
    Node {
        name: name.into(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// X → MatMul(W) [cpu] → Relu [test] → Add(B) [test] → Sigmoid [cpu] → Y
fn model() -> Model {
    let mut rng = fastrand::Rng::with_seed(7);
    let w: Vec<f32> = (0..5 * 3).map(|_| rng.f32() - 0.5).collect();
    let b: Vec<f32> = (0..3).map(|_| rng.f32() - 0.5).collect();
    let tensor = |dims: &[usize]| ValueType::Tensor(TensorType::fixed(DataType::Float, dims));
    Model {
        ir_version: 8,
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            name: "plugin".into(),
            nodes: vec![
                node("MatMul", "mm", &["X", "W"], &["h1"]),
                node("Relu", "relu", &["h1"], &["h2"]),
                node("Add", "add", &["h2", "B"], &["h3"]),
                node("Sigmoid", "sigmoid", &["h3"], &["Y"]),
            ],
            inputs: vec![ValueInfo::new("X", tensor(&[4, 5]))],
            outputs: vec![ValueInfo::new("Y", tensor(&[4, 3]))],
            initializers: BTreeMap::from([
                ("W".to_string(), Tensor::from_vec(vec![5, 3], w).unwrap()),
                ("B".to_string(), Tensor::from_vec(vec![3], b).unwrap()),
            ]),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn second_provider_takes_nodes_and_copies_are_inserted() {
    let ep = Arc::new(TestEp::default());
    let session = SessionBuilder::new().with_provider(ep.clone()).commit_from_model(model()).unwrap();
    let placement: Vec<(&str, &str)> =
        session.assignments().iter().map(|a| (a.node.as_str(), a.provider.as_str())).collect();
    assert_eq!(placement, [("mm", "cpu"), ("relu", "test"), ("add", "test"), ("sigmoid", "cpu")]);
    // One upload (MatMul → Relu) and one download (Add → Sigmoid) per run; B is uploaded once.
    assert_eq!(session.copies_per_run(), 2);
    assert_eq!(ep.uploads.load(Ordering::SeqCst), 1, "the initializer B is uploaded at session creation");

    let cpu = SessionBuilder::new().commit_from_model(model()).unwrap();
    let x: Vec<f32> = (0..20).map(|i| (i as f32 * 0.37).sin()).collect();
    let shape = [4, 5];
    for run in 1..=3 {
        let got = session.run([("X", TensorView::from_slice(&shape, &x).unwrap())]).unwrap();
        let want = cpu.run([("X", TensorView::from_slice(&shape, &x).unwrap())]).unwrap();
        let got = got.get("Y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec();
        let want = want.get("Y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        assert_eq!(ep.uploads.load(Ordering::SeqCst), 1 + run);
        assert_eq!(ep.downloads.load(Ordering::SeqCst), run);
    }
}

/// Runs shorter than a thread hand-off are made with the caller waiting on the run's thread
/// (not sleeping): kernels still run on the session's own threads, from any number of callers.
#[test]
fn short_runs_run_their_kernels_on_the_sessions_threads() {
    let ep = Arc::new(TestEp::default());
    let session =
        SessionBuilder::new().with_provider(ep.clone()).with_intra_threads(2).commit_from_model(model()).unwrap();
    let cpu = SessionBuilder::new().commit_from_model(model()).unwrap();
    let x: Vec<f32> = (0..20).map(|i| (i as f32 * 0.41).cos()).collect();
    let run = |s: &onyx::Session| -> Vec<f32> {
        let out = s.run([("X", TensorView::from_slice(&[4, 5], &x).unwrap())]).unwrap();
        out.get("Y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
    };
    let want = run(&cpu);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..200 {
                    assert_eq!(run(&session), want);
                }
            });
        }
    });
    let threads = ep.run_threads.lock().unwrap();
    assert_eq!(threads.len(), 2 * 800, "Relu and Add, every run");
    assert!(
        threads.iter().all(|t| t.starts_with("onyx-intra-")),
        "{:?}",
        threads.iter().find(|t| !t.starts_with("onyx-intra-"))
    );
}

#[test]
fn disabled_fallback_names_the_nodes_no_provider_takes() {
    let ep = Arc::new(TestEp::default());
    let err = SessionBuilder::new()
        .with_providers([])
        .with_provider(ep)
        .with_cpu_fallback(false)
        .commit_from_model(model())
        .err()
        .expect("MatMul and Sigmoid have no provider")
        .to_string();
    assert!(err.contains("MatMul node 'mm'") && err.contains("Sigmoid node 'sigmoid'"), "{err}");
    assert!(err.contains("CPU fallback is disabled"), "{err}");
}

/// X[N,5] → MatMul(W) [cpu] → Relu [test] → h2; Shape(h2) → Reshape(h2, shape) [cpu] → Add(B)
/// [test] → Y: a graph with free dimension N and shape arithmetic on a device value.
fn dynamic_model() -> Model {
    let mut m = model();
    let free = vec![onyx::types::Dim::Symbol("N".into()), onyx::types::Dim::Fixed(5)];
    m.graph.inputs =
        vec![ValueInfo::new("X", ValueType::Tensor(TensorType { dtype: DataType::Float, shape: Some(free) }))];
    m.graph.outputs = vec![ValueInfo::new("Y", ValueType::Unknown)];
    m.graph.nodes = vec![
        node("MatMul", "mm", &["X", "W"], &["h1"]),
        node("Relu", "relu", &["h1"], &["h2"]),
        node("Shape", "shape", &["h2"], &["s"]),
        node("Reshape", "reshape", &["h2", "s"], &["h3"]),
        node("Add", "add", &["h3", "B"], &["Y"]),
    ];
    m
}

fn run_y(session: &onyx::Session, n: usize) -> Vec<f32> {
    let x: Vec<f32> = (0..n * 5).map(|i| (i as f32 * 0.61).cos()).collect();
    let shape = [n, 5];
    let out = session.run([("X", TensorView::from_slice(&shape, &x).unwrap())]).unwrap();
    out.get("Y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn shape_arithmetic_on_known_shapes_is_folded_into_the_plan() {
    // The plan folds the Shape node (the optimizer, which would remove it, is off here).
    let fixed = SessionBuilder::new()
        .with_provider(Arc::new(TestEp::default()))
        .with_optimization_level(onyx::OptimizationLevel::Disable)
        .with_free_dimension_override_by_name("N", 4)
        .commit_from_model(dynamic_model())
        .unwrap();
    let placement = |s: &onyx::Session| -> Vec<(String, String)> {
        s.assignments().iter().map(|a| (a.node.clone(), a.provider.clone())).collect()
    };
    let want = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    assert_eq!(
        placement(&fixed),
        want(&[("mm", "cpu"), ("relu", "test"), ("shape", onyx::FOLDED), ("reshape", "cpu"), ("add", "test")])
    );
    // With the optimizer on, overrides apply first and constant folding removes the Shape node.
    let optimized = SessionBuilder::new()
        .with_provider(Arc::new(TestEp::default()))
        .with_free_dimension_override_by_name("N", 4)
        .commit_from_model(dynamic_model())
        .unwrap();
    assert_eq!(placement(&optimized), want(&[("mm", "cpu"), ("relu", "test"), ("reshape", "cpu"), ("add", "test")]));
    let free =
        SessionBuilder::new().with_provider(Arc::new(TestEp::default())).commit_from_model(dynamic_model()).unwrap();
    assert_eq!(free.assignments()[2].provider, "cpu", "with N free, Shape runs (on metadata only)");
}

#[test]
fn plans_for_new_input_shapes_are_cached_and_share_uploaded_weights() {
    let ep = Arc::new(TestEp::default());
    let session = SessionBuilder::new().with_provider(ep.clone()).commit_from_model(dynamic_model()).unwrap();
    let uploads_at_creation = ep.uploads.load(Ordering::SeqCst);
    assert_eq!(uploads_at_creation, 1, "B is uploaded once, when the session is made");
    let cpu = SessionBuilder::new().commit_from_model(dynamic_model()).unwrap();
    for (i, n) in [4, 7, 4, 1, 7].into_iter().enumerate() {
        let got = run_y(&session, n);
        let want = run_y(&cpu, n);
        assert_eq!(got.len(), n * 3);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "N={n}: {g} vs {w}");
        }
        // Per run: h1 up to the device, h2 down for Reshape, h3 up again for Add, Y down.
        // Plans made for new shapes reuse the device copy of B instead of uploading it again.
        assert_eq!(ep.uploads.load(Ordering::SeqCst), uploads_at_creation + 2 * (i + 1), "run {i} (N={n})");
    }
}

#[test]
fn plans_for_new_shapes_share_the_kernels_of_nodes_whose_inputs_did_not_change() {
    // X[N,5] → MatMul(W) [cpu] → h1; Relu(B) [test] → b2 (the same [3] in every plan);
    // Add(h1, b2) [test] → Y (its input shape follows N).
    let mut m = dynamic_model();
    m.graph.nodes = vec![
        node("MatMul", "mm", &["X", "W"], &["h1"]),
        node("Relu", "relu", &["B"], &["b2"]),
        node("Add", "add", &["h1", "b2"], &["Y"]),
    ];
    let ep = Arc::new(TestEp::default());
    let session = SessionBuilder::new()
        .with_provider(ep.clone())
        .with_optimization_level(onyx::OptimizationLevel::Disable)
        .commit_from_model(m.clone())
        .unwrap();
    let cpu =
        SessionBuilder::new().with_optimization_level(onyx::OptimizationLevel::Disable).commit_from_model(m).unwrap();
    for n in [2, 3, 4, 3] {
        assert_eq!(run_y(&session, n), run_y(&cpu, n), "N={n}");
    }
    let builds = ep.builds.lock().unwrap().clone();
    let count = |name: &str| builds.iter().filter(|b| *b == name).count();
    assert_eq!(count("relu"), 1, "{builds:?}");
    assert_eq!(count("add"), 4, "the general plan's and one per new N: {builds:?}");
}
