//! The host buffer pool and in-place elementwise ops of the CPU EP: outputs are right whether
//! or not a node writes over its input, in-place fires only where it is legal (on an input the
//! caller handed over and holds no more, too), and a warm run
//! takes every output buffer from the pool. With `--ignored --nocapture`, allocations per run
//! and pool counters for the benchmark models (scripts/make_test_models.py, in
//! target/testmodels), with the pool on and off.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use onyx::ir::{Graph, Model, Node};
use onyx::types::{TensorType, ValueInfo, ValueType};
use onyx::{CpuProvider, DataType, OptimizationLevel, Session, SessionOptions, Tensor, TensorView, Value};

/// Counts heap allocations (of the whole test binary; the figures are read around single runs).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Allocations of at least [`BIG`] bytes: tensor buffers and large scratch, not metadata.
static BIG_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
const BIG: usize = 16 << 10;

fn count(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if size >= BIG {
        BIG_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const R: usize = 37;
const C: usize = 53; // 1961 elements: not a multiple of any vector width

fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node {
        name: format!("{op}_{output}"),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        ..Default::default()
    }
}

fn random(shape: &[usize], seed: u64) -> Vec<f32> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..shape.iter().product()).map(|_| rng.f32() * 4.0 - 2.0).collect()
}

fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(shape.to_vec(), random(shape, seed)).unwrap()
}

/// A model of `nodes` with float inputs `inputs` (name, shape), initializers and outputs.
fn model(nodes: Vec<Node>, inputs: &[(&str, &[usize])], init: &[(&str, Tensor)], outputs: &[&str]) -> Model {
    let info = |(n, s): &(&str, &[usize])| ValueInfo::new(*n, ValueType::Tensor(TensorType::fixed(DataType::Float, s)));
    Model {
        ir_version: 8,
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes,
            inputs: inputs.iter().map(info).collect(),
            outputs: outputs.iter().map(|o| ValueInfo::new(*o, ValueType::Unknown)).collect(),
            initializers: init.iter().map(|(n, t)| (n.to_string(), t.clone())).collect(),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn session(model: Model, pool: bool) -> Session {
    let options = SessionOptions {
        fallback: Some(Arc::new(CpuProvider::new())),
        optimization_level: OptimizationLevel::Disable,
        intra_op_threads: 2,
        ..Default::default()
    }
    .with_host_pool(pool);
    Session::new(model, options).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
}

/// Runs `model` with and without the pool on `inputs`; checks the outputs agree with `want`
/// and returns how many nodes wrote in place per run (the same at every run).
fn in_place_count(m: Model, inputs: &[(&str, Tensor)], want: &[Vec<f32>]) -> u64 {
    let plain = session(m.clone(), false);
    let pooled = session(m, true);
    let mut per_run = vec![];
    for _ in 0..3 {
        let before = pooled.host_pool_stats().unwrap().in_place;
        let got = pooled.run(inputs.iter().map(|(n, t)| (*n, t.clone()))).unwrap();
        per_run.push(pooled.host_pool_stats().unwrap().in_place - before);
        let reference = plain.run(inputs.iter().map(|(n, t)| (*n, t.clone()))).unwrap();
        for (i, w) in want.iter().enumerate() {
            let (g, r) = (floats(&got[i]), floats(&reference[i]));
            assert!(g == r, "output {i}: the pooled run differs from the plain one");
            assert_close(&g, w, &format!("output {i}"));
        }
    }
    assert!(per_run.windows(2).all(|w| w[0] == w[1]), "in-place counts per run differ: {per_run:?}");
    per_run[0]
}

/// Checks `got` against `want` to within f32 rounding of the reference formulas.
fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-6 + 1e-5 * w.abs(), "{what}: element {k} is {g}, expected {w}");
    }
}

fn relu(x: f32) -> f32 {
    x.max(0.0)
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn a_chain_of_elementwise_ops_runs_in_place() {
    // a = X * S; b = Relu(a); c = Sigmoid(b); d = Clip(c, 0.2, 0.7); Y = d + B (B broadcast)
    let (x, s, b) = (tensor(&[R, C], 1), tensor(&[R, C], 2), tensor(&[C], 3));
    let (lo, hi) = (Tensor::scalar(0.2f32), Tensor::scalar(0.7f32));
    let nodes = vec![
        node("Mul", &["X", "S"], "a"),
        node("Relu", &["a"], "b"),
        node("Sigmoid", &["b"], "c"),
        node("Clip", &["c", "lo", "hi"], "d"),
        node("Add", &["d", "B"], "Y"),
    ];
    let m = model(nodes, &[("X", &[R, C])], &[("S", s.clone()), ("B", b.clone()), ("lo", lo), ("hi", hi)], &["Y"]);
    let (xs, ss, bs) = (x.as_slice::<f32>().unwrap(), s.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
    let want: Vec<f32> = (0..R * C).map(|i| sigmoid(relu(xs[i] * ss[i])).clamp(0.2, 0.7) + bs[i % C]).collect();
    assert_eq!(in_place_count(m, &[("X", x)], &[want]), 4);
}

#[test]
fn a_value_read_later_is_not_overwritten() {
    // b = Relu(a) must not overwrite a, which Add reads after it; Add may overwrite either.
    let (x, s) = (tensor(&[R, C], 4), tensor(&[R, C], 5));
    let nodes = vec![node("Mul", &["X", "S"], "a"), node("Relu", &["a"], "b"), node("Add", &["a", "b"], "Y")];
    let m = model(nodes, &[("X", &[R, C])], &[("S", s.clone())], &["Y"]);
    let (xs, ss) = (x.as_slice::<f32>().unwrap(), s.as_slice::<f32>().unwrap());
    let want: Vec<f32> = (0..R * C).map(|i| xs[i] * ss[i] + relu(xs[i] * ss[i])).collect();
    assert_eq!(in_place_count(m, &[("X", x)], &[want]), 1);
}

#[test]
fn graph_outputs_weights_and_inputs_are_never_overwritten() {
    // a is a graph output; W a weight; X the caller's input; Mul(c, c) reads c twice.
    let (x, s, w) = (tensor(&[R, C], 6), tensor(&[R, C], 7), tensor(&[R, C], 8));
    let nodes = vec![
        node("Mul", &["X", "S"], "a"),
        node("Relu", &["a"], "b"),
        node("Neg", &["X"], "n"),
        node("Add", &["W", "n"], "c"),
        node("Mul", &["c", "c"], "Y"),
    ];
    let m = model(nodes, &[("X", &[R, C])], &[("S", s.clone()), ("W", w.clone())], &["a", "b", "Y"]);
    let (xs, ss, ws) = (x.as_slice::<f32>().unwrap(), s.as_slice::<f32>().unwrap(), w.as_slice::<f32>().unwrap());
    let a: Vec<f32> = (0..R * C).map(|i| xs[i] * ss[i]).collect();
    let b: Vec<f32> = a.iter().map(|&v| relu(v)).collect();
    let y: Vec<f32> = (0..R * C).map(|i| (ws[i] - xs[i]) * (ws[i] - xs[i])).collect();
    // Only Add(W, n) may write over n (its last use, made by Neg).
    let original = xs.to_vec();
    assert_eq!(in_place_count(m, &[("X", x.clone())], &[a, b, y]), 1);
    assert!(x.as_slice::<f32>().unwrap() == &original[..], "the caller's input changed");
    assert!(w.as_slice::<f32>().unwrap() == ws, "the weight changed");
}

#[test]
fn a_previous_output_fed_back_is_not_overwritten() {
    // Outputs come from the pool; fed back as an input that the caller still holds, a node
    // must not write over them.
    let m = model(vec![node("Sigmoid", &["X"], "Y")], &[("X", &[R, C])], &[], &["Y"]);
    let s = session(m, true);
    let first = s.run([("X", tensor(&[R, C], 9))]).unwrap();
    let y = first[0].as_tensor().unwrap().clone();
    let before = y.as_slice::<f32>().unwrap().to_vec();
    let second = s.run([("X", y.clone())]).unwrap();
    assert!(y.as_slice::<f32>().unwrap() == &before[..], "the caller's tensor changed");
    let want: Vec<f32> = before.iter().map(|&v| sigmoid(v)).collect();
    assert_close(&floats(&second[0]), &want, "Y");
    assert_eq!(s.host_pool_stats().unwrap().in_place, 0);
}

#[test]
fn a_previous_output_handed_back_is_written_in_place() {
    // Fed back by value with no other holder (a KV cache passed from step to step), the run
    // owns the buffer: a node may write its output over it.
    let m = model(vec![node("Sigmoid", &["X"], "Y")], &[("X", &[R, C])], &[], &["Y"]);
    let s = session(m, true);
    let first = s.run([("X", tensor(&[R, C], 9))]).unwrap();
    let y = first[0].as_tensor().unwrap().clone();
    drop(first);
    let want: Vec<f32> = y.as_slice::<f32>().unwrap().iter().map(|&v| sigmoid(v)).collect();
    let at = y.as_slice::<f32>().unwrap().as_ptr();
    let second = s.run([("X", y)]).unwrap();
    assert_close(&floats(&second[0]), &want, "Y");
    assert_eq!(s.host_pool_stats().unwrap().in_place, 1);
    assert_eq!(second[0].as_tensor().unwrap().as_slice::<f32>().unwrap().as_ptr(), at, "Y in X's buffer");
}

#[test]
fn views_of_the_callers_memory_are_read_not_donated() {
    // A graph input read last by a kernel that could write in place, given as a view: the run
    // reads the caller's memory and leaves it as it was (a donation would lose the input).
    let m = model(vec![node("Add", &["X", "Z"], "Y")], &[("X", &[R, C]), ("Z", &[R, C])], &[], &["Y"]);
    let s = session(m, true);
    let (x, z) = (tensor(&[R, C], 13), tensor(&[R, C], 14));
    let (xs, zs) = (x.as_slice::<f32>().unwrap().to_vec(), z.as_slice::<f32>().unwrap().to_vec());
    let want: Vec<f32> = xs.iter().zip(&zs).map(|(a, b)| a + b).collect();
    let shape = [R, C];
    for _ in 0..2 {
        let views =
            [("X", TensorView::from_slice(&shape, &xs).unwrap()), ("Z", TensorView::from_slice(&shape, &zs).unwrap())];
        let out = s.run(views).unwrap();
        assert_close(&floats(&out[0]), &want, "Y");
    }
    assert_eq!(s.host_pool_stats().unwrap().in_place, 0);
}

#[test]
fn broadcasts_that_grow_and_other_types_do_not_run_in_place() {
    // r = Relu(X[1, C] * S) is smaller than Add's output; Add(r, Z) must allocate. Cast to
    // double changes the element size; Mod (integer semantics) is never computed in place.
    let (x, s, z) = (tensor(&[1, C], 10), tensor(&[1, C], 11), tensor(&[R, C], 12));
    let nodes = vec![node("Mul", &["X", "S"], "r"), node("Add", &["r", "Z"], "Y")];
    let m = model(nodes, &[("X", &[1, C]), ("Z", &[R, C])], &[("S", s.clone())], &["Y"]);
    let (xs, ss, zs) = (x.as_slice::<f32>().unwrap(), s.as_slice::<f32>().unwrap(), z.as_slice::<f32>().unwrap());
    let want: Vec<f32> = (0..R * C).map(|i| xs[i % C] * ss[i % C] + zs[i]).collect();
    assert_eq!(in_place_count(m, &[("X", x.clone()), ("Z", z)], &[want]), 0);

    let cast = |input: &str, to: i64, output: &str| {
        let mut n = node("Cast", &[input], output);
        n.attributes.push(onyx::ir::Attribute { name: "to".into(), value: onyx::ir::AttrValue::Int(to) });
        n
    };
    let nodes = vec![node("Mul", &["X", "S"], "r"), cast("r", 11, "d"), cast("d", 1, "Y")];
    let m = model(nodes, &[("X", &[1, C])], &[("S", s.clone())], &["Y"]);
    let want: Vec<f32> = (0..C).map(|i| xs[i] * ss[i]).collect();
    assert_eq!(in_place_count(m, &[("X", x)], &[want]), 0);
}

#[test]
fn a_warm_run_takes_every_output_from_the_pool() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny_cnn/tiny_cnn.onnx");
    let model = onyx::load_model(&path).unwrap();
    let options =
        SessionOptions { fallback: Some(Arc::new(CpuProvider::new())), intra_op_threads: 2, ..Default::default() };
    let s = Session::new(model, options).unwrap();
    let name = s.inputs()[0].name.clone();
    let x = tensor(&[1, 3, 32, 32], 13);
    let first = s.run([(name.as_str(), x.clone())]).unwrap();
    let want = floats(&first[0]);
    drop(first);
    let warm = s.host_pool_stats().unwrap();
    assert!(warm.misses > 0 && warm.returned > 0, "{warm:?}");
    let second = s.run([(name.as_str(), x)]).unwrap();
    let after = s.host_pool_stats().unwrap();
    assert!(floats(&second[0]) == want, "the warm run's output differs");
    assert_eq!(after.misses, warm.misses, "the second run allocated outputs: {warm:?} then {after:?}");
    assert!(after.hits > warm.hits);
}

/// Allocations and pool counters per run of the benchmark models (see the module docs).
#[test]
#[ignore]
fn report_allocations_per_run() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels");
    for name in ["resnet18", "mobilenet_v2", "bert4"] {
        let case = dir.join(name);
        let Ok(model) = onyx::load_model(&case.join("model.onnx")) else {
            println!("{name}: no model in {}", case.display());
            continue;
        };
        let mut inputs = vec![];
        for entry in std::fs::read_dir(case.join("inputs")).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            inputs.push((stem, onyx::npy::read(&path).unwrap()));
        }
        for pool in [false, true] {
            let options = SessionOptions {
                fallback: Some(Arc::new(CpuProvider::new())),
                intra_op_threads: 2,
                ..Default::default()
            }
            .with_host_pool(pool);
            let s = Session::new(model.clone(), options).unwrap();
            let (mut counts, mut big) = (vec![], vec![]);
            for _ in 0..4 {
                let before = (ALLOCATIONS.load(Ordering::Relaxed), BIG_ALLOCATIONS.load(Ordering::Relaxed));
                let out = s.run(inputs.iter().map(|(n, t)| (n.as_str(), t.clone()))).unwrap();
                counts.push(ALLOCATIONS.load(Ordering::Relaxed) - before.0);
                big.push(BIG_ALLOCATIONS.load(Ordering::Relaxed) - before.1);
                drop(out);
            }
            let mut times = vec![];
            for _ in 0..20 {
                let start = std::time::Instant::now();
                drop(s.run(inputs.iter().map(|(n, t)| (n.as_str(), t.clone()))).unwrap());
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(f64::total_cmp);
            let p50 = times[times.len() / 2];
            println!(
                "{name} pool={pool}: allocations per run {counts:?}, of >= 16 KiB {big:?}, p50 {p50:.2} ms, pool {:?}",
                s.host_pool_stats()
            );
        }
    }
}
