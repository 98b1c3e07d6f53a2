//! Resource limits: sizes a model or an input asks for are refused before anything that large
//! is allocated, at session creation, when a plan is made for new input shapes, or in the
//! kernel that computes a size from data; the error names the value, the size and the limit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use onyx::ir::{AttrValue, Attribute, Graph, Model, Node};
use onyx::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx::{DataType, Error, Session, SessionBuilder, Tensor};

const HUGE: i64 = 1 << 40;

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> Node {
    Node {
        name: name.into(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn tensor_input(name: &str, dtype: DataType, dims: Vec<Dim>) -> ValueInfo {
    ValueInfo::new(name, ValueType::Tensor(TensorType { dtype, shape: Some(dims) }))
}

fn model(nodes: Vec<Node>, inputs: Vec<ValueInfo>, outputs: &[&str], initializers: Vec<(&str, Tensor)>) -> Model {
    Model {
        ir_version: 8,
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            name: "limits".into(),
            nodes,
            inputs,
            outputs: outputs.iter().map(|o| ValueInfo::new(*o, ValueType::Unknown)).collect(),
            initializers: initializers.into_iter().map(|(n, t)| (n.to_string(), t)).collect(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// ConstantOfShape(shape) with `shape` an int64[1] graph input (its value is data).
fn constant_of_shape_model() -> Model {
    let mut n = node("fill", "ConstantOfShape", &["shape"], &["y"]);
    n.attributes = vec![Attribute {
        name: "value".into(),
        value: AttrValue::Tensor(Tensor::from_vec(vec![1], vec![1.5f32]).unwrap()),
    }];
    model(vec![n], vec![tensor_input("shape", DataType::Int64, vec![Dim::Fixed(1)])], &["y"], vec![])
}

/// The limit error of `result`, checked to name `needles`, and how long it took.
fn limit_error<T>(result: onyx::Result<T>, needles: &[&str]) -> String {
    let err = match result {
        Ok(_) => panic!("expected a limit error"),
        Err(e) => e,
    };
    assert!(matches!(err, Error::Limit { .. }), "not a limit error: {err}");
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "'{n}' missing from: {msg}");
    }
    msg
}

fn quickly<T>(f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    out
}

#[test]
fn constant_of_shape_with_a_constant_huge_shape_fails_at_session_creation() {
    let mut m = constant_of_shape_model();
    m.graph.inputs.clear();
    m.graph.initializers.insert("shape".into(), Tensor::from_vec(vec![1], vec![HUGE]).unwrap());
    let result = quickly(|| SessionBuilder::new().commit_from_model(m));
    let bytes = (HUGE * 4).to_string();
    limit_error(result, &["ConstantOfShape node 'fill'", "output 'y'", &bytes, "max_tensor_bytes = 17179869184"]);
}

#[test]
fn constant_of_shape_with_a_huge_shape_input_fails_at_run() {
    let session = SessionBuilder::new().commit_from_model(constant_of_shape_model()).unwrap();
    let shape = Tensor::from_vec(vec![1], vec![HUGE]).unwrap();
    let result = quickly(|| session.run([("shape", shape)]));
    limit_error(result, &["'fill'", &HUGE.to_string(), "max_tensor_bytes"]);
    // The session still works, and the default limit lets real sizes through.
    let outputs = session.run([("shape", Tensor::from_vec(vec![1], vec![1i64 << 20]).unwrap())]).unwrap();
    let y = outputs.get("y").unwrap().as_tensor().unwrap();
    assert_eq!(y.shape(), [1 << 20]);
    assert!(y.as_slice::<f32>().unwrap().iter().all(|&v| v == 1.5));
}

#[test]
fn a_lowered_tensor_limit_applies_to_sizes_from_data() {
    let session =
        SessionBuilder::new().with_max_tensor_bytes(1 << 20).commit_from_model(constant_of_shape_model()).unwrap();
    let ok = session.run([("shape", Tensor::from_vec(vec![1], vec![1000i64]).unwrap())]).unwrap();
    assert_eq!(ok.get("y").unwrap().as_tensor().unwrap().shape(), [1000]);
    let big = Tensor::from_vec(vec![1], vec![(1i64 << 18) + 1]).unwrap();
    limit_error(session.run([("shape", big)]), &["'fill'", "1048580 bytes", "max_tensor_bytes = 1048576"]);
}

#[test]
fn expand_to_a_huge_shape_fails_at_run() {
    let m = model(
        vec![node("grow", "Expand", &["x", "shape"], &["y"])],
        vec![
            tensor_input("x", DataType::Float, vec![Dim::Fixed(1)]),
            tensor_input("shape", DataType::Int64, vec![Dim::Fixed(2)]),
        ],
        &["y"],
        vec![],
    );
    for limit in [None, Some(4096)] {
        let mut builder = SessionBuilder::new();
        if let Some(l) = limit {
            builder = builder.with_max_tensor_bytes(l);
        }
        let session = builder.commit_from_model(m.clone()).unwrap();
        let x = Tensor::from_vec(vec![1], vec![2.0f32]).unwrap();
        let dims: Vec<i64> = if limit.is_some() { vec![33, 32] } else { vec![1 << 20, 1 << 20] };
        let shape = Tensor::from_vec(vec![2], dims).unwrap();
        let result = quickly(|| session.run([("x", x), ("shape", shape)]));
        limit_error(result, &["Expand node 'grow'", "max_tensor_bytes"]);
    }
}

/// A + B broadcast: float[n,1] + float[1,n] is float[n,n].
fn outer_sum(session: &Session, n: usize) -> onyx::Result<onyx::Outputs> {
    let a = Tensor::from_vec(vec![n, 1], vec![1.0f32; n]).unwrap();
    let b = Tensor::from_vec(vec![1, n], vec![2.0f32; n]).unwrap();
    session.run([("a", a), ("b", b)])
}

#[test]
fn a_plan_for_new_input_shapes_checks_every_size_before_running() {
    let n = || Dim::Symbol("n".into());
    let m = model(
        vec![node("outer", "Add", &["a", "b"], &["y"])],
        vec![
            tensor_input("a", DataType::Float, vec![n(), Dim::Fixed(1)]),
            tensor_input("b", DataType::Float, vec![Dim::Fixed(1), n()]),
        ],
        &["y"],
        vec![],
    );
    let session = SessionBuilder::new().commit_from_model(m).unwrap();
    let y = outer_sum(&session, 7).unwrap();
    assert_eq!(y.get("y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap(), &[3.0; 49]);
    // 70000² floats: 19.6 GB, from two inputs of 280 kB.
    let result = quickly(|| outer_sum(&session, 70_000));
    limit_error(result, &["Add node 'outer'", "output 'y'", "19600000000 bytes", "max_tensor_bytes"]);
}

#[test]
fn the_run_limit_counts_the_values_held_at_once() {
    let m = model(
        vec![
            node("relu", "Relu", &["x"], &["r"]),
            node("neg", "Neg", &["r"], &["n"]),
            node("abs", "Abs", &["n"], &["y"]),
        ],
        vec![tensor_input("x", DataType::Float, vec![Dim::Fixed(1000)])],
        &["y"],
        vec![],
    );
    // Two 4000-byte values live at once (an op's input and its output), never three.
    let session = SessionBuilder::new().with_max_run_bytes(8000).commit_from_model(m.clone()).unwrap();
    let x = Tensor::from_vec(vec![1000], (0..1000).map(|i| i as f32 - 500.0).collect()).unwrap();
    let y = session.run([("x", x)]).unwrap();
    assert_eq!(y.get("y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap()[..3], [0.0, 0.0, 0.0]);
    let result = SessionBuilder::new().with_max_run_bytes(7999).commit_from_model(m);
    limit_error(result, &["graph 'limits'", "8000 bytes", "max_run_bytes = 7999"]);
}
