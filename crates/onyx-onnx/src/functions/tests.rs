use onyx_core::ir::{AttrValue, Model, Node};
use onyx_core::{DataType, Error};

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, FunctionProto, ModelProto, NodeProto};
use crate::testutil::*;

fn function(name: &str, inputs: &[&str], outputs: &[&str], nodes: Vec<NodeProto>) -> FunctionProto {
    FunctionProto {
        name: Some(name.into()),
        domain: Some("custom".into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        node: nodes,
        opset_import: vec![opset("", 17)],
        ..Default::default()
    }
}

fn call(name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto { domain: Some("custom".into()), ..node(name, inputs, outputs) }
}

fn ref_attr(name: &str, referenced: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ref_attr_name: Some(referenced.into()),
        r#type: Some(ty as i32),
        ..Default::default()
    }
}

fn with_functions(
    nodes: Vec<NodeProto>,
    inputs: &[&str],
    outputs: &[&str],
    functions: Vec<FunctionProto>,
) -> ModelProto {
    let mut m = model_proto(graph_proto(nodes, inputs, outputs));
    m.opset_import.push(opset("custom", 1));
    m.functions = functions;
    m
}

/// `custom::Scaled(X, Y) -> Z`: T = LeakyRelu(X, alpha=@a); Z = Add(T, Y).
fn scaled() -> FunctionProto {
    let mut leaky = node("LeakyRelu", &["X"], &["T"]);
    leaky.attribute = vec![ref_attr("alpha", "a", AttributeType::Float)];
    let mut f = function("Scaled", &["X", "Y"], &["Z"], vec![leaky, node("Add", &["T", "Y"], &["Z"])]);
    f.attribute_proto = vec![float_attr("a", 0.125)];
    f
}

fn ops(model: &Model) -> Vec<&str> {
    model.graph.nodes.iter().map(|n| n.op_type.as_str()).collect()
}

fn alpha(n: &Node) -> Option<f32> {
    n.get_float("alpha").unwrap()
}

#[test]
fn calls_are_inlined_with_attribute_values_and_defaults() {
    let mut first = call("Scaled", &["x", "x"], &["h"]);
    first.attribute = vec![float_attr("a", 0.5)];
    let second = call("Scaled", &["h", "x"], &["y"]);
    let m = with_functions(vec![first, second], &["x"], &["y"], vec![scaled()]);
    let model = load(&m).unwrap();
    assert_eq!(ops(&model), ["LeakyRelu", "Add", "LeakyRelu", "Add"]);
    let n = &model.graph.nodes;
    assert_eq!(alpha(&n[0]), Some(0.5), "the call's attribute");
    assert_eq!(alpha(&n[2]), Some(0.125), "the function's default");
    assert_eq!(n[0].inputs, ["x"]);
    assert_eq!(n[1].outputs, ["h"]);
    assert_eq!(n[2].inputs, ["h"]);
    assert_eq!(n[3].inputs[1], "x");
    assert_eq!(n[3].outputs, ["y"]);
    // Internal values get distinct fresh names per call.
    let (t1, t2) = (&n[0].outputs[0], &n[2].outputs[0]);
    assert_ne!(t1, t2);
    assert!(t1.ends_with('T') && t2.ends_with('T') && t1 != "T", "{t1} {t2}");
    assert_eq!(n[1].inputs[0], *t1);
    assert_eq!(n[3].inputs[0], *t2);
    assert_eq!(n[0].name, "Scaled_h/LeakyRelu_T");
}

#[test]
fn references_without_value_or_default_are_dropped() {
    let mut f = scaled();
    f.attribute_proto.clear();
    let m = with_functions(vec![call("Scaled", &["x", "x"], &["y"])], &["x"], &["y"], vec![f]);
    let model = load(&m).unwrap();
    assert_eq!(model.graph.nodes[0].attributes.len(), 0);
}

#[test]
fn omitted_inputs_become_empty_and_omitted_outputs_stay_internal() {
    // custom::Clamp(X, Lo, Hi) -> (Y, Z): Y = Clip(X, Lo, Hi); Z = Neg(Y).
    let f = function(
        "Clamp",
        &["X", "Lo", "Hi"],
        &["Y", "Z"],
        vec![node("Clip", &["X", "Lo", "Hi"], &["Y"]), node("Neg", &["Y"], &["Z"])],
    );
    let mut g = graph_proto(vec![call("Clamp", &["x", "", "hi"], &["", "z"])], &["x"], &["z"]);
    g.input.push(tensor_info("hi", DataType::Float, &[]));
    let mut m = with_functions(vec![], &[], &[], vec![f.clone()]);
    m.graph = Some(g);
    let model = load(&m).unwrap();
    let n = &model.graph.nodes;
    assert_eq!(n[0].inputs, ["x", "", "hi"]);
    assert!(!n[0].outputs[0].is_empty() && n[0].outputs[0] != "Y");
    assert_eq!(n[1].inputs, n[0].outputs);
    assert_eq!(n[1].outputs, ["z"]);
    // Fewer inputs than declared: the rest are omitted.
    let mut m = with_functions(vec![call("Clamp", &["x"], &["y", "z"])], &["x"], &["y", "z"], vec![f]);
    m.graph.as_mut().unwrap().output.truncate(2);
    let model = load(&m).unwrap();
    assert_eq!(model.graph.nodes[0].inputs, ["x", "", ""]);
}

#[test]
fn nested_calls_are_inlined_and_their_opsets_merged() {
    // custom::Outer(A) -> B calls custom::Scaled(A, A) -> B; Scaled imports com.microsoft 1.
    let mut inner_call = call("Scaled", &["A", "A"], &["B"]);
    inner_call.attribute = vec![ref_attr("a", "outer_alpha", AttributeType::Float)];
    let mut outer = function("Outer", &["A"], &["B"], vec![inner_call]);
    outer.attribute_proto = vec![float_attr("outer_alpha", 0.75)];
    let mut s = scaled();
    s.opset_import.push(opset("com.microsoft", 1));
    let m = with_functions(vec![call("Outer", &["x"], &["y"])], &["x"], &["y"], vec![outer, s]);
    let model = load(&m).unwrap();
    assert_eq!(ops(&model), ["LeakyRelu", "Add"]);
    assert_eq!(alpha(&model.graph.nodes[0]), Some(0.75));
    assert_eq!(model.opsets.get("com.microsoft"), Some(&1));
    assert_eq!(model.opsets.get(""), Some(&17));
}

#[test]
fn fresh_names_avoid_names_of_the_graph() {
    // The graph already uses the name inlining would pick first for T.
    let first = call("Scaled", &["x", "x"], &["_Scaled1_T"]);
    let second = call("Scaled", &["_Scaled1_T", "x"], &["y"]);
    let m = with_functions(vec![first, second], &["x"], &["y"], vec![scaled()]);
    let model = load(&m).unwrap();
    let t = &model.graph.nodes[0].outputs[0];
    assert_ne!(t, "_Scaled1_T");
    assert_eq!(model.graph.nodes[1].outputs, ["_Scaled1_T"]);
}

#[test]
fn subgraphs_in_bodies_are_renamed_and_calls_in_subgraphs_inlined() {
    // custom::Pick(C, X) -> Y: Y = If(C) { then: R = Relu(X); else: N = LeakyRelu(X, alpha=@a) }.
    let mut leaky = node("LeakyRelu", &["X"], &["N"]);
    leaky.attribute = vec![ref_attr("alpha", "a", AttributeType::Float)];
    let then = graph_proto(vec![node("Relu", &["X"], &["R"])], &[], &["R"]);
    let otherwise = graph_proto(vec![leaky], &[], &["N"]);
    let mut if_node = node("If", &["C"], &["Y"]);
    if_node.attribute = vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)];
    let f = function("Pick", &["C", "X"], &["Y"], vec![if_node]);
    // The main graph calls Pick inside a subgraph of its own If.
    let mut pick = call("Pick", &["c", "x"], &["p"]);
    pick.attribute = vec![float_attr("a", 0.25)];
    let branch = graph_proto(vec![pick], &[], &["p"]);
    let other = graph_proto(vec![node("Neg", &["x"], &["q"])], &[], &["q"]);
    let mut outer_if = node("If", &["c"], &["y"]);
    outer_if.attribute = vec![graph_attr("then_branch", branch), graph_attr("else_branch", other)];
    let mut m = with_functions(vec![outer_if], &["x"], &["y"], vec![f]);
    m.graph.as_mut().unwrap().input.push(tensor_info("c", DataType::Bool, &[]));
    let model = load(&m).unwrap();
    let branch = model.graph.nodes[0].get_graph("then_branch").unwrap().unwrap();
    let inlined_if = &branch.nodes[0];
    assert_eq!((inlined_if.op_type.as_str(), inlined_if.inputs.clone()), ("If", vec!["c".to_string()]));
    let then = inlined_if.get_graph("then_branch").unwrap().unwrap();
    assert_eq!(then.nodes[0].inputs, ["x"]);
    assert_ne!(then.outputs[0].name, "R");
    assert_eq!(then.outputs[0].name, then.nodes[0].outputs[0]);
    let otherwise = inlined_if.get_graph("else_branch").unwrap().unwrap();
    assert!(matches!(otherwise.nodes[0].attr("alpha").map(|a| &a.value), Some(AttrValue::Float(x)) if *x == 0.25));
    assert_eq!(model.graph.nodes[0].implicit_inputs, ["c", "x"]);
}

#[test]
fn invalid_functions_are_errors() {
    let recursive_f = function("F", &["X"], &["Y"], vec![call("G", &["X"], &["Y"])]);
    let recursive_g = function("G", &["X"], &["Y"], vec![call("F", &["X"], &["Y"])]);
    let mut conflicting = scaled();
    conflicting.opset_import = vec![opset("ai.onnx", 13)];
    let cases: Vec<(ModelProto, &str)> = vec![
        (
            with_functions(vec![call("F", &["x"], &["y"])], &["x"], &["y"], vec![recursive_f.clone(), recursive_g]),
            "calls itself (custom::F -> custom::G -> custom::F)",
        ),
        (
            with_functions(vec![call("F", &["x"], &["y"])], &["x"], &["y"], vec![recursive_f.clone(), recursive_f]),
            "defined twice",
        ),
        (
            with_functions(vec![call("Scaled", &["x", "x"], &["y"])], &["x"], &["y"], vec![conflicting]),
            "imports opset ai.onnx version 13, but the model imports version 17",
        ),
        (
            with_functions(vec![call("Scaled", &["x", "x", "x"], &["y"])], &["x"], &["y"], vec![scaled()]),
            "with 3 inputs, but it declares 2",
        ),
        (
            with_functions(vec![call("Scaled", &["x", "x"], &["y", "z"])], &["x"], &["y"], vec![scaled()]),
            "with 2 outputs, but it declares 1",
        ),
    ];
    for (m, needle) in cases {
        let err = load(&m).unwrap_err();
        assert!(matches!(&err, Error::InvalidModel(_) | Error::Node { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{err} (want {needle})");
    }
}

#[test]
fn exponential_inlining_is_bounded() {
    // F0 = Relu; Fi calls F(i-1) twice: F30 would make 2^30 nodes.
    let mut functions = vec![function("F0", &["X"], &["Y"], vec![node("Relu", &["X"], &["Y"])])];
    for i in 1..=30 {
        let prev = format!("F{}", i - 1);
        functions.push(function(
            &format!("F{i}"),
            &["X"],
            &["Y"],
            vec![call(&prev, &["X"], &["T"]), call(&prev, &["T"], &["Y"])],
        ));
    }
    let mut m = with_functions(vec![call("F30", &["x"], &["y"])], &["x"], &["y"], functions.clone());
    let err = super::inline_with_limit(&mut m, 5000).unwrap_err().to_string();
    assert!(err.contains("more than 5000 nodes"), "{err}");
    // Under the limit, F12 inlines to its 2^12 Relu nodes.
    let mut m = with_functions(vec![call("F12", &["x"], &["y"])], &["x"], &["y"], functions);
    super::inline_with_limit(&mut m, 5000).unwrap();
    let g = m.graph.unwrap();
    assert_eq!(g.node.len(), 4096);
    assert!(g.node.iter().all(|n| n.op_type.as_deref() == Some("Relu")));
}

#[test]
fn long_call_chains_are_bounded() {
    // F0 = Relu; Fi calls F(i-1) once.
    let chain = |n: usize| {
        let mut functions = vec![function("F0", &["X"], &["Y"], vec![node("Relu", &["X"], &["Y"])])];
        for i in 1..=n {
            functions.push(function(
                &format!("F{i}"),
                &["X"],
                &["Y"],
                vec![call(&format!("F{}", i - 1), &["X"], &["Y"])],
            ));
        }
        with_functions(vec![call(&format!("F{n}"), &["x"], &["y"])], &["x"], &["y"], functions)
    };
    let model = load(&chain(127)).unwrap();
    assert_eq!(ops(&model), ["Relu"]);
    assert_eq!(model.graph.nodes[0].outputs, ["y"]);
    let err = load(&chain(5000)).unwrap_err().to_string();
    assert!(err.contains("nested more than 128 deep"), "{err}");
}
