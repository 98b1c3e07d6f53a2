//! The graph optimizer end to end: each pattern fires (node counts before and after) and the
//! optimized session computes what the unoptimized one does on random data through the CPU
//! EP; the must-not-fire cases leave the graph alone; and real models (tiny_cnn, the models
//! `scripts/make_test_models.py` generates) give the same outputs at levels disable and all.
//! Fusions are checked at level extended; level all adds the CPU EP's NCHWc layout (the
//! "Layout" section), which fires only on CPUs with AVX2 or AVX-512.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use onyx::ir::{AttrValue, Attribute, Graph, Model, Node};
use onyx::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx::{npy, DataType, ExecutionProvider, OptimizationLevel, SessionBuilder, Tensor};

// ------------------------------------------------------------------------------------------
// Building small models

/// A graph under construction: float inputs with fixed shapes, initializers, nodes.
struct G {
    nodes: Vec<Node>,
    inputs: Vec<(String, Vec<usize>)>,
    /// Declared dims of inputs that differ from their fed shapes (symbolic dims).
    declared: BTreeMap<String, Vec<Dim>>,
    inits: BTreeMap<String, Tensor>,
    outputs: Vec<String>,
    rng: fastrand::Rng,
}

impl G {
    fn new(seed: u64) -> Self {
        G {
            nodes: vec![],
            inputs: vec![],
            declared: BTreeMap::new(),
            inits: BTreeMap::new(),
            outputs: vec![],
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    fn input(&mut self, name: &str, shape: &[usize]) -> String {
        self.inputs.push((name.into(), shape.to_vec()));
        name.into()
    }

    fn random(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> String {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| lo + (hi - lo) * self.rng.f32()).collect();
        self.inits.insert(name.into(), Tensor::from_vec(shape.to_vec(), v).unwrap());
        name.into()
    }

    fn int64s(&mut self, name: &str, v: &[i64]) -> String {
        self.inits.insert(name.into(), Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap());
        name.into()
    }

    fn scalar(&mut self, name: &str, v: f32) -> String {
        self.inits.insert(name.into(), Tensor::scalar(v));
        name.into()
    }

    fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<Attribute>) -> String {
        let out = format!("{}_{}", op.to_lowercase(), self.nodes.len());
        self.nodes.push(Node {
            name: format!("/{op}_{}", self.nodes.len()),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![out.clone()],
            attributes: attrs,
            ..Default::default()
        });
        out
    }

    fn output(&mut self, name: &str) {
        self.outputs.push(name.into());
    }

    fn model(&self, opset: i64) -> Model {
        let info = |(n, s): &(String, Vec<usize>)| {
            let t = match self.declared.get(n) {
                Some(dims) => TensorType { dtype: DataType::Float, shape: Some(dims.clone()) },
                None => TensorType::fixed(DataType::Float, s),
            };
            ValueInfo::new(n.clone(), ValueType::Tensor(t))
        };
        Model {
            ir_version: 8,
            opsets: BTreeMap::from([(String::new(), opset)]),
            graph: Graph {
                nodes: self.nodes.clone(),
                inputs: self.inputs.iter().map(info).collect(),
                outputs: self.outputs.iter().map(|o| ValueInfo::new(o.clone(), ValueType::Unknown)).collect(),
                initializers: self.inits.clone(),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Ints(v.to_vec()) }
}

fn int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Int(v) }
}

fn float(name: &str, v: f32) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::Float(v) }
}

fn string(name: &str, v: &str) -> Attribute {
    Attribute { name: name.into(), value: AttrValue::String(v.as_bytes().to_vec()) }
}

// ------------------------------------------------------------------------------------------
// Running and comparing

/// Ops of a model's graph, `domain:op` outside the default domain.
fn ops(model: &Model) -> Vec<String> {
    model
        .graph
        .nodes
        .iter()
        .map(|n| if n.domain.is_empty() { n.op_type.clone() } else { format!("{}:{}", n.domain, n.op_type) })
        .collect()
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DataType::Float => t.as_slice::<f32>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Double => t.as_slice::<f64>().unwrap().to_vec(),
        DataType::Float16 => t.as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f64()).collect(),
        DataType::BFloat16 => t.as_slice::<half::bf16>().unwrap().iter().map(|x| x.to_f64()).collect(),
        DataType::Int64 => t.as_slice::<i64>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Int32 => t.as_slice::<i32>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Bool | DataType::Uint8 => t.view().unwrap().bytes().unwrap().iter().map(|&x| x as f64).collect(),
        other => panic!("no comparison for {other}"),
    }
}

/// Runs `model` at `level` on `feeds`; returns the outputs by name and the optimized model.
fn run(model: &Model, level: OptimizationLevel, feeds: &[(String, Tensor)]) -> (BTreeMap<String, Tensor>, Model) {
    run_with(SessionBuilder::new(), model, level, feeds)
}

/// [`run`] from a builder with its providers chosen.
fn run_with(
    builder: SessionBuilder,
    model: &Model,
    level: OptimizationLevel,
    feeds: &[(String, Tensor)],
) -> (BTreeMap<String, Tensor>, Model) {
    let session = builder
        .with_optimization_level(level)
        .commit_from_model(model.clone())
        .unwrap_or_else(|e| panic!("session at level {level}: {e}"));
    let outputs = session
        .run(feeds.iter().map(|(n, t)| (n.clone(), t.clone())))
        .unwrap_or_else(|e| panic!("run at {level}: {e}"));
    let got = outputs.iter().map(|(n, v)| (n.to_string(), v.as_tensor().unwrap().clone())).collect();
    (got, session.model().clone())
}

/// Asserts equal shapes and values within `tol` (relative to the output's largest magnitude).
fn assert_same(want: &BTreeMap<String, Tensor>, got: &BTreeMap<String, Tensor>, tol: f64, what: &str) {
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "{what}: output names");
    for (name, w) in want {
        let g = &got[name];
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{what}: output {name}");
        let (gv, wv) = (as_f64(g), as_f64(w));
        let scale = wv.iter().fold(1e-6f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
            assert!(
                (a - b).abs() <= tol * scale || (a.is_nan() && b.is_nan()),
                "{what}: {name}[{i}]: got {a}, want {b}"
            );
        }
    }
}

/// Random feeds for a built graph's inputs.
fn feeds(g: &G, seed: u64) -> Vec<(String, Tensor)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    g.inputs
        .iter()
        .map(|(n, s)| {
            let v: Vec<f32> = (0..s.iter().product()).map(|_| rng.f32() * 4.0 - 2.0).collect();
            (n.clone(), Tensor::from_vec(s.clone(), v).unwrap())
        })
        .collect()
}

/// Runs `g` at levels disable, extended and all, checks equal outputs; returns the ops at
/// extended (the fusions) and at all (the layout too).
fn check_levels(g: &G, opset: i64, what: &str) -> (Vec<String>, Vec<String>) {
    let model = g.model(opset);
    let feeds = feeds(g, 99);
    let (want, plain) = run(&model, OptimizationLevel::Disable, &feeds);
    assert_eq!(ops(&plain), ops(&model), "{what}: level disable changes nothing");
    let (got, extended) = run(&model, OptimizationLevel::Extended, &feeds);
    assert_same(&want, &got, 1e-5, &format!("{what} (extended)"));
    let (got, all) = run(&model, OptimizationLevel::All, &feeds);
    assert_same(&want, &got, 1e-5, &format!("{what} (all)"));
    (ops(&extended), ops(&all))
}

/// [`check_levels`]: the ops at level extended.
fn check(g: &G, opset: i64, what: &str) -> Vec<String> {
    check_levels(g, opset, what).0
}

/// The ops at level extended for the wgpu provider (CPU fallback), its outputs checked against
/// the CPU's at level disable; `None` when there is no adapter ([`wgpu_provider`]).
fn check_gpu(g: &G, opset: i64, what: &str) -> Option<Vec<String>> {
    let gpu = wgpu_provider(what)?;
    let model = g.model(opset);
    let feeds = feeds(g, 99);
    let (want, _) = run(&model, OptimizationLevel::Disable, &feeds);
    let builder = SessionBuilder::new().with_providers([onyx::Provider::Custom(gpu)]);
    let (got, extended) = run_with(builder, &model, OptimizationLevel::Extended, &feeds);
    assert_same(&want, &got, 1e-4, &format!("{what} (wgpu, extended)"));
    Some(ops(&extended))
}

/// The shared wgpu provider; `None` when there is no adapter (outside CI: `CI=true` installs
/// Mesa's software Vulkan, and there a missing adapter fails).
fn wgpu_provider(what: &str) -> Option<std::sync::Arc<dyn ExecutionProvider>> {
    match onyx::shared_wgpu(&Default::default()) {
        Ok(p) => Some(p),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI=true and no wgpu adapter: {e}"),
        Err(e) => {
            eprintln!("skipping the wgpu half of {what}: {e}");
            None
        }
    }
}

/// The CPU EP's NCHWc block on this machine (`None`: level all adds no layout change).
fn nchwc_block() -> Option<usize> {
    onyx::CpuProvider::new().nchwc_block()
}

// ------------------------------------------------------------------------------------------
// Basic level

#[test]
fn identity_dropout_dead_nodes_and_constants_go() {
    let mut g = G::new(1);
    let x = g.input("x", &[3, 5]);
    let a = g.random("a", &[5], -1.0, 1.0);
    let b = g.random("b", &[5], -1.0, 1.0);
    let ab = g.op("Add", &[&a, &b], vec![]); // constant: folded
    let i = g.op("Identity", &[&x], vec![]);
    let d = g.op("Dropout", &[&i], vec![]);
    let y = g.op("Mul", &[&d, &ab], vec![]);
    let _dead = g.op("Sigmoid", &[&y], vec![]); // nobody reads it
    let out = g.op("Identity", &[&y], vec![]); // a graph output: Mul writes it directly
    g.output(&out);
    assert_eq!(check(&g, 17, "basic clean-ups"), ["Mul"]);
}

#[test]
fn identities_of_one_weight_go_at_once_and_share_it() {
    // Exporters tie equal weights through Identity nodes of one initializer: all of them go,
    // more than the optimizer's rounds, and the weight is shared, not copied.
    let mut g = G::new(6);
    let mut y = g.input("x", &[3, 5]);
    let w = g.random("w", &[5], -1.0, 1.0);
    for _ in 0..12 {
        let tied = g.op("Identity", &[&w], vec![]);
        y = g.op("Add", &[&y, &tied], vec![]);
    }
    g.output(&y);
    assert_eq!(check(&g, 17, "tied weights"), vec!["Add"; 12]);
    let (_, optimized) = run(&g.model(17), OptimizationLevel::Basic, &feeds(&g, 1));
    assert_eq!(optimized.graph.initializers.keys().collect::<Vec<_>>(), ["w"]);
}

#[test]
fn constant_of_shape_over_16_mib_is_not_folded() {
    let mut g = G::new(2);
    let x = g.input("x", &[2]);
    g.inits.insert("big".into(), Tensor::from_vec(vec![2], vec![2048i64, 4096]).unwrap());
    g.inits.insert("small".into(), Tensor::from_vec(vec![1], vec![2i64]).unwrap());
    let huge = g.op("ConstantOfShape", &["big"], vec![]);
    let tiny = g.op("ConstantOfShape", &["small"], vec![]);
    let s = g.op("ReduceSum", &[&huge], vec![int("keepdims", 0)]);
    let t = g.op("Add", &[&x, &tiny], vec![]);
    let y = g.op("Add", &[&t, &s], vec![]);
    g.output(&y);
    let after = check(&g, 17, "ConstantOfShape");
    assert_eq!(after, ["ConstantOfShape", "ReduceSum", "Add", "Add"], "only the 8-byte constant is folded");
}

/// A chain of `depth` float nodes on constants (ops inference does not evaluate, so the CPU EP
/// folds each): `a = Sqrt(a * a + b)`, repeated.
fn constant_chain(g: &mut G, depth: usize) -> String {
    let mut a = g.random("a", &[7], -2.0, 2.0);
    let b = g.random("b", &[7], 0.5, 1.5);
    for _ in 0..depth {
        let sq = g.op("Mul", &[&a, &a], vec![]);
        let sum = g.op("Add", &[&sq, &b], vec![]);
        a = g.op("Sqrt", &[&sum], vec![]);
    }
    a
}

#[test]
fn a_constant_chain_deeper_than_the_rounds_folds_whole() {
    // 60 nodes deep: more than the optimizer's rounds, each of which runs the folding pass once.
    let mut g = G::new(3);
    let x = g.input("x", &[3, 7]);
    let a = constant_chain(&mut g, 20);
    let y = g.op("Add", &[&x, &a], vec![]);
    g.output(&y);
    assert_eq!(check(&g, 17, "constant chain"), ["Add"]);
}

#[test]
fn shape_arithmetic_through_data_dependent_nodes_folds_in_one_pass() {
    // Each Pad's pads are computed from the shape of the Pad before it, through float ops
    // inference does not evaluate: the next Shape is known only once the pads were folded.
    // Ten levels: more than the optimizer's rounds, so the pass must infer as it folds.
    let mut g = G::new(5);
    let mut cur = g.input("x", &[3, 7]);
    for _ in 0..10 {
        let shape = g.op("Shape", &[&cur], vec![]);
        let f = g.op("Cast", &[&shape], vec![int("to", 1)]);
        let ones = g.op("Div", &[&f, &f], vec![]);
        let ones = g.op("Floor", &[&ones], vec![]);
        let ones = g.op("Cast", &[&ones], vec![int("to", 7)]);
        let pads = g.op("Concat", &[&ones, &ones], vec![int("axis", 0)]);
        cur = g.op("Pad", &[&cur, &pads], vec![]);
    }
    g.output(&cur);
    assert_eq!(check(&g, 17, "shape-dependent pads"), vec!["Pad"; 10]);
}

#[test]
fn a_shape_computed_by_folding_is_checked_against_the_size_limit() {
    // The shapes are floats rounded and cast in the pass, so only inference on the folded
    // inputs tells how big each ConstantOfShape would be: 32 MiB stays a node, 8 bytes folds.
    let mut g = G::new(4);
    let x = g.input("x", &[2]);
    g.inits.insert("big".into(), Tensor::from_vec(vec![2], vec![2048.2f32, 4096.4]).unwrap());
    g.inits.insert("small".into(), Tensor::from_vec(vec![1], vec![2.3f32]).unwrap());
    let cast = |g: &mut G, v: &str| {
        let f = g.op("Floor", &[v], vec![]);
        g.op("Cast", &[&f], vec![int("to", 7)])
    };
    let (big, small) = (cast(&mut g, "big"), cast(&mut g, "small"));
    let huge = g.op("ConstantOfShape", &[&big], vec![]);
    let tiny = g.op("ConstantOfShape", &[&small], vec![]);
    let s = g.op("ReduceSum", &[&huge], vec![int("keepdims", 0)]);
    let t = g.op("Add", &[&x, &tiny], vec![]);
    let y = g.op("Add", &[&t, &s], vec![]);
    g.output(&y);
    assert_eq!(check(&g, 17, "computed shapes"), ["ConstantOfShape", "ReduceSum", "Add", "Add"]);
}

// ------------------------------------------------------------------------------------------
// Convolutions

/// Conv(x) → BatchNormalization → Relu, optionally with the Conv output also a graph output.
fn conv_bn_relu(conv_out_visible: bool, bn_scale_is_input: bool) -> G {
    let mut g = G::new(3);
    let x = g.input("x", &[2, 3, 9, 7]);
    let w = g.random("w", &[4, 3, 3, 3], -0.5, 0.5);
    let b = g.random("b", &[4], -0.5, 0.5);
    let c = g.op("Conv", &[&x, &w, &b], vec![ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 1])]);
    let scale = if bn_scale_is_input { g.input("scale", &[4]) } else { g.random("scale", &[4], 0.5, 1.5) };
    let bias = g.random("bias", &[4], -0.5, 0.5);
    let mean = g.random("mean", &[4], -0.5, 0.5);
    let var = g.random("var", &[4], 0.5, 1.5);
    let bn = g.op("BatchNormalization", &[&c, &scale, &bias, &mean, &var], vec![float("epsilon", 1e-3)]);
    let y = g.op("Relu", &[&bn], vec![]);
    g.output(&y);
    if conv_out_visible {
        g.output(&c);
    }
    g
}

#[test]
fn conv_batch_norm_relu_becomes_one_fused_conv() {
    assert_eq!(check(&conv_bn_relu(false, false), 17, "Conv+BN+Relu"), ["com.microsoft:FusedConv"]);
}

#[test]
fn conv_fusions_do_not_fire_on_visible_or_variable_values() {
    let after = check(&conv_bn_relu(true, false), 17, "Conv output is a graph output");
    assert_eq!(after, ["Conv", "BatchNormalization", "Relu"]);
    let after = check(&conv_bn_relu(false, true), 17, "BN scale is an input");
    assert_eq!(after, ["Conv", "BatchNormalization", "Relu"]);
}

#[test]
fn conv_residual_and_activations_fuse() {
    // (activation op, its attributes / bound inputs, expected activation)
    for act in ["Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"] {
        let mut g = G::new(4);
        let x = g.input("x", &[1, 4, 8, 6]);
        let z = g.input("z", &[1, 5, 8, 6]);
        let w = g.random("w", &[5, 4, 3, 3], -0.5, 0.5);
        let c = g.op("Conv", &[&x, &w], vec![ints("pads", &[1, 1, 1, 1])]);
        let s = g.op("Add", &[&z, &c], vec![]);
        let y = match act {
            "Clip" => {
                let (lo, hi) = (g.scalar("lo", -0.5), g.scalar("hi", 0.75));
                g.op("Clip", &[&s, &lo, &hi], vec![])
            }
            "LeakyRelu" => g.op(act, &[&s], vec![float("alpha", 0.2)]),
            "HardSigmoid" => g.op(act, &[&s], vec![float("alpha", 0.3), float("beta", 0.4)]),
            _ => g.op(act, &[&s], vec![]),
        };
        g.output(&y);
        assert_eq!(check(&g, 17, act), ["com.microsoft:FusedConv"], "{act}");
    }
}

#[test]
fn conv_add_with_a_broadcast_operand_is_not_fused() {
    let mut g = G::new(5);
    let x = g.input("x", &[1, 4, 8, 6]);
    let w = g.random("w", &[5, 4, 3, 3], -0.5, 0.5);
    let bias = g.random("bias", &[5, 1, 1], -0.5, 0.5);
    let c = g.op("Conv", &[&x, &w], vec![]);
    let s = g.op("Add", &[&c, &bias], vec![]);
    g.output(&s);
    assert_eq!(check(&g, 17, "broadcast add"), ["Conv", "Add"]);
}

// ------------------------------------------------------------------------------------------
// Layout (level all): NCHWc on the CPU EP

/// A small CNN with every NCHWc pattern: a 3-channel stem (read as NCHW), MaxPool, a
/// residual block (FusedConv with Z), a depthwise Conv with Clip, a SAME_UPPER Conv, an
/// AveragePool, channel counts that are no multiple of a block, batch 2; one blocked value is
/// also read by a plain op (ReduceMean) and one is a graph output; GlobalAveragePool ends it.
fn blocked_cnn() -> G {
    let mut g = G::new(21);
    let x = g.input("x", &[2, 3, 19, 17]);
    let w0 = g.random("w0", &[20, 3, 3, 3], -0.5, 0.5);
    let b0 = g.random("b0", &[20], -0.5, 0.5);
    let c0 = g.op("Conv", &[&x, &w0, &b0], vec![ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])]);
    let r0 = g.op("Relu", &[&c0], vec![]);
    let p0 = g.op(
        "MaxPool",
        &[&r0],
        vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
    );
    let w1 = g.random("w1", &[20, 20, 3, 3], -0.3, 0.3);
    let c1 = g.op("Conv", &[&p0, &w1], vec![ints("pads", &[1, 1, 1, 1])]);
    let a1 = g.op("Add", &[&c1, &p0], vec![]);
    let r1 = g.op("Relu", &[&a1], vec![]);
    let wd = g.random("wd", &[20, 1, 3, 3], -0.5, 0.5);
    let d = g.op("Conv", &[&r1, &wd], vec![int("group", 20), ints("pads", &[1, 1, 1, 1])]);
    let (lo, hi) = (g.scalar("lo", 0.0), g.scalar("hi", 6.0));
    let d = g.op("Clip", &[&d, &lo, &hi], vec![]);
    let w2 = g.random("w2", &[33, 20, 2, 2], -0.3, 0.3);
    let c2 = g.op(
        "Conv",
        &[&d, &w2],
        vec![Attribute { name: "auto_pad".into(), value: AttrValue::String(b"SAME_UPPER".to_vec()) }],
    );
    let s2 = g.op("Sigmoid", &[&c2], vec![]);
    let p2 = g.op("AveragePool", &[&s2], vec![ints("kernel_shape", &[2, 2]), ints("strides", &[1, 1])]);
    let gp = g.op("GlobalAveragePool", &[&p2], vec![]);
    let mean = g.op("ReduceMean", &[&r1], vec![ints("axes", &[1]), int("keepdims", 1)]);
    g.output(&gp);
    g.output(&mean);
    g.output(&c2);
    g
}

#[test]
fn conv_chains_run_blocked_at_level_all_with_the_same_results() {
    let (extended, all) = check_levels(&blocked_cnn(), 17, "blocked CNN");
    assert!(!extended.iter().any(|o| o.starts_with("ai.onyx:Nchwc")), "extended: no layout change: {extended:?}");
    if nchwc_block().is_none() {
        return;
    }
    let count = |op: &str| all.iter().filter(|o| o.as_str() == op).count();
    assert_eq!(count("ai.onyx:NchwcConv"), 4, "{all:?}");
    for op in ["ai.onyx:NchwcMaxPool", "ai.onyx:NchwcAveragePool", "ai.onyx:NchwcGlobalAveragePool"] {
        assert_eq!(count(op), 1, "{op}: {all:?}");
    }
    assert_eq!(count("ai.onyx:ReorderInput"), 0, "the stem reads NCHW: {all:?}");
    // Back to NCHW: the ReduceMean's input, the Conv output and the pooled graph outputs.
    assert_eq!(count("ai.onyx:ReorderOutput"), 3, "{all:?}");
    assert!(!all.iter().any(|o| o == "Conv" || o == "com.microsoft:FusedConv"), "{all:?}");
}

#[test]
fn optimized_blocked_model_saves_and_runs_the_same() {
    if nchwc_block().is_none() {
        return;
    }
    let g = blocked_cnn();
    let model = g.model(17);
    let feeds = feeds(&g, 5);
    let (want, optimized) = run(&model, OptimizationLevel::All, &feeds);
    let bytes = onyx::model_to_bytes(&optimized).unwrap();
    let reloaded = onyx::load_model_from_bytes(&bytes, None).unwrap();
    assert!(ops(&reloaded).iter().any(|o| o == "ai.onyx:NchwcConv"));
    let (got, _) = run(&reloaded, OptimizationLevel::Disable, &feeds);
    assert_same(&want, &got, 1e-6, "saved blocked model");
}

// ------------------------------------------------------------------------------------------
// Half precision on the CPU

/// `t` (f32) in `dtype` (f16 or bf16); other tensors as they are.
fn to_half(t: &Tensor, dtype: DataType) -> Tensor {
    let Ok(v) = t.as_slice::<f32>() else { return t.clone() };
    let shape = t.shape().to_vec();
    match dtype {
        DataType::Float16 => Tensor::from_vec(shape, v.iter().map(|&x| half::f16::from_f32(x)).collect()).unwrap(),
        _ => Tensor::from_vec(shape, v.iter().map(|&x| half::bf16::from_f32(x)).collect()).unwrap(),
    }
}

/// `feeds` in `dtype`.
fn half_feeds(feeds: &[(String, Tensor)], dtype: DataType) -> Vec<(String, Tensor)> {
    feeds.iter().map(|(n, t)| (n.clone(), to_half(t, dtype))).collect()
}

/// `g`'s model with its float inputs and initializers in `dtype`.
fn half_model(g: &G, dtype: DataType) -> Model {
    let mut model = g.model(17);
    for input in &mut model.graph.inputs {
        if let ValueType::Tensor(t) = &mut input.ty {
            t.dtype = dtype;
        }
    }
    for t in model.graph.initializers.values_mut() {
        *t = to_half(t, dtype);
    }
    model
}

/// A convolution into a product and a guarded Softmax in half precision; a CumSum (an op the
/// pass leaves alone) reads the Relu, a Sigmoid (a group without a product) the CumSum, and the
/// Conv's output is also a graph output.
fn half_graph() -> G {
    let mut g = G::new(31);
    let x = g.input("x", &[2, 5, 9, 11]);
    let w = g.random("w", &[8, 5, 3, 3], -0.5, 0.5);
    let b = g.random("b", &[8], -0.5, 0.5);
    let c = g.op("Conv", &[&x, &w, &b], vec![ints("pads", &[1, 1, 1, 1])]);
    let r = g.op("Relu", &[&c], vec![]);
    let shape = g.int64s("shape", &[2, 8, 99]);
    let rows = g.op("Reshape", &[&r, &shape], vec![]);
    let wm = g.random("wm", &[99, 7], -0.3, 0.3);
    let y = g.op("MatMul", &[&rows, &wm], vec![]);
    // Softmax's NaN guard as torch exports it for f16 attention.
    let p = g.op("Softmax", &[&y], vec![int("axis", -1)]);
    let nan = g.op("IsNaN", &[&p], vec![]);
    let zero = g.scalar("zero", 0.0);
    let y = g.op("Where", &[&nan, &zero, &p], vec![]);
    let axis = g.int64s("axis", &[3]);
    let sums = g.op("CumSum", &[&r, &axis], vec![]);
    let s = g.op("Sigmoid", &[&sums], vec![]);
    g.output(&y);
    g.output(&c);
    g.output(&s);
    g
}

#[test]
fn half_precision_groups_on_the_cpu_compute_in_float() {
    let g = half_graph();
    let feeds32 = feeds(&g, 8);
    let (exact, _) = run(&g.model(17), OptimizationLevel::Disable, &feeds32);
    // (type, its relative rounding): bf16 keeps 8 bits of mantissa, f16 11.
    for (dtype, eps) in [(DataType::Float16, 1e-3), (DataType::BFloat16, 8e-3)] {
        let model = half_model(&g, dtype);
        let feeds = half_feeds(&feeds32, dtype);
        let (plain, _) = run(&model, OptimizationLevel::Disable, &feeds);
        let (got, optimized) = run(&model, OptimizationLevel::Extended, &feeds);
        let nodes = ops(&optimized);
        // In: x. Back: the Conv output (a graph output), the Relu (for the CumSum), the guarded
        // Softmax (a graph output).
        assert_eq!(nodes.iter().filter(|o| *o == "Cast").count(), 4, "{dtype}: {nodes:?}");
        let weights: Vec<DataType> =
            ["w_f32", "wm_f32"].iter().map(|w| optimized.graph.initializers[*w].dtype()).collect();
        assert_eq!(weights, [DataType::Float; 2], "{dtype}: the weights are f32 once");
        assert!(!optimized.graph.initializers.contains_key("w"), "{dtype}: the half weights go");
        // Each output, rounded to the half type once, is within a few roundings of the exact
        // one; the half-precision graph itself is no closer.
        let exact_in_half: BTreeMap<String, Tensor> =
            exact.iter().map(|(n, t)| (n.clone(), to_half(t, dtype))).collect();
        assert_same(&exact_in_half, &got, 4.0 * eps, &format!("{dtype} in f32 against f32"));
        assert_same(&plain, &got, 16.0 * eps, &format!("{dtype} in f32 against {dtype}"));
        // Level all: the f32 convolution runs blocked.
        let (got, all) = run(&model, OptimizationLevel::All, &feeds);
        assert_same(&exact_in_half, &got, 4.0 * eps, &format!("{dtype} at level all"));
        let blocked = ops(&all).iter().any(|o| o == "ai.onyx:NchwcConv");
        assert_eq!(blocked, nchwc_block().is_some(), "{dtype}: {:?}", ops(&all));
    }
}

#[test]
fn half_precision_stays_half_on_the_gpu() {
    let Some(gpu) = wgpu_provider("half precision") else { return };
    let g = half_graph();
    let model = half_model(&g, DataType::Float16);
    let feeds = half_feeds(&feeds(&g, 8), DataType::Float16);
    let builder = SessionBuilder::new().with_providers([onyx::Provider::Custom(gpu)]);
    let (_, optimized) = run_with(builder, &model, OptimizationLevel::Extended, &feeds);
    let ops = ops(&optimized);
    assert!(!ops.iter().any(|o| o == "Cast"), "{ops:?}");
    assert_eq!(optimized.graph.initializers["w"].dtype(), DataType::Float16);
}

// ------------------------------------------------------------------------------------------
// Matrix products

#[test]
fn matmul_add_becomes_gemm_for_fixed_rows() {
    let sym = |name: &str| Dim::Symbol(name.into());
    let cases = [
        (&[5, 7][..], None, vec!["Gemm"]),
        // A sequence of rows: viewed as a matrix around the Gemm (both Reshapes are views).
        (&[2, 5, 7], None, vec!["Reshape", "Gemm", "Reshape"]),
        (&[2, 5, 7], Some(vec![sym("batch"), Dim::Fixed(5), Dim::Fixed(7)]), vec!["MatMul", "Add"]),
    ];
    for (a_shape, declared, want) in cases {
        let mut g = G::new(6);
        let a = g.input("a", a_shape);
        if let Some(dims) = &declared {
            g.declared.insert(a.clone(), dims.clone());
        }
        let b = g.random("b", &[7, 3], -1.0, 1.0);
        let c = g.random("c", &[3], -1.0, 1.0);
        let m = g.op("MatMul", &[&a, &b], vec![]);
        let y = g.op("Add", &[&c, &m], vec![]);
        g.output(&y);
        assert_eq!(check(&g, 17, "MatMul+Add"), want, "A {a_shape:?} declared {declared:?}");
    }
}

#[test]
fn gemm_and_activation_become_fused_gemm() {
    // (A, activation op, its attributes, opset, nodes after)
    let reshaped = vec!["Reshape", "ai.onyx:FusedGemm", "Reshape"];
    let cases: Vec<(&[usize], &str, Vec<Attribute>, i64, Vec<&str>)> = vec![
        (&[5, 7], "Relu", vec![], 17, vec!["ai.onyx:FusedGemm"]),
        (&[5, 7], "LeakyRelu", vec![float("alpha", 0.2)], 17, vec!["ai.onyx:FusedGemm"]),
        // A sequence of rows: the activation reads the Reshape back, which moves after it.
        (&[2, 5, 7], "Gelu", vec![], 20, reshaped.clone()),
        (&[2, 5, 7], "Gelu", vec![string("approximate", "tanh")], 20, reshaped),
        (&[5, 7], "Softplus", vec![], 17, vec!["Gemm", "Softplus"]),
    ];
    for (a_shape, act, attrs, opset, want) in cases {
        let mut g = G::new(12);
        let a = g.input("a", a_shape);
        let b = g.random("b", &[7, 3], -1.0, 1.0);
        let c = g.random("c", &[3], -1.0, 1.0);
        let m = g.op("MatMul", &[&a, &b], vec![]);
        let y = g.op("Add", &[&m, &c], vec![]);
        let z = g.op(act, &[&y], attrs);
        g.output(&z);
        assert_eq!(check(&g, opset, "Gemm+activation"), want, "A {a_shape:?} {act}");
    }
    // The product read elsewhere too: no fusion.
    let mut g = G::new(13);
    let a = g.input("a", &[5, 7]);
    let b = g.random("b", &[7, 3], -1.0, 1.0);
    let c = g.random("c", &[3], -1.0, 1.0);
    let m = g.op("MatMul", &[&a, &b], vec![]);
    let y = g.op("Add", &[&m, &c], vec![]);
    let z = g.op("Relu", &[&y], vec![]);
    g.output(&z);
    g.output(&y);
    assert_eq!(check(&g, 17, "Gemm read twice"), ["Gemm", "Relu"]);
}

#[test]
fn products_of_one_input_are_packed() {
    // Gemms (with bias, transB), MatMuls of a sequence of rows (no bias, as LLMs' projections):
    // one product by the weights side by side, then a Split.
    for (a_shape, trans_b, bias) in [(&[5, 7][..], 1, true), (&[2, 5, 7], 0, true), (&[2, 5, 7], 0, false)] {
        let mut g = G::new(14);
        let a = g.input("a", a_shape);
        let mut outs = vec![];
        for (i, n) in [3usize, 4, 6].into_iter().enumerate() {
            let w_shape = if trans_b == 1 { [n, 7] } else { [7, n] };
            let w = g.random(&format!("w{i}"), &w_shape, -1.0, 1.0);
            let y = if a_shape.len() == 2 {
                let c = g.random(&format!("c{i}"), &[n], -1.0, 1.0);
                g.op("Gemm", &[&a, &w, &c], vec![int("transB", trans_b)])
            } else {
                let m = g.op("MatMul", &[&a, &w], vec![]);
                if bias {
                    let c = g.random(&format!("c{i}"), &[n], -1.0, 1.0);
                    g.op("Add", &[&m, &c], vec![])
                } else {
                    m
                }
            };
            outs.push(g.op("Relu", &[&y], vec![]));
        }
        let sum = g.op("Concat", &[&outs[0], &outs[1], &outs[2]], vec![int("axis", -1)]);
        g.output(&sum);
        // The CPU provider keeps them apart (the Split's copy costs it more than it saves).
        let cpu = check(&g, 17, "sibling products");
        assert!(!cpu.contains(&"Split".to_string()), "{a_shape:?} {cpu:?}");
        let Some(ops) = check_gpu(&g, 17, "sibling products") else { continue };
        let count = |op: &str| ops.iter().filter(|o| o.ends_with(op)).count();
        assert_eq!((count("Gemm") + count("MatMul"), count("Split")), (1, 1), "{a_shape:?} {ops:?}");
    }
    // Other inputs, or weights that are inputs: nothing to pack.
    let mut g = G::new(15);
    let a = g.input("a", &[5, 7]);
    let b = g.input("b", &[5, 7]);
    let w = g.random("w", &[7, 3], -1.0, 1.0);
    let v = g.input("v", &[7, 3]);
    let ya = g.op("MatMul", &[&a, &w], vec![]);
    let yb = g.op("MatMul", &[&b, &w], vec![]);
    let yv = g.op("MatMul", &[&a, &v], vec![]);
    let s = g.op("Sum", &[&ya, &yb, &yv], vec![]);
    g.output(&s);
    assert_eq!(check(&g, 17, "no siblings"), ["MatMul", "MatMul", "MatMul", "Sum"]);
    if let Some(ops) = check_gpu(&g, 17, "no siblings") {
        assert_eq!(ops, ["MatMul", "MatMul", "MatMul", "Sum"]);
    }
}

#[test]
fn transposes_and_scale_fold_into_fused_matmul() {
    let mut g = G::new(7);
    let a = g.input("a", &[2, 5, 4]);
    let b = g.input("b", &[2, 3, 5]);
    let at = g.op("Transpose", &[&a], vec![ints("perm", &[0, 2, 1])]);
    let bt = g.op("Transpose", &[&b], vec![ints("perm", &[0, 2, 1])]);
    let m = g.op("MatMul", &[&at, &bt], vec![]);
    let k = g.scalar("k", 8.0);
    let y = g.op("Div", &[&m, &k], vec![]);
    g.output(&y);
    assert_eq!(check(&g, 17, "Transpose+MatMul+Div"), ["com.microsoft:FusedMatMul"]);

    // A transpose of other axes is not a transA.
    let mut g = G::new(8);
    let a = g.input("a", &[5, 2, 4]);
    let b = g.input("b", &[4, 3]);
    let at = g.op("Transpose", &[&a], vec![ints("perm", &[1, 0, 2])]);
    let y = g.op("MatMul", &[&at, &b], vec![]);
    g.output(&y);
    assert_eq!(check(&g, 17, "batch transpose"), ["Transpose", "MatMul"]);
}

// ------------------------------------------------------------------------------------------
// Gelu

/// The exact Gelu pattern in one of its exporter forms, after an optional bias Add.
fn gelu_graph(form: usize, half: f32, bias: bool) -> G {
    let mut g = G::new(9);
    let mut x = g.input("x", &[3, 16]);
    if bias {
        let b = g.random("bias", &[16], -1.0, 1.0);
        x = g.op("Add", &[&b, &x], vec![]);
    }
    let scaled = if form == 1 {
        let r = g.scalar("r", std::f32::consts::FRAC_1_SQRT_2);
        g.op("Mul", &[&r, &x], vec![])
    } else {
        let s = g.scalar("s", std::f32::consts::SQRT_2);
        g.op("Div", &[&x, &s], vec![])
    };
    let e = g.op("Erf", &[&scaled], vec![]);
    let one = g.scalar("one", 1.0);
    let p = g.op("Add", &[&one, &e], vec![]);
    let h = g.scalar("half", half);
    let y = match form {
        0 | 1 => {
            let m = g.op("Mul", &[&x, &p], vec![]);
            g.op("Mul", &[&m, &h], vec![])
        }
        2 => {
            let hx = g.op("Mul", &[&x, &h], vec![]);
            g.op("Mul", &[&hx, &p], vec![])
        }
        _ => {
            let hp = g.op("Mul", &[&h, &p], vec![]);
            g.op("Mul", &[&hp, &x], vec![])
        }
    };
    g.output(&y);
    g
}

#[test]
fn gelu_forms_fuse_and_bias_joins_them() {
    for form in 0..4 {
        assert_eq!(check(&gelu_graph(form, 0.5, false), 17, "gelu"), ["com.microsoft:Gelu"], "form {form}");
        assert_eq!(check(&gelu_graph(form, 0.5, false), 20, "gelu"), ["Gelu"], "form {form} opset 20");
        assert_eq!(check(&gelu_graph(form, 0.5, true), 17, "bias gelu"), ["com.microsoft:BiasGelu"], "form {form}");
        let after = check(&gelu_graph(form, 0.6, false), 17, "not gelu");
        assert!(after.contains(&"Erf".to_string()), "form {form} with 0.6 is no Gelu: {after:?}");
    }
}

#[test]
fn tanh_gelu_becomes_fast_gelu() {
    for pow in [true, false] {
        let mut g = G::new(10);
        let x = g.input("x", &[4, 9]);
        let cube = if pow {
            let three = g.scalar("three", 3.0);
            g.op("Pow", &[&x, &three], vec![])
        } else {
            let sq = g.op("Mul", &[&x, &x], vec![]);
            g.op("Mul", &[&x, &sq], vec![])
        };
        let c = g.scalar("c", 0.044715);
        let sc = g.op("Mul", &[&c, &cube], vec![]);
        let inner = g.op("Add", &[&x, &sc], vec![]);
        let k = g.scalar("k", 0.797_884_6);
        let u = g.op("Mul", &[&inner, &k], vec![]);
        let t = g.op("Tanh", &[&u], vec![]);
        let one = g.scalar("one", 1.0);
        let p = g.op("Add", &[&t, &one], vec![]);
        let h = g.scalar("half", 0.5);
        let hx = g.op("Mul", &[&h, &x], vec![]);
        let y = g.op("Mul", &[&hx, &p], vec![]);
        g.output(&y);
        assert_eq!(check(&g, 17, "tanh gelu"), ["com.microsoft:FastGelu"], "pow {pow}");
    }
}

// ------------------------------------------------------------------------------------------
// Layer normalization

/// The decomposed LayerNormalization of `residual + x` over `axis`.
fn layer_norm_graph(axis: i64, residual: bool) -> G {
    let mut g = G::new(11);
    let mut x = g.input("x", &[2, 5, 12]);
    if residual {
        let r = g.input("r", &[2, 5, 12]);
        x = g.op("Add", &[&x, &r], vec![]);
    }
    let mean = g.op("ReduceMean", &[&x], vec![ints("axes", &[axis])]);
    let d = g.op("Sub", &[&x, &mean], vec![]);
    let two = g.scalar("two", 2.0);
    let sq = g.op("Pow", &[&d, &two], vec![]);
    let var = g.op("ReduceMean", &[&sq], vec![ints("axes", &[axis])]);
    let eps = g.scalar("eps", 1e-5);
    let ve = g.op("Add", &[&var, &eps], vec![]);
    let std = g.op("Sqrt", &[&ve], vec![]);
    let n = g.op("Div", &[&d, &std], vec![]);
    let gamma = g.random("gamma", &[12], 0.5, 1.5);
    let beta = g.random("beta", &[12], -0.5, 0.5);
    let s = g.op("Mul", &[&n, &gamma], vec![]);
    let y = g.op("Add", &[&beta, &s], vec![]);
    g.output(&y);
    g
}

#[test]
fn decomposed_layer_norm_fuses_and_takes_the_residual() {
    assert_eq!(check(&layer_norm_graph(-1, false), 17, "layer norm"), ["LayerNormalization"]);
    assert_eq!(check(&layer_norm_graph(2, true), 17, "skip layer norm"), ["com.microsoft:SkipLayerNormalization"]);
    assert_eq!(check(&layer_norm_graph(-1, false), 13, "opset 13").len(), 9, "no LayerNormalization before opset 17");
    assert_eq!(check(&layer_norm_graph(1, false), 17, "axis 1").len(), 9, "not over the last axis");
}

/// MatMul(x, w) + bias → LayerNormalization of (that + residual): the end of a transformer
/// sub-block. `bias_is_input` makes the bias a graph input; `sum_visible` makes the biased
/// MatMul a graph output too.
/// A transformer's residual stream: the sum feeding LayerNormalization is read again by the
/// next residual Add (and is a graph output when `sum_is_output`).
#[test]
fn skip_layer_norm_keeps_a_sum_read_later() {
    for sum_is_output in [false, true] {
        let mut g = G::new(21);
        let x = g.input("x", &[2, 5, 12]);
        let r = g.input("r", &[2, 5, 12]);
        let s = g.op("Add", &[&x, &r], vec![]);
        let gamma = g.random("gamma", &[12], 0.5, 1.5);
        let beta = g.random("beta", &[12], -0.5, 0.5);
        let n = g.op("LayerNormalization", &[&s, &gamma, &beta], vec![]);
        let t = g.op("Tanh", &[&n], vec![]);
        let y = g.op("Add", &[&s, &t], vec![]);
        g.output(&y);
        if sum_is_output {
            g.output(&s);
        }
        let ops = check(&g, 17, "residual stream");
        assert_eq!(ops, ["com.microsoft:SkipLayerNormalization", "Tanh", "Add"], "sum is output: {sum_is_output}");
    }
}

/// The batch is symbolic: with fixed rows MatMul+Add would become a Gemm first.
fn biased_skip_norm_graph(bias_is_input: bool, sum_visible: bool) -> G {
    let mut g = G::new(12);
    let x = g.input("x", &[2, 5, 12]);
    let r = g.input("r", &[2, 5, 12]);
    for v in [&x, &r] {
        g.declared.insert(v.clone(), vec![Dim::Symbol("batch".into()), Dim::Fixed(5), Dim::Fixed(12)]);
    }
    let w = g.random("w", &[12, 12], -0.5, 0.5);
    let bias = if bias_is_input { g.input("bias", &[12]) } else { g.random("bias", &[12], -0.5, 0.5) };
    let m = g.op("MatMul", &[&x, &w], vec![]);
    let biased = g.op("Add", &[&bias, &m], vec![]);
    let s = g.op("Add", &[&biased, &r], vec![]);
    let gamma = g.random("gamma", &[12], 0.5, 1.5);
    let beta = g.random("beta", &[12], -0.5, 0.5);
    let y = g.op("LayerNormalization", &[&s, &gamma, &beta], vec![]);
    g.output(&y);
    if sum_visible {
        g.output(&biased);
    }
    g
}

#[test]
fn a_bias_add_folds_into_skip_layer_norm() {
    let sln = "com.microsoft:SkipLayerNormalization";
    assert_eq!(check(&biased_skip_norm_graph(false, false), 17, "biased"), ["MatMul", sln]);
    // Must not fire: the bias is not a constant, or the biased sum is read elsewhere.
    assert_eq!(check(&biased_skip_norm_graph(true, false), 17, "bias input"), ["MatMul", "Add", sln]);
    assert_eq!(check(&biased_skip_norm_graph(false, true), 17, "visible sum"), ["MatMul", "Add", sln]);
}

// ------------------------------------------------------------------------------------------
// Attention

/// How a test attention block is written.
#[derive(Clone, Copy)]
struct AttentionForm {
    /// The scale as `Div` by √D (else `Mul` by 1/√D).
    div: bool,
    /// An additive `[B,1,1,T]` mask.
    mask: bool,
    /// The attention probabilities are also a graph output (the block must not fuse).
    probs_visible: bool,
    /// Biases added to the q, k and v projections.
    bias: bool,
    /// As torch's SDPA export writes it: q and kᵀ each scaled by √scale before the product,
    /// kᵀ made by Reshape/Transpose/Reshape/Transpose/Reshape, NaN → 0 after the Softmax.
    sdpa: bool,
    /// As torch's legacy exporter writes it with dynamic axes: batch and sequence symbolic, the
    /// Reshape targets built by Shape → Gather → Unsqueeze → Concat, the merge's Shape reading
    /// the merged heads inside the block.
    symbolic: bool,
}

/// `Concat(Unsqueeze(Gather(Shape(v), 0)), Unsqueeze(Gather(Shape(v), 1)), tail)`: a Reshape
/// target keeping v's first two dims.
fn leading_dims_then(g: &mut G, v: &str, tail: &[i64]) -> String {
    let shape = g.op("Shape", &[v], vec![]);
    let zero_axis = g.int64s(&format!("axes_{shape}"), &[0]);
    let mut parts = vec![];
    for i in 0..2 {
        let index = format!("index_{i}_{shape}");
        g.inits.insert(index.clone(), Tensor::scalar(i));
        let dim = g.op("Gather", &[&shape, &index], vec![int("axis", 0)]);
        parts.push(g.op("Unsqueeze", &[&dim, &zero_axis], vec![]));
    }
    parts.push(g.int64s(&format!("tail_{shape}"), tail));
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    g.op("Concat", &parts, vec![int("axis", 0)])
}

/// One BERT-style self-attention block over x `[2, 7, 12]` with 3 heads of 4.
fn attention_graph(form: AttentionForm) -> G {
    let (b, s, n, d) = (2usize, 7usize, 3usize, 4usize);
    let h = n * d;
    let mut g = G::new(13);
    let x = g.input("x", &[b, s, h]);
    if form.symbolic {
        let sym = |name: &str| Dim::Symbol(name.into());
        g.declared.insert(x.clone(), vec![sym("batch"), sym("seq"), Dim::Fixed(h)]);
        g.declared.insert("mask".into(), vec![sym("batch"), Dim::Fixed(1), Dim::Fixed(1), sym("seq")]);
    }
    let split = g.int64s("split", &[b as i64, s as i64, n as i64, d as i64]);
    let mut heads = vec![];
    for (name, perm) in [("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])] {
        let w = g.random(&format!("w{name}"), &[h, h], -0.5, 0.5);
        let bias = g.random(&format!("b{name}"), &[h], -0.5, 0.5);
        let m = g.op("MatMul", &[&x, &w], vec![]);
        let p = if form.bias { g.op("Add", &[&m, &bias], vec![]) } else { m };
        let split = if form.symbolic { leading_dims_then(&mut g, &p, &[n as i64, d as i64]) } else { split.clone() };
        let r = g.op("Reshape", &[&p, &split], vec![]);
        if form.sdpa && name == "k" {
            let t = g.op("Transpose", &[&r], vec![ints("perm", &[0, 2, 1, 3])]);
            let flat = g.int64s("flat", &[(b * n) as i64, s as i64, d as i64]);
            let f = g.op("Reshape", &[&t, &flat], vec![]);
            let ft = g.op("Transpose", &[&f], vec![ints("perm", &[0, 2, 1])]);
            let kt = g.int64s("kt", &[b as i64, n as i64, d as i64, s as i64]);
            heads.push(g.op("Reshape", &[&ft, &kt], vec![]));
        } else {
            heads.push(g.op("Transpose", &[&r], vec![ints("perm", &perm)]));
        }
    }
    if form.sdpa {
        let c = g.scalar("root_scale", (1.0 / (d as f32).sqrt()).sqrt());
        heads[0] = g.op("Mul", &[&heads[0], &c], vec![]);
        heads[1] = g.op("Mul", &[&heads[1], &c], vec![]);
    }
    let scores = g.op("MatMul", &[&heads[0], &heads[1]], vec![]);
    let scaled = if form.sdpa {
        scores
    } else if form.div {
        let c = g.scalar("sqrt_d", (d as f32).sqrt());
        g.op("Div", &[&scores, &c], vec![])
    } else {
        let c = g.scalar("inv_sqrt_d", 1.0 / (d as f32).sqrt());
        g.op("Mul", &[&c, &scores], vec![])
    };
    let logits = if form.mask {
        let mask = g.input("mask", &[b, 1, 1, s]);
        g.op("Add", &[&scaled, &mask], vec![])
    } else {
        scaled
    };
    let mut probs = g.op("Softmax", &[&logits], vec![int("axis", -1)]);
    if form.sdpa {
        let nan = g.op("IsNaN", &[&probs], vec![]);
        let zero = g.scalar("zero", 0.0);
        probs = g.op("Where", &[&nan, &zero, &probs], vec![]);
    }
    let pv = g.op("MatMul", &[&probs, &heads[2]], vec![]);
    let t = g.op("Transpose", &[&pv], vec![ints("perm", &[0, 2, 1, 3])]);
    let merge = if form.symbolic {
        leading_dims_then(&mut g, &t, &[h as i64])
    } else {
        g.int64s("merge", &[b as i64, s as i64, h as i64])
    };
    let y = g.op("Reshape", &[&t, &merge], vec![]);
    g.output(&y);
    if form.probs_visible {
        g.output(&probs);
    }
    g
}

#[test]
fn attention_blocks_become_one_attention_node() {
    let plain = AttentionForm { div: true, mask: true, probs_visible: false, bias: true, sdpa: false, symbolic: false };
    let attention = |ops: &[String], name: &str| ops.iter().filter(|o| *o == name).count();
    let forms = [
        plain,
        AttentionForm { div: false, ..plain },
        AttentionForm { mask: false, ..plain },
        AttentionForm { sdpa: true, ..plain },
        AttentionForm { symbolic: true, ..plain },
        AttentionForm { bias: false, ..plain },
    ];
    for form in forms {
        let ops = check(&attention_graph(form), 17, "attention");
        assert_eq!(attention(&ops, "ai.onyx:Attention"), 1, "{ops:?}");
        let left = ["Transpose", "Softmax", "IsNaN", "Where", "Mul", "Div", "Shape", "Concat"];
        assert_eq!(ops.iter().filter(|o| left.contains(&o.as_str())).count(), 0, "{ops:?}");
        // The only Reshapes left view the projections' rows as matrices around their Gemm.
        assert_eq!(attention(&ops, "Reshape"), 2 * attention(&ops, "Gemm"), "{ops:?}");
        // On a GPU, q, k and v come from one product by their weights side by side and a
        // Split. Where nothing sits between the Split and the heads (no bias Adds, or biases
        // the product took), a PackedAttention reads the product in place and the Split goes.
        if let Some(ops) = check_gpu(&attention_graph(form), 17, "attention") {
            let products = attention(&ops, "Gemm") + attention(&ops, "MatMul");
            let (fused, packed) = (attention(&ops, "ai.onyx:Attention"), attention(&ops, "ai.onyx:PackedAttention"));
            assert_eq!((products, fused + packed, attention(&ops, "Split")), (1, 1, fused), "{ops:?}");
            assert!(form.bias || packed == 1, "{ops:?}");
        }
    }
    // Must not fire: the merged heads' shape is read whole (a graph output).
    let mut g = attention_graph(AttentionForm { symbolic: true, ..plain });
    let merged_shape = g.nodes.iter().rev().find(|n| n.op_type == "Shape").map(|n| n.outputs[0].clone()).unwrap();
    g.output(&merged_shape);
    let ops = check(&g, 17, "merged heads' shape visible");
    assert_eq!(attention(&ops, "ai.onyx:Attention"), 0, "{ops:?}");
    // From opset 23 the standard op.
    let ops = check(&attention_graph(plain), 23, "attention at opset 23");
    assert_eq!(attention(&ops, "Attention"), 1, "{ops:?}");
    // Must not fire: the probabilities are visible.
    let ops = check(&attention_graph(AttentionForm { probs_visible: true, ..plain }), 17, "visible probs");
    assert_eq!(attention(&ops, "ai.onyx:Attention"), 0, "{ops:?}");
    assert!(ops.contains(&"Softmax".to_string()), "{ops:?}");
}

/// Self-attention over x `[B, 7, 12]` (3 heads of 4) on one packed QKV projection, taken apart
/// as torch's `nn.MultiheadAttention` export does (`seq_first`: torchvision's ViT, batch 1,
/// the sequence first between Transposes) or as torchvision's Swin does (batch first, B = 2,
/// with a relative position bias; `shifted`: then a shifted-window mask added through a 5-D
/// view of the 2 windows).
fn packed_attention_graph(seq_first: bool, shifted: bool) -> G {
    let (b, s, n, d) = (if seq_first { 1usize } else { 2 }, 7usize, 3usize, 4usize);
    let h = n * d;
    let mut g = G::new(17);
    let i = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
    let x = g.input("x", &[b, s, h]);
    let w = g.random("w_qkv", &[h, 3 * h], -0.5, 0.5);
    let bias = g.random("b_qkv", &[3 * h], -0.5, 0.5);
    let root = g.scalar("root_scale", (1.0 / (d as f32).sqrt()).sqrt());
    let mut heads = vec![];
    if seq_first {
        let xs = g.op("Transpose", &[&x], vec![ints("perm", &[1, 0, 2])]);
        let m = g.op("MatMul", &[&xs, &w], vec![]);
        let qkv = g.op("Add", &[&bias, &m], vec![]);
        let split = g.int64s("split", &i(&[s, b, 3, h]));
        let r = g.op("Reshape", &[&qkv, &split], vec![]);
        let zero = g.int64s("axis0", &[0]);
        let u = g.op("Unsqueeze", &[&r, &zero], vec![]);
        let t = g.op("Transpose", &[&u], vec![ints("perm", &[3, 1, 2, 0, 4])]);
        let minus2 = g.int64s("axis_m2", &[-2]);
        let packed = g.op("Squeeze", &[&t, &minus2], vec![]);
        for which in 0..3 {
            let index = format!("index_{which}");
            g.inits.insert(index.clone(), Tensor::scalar(which as i64));
            let one = g.op("Gather", &[&packed, &index], vec![int("axis", 0)]);
            let by_head = g.int64s("by_head", &i(&[s, b * n, d]));
            let r = g.op("Reshape", &[&one, &by_head], vec![]);
            let t = g.op("Transpose", &[&r], vec![ints("perm", &[1, 0, 2])]);
            let four = g.int64s("four", &i(&[b, n, s, d]));
            heads.push(g.op("Reshape", &[&t, &four], vec![]));
        }
    } else {
        let m = g.op("MatMul", &[&x, &w], vec![]);
        let qkv = g.op("Add", &[&m, &bias], vec![]);
        let split = g.int64s("split", &i(&[b, s, 3, n, d]));
        let r = g.op("Reshape", &[&qkv, &split], vec![]);
        let packed = g.op("Transpose", &[&r], vec![ints("perm", &[2, 0, 3, 1, 4])]);
        for which in 0..3 {
            let index = format!("index_{which}");
            g.inits.insert(index.clone(), Tensor::scalar(which as i64));
            heads.push(g.op("Gather", &[&packed, &index], vec![int("axis", 0)]));
        }
    }
    let logits = if seq_first {
        let q = g.op("Mul", &[&heads[0], &root], vec![]);
        let kt = g.op("Transpose", &[&heads[1]], vec![ints("perm", &[0, 1, 3, 2])]);
        let kt = g.op("Mul", &[&kt, &root], vec![]);
        g.op("MatMul", &[&q, &kt], vec![])
    } else {
        // Swin: q scaled, `q @ k.transpose(-2, -1)` (a FusedMatMul with transB once fused), plus
        // the relative position bias.
        let inv = g.scalar("inv_sqrt_d", 1.0 / (d as f32).sqrt());
        let q = g.op("Mul", &[&heads[0], &inv], vec![]);
        let kt = g.op("Transpose", &[&heads[1]], vec![ints("perm", &[0, 1, 3, 2])]);
        let scores = g.op("MatMul", &[&q, &kt], vec![]);
        let bias = g.random("position_bias", &[n, s, s], -1.0, 1.0);
        let biased = g.op("Add", &[&scores, &bias], vec![]);
        if shifted {
            let windows = g.int64s("windows", &i(&[1, b, n, s, s]));
            let w = g.op("Reshape", &[&biased, &windows], vec![]);
            let mask = g.random("window_mask", &[1, b, 1, s, s], -100.0, 0.0);
            let masked = g.op("Add", &[&w, &mask], vec![]);
            let back = g.int64s("scores_shape", &i(&[b, n, s, s]));
            g.op("Reshape", &[&masked, &back], vec![])
        } else {
            biased
        }
    };
    let probs = g.op("Softmax", &[&logits], vec![int("axis", -1)]);
    let pv = g.op("MatMul", &[&probs, &heads[2]], vec![]);
    let y = if seq_first {
        let t = g.op("Transpose", &[&pv], vec![ints("perm", &[2, 0, 1, 3])]);
        let rows = g.int64s("rows", &i(&[s * b, h]));
        let r = g.op("Reshape", &[&t, &rows], vec![]);
        let back = g.int64s("back", &i(&[s, b, h]));
        let r = g.op("Reshape", &[&r, &back], vec![]);
        g.op("Transpose", &[&r], vec![ints("perm", &[1, 0, 2])])
    } else {
        let t = g.op("Transpose", &[&pv], vec![ints("perm", &[0, 2, 1, 3])]);
        let merge = g.int64s("merge", &i(&[b, s, h]));
        g.op("Reshape", &[&t, &merge], vec![])
    };
    g.output(&y);
    g
}

#[test]
fn attention_on_packed_projections_becomes_one_attention_node() {
    for (seq_first, shifted) in [(true, false), (false, false), (false, true)] {
        let ops = check(&packed_attention_graph(seq_first, shifted), 17, "packed attention");
        let count = |op: &str| ops.iter().filter(|o| *o == op).count();
        assert_eq!(count("ai.onyx:Attention"), 1, "{ops:?}");
        // q, k and v side by side in the packed rows: one Split takes them apart.
        assert_eq!((count("Split"), count("Slice")), (1, 0), "{ops:?}");
        for gone in ["Softmax", "Gather", "Squeeze", "Unsqueeze", "MatMul", "com.microsoft:FusedMatMul", "Mul", "Add"] {
            assert_eq!(count(gone), 0, "{gone}: {ops:?}");
        }
        // On a GPU, a PackedAttention reads them in place.
        if let Some(ops) = check_gpu(&packed_attention_graph(seq_first, shifted), 17, "packed attention") {
            let count = |op: &str| ops.iter().filter(|o| *o == op).count();
            assert_eq!((count("ai.onyx:PackedAttention"), count("Split"), count("Slice")), (1, 0, 0), "{ops:?}");
        }
    }
}

// ------------------------------------------------------------------------------------------
// Real models

fn models_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("ONYX_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels"));
    dir.join("manifest.json").exists().then_some(dir)
}

/// Runs a model file at levels disable, extended and all on `feeds`; returns node counts
/// before and after extended, the ops at extended and at all.
fn compare_file(path: &Path, feeds: &[(String, Tensor)], tol: f64) -> (usize, usize, Vec<String>, Vec<String>) {
    let model = onyx::load_model(path).unwrap();
    let (want, plain) = run(&model, OptimizationLevel::Disable, feeds);
    let (got, extended) = run(&model, OptimizationLevel::Extended, feeds);
    assert_same(&want, &got, tol, &format!("{} (extended)", path.display()));
    let (got, all) = run(&model, OptimizationLevel::All, feeds);
    assert_same(&want, &got, tol, &format!("{} (all)", path.display()));
    (plain.graph.nodes.len(), extended.graph.nodes.len(), ops(&extended), ops(&all))
}

#[test]
fn tiny_cnn_is_the_same_at_every_level() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny_cnn/tiny_cnn.onnx");
    let model = onyx::load_model(&path).unwrap();
    let session = SessionBuilder::new().commit_from_model(model.clone()).unwrap();
    let mut rng = fastrand::Rng::with_seed(12);
    let feeds: Vec<(String, Tensor)> = session
        .inputs()
        .iter()
        .map(|i| {
            let shape: Vec<usize> =
                i.ty.as_tensor().unwrap().shape.as_ref().unwrap().iter().map(|d| d.fixed().unwrap_or(1)).collect();
            let v: Vec<f32> = (0..shape.iter().product()).map(|_| rng.f32() * 2.0 - 1.0).collect();
            (i.name.clone(), Tensor::from_vec(shape, v).unwrap())
        })
        .collect();
    let (before, after, ops, _) = compare_file(&path, &feeds, 1e-5);
    println!("tiny_cnn: {before} nodes -> {after}: {ops:?}");
    for level in [OptimizationLevel::Basic, OptimizationLevel::Extended] {
        let (want, _) = run(&model, OptimizationLevel::Disable, &feeds);
        let (got, _) = run(&model, level, &feeds);
        assert_same(&want, &got, 1e-5, &format!("tiny_cnn at {level}"));
    }
}

#[test]
fn generated_models_are_the_same_optimized_and_smaller() {
    let Some(dir) = models_dir() else {
        eprintln!("no generated test models: run scripts/test.sh");
        return;
    };
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut sizes = BTreeMap::new();
    for case in manifest.as_array().unwrap() {
        let name = case["name"].as_str().unwrap().to_string();
        let mut feeds = vec![];
        for (input, file) in case["inputs"].as_object().unwrap() {
            feeds.push((input.clone(), npy::read(&dir.join(file.as_str().unwrap())).unwrap()));
        }
        let (before, after, ops, all) = compare_file(&dir.join(case["model"].as_str().unwrap()), &feeds, 1e-4);
        println!("{name}: {before} nodes -> {after}; at level all: {all:?}");
        sizes.insert(name, (before, after, ops, all));
    }
    let count = |name: &str, op: &str| sizes[name].2.iter().filter(|o| *o == op).count();
    if sizes.contains_key("resnet18") {
        let (before, after, _, all) = &sizes["resnet18"];
        assert!(after < before, "resnet18: {before} -> {after}");
        assert_eq!(count("resnet18", "BatchNormalization"), 0, "every BN folds into its Conv");
        // Each main-path Conv fuses with its ReLU or residual Add; the three 1x1 downsample Convs
        // stay plain: their output is the residual Z of the next FusedConv.
        assert_eq!(count("resnet18", "Conv"), 3, "{:?}", sizes["resnet18"].2);
        if nchwc_block().is_some() {
            // Level all: the whole network blocked, one reorder before Flatten.
            let blocked = all.iter().filter(|o| o.as_str() == "ai.onyx:NchwcConv").count();
            assert_eq!(blocked, 20, "{all:?}");
            assert_eq!(all.iter().filter(|o| o.contains("Reorder")).count(), 1, "{all:?}");
        }
    }
    if sizes.contains_key("bert4") {
        let (before, after, _, _) = &sizes["bert4"];
        assert!(after < before, "bert4: {before} -> {after}");
        assert_eq!(count("bert4", "Erf"), 0, "the Gelu patterns fuse");
        assert_eq!(count("bert4", "com.microsoft:BiasGelu"), 4);
        assert_eq!(count("bert4", "Sqrt"), 0, "the decomposed LayerNormalizations fuse");
        assert!(count("bert4", "com.microsoft:SkipLayerNormalization") >= 8, "{:?}", sizes["bert4"].2);
        assert!(count("bert4", "Add") <= 17, "bias Adds fold into SkipLayerNormalization: {:?}", sizes["bert4"].2);
        // With symbolic batch and sequence too: the Shape nodes that read the blocks' merged
        // heads are re-pointed at the blocks' inputs.
        assert_eq!(count("bert4", "ai.onyx:Attention"), 4, "{:?}", sizes["bert4"].2);
    }
    if sizes.contains_key("mobilenet_block") {
        assert_eq!(count("mobilenet_block", "Clip"), 0, "Conv+Clip fuse");
    }
    if let (Some((_, _, _, all)), Some(_)) = (sizes.get("mobilenet_v2"), nchwc_block()) {
        assert!(!all.iter().any(|o| o == "Conv" || o == "com.microsoft:FusedConv"), "every conv blocked: {all:?}");
    }
}

#[test]
fn bert4_with_fixed_dims_fuses_attention() {
    let Some(dir) = models_dir() else {
        eprintln!("no generated test models: run scripts/test.sh");
        return;
    };
    let path = dir.join("bert4/model.onnx");
    let model = onyx::load_model(&path).unwrap();
    let feeds: Vec<(String, Tensor)> = ["input_ids", "attention_mask"]
        .iter()
        .map(|n| (n.to_string(), npy::read(&dir.join(format!("bert4/inputs/{n}.npy"))).unwrap()))
        .collect();
    let dims = feeds[0].1.shape().to_vec();
    let session = |level| {
        SessionBuilder::new()
            .with_optimization_level(level)
            .with_free_dimension_override_by_name("batch", dims[0])
            .with_free_dimension_override_by_name("sequence", dims[1])
            .commit_from_model(model.clone())
            .unwrap()
    };
    let outputs = |s: &onyx::Session| -> BTreeMap<String, Tensor> {
        let out = s.run(feeds.iter().map(|(n, t)| (n.clone(), t.clone()))).unwrap();
        out.iter().map(|(n, v)| (n.to_string(), v.as_tensor().unwrap().clone())).collect()
    };
    let (plain, fused) = (session(OptimizationLevel::Disable), session(OptimizationLevel::All));
    assert_same(&outputs(&plain), &outputs(&fused), 1e-4, "bert4 with fixed dims");
    let ops = ops(fused.model());
    assert_eq!(ops.iter().filter(|o| *o == "ai.onyx:Attention").count(), 4, "{ops:?}");
    assert_eq!(ops.iter().filter(|o| *o == "Softmax" || *o == "Transpose").count(), 0, "{ops:?}");
}
