use std::collections::BTreeMap;

use onyx_core::ir::{AttrValue, Model};
use onyx_core::types::{Dim, TensorType, ValueType};
use onyx_core::{DataType, Error};
use prost::Message;

use super::*;
use crate::proto::{GraphProto, NodeProto, SparseTensorProto, StringStringEntryProto, TensorProto};
use crate::testutil::*;

fn relu_model() -> ModelProto {
    model_proto(graph_proto(vec![node("Relu", &["x"], &["y"])], &["x"], &["y"]))
}

#[test]
fn converts_every_model_field() {
    let mut m = relu_model();
    m.producer_name = Some("pytorch".into());
    m.producer_version = Some("2.5".into());
    m.domain = Some("org.example".into());
    m.model_version = Some(3);
    m.doc_string = Some("a model".into());
    m.opset_import = vec![opset("ai.onnx", 17), opset("com.microsoft", 1)];
    m.metadata_props = vec![
        StringStringEntryProto { key: Some("b".into()), value: Some("2".into()) },
        StringStringEntryProto { key: Some("a".into()), value: Some("1".into()) },
    ];
    let g = m.graph.as_mut().unwrap();
    g.doc_string = Some("graph doc".into());
    g.node[0].domain = Some("ai.onnx".into());
    g.node[0].doc_string = Some("node doc".into());
    g.value_info = vec![tensor_info("h", DataType::Int64, &[4])];
    g.initializer = vec![float_tensor("w", &[2], vec![0.5, -1.5])];
    let model = load(&m).unwrap();
    assert_eq!(model.ir_version, 10);
    assert_eq!((model.producer_name.as_str(), model.producer_version.as_str()), ("pytorch", "2.5"));
    assert_eq!((model.domain.as_str(), model.model_version, model.doc.as_str()), ("org.example", Some(3), "a model"));
    let want: BTreeMap<String, i64> = [("".to_string(), 17), ("com.microsoft".to_string(), 1)].into();
    assert_eq!(model.opsets, want);
    assert_eq!(model.metadata, vec![("b".into(), "2".into()), ("a".into(), "1".into())]);
    let g = &model.graph;
    assert_eq!((g.name.as_str(), g.doc.as_str()), ("g", "graph doc"));
    let n = &g.nodes[0];
    assert_eq!((n.name.as_str(), n.op_type.as_str(), n.domain.as_str()), ("Relu_y", "Relu", ""));
    assert_eq!((n.inputs.clone(), n.outputs.clone(), n.doc.as_str()), (vec!["x".into()], vec!["y".into()], "node doc"));
    assert_eq!(g.inputs[0].ty, ValueType::Tensor(TensorType::fixed(DataType::Float, &[2, 3])));
    assert_eq!(g.outputs[0].name, "y");
    assert_eq!(g.value_info[0].ty, ValueType::Tensor(TensorType::fixed(DataType::Int64, &[4])));
    assert_eq!(g.initializers["w"].as_slice::<f32>().unwrap(), &[0.5, -1.5]);
}

#[test]
fn loads_from_a_file_and_reports_missing_files() {
    let dir = crate::testutil::TempDir::new("file");
    let path = dir.path().join("relu.onnx");
    std::fs::write(&path, relu_model().encode_to_vec()).unwrap();
    let model = load_model(&path).unwrap();
    assert_eq!(model.graph.nodes[0].op_type, "Relu");
    let missing = dir.path().join("nope.onnx");
    let err = load_model(&missing).unwrap_err();
    assert!(matches!(&err, Error::Io { path, .. } if path.contains("nope.onnx")), "{err}");
}

#[test]
fn undecodable_bytes_are_load_errors() {
    let bytes = relu_model().encode_to_vec();
    let mut rng = fastrand::Rng::with_seed(3);
    let garbage: Vec<u8> = (0..253).map(|_| rng.u8(..)).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", bytes[..bytes.len() - 5].to_vec()),
        ("cut in half", bytes[..bytes.len() / 2].to_vec()),
        ("text", b"this is not an ONNX file, just some text\n".to_vec()),
        ("random", garbage),
        ("empty", vec![]),
    ];
    for (what, b) in cases {
        let err = load_model_from_bytes(&b, None).unwrap_err();
        assert!(matches!(&err, Error::Load(m) if m.contains("not a valid ONNX ModelProto")), "{what}: {err}");
    }
}

#[test]
fn a_model_without_a_graph_is_an_error() {
    let mut m = relu_model();
    m.graph = None;
    let err = load(&m).unwrap_err();
    assert!(matches!(&err, Error::InvalidModel(msg) if msg.contains("no graph")), "{err}");
}

#[test]
fn invalid_content_is_an_invalid_model() {
    type Edit = fn(&mut ModelProto);
    let cases: Vec<(&str, Edit)> = vec![
        ("needs 6 values, found 5 in float_data", |m| {
            m.graph.as_mut().unwrap().initializer = vec![float_tensor("w", &[2, 3], vec![1.0; 5])];
        }),
        ("dimension -2", |m| {
            m.graph.as_mut().unwrap().initializer = vec![float_tensor("w", &[-2, 3], vec![1.0; 6])];
        }),
        ("value 'x': dimension -4 is negative", |m| {
            m.graph.as_mut().unwrap().input = vec![tensor_info("x", DataType::Float, &[-4])];
        }),
        ("initializer 'w' is declared twice", |m| {
            let w = float_tensor("w", &[1], vec![1.0]);
            m.graph.as_mut().unwrap().initializer = vec![w.clone(), w];
        }),
        ("an initializer has no name", |m| {
            m.graph.as_mut().unwrap().initializer = vec![float_tensor("", &[1], vec![1.0])];
        }),
        ("imported twice, as version 17 and 18", |m| m.opset_import.push(opset("ai.onnx", 18))),
        ("has no version", |m| m.opset_import.push(OperatorSetIdProto { domain: Some("x".into()), version: None })),
        ("has no op_type", |m| m.graph.as_mut().unwrap().node[0].op_type = None),
    ];
    for (needle, edit) in cases {
        let mut m = relu_model();
        edit(&mut m);
        let err = load(&m).unwrap_err();
        assert!(matches!(&err, Error::InvalidModel(msg) if msg.contains(needle)), "{err} (want {needle})");
    }
}

#[test]
fn checker_errors_come_through() {
    let cycle = graph_proto(vec![node("Add", &["x", "b"], &["a"]), node("Relu", &["a"], &["b"])], &["x"], &["a"]);
    let dangling = graph_proto(vec![node("Add", &["x", "nowhere"], &["y"])], &["x"], &["y"]);
    let twice = graph_proto(vec![node("Relu", &["x"], &["y"]), node("Neg", &["x"], &["y"])], &["x"], &["y"]);
    let unknown = graph_proto(vec![node("Frobnicate", &["x"], &["y"])], &["x"], &["y"]);
    let cases = [(cycle, "cycle"), (dangling, "'nowhere'"), (twice, "produced twice"), (unknown, "Frobnicate")];
    for (g, needle) in cases {
        let err = load(&model_proto(g)).unwrap_err().to_string();
        assert!(err.contains(needle), "{err} (want {needle})");
    }
    let mut m = relu_model();
    m.graph.as_mut().unwrap().node[0].domain = Some("com.unknown".into());
    assert!(matches!(load(&m), Err(Error::UnknownOp { .. })));
}

#[test]
fn nodes_are_sorted_by_the_checker() {
    let g = graph_proto(vec![node("Neg", &["h"], &["y"]), node("Relu", &["x"], &["h"])], &["x"], &["y"]);
    let model = load(&model_proto(g)).unwrap();
    let ops: Vec<&str> = model.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["Relu", "Neg"]);
}

#[test]
fn old_files_without_opset_imports_use_opset_1() {
    let mut m = relu_model();
    m.opset_import.clear();
    m.ir_version = Some(2);
    assert_eq!(load(&m).unwrap().opsets, [(String::new(), 1)].into());
}

#[test]
fn sparse_initializers_are_densified() {
    let mut m = model_proto(graph_proto(vec![node("Add", &["x", "w"], &["y"])], &["x"], &["y"]));
    let indices =
        TensorProto { data_type: Some(7), dims: vec![2, 2], int64_data: vec![0, 2, 1, 1], ..Default::default() };
    m.graph.as_mut().unwrap().sparse_initializer = vec![SparseTensorProto {
        values: Some(float_tensor("w", &[2], vec![4.5, -2.0])),
        indices: Some(indices),
        dims: vec![2, 3],
    }];
    let model = load(&m).unwrap();
    assert_eq!(model.graph.initializers["w"].as_slice::<f32>().unwrap(), &[0.0, 0.0, 4.5, 0.0, -2.0, 0.0]);
}

fn if_node(then: GraphProto, otherwise: GraphProto, out: &str) -> NodeProto {
    let mut n = node("If", &["cond"], &[out]);
    n.attribute = vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)];
    n
}

#[test]
fn subgraphs_are_converted_and_read_outer_values() {
    let then = graph_proto(vec![node("Relu", &["x"], &["t"])], &[], &["t"]);
    let otherwise = graph_proto(vec![node("Neg", &["x"], &["e"])], &[], &["e"]);
    let mut g = graph_proto(vec![if_node(then, otherwise, "y")], &["x"], &["y"]);
    g.input.push(tensor_info("cond", DataType::Bool, &[]));
    let model = load(&model_proto(g)).unwrap();
    let n = &model.graph.nodes[0];
    assert_eq!(n.implicit_inputs, vec!["x".to_string()]);
    let Some(AttrValue::Graph(then)) = n.attr("then_branch").map(|a| &a.value) else { panic!("no then branch") };
    assert_eq!(then.nodes[0].op_type, "Relu");
    assert_eq!(n.get_graph("else_branch").unwrap().unwrap().nodes[0].op_type, "Neg");
}

/// A chain of `levels` If nodes, each nested in the then branch of the previous one.
fn nested_ifs(levels: usize) -> GraphProto {
    let mut inner = graph_proto(vec![node("Relu", &["x"], &["y0"])], &[], &["y0"]);
    for level in 1..=levels {
        let out = format!("y{level}");
        let other = graph_proto(vec![node("Neg", &["x"], &[&format!("e{level}")])], &[], &[&format!("e{level}")]);
        inner = graph_proto(vec![if_node(inner, other, &out)], &[], &[&out]);
    }
    inner
}

#[test]
fn subgraph_depth_is_limited_during_conversion() {
    let mut ext = ExternalData::new(None);
    let ok = graph(nested_ifs(crate::MAX_SUBGRAPH_DEPTH), &mut ext, 0);
    assert!(ok.is_ok(), "{:?}", ok.err());
    let err = graph(nested_ifs(crate::MAX_SUBGRAPH_DEPTH + 1), &mut ext, 0).unwrap_err().to_string();
    assert!(err.contains("nested more than 64 deep"), "{err}");
    // Encoded, such nesting already exceeds prost's decoding recursion limit.
    let mut m = model_proto(nested_ifs(200));
    m.graph.as_mut().unwrap().input =
        vec![tensor_info("x", DataType::Float, &[1]), tensor_info("cond", DataType::Bool, &[])];
    assert!(matches!(load(&m), Err(Error::Load(_))));
}

#[test]
fn shallow_nesting_loads() {
    let mut g = nested_ifs(3);
    g.input = vec![tensor_info("x", DataType::Float, &[1]), tensor_info("cond", DataType::Bool, &[])];
    let model: Model = load(&model_proto(g)).unwrap();
    let mut depth = 0;
    let mut cur = &model.graph;
    while let Some(sub) = cur.nodes.first().and_then(|n| n.get_graph("then_branch").ok().flatten()) {
        depth += 1;
        cur = sub;
    }
    assert_eq!(depth, 3);
    assert_eq!(model.graph.nodes[0].implicit_inputs, vec!["cond".to_string(), "x".to_string()]);
}

#[test]
fn symbolic_dims_survive_loading() {
    let mut m = relu_model();
    let g = m.graph.as_mut().unwrap();
    let Some(crate::proto::type_proto::Value::TensorType(t)) = g.input[0].r#type.as_mut().unwrap().value.as_mut()
    else {
        unreachable!()
    };
    t.shape.as_mut().unwrap().dim[0].value =
        Some(crate::proto::tensor_shape_proto::dimension::Value::DimParam("N".into()));
    let model = load(&m).unwrap();
    let shape = model.graph.inputs[0].ty.as_tensor().unwrap().shape.clone().unwrap();
    assert_eq!(shape, vec![Dim::Symbol("N".into()), Dim::Fixed(3)]);
}
