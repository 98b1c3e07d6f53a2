//! The NCHWc pass on hand-built graphs against fake providers: which nodes convert, where the
//! reorders go, and the cases that must stay NCHW. The numerical checks (outputs equal to the
//! unoptimized run on the CPU EP) are in `crates/onyx/tests/optimizer.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::ep::{DeviceDescription, Kernel, NodeContext};
use crate::ir::check_model;
use crate::types::{TensorType, ValueInfo, ValueType};
use crate::{Device, Error, Tensor, TensorView};

/// A provider that takes every op and runs NCHWc with `block` (or not).
struct Blocked(Option<usize>);

impl ExecutionProvider for Blocked {
    fn name(&self) -> &str {
        "blocked"
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn describe_devices(&self) -> Vec<DeviceDescription> {
        vec![]
    }
    fn supports(&self, _: &NodeContext<'_>) -> bool {
        true
    }
    fn build_kernel(&self, _: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
        Err(Error::Unsupported("fake provider".into()))
    }
    fn nchwc_block(&self) -> Option<usize> {
        self.0
    }
    fn upload(&self, _: TensorView<'_>) -> Result<Tensor> {
        Err(Error::Unsupported("fake provider".into()))
    }
    fn download(&self, _: &Tensor) -> Result<Tensor> {
        Err(Error::Unsupported("fake provider".into()))
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attributes: Vec<Attribute>) -> Node {
    Node {
        name: output.to_string(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attributes,
        ..Default::default()
    }
}

fn weights(shape: &[usize]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), vec![0.1f32; shape.iter().product()]).unwrap()
}

fn model(nodes: Vec<Node>, x: &[usize], inits: Vec<(&str, Tensor)>, outputs: &[&str]) -> Model {
    let mut m = Model {
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes,
            inputs: vec![ValueInfo::new("x", ValueType::Tensor(TensorType::fixed(DataType::Float, x)))],
            outputs: outputs.iter().map(|o| ValueInfo::new(*o, ValueType::Unknown)).collect(),
            initializers: inits.into_iter().map(|(n, t)| (n.to_string(), t)).collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    check_model(&mut m).unwrap();
    m
}

fn ops(m: &Model) -> Vec<String> {
    m.graph.nodes.iter().map(|n| n.op_type.clone()).collect()
}

fn run(mut m: Model, block: Option<usize>) -> (usize, Model) {
    let providers: Vec<Arc<dyn ExecutionProvider>> = vec![Arc::new(Blocked(block))];
    let n = nchwc(&mut m, &providers).unwrap();
    (n, m)
}

/// Stem Conv (3 channels: read as NCHW) → Relu → MaxPool → Conv → Add(residual) →
/// GlobalAveragePool → Flatten: one chain, one ReorderOutput before Flatten; the pooled
/// value is also a graph output (restored at the end).
#[test]
fn a_resnet_like_chain_becomes_one_blocked_chain() {
    let pads = Attribute { name: "pads".into(), value: AttrValue::Ints(vec![1, 1, 1, 1]) };
    let k3 = Attribute { name: "kernel_shape".into(), value: AttrValue::Ints(vec![3, 3]) };
    let s2 = Attribute { name: "strides".into(), value: AttrValue::Ints(vec![2, 2]) };
    let nodes = vec![
        node("Conv", &["x", "w0"], "c0", vec![pads.clone()]),
        node("Relu", &["c0"], "r0", vec![]),
        node("MaxPool", &["r0"], "p0", vec![k3, s2, pads.clone()]),
        node("Conv", &["p0", "w1"], "c1", vec![pads]),
        node("Add", &["c1", "p0"], "a1", vec![]),
        node("GlobalAveragePool", &["a1"], "g", vec![]),
        node("Flatten", &["g"], "y", vec![]),
    ];
    let m = model(
        nodes,
        &[1, 3, 16, 16],
        vec![("w0", weights(&[20, 3, 3, 3])), ("w1", weights(&[20, 20, 3, 3]))],
        &["y", "p0"],
    );
    let (n, out) = run(m, Some(16));
    assert_eq!(n, 6);
    assert_eq!(
        ops(&out),
        [
            "NchwcConv",
            "Relu",
            "NchwcMaxPool",
            "NchwcConv",
            "Add",
            "NchwcGlobalAveragePool",
            "ReorderOutput",
            "Flatten",
            "ReorderOutput"
        ]
    );
    let stem = &out.graph.nodes[0];
    assert_eq!(stem.inputs[0], "x", "3 channels: the stem reads NCHW");
    assert_eq!(stem.domain, ONYX_DOMAIN);
    assert_eq!(stem.get_int("block").unwrap(), Some(16));
    let back = &out.graph.nodes[8];
    assert_eq!((back.outputs[0].as_str(), back.get_int("channels").unwrap()), ("p0", Some(20)));
    assert_eq!(out.opsets.get(ONYX_DOMAIN), Some(&1));
}

/// A wide input gets one ReorderInput shared by its two Convs; a depthwise Conv converts.
#[test]
fn a_wide_input_is_reordered_once_and_depthwise_converts() {
    let group = Attribute { name: "group".into(), value: AttrValue::Int(32) };
    let nodes = vec![
        node("Conv", &["x", "w0"], "a", vec![]),
        node("Conv", &["x", "wd"], "b", vec![group]),
        node("Add", &["a", "b"], "y", vec![]),
    ];
    let m =
        model(nodes, &[1, 32, 8, 8], vec![("w0", weights(&[32, 32, 1, 1])), ("wd", weights(&[32, 1, 1, 1]))], &["y"]);
    let (n, out) = run(m, Some(8));
    assert_eq!(n, 3);
    assert_eq!(ops(&out), ["ReorderInput", "NchwcConv", "NchwcConv", "Add", "ReorderOutput"]);
}

/// No block, a grouped (not depthwise) Conv, weights computed at run time, a 1-D Conv: the
/// graph stays as it is.
#[test]
fn what_must_stay_nchw_stays() {
    let conv = |w: &str, attrs| {
        model(
            vec![node("Conv", &["x", w], "y", attrs)],
            &[1, 32, 8, 8],
            vec![("w", weights(&[32, 32, 1, 1])), ("wg", weights(&[32, 16, 1, 1]))],
            &["y"],
        )
    };
    assert_eq!(run(conv("w", vec![]), None).0, 0, "provider without a block");
    let group = Attribute { name: "group".into(), value: AttrValue::Int(2) };
    assert_eq!(run(conv("wg", vec![group]), Some(16)).0, 0, "grouped");
    let mut variable = conv("w", vec![]);
    variable.graph.initializers.clear();
    variable
        .graph
        .inputs
        .push(ValueInfo::new("w", ValueType::Tensor(TensorType::fixed(DataType::Float, &[32, 32, 1, 1]))));
    assert_eq!(run(variable, Some(16)).0, 0, "weights are an input");
    let one_d =
        model(vec![node("Conv", &["x", "w"], "y", vec![])], &[1, 32, 8], vec![("w", weights(&[32, 32, 1]))], &["y"]);
    assert_eq!(run(one_d, Some(16)).0, 0, "1-D");
}
