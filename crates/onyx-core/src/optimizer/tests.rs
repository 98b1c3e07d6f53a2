//! The optimizer's driver against fake providers: fusions gated by what each provider takes,
//! levels, the report, renames and folds that need no kernel. The numerical checks of every
//! pattern (outputs equal to the unoptimized run through the CPU EP) are in
//! `crates/onyx/tests/optimizer.rs`, where the CPU EP is available.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::ep::{DeviceDescription, Kernel, NodeContext};
use crate::ir::{check_model, AttrValue, Attribute};
use crate::types::{TensorType, ValueInfo, ValueType};
use crate::{DataType, Device, Error, TensorView};

/// A provider that takes the listed ops (every op when the list is empty) and builds nothing.
struct Fake {
    name: &'static str,
    device: Device,
    ops: Vec<&'static str>,
}

impl ExecutionProvider for Fake {
    fn name(&self) -> &str {
        self.name
    }
    fn device(&self) -> Device {
        self.device
    }
    fn describe_devices(&self) -> Vec<DeviceDescription> {
        vec![]
    }
    fn supports(&self, ctx: &NodeContext<'_>) -> bool {
        self.ops.is_empty() || self.ops.contains(&ctx.node.op_type.as_str())
    }
    fn build_kernel(&self, _: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
        Err(Error::Unsupported("fake provider".into()))
    }
    fn upload(&self, _: TensorView<'_>) -> Result<Tensor> {
        Err(Error::Unsupported("fake provider".into()))
    }
    fn download(&self, _: &Tensor) -> Result<Tensor> {
        Err(Error::Unsupported("fake provider".into()))
    }
}

fn cpu() -> Arc<dyn ExecutionProvider> {
    Arc::new(Fake { name: "cpu", device: Device::Cpu, ops: vec![] })
}

fn gpu(ops: &[&'static str]) -> Arc<dyn ExecutionProvider> {
    Arc::new(Fake { name: "gpu", device: Device::Other(1), ops: ops.to_vec() })
}

fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node {
        name: output.to_string(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        ..Default::default()
    }
}

fn float_input(name: &str, shape: &[usize]) -> ValueInfo {
    ValueInfo::new(name, ValueType::Tensor(TensorType::fixed(DataType::Float, shape)))
}

/// Conv(x, w) → Relu → y.
fn conv_relu() -> Model {
    let w = Tensor::from_vec(vec![2, 3, 3, 3], vec![0.1f32; 54]).unwrap();
    let mut m = Model {
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes: vec![node("Conv", &["x", "w"], "c"), node("Relu", &["c"], "y")],
            inputs: vec![float_input("x", &[1, 3, 8, 8])],
            outputs: vec![ValueInfo::new("y", ValueType::Unknown)],
            initializers: BTreeMap::from([("w".to_string(), w)]),
            ..Default::default()
        },
        ..Default::default()
    };
    check_model(&mut m).unwrap();
    m
}

fn op_list(m: &Model) -> Vec<&str> {
    m.graph.nodes.iter().map(|n| n.op_type.as_str()).collect()
}

#[test]
fn fusions_follow_the_provider_of_the_anchor() {
    let cases: Vec<(Vec<Arc<dyn ExecutionProvider>>, Vec<&str>)> = vec![
        (vec![cpu()], vec!["FusedConv"]),
        (vec![gpu(&["Conv", "Relu", "FusedConv"]), cpu()], vec!["FusedConv"]),
        // The GPU takes Conv but not FusedConv: fusing would move the Conv off the GPU.
        (vec![gpu(&["Conv", "Relu"]), cpu()], vec!["Conv", "Relu"]),
        // The GPU takes only the Relu: fusing would move the Relu off the GPU.
        (vec![gpu(&["Relu"]), cpu()], vec!["Conv", "Relu"]),
        // No provider at all: nothing to check against, nothing fuses.
        (vec![], vec!["Conv", "Relu"]),
    ];
    for (providers, want) in cases {
        let names: Vec<String> = providers.iter().map(|p| p.name().to_string()).collect();
        let mut m = conv_relu();
        optimize(&mut m, OptimizationLevel::All, &providers).unwrap();
        assert_eq!(op_list(&m), want, "providers {names:?}");
        assert_eq!(m.opsets.contains_key(MS_DOMAIN), want == ["FusedConv"], "providers {names:?}");
    }
}

#[test]
fn levels_and_the_report() {
    for (level, want) in [
        (OptimizationLevel::Disable, vec!["Conv", "Relu"]),
        (OptimizationLevel::Basic, vec!["Conv", "Relu"]),
        (OptimizationLevel::Extended, vec!["FusedConv"]),
        (OptimizationLevel::All, vec!["FusedConv"]),
    ] {
        let mut m = conv_relu();
        let report = optimize(&mut m, level, &[cpu()]).unwrap();
        assert_eq!(op_list(&m), want, "{level}");
        assert_eq!((report.nodes_before(), report.nodes_after()), (2, want.len()), "{level}");
        assert_eq!(report.fired("fused_conv"), usize::from(want.len() == 1), "{level}");
        if level == OptimizationLevel::All {
            let text = report.to_string();
            assert!(text.contains("com.microsoft:FusedConv: 0 -> 1") && text.contains("Relu: 1 -> 0"), "{text}");
            assert_eq!(report.before.get("Conv"), Some(&1));
        }
    }
}

#[test]
fn identity_chains_collapse_and_inferred_constants_fold_without_kernels() {
    let shape_tensor = Tensor::from_vec(vec![1], vec![0i64]).unwrap();
    let mut m = Model {
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes: vec![
                node("Relu", &["x"], "a"),
                node("Identity", &["a"], "b"),
                node("Identity", &["b"], "c"),
                node("Shape", &["x"], "s"),
                node("Gather", &["s", "zero"], "d0"),
                node("Unsqueeze", &["d0", "zero"], "d"),
                node("Reshape", &["c", "flat"], "r"),
                node("Identity", &["r"], "y"),
                node("Relu", &["d"], "unused"),
            ],
            inputs: vec![float_input("x", &[2, 3])],
            outputs: vec![ValueInfo::new("y", ValueType::Unknown), ValueInfo::new("d", ValueType::Unknown)],
            initializers: BTreeMap::from([
                ("zero".to_string(), shape_tensor),
                ("flat".to_string(), Tensor::from_vec(vec![1], vec![-1i64]).unwrap()),
                ("orphan".to_string(), Tensor::scalar(1.0f32)),
            ]),
            ..Default::default()
        },
        ..Default::default()
    };
    check_model(&mut m).unwrap();
    let report = optimize(&mut m, OptimizationLevel::Basic, &[cpu()]).unwrap();
    // The fake CPU provider builds no kernel: only what inference knows is folded (the shape
    // arithmetic up to the graph output `d`, which stays a node).
    assert_eq!(op_list(&m), ["Relu", "Unsqueeze", "Reshape"], "{report}");
    let reshape = &m.graph.nodes[2];
    assert_eq!((reshape.inputs[0].as_str(), reshape.outputs[0].as_str()), ("a", "y"));
    assert!(m.graph.initializers.contains_key("d0"), "Gather folded into an initializer");
    assert!(!m.graph.initializers.contains_key("orphan"), "unread initializers go");
    assert!(report.fired("identity") >= 3 && report.fired("dead_nodes") >= 1, "{report}");
}

#[test]
fn an_input_with_a_default_is_not_a_constant() {
    // `k` has an initializer but is a graph input: a caller may feed another value.
    let mut m = Model {
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes: vec![node("Add", &["k", "k"], "y")],
            inputs: vec![float_input("k", &[2])],
            outputs: vec![ValueInfo::new("y", ValueType::Unknown)],
            initializers: BTreeMap::from([("k".to_string(), Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap())]),
            ..Default::default()
        },
        ..Default::default()
    };
    check_model(&mut m).unwrap();
    let view = View::new(&m.graph, &m.opsets).unwrap();
    assert!(view.constant("k").is_none());
    optimize(&mut m, OptimizationLevel::All, &[cpu()]).unwrap();
    assert_eq!(op_list(&m), ["Add"]);
}

/// x (f16) → MatMul(w) → Relu → Sigmoid → y, with one Sigmoid of x beside, and w rows of a
/// table (a Gather of an input's indices): the product's group computes in f32 only where the
/// CPU runs it.
fn half_matmul() -> Model {
    let table = Tensor::from_vec(vec![6, 3], vec![::half::f16::from_f32(0.5); 18]).unwrap();
    let rows = ValueInfo::new("rows", ValueType::Tensor(TensorType::fixed(DataType::Int64, &[4])));
    let half_input = ValueInfo::new("x", ValueType::Tensor(TensorType::fixed(DataType::Float16, &[2, 4])));
    let mut m = Model {
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes: vec![
                node("Gather", &["table", "rows"], "w"),
                node("MatMul", &["x", "w"], "p"),
                node("Relu", &["p"], "r"),
                node("Sigmoid", &["r"], "y"),
                node("Sigmoid", &["x"], "z"),
            ],
            inputs: vec![half_input, rows],
            outputs: vec![ValueInfo::new("y", ValueType::Unknown), ValueInfo::new("z", ValueType::Unknown)],
            initializers: BTreeMap::from([("table".to_string(), table)]),
            ..Default::default()
        },
        ..Default::default()
    };
    check_model(&mut m).unwrap();
    m
}

#[test]
fn half_precision_computes_in_float_where_the_cpu_runs_products() {
    let cases: Vec<(Vec<Arc<dyn ExecutionProvider>>, Vec<&str>)> = vec![
        // x in, the gathered rows in (the table stays f16), y back; the Sigmoid of x has no
        // product in its group: it stays f16.
        (vec![cpu()], vec!["Cast", "Gather", "Cast", "MatMul", "Relu", "Sigmoid", "Cast", "Sigmoid"]),
        (vec![gpu(&[]), cpu()], vec!["Gather", "MatMul", "Relu", "Sigmoid", "Sigmoid"]),
        // The GPU's Relu splits the product from the Sigmoid: back to f16 after the product.
        (vec![gpu(&["Relu"]), cpu()], vec!["Cast", "Gather", "Cast", "MatMul", "Cast", "Relu", "Sigmoid", "Sigmoid"]),
    ];
    for (providers, want) in cases {
        let names: Vec<String> = providers.iter().map(|p| p.name().to_string()).collect();
        let mut m = half_matmul();
        let report = optimize(&mut m, OptimizationLevel::Extended, &providers).unwrap();
        assert_eq!(op_list(&m), want, "providers {names:?}");
        assert_eq!(m.graph.initializers.keys().collect::<Vec<_>>(), ["table"], "providers {names:?}");
        assert_eq!(m.graph.initializers["table"].dtype(), DataType::Float16);
        assert_eq!(report.fired("half_in_float") > 0, want.contains(&"Cast"), "providers {names:?}");
    }
    let mut m = half_matmul();
    optimize(&mut m, OptimizationLevel::Basic, &[cpu()]).unwrap();
    assert!(!op_list(&m).contains(&"Cast"), "level basic keeps f16");
}

/// Gemm(a, w, c?) → Reshape → Transpose of a size-1 dim → SkipLayerNormalization(skip, input,
/// gamma, beta, bias?) with the sum output named.
fn gemm_skip(gemm_bias: bool, norm_bias: bool) -> Model {
    let t = |shape: &[usize], v: f32| Tensor::from_vec(shape.to_vec(), vec![v; shape.iter().product()]).unwrap();
    let mut gemm = node("Gemm", &["a", "w"], "g");
    gemm.attributes.push(Attribute { name: "transB".into(), value: AttrValue::Int(1) });
    if gemm_bias {
        gemm.inputs.push("c".into());
    }
    let mut transpose = node("Transpose", &["r"], "v");
    transpose.attributes.push(Attribute { name: "perm".into(), value: AttrValue::Ints(vec![1, 0, 2]) });
    let mut sln = node("SkipLayerNormalization", &["s", "v", "gamma", "beta"], "y");
    sln.domain = crate::ir::MS_DOMAIN.into();
    sln.outputs = vec!["y".into(), String::new(), String::new(), "sum".into()];
    if norm_bias {
        sln.inputs.push("nb".into());
    }
    let shape = Tensor::from_vec(vec![3], vec![6i64, 1, 5]).unwrap();
    Model {
        opsets: BTreeMap::from([(String::new(), 17), (crate::ir::MS_DOMAIN.to_string(), 1)]),
        graph: Graph {
            nodes: vec![gemm, node("Reshape", &["g", "shape"], "r"), transpose, sln],
            inputs: vec![float_input("a", &[6, 8]), float_input("s", &[1, 6, 5])],
            outputs: ["y", "sum"].iter().map(|o| ValueInfo::new(*o, ValueType::Unknown)).collect(),
            initializers: BTreeMap::from([
                ("w".to_string(), t(&[5, 8], 0.1)),
                ("c".to_string(), t(&[5], 0.2)),
                ("nb".to_string(), t(&[5], 0.3)),
                ("gamma".to_string(), t(&[5], 1.0)),
                ("beta".to_string(), t(&[5], 0.0)),
                ("shape".to_string(), shape),
            ]),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn gemm_into_skip_layer_norm_fuses_where_the_provider_takes_it() {
    let all = ["Gemm", "Reshape", "Transpose", "SkipLayerNormalization", "GemmSkipLayerNormalization"];
    let mut m = gemm_skip(true, false);
    optimize(&mut m, OptimizationLevel::Extended, &[gpu(&all), cpu()]).unwrap();
    assert_eq!(op_list(&m), ["GemmSkipLayerNormalization"]);
    let fused = &m.graph.nodes[0];
    assert_eq!(fused.inputs, ["a", "w", "c", "s", "gamma", "beta"]);
    assert_eq!(fused.outputs, ["y", "sum"]);
    assert_eq!(fused.int_or("transB", 0).unwrap(), 1);
    // The norm's own bias stands in for the Gemm's missing C.
    let mut m = gemm_skip(false, true);
    optimize(&mut m, OptimizationLevel::Extended, &[gpu(&all), cpu()]).unwrap();
    assert_eq!(m.graph.nodes[0].inputs, ["a", "w", "nb", "s", "gamma", "beta"]);
    // Two biases, or a provider without the fused op: nothing fuses.
    let mut m = gemm_skip(true, true);
    optimize(&mut m, OptimizationLevel::Extended, &[gpu(&all), cpu()]).unwrap();
    assert_eq!(op_list(&m), ["Gemm", "Reshape", "Transpose", "SkipLayerNormalization"]);
    let mut m = gemm_skip(true, false);
    optimize(&mut m, OptimizationLevel::Extended, &[gpu(&all[..4]), cpu()]).unwrap();
    assert_eq!(op_list(&m), ["Gemm", "Reshape", "Transpose", "SkipLayerNormalization"]);
}
