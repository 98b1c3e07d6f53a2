//! Type and shape inference with symbolic dimensions.
//!
//! Runs over a graph in topological order. Besides types it tracks the *values* of small
//! integer tensors where they are known symbolically (the output of `Shape`, and what
//! `Gather`/`Concat`/`Slice`/arithmetic make of it), so that `Reshape` targets computed from
//! input shapes in exported models still give symbolic output shapes.

mod rules;

use std::collections::HashMap;

use crate::ir::{Graph, Node, OpsetImports, MAX_SUBGRAPH_DEPTH};
use crate::ops::registry;
use crate::types::{TensorType, ValueType};
use crate::{Error, Result, Tensor};

pub use rules::{from_constant, infer_node, merge};

/// One element of a symbolically known integer tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymInt {
    /// A known value.
    Known(i64),
    /// The value of a named free dimension.
    Symbol(String),
    /// Not known.
    Unknown,
}

/// What inference knows about one value.
#[derive(Debug, Clone)]
pub struct Inferred {
    /// Its type.
    pub ty: ValueType,
    /// Its constant value, when known (initializers, Constant nodes, folded shape arithmetic).
    pub constant: Option<Tensor>,
    /// Its elements as symbolic integers, for small 0-D/1-D integer tensors.
    pub sym_value: Option<Vec<SymInt>>,
}

impl Inferred {
    /// Knows only a type.
    pub fn of_type(ty: ValueType) -> Self {
        Inferred { ty, constant: None, sym_value: None }
    }

    /// The tensor type, when this is a tensor.
    pub fn tensor_type(&self) -> Option<&TensorType> {
        self.ty.as_tensor()
    }
}

/// Infers the type of every value of `graph`. `known` holds what is known beforehand (graph
/// inputs, possibly with free dimensions overridden, and outer-scope values for subgraphs);
/// initializers are added here. Values inference cannot type are `ValueType::Unknown`.
/// Errors only where the model is certainly inconsistent (e.g. MatMul inner dimensions 3 vs 4).
/// The branches of `If` nodes are inferred too, with the enclosing values in scope.
pub fn infer_graph(graph: &Graph, opsets: &OpsetImports, known: &mut HashMap<String, Inferred>) -> Result<()> {
    infer_scope(graph, opsets, known, 0)
}

/// [`infer_graph`] for a graph nested `depth` subgraphs deep.
fn infer_scope(
    graph: &Graph,
    opsets: &OpsetImports,
    known: &mut HashMap<String, Inferred>,
    depth: usize,
) -> Result<()> {
    if depth > MAX_SUBGRAPH_DEPTH {
        return Err(Error::InvalidModel(format!("subgraphs are nested more than {MAX_SUBGRAPH_DEPTH} deep")));
    }
    for input in &graph.inputs {
        known.entry(input.name.clone()).or_insert_with(|| Inferred::of_type(input.ty.clone()));
    }
    for (name, t) in &graph.initializers {
        known.insert(name.clone(), rules::from_constant(t));
    }
    let declared: HashMap<&str, &ValueType> =
        graph.value_info.iter().chain(&graph.outputs).map(|v| (v.name.as_str(), &v.ty)).collect();
    for node in &graph.nodes {
        let since = registry::since_version(node, opsets)?;
        let inputs: Vec<Option<&Inferred>> =
            node.inputs.iter().map(|n| if n.is_empty() { None } else { known.get(n) }).collect();
        let mut outputs = infer_node(node, since, &inputs)?;
        if node.op_type == "If" && node.domain.is_empty() {
            outputs = infer_if_branches(node, opsets, known, depth)?;
        }
        for (i, name) in node.outputs.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let mut out = outputs.get(i).cloned().unwrap_or_else(|| Inferred::of_type(ValueType::Unknown));
            if let Some(decl) = declared.get(name.as_str()) {
                out.ty = rules::merge(&out.ty, decl);
            }
            known.insert(name.clone(), out);
        }
    }
    Ok(())
}

/// The outputs of an `If` node from inferring both branches with the enclosing values in
/// scope (only the taken branch when the condition is a constant).
fn infer_if_branches(
    node: &Node,
    opsets: &OpsetImports,
    known: &HashMap<String, Inferred>,
    depth: usize,
) -> Result<Vec<Inferred>> {
    let (Some(then_g), Some(else_g)) = (node.get_graph("then_branch")?, node.get_graph("else_branch")?) else {
        return Ok(vec![]);
    };
    let branch_types = |g: &Graph| -> Result<Vec<ValueType>> {
        let mut scope = known.clone();
        infer_scope(g, opsets, &mut scope, depth + 1)?;
        Ok(g.outputs.iter().map(|o| scope.get(&o.name).map_or(ValueType::Unknown, |k| k.ty.clone())).collect())
    };
    let cond = node.input(0).and_then(|c| known.get(c));
    Ok(match rules::constant_condition(cond) {
        Some(true) => branch_types(then_g)?.into_iter().map(Inferred::of_type).collect(),
        Some(false) => branch_types(else_g)?.into_iter().map(Inferred::of_type).collect(),
        None => rules::merge_branch_lists(&branch_types(then_g)?, &branch_types(else_g)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute};
    use crate::types::{Dim, ValueInfo};

    fn n(op: &str, inputs: &[&str], outputs: &[&str], attributes: Vec<Attribute>) -> Node {
        Node {
            name: outputs[0].to_string(),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            attributes,
            ..Default::default()
        }
    }

    fn axis(v: i64) -> Vec<Attribute> {
        vec![Attribute { name: "axis".into(), value: AttrValue::Int(v) }]
    }

    fn input(name: &str, dims: Vec<Dim>) -> ValueInfo {
        ValueInfo::new(name, ValueType::Tensor(TensorType { dtype: crate::DataType::Float, shape: Some(dims) }))
    }

    fn sym(s: &str) -> Dim {
        Dim::Symbol(s.into())
    }

    /// The reshape chain an exported BERT uses to split heads, then the attention scores.
    fn bert_graph() -> Graph {
        let ints = |v: &[i64]| Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap();
        Graph {
            inputs: vec![input("x", vec![sym("batch"), sym("seq"), Dim::Fixed(768)])],
            initializers: [
                ("zero".to_string(), Tensor::scalar(0i64)),
                ("one".to_string(), Tensor::scalar(1i64)),
                ("axes0".to_string(), ints(&[0])),
                ("heads".to_string(), ints(&[12])),
                ("head_size".to_string(), ints(&[64])),
            ]
            .into(),
            nodes: vec![
                n("Shape", &["x"], &["shape"], vec![]),
                n("Gather", &["shape", "zero"], &["b"], axis(0)),
                n("Gather", &["shape", "one"], &["s"], axis(0)),
                n("Unsqueeze", &["b", "axes0"], &["b1"], vec![]),
                n("Unsqueeze", &["s", "axes0"], &["s1"], vec![]),
                n("Concat", &["b1", "s1", "heads", "head_size"], &["target"], axis(0)),
                n("Reshape", &["x", "target"], &["split"], vec![]),
                n(
                    "Transpose",
                    &["split"],
                    &["q"],
                    vec![Attribute { name: "perm".into(), value: AttrValue::Ints(vec![0, 2, 1, 3]) }],
                ),
                n(
                    "Transpose",
                    &["split"],
                    &["kt"],
                    vec![Attribute { name: "perm".into(), value: AttrValue::Ints(vec![0, 2, 3, 1]) }],
                ),
                n("MatMul", &["q", "kt"], &["scores"], vec![]),
                n("Softmax", &["scores"], &["probs"], axis(-1)),
                n("Frobnicate", &["probs"], &["mystery"], vec![]),
            ],
            outputs: vec![ValueInfo::new("probs", ValueType::Unknown)],
            ..Default::default()
        }
    }

    fn opsets() -> OpsetImports {
        [(String::new(), 17)].into()
    }

    fn type_of(known: &HashMap<String, Inferred>, name: &str) -> String {
        known[name].ty.to_string()
    }

    #[test]
    fn bert_reshape_chain_is_symbolic() {
        let mut g = bert_graph();
        g.nodes.pop(); // the unknown op is not in the opset table
        let mut known = HashMap::new();
        infer_graph(&g, &opsets(), &mut known).unwrap();
        assert_eq!(type_of(&known, "target"), "int64[4]");
        assert_eq!(
            known["target"].sym_value.as_deref().unwrap(),
            &[SymInt::Symbol("batch".into()), SymInt::Symbol("seq".into()), SymInt::Known(12), SymInt::Known(64)]
        );
        assert!(known["target"].constant.is_none(), "batch and seq are not known");
        assert_eq!(type_of(&known, "split"), "float[batch,seq,12,64]");
        assert_eq!(type_of(&known, "scores"), "float[batch,12,seq,seq]");
        assert_eq!(type_of(&known, "probs"), "float[batch,12,seq,seq]");
    }

    #[test]
    fn concrete_inputs_fold_the_shape_to_a_constant() {
        let mut g = bert_graph();
        g.nodes.pop();
        let mut known = HashMap::new();
        let concrete = input("x", vec![Dim::Fixed(2), Dim::Fixed(5), Dim::Fixed(768)]);
        known.insert("x".to_string(), Inferred::of_type(concrete.ty));
        infer_graph(&g, &opsets(), &mut known).unwrap();
        let target = known["target"].constant.as_ref().expect("a constant target shape");
        assert_eq!(target.as_slice::<i64>().unwrap(), &[2, 5, 12, 64]);
        assert_eq!(type_of(&known, "scores"), "float[2,12,5,5]");
    }

    #[test]
    fn unknown_ops_leave_outputs_untyped_and_declarations_fill_in() {
        let mut g = bert_graph();
        let mystery = ValueType::Tensor(TensorType { dtype: crate::DataType::Float, shape: Some(vec![sym("m")]) });
        g.value_info.push(ValueInfo::new("mystery", mystery));
        g.value_info
            .push(ValueInfo::new("split", input("", vec![Dim::Unknown, sym("s2"), Dim::Fixed(12), Dim::Unknown]).ty));
        let mut known = HashMap::new();
        // "Frobnicate" is unknown to the registry: inference of a node needs its op.
        assert!(infer_graph(&g, &opsets(), &mut known).is_err());
        g.nodes.last_mut().unwrap().domain = "com.microsoft".into();
        let opsets: OpsetImports = [(String::new(), 17), ("com.microsoft".to_string(), 1)].into();
        let mut known = HashMap::new();
        infer_graph(&g, &opsets, &mut known).unwrap();
        assert_eq!(type_of(&known, "mystery"), "float[m]");
        // Inferred facts win over declared ones; declared ones fill what inference left unknown.
        assert_eq!(type_of(&known, "split"), "float[batch,seq,12,64]");
    }

    #[test]
    fn inconsistent_models_are_errors_naming_the_node() {
        let mut g = bert_graph();
        g.nodes.pop();
        g.initializers.insert("heads".into(), Tensor::from_vec(vec![1], vec![13i64]).unwrap());
        let mut known = HashMap::new();
        // With symbolic batch and seq, 0 is possible and 0 elements fit any shape: no error.
        infer_graph(&g, &opsets(), &mut known).unwrap();
        let mut known = HashMap::new();
        let concrete = input("x", vec![Dim::Fixed(2), Dim::Fixed(5), Dim::Fixed(768)]);
        known.insert("x".to_string(), Inferred::of_type(concrete.ty));
        let err = infer_graph(&g, &opsets(), &mut known).unwrap_err().to_string();
        assert!(err.contains("Reshape node 'split'") && err.contains("768"), "{err}");
    }

    fn branch(nodes: Vec<Node>, output: &str) -> Box<Graph> {
        Box::new(Graph { nodes, outputs: vec![ValueInfo::new(output, ValueType::Unknown)], ..Default::default() })
    }

    /// An If whose branches compute from the outer `x`, with undeclared output types.
    fn if_graph(cond: Option<bool>, else_perm: Vec<i64>) -> Graph {
        let then_b = branch(vec![n("Relu", &["x"], &["t"], vec![])], "t");
        let perm = vec![Attribute { name: "perm".into(), value: AttrValue::Ints(else_perm) }];
        let else_b = branch(vec![n("Transpose", &["x"], &["e"], perm)], "e");
        let attrs = vec![
            Attribute { name: "then_branch".into(), value: AttrValue::Graph(then_b) },
            Attribute { name: "else_branch".into(), value: AttrValue::Graph(else_b) },
        ];
        let mut g = Graph {
            inputs: vec![input("x", vec![sym("b"), Dim::Fixed(7), Dim::Fixed(7)])],
            nodes: vec![n("If", &["c"], &["y"], attrs)],
            outputs: vec![ValueInfo::new("y", ValueType::Unknown)],
            ..Default::default()
        };
        match cond {
            Some(c) => {
                g.initializers.insert("c".into(), Tensor::from_bools(vec![], vec![c]).unwrap());
            }
            None => {
                g.inputs.push(ValueInfo::new("c", ValueType::Tensor(TensorType::fixed(crate::DataType::Bool, &[]))))
            }
        }
        g
    }

    #[test]
    fn if_branches_are_inferred_with_the_outer_scope() {
        let cases = [
            (None, vec![0, 1, 2], "float[b,7,7]"),
            (None, vec![1, 0, 2], "float[?,?,7]"),
            (Some(true), vec![1, 0, 2], "float[b,7,7]"),
            (Some(false), vec![1, 0, 2], "float[7,b,7]"),
        ];
        for (cond, perm, want) in cases {
            let mut known = HashMap::new();
            infer_graph(&if_graph(cond, perm.clone()), &opsets(), &mut known).unwrap();
            assert_eq!(type_of(&known, "y"), want, "cond {cond:?} perm {perm:?}");
            assert!(!known.contains_key("t") && !known.contains_key("e"), "branch values stay in their scope");
        }
        let mut known = HashMap::new();
        let err = infer_graph(&if_graph(None, vec![0, 0, 1]), &opsets(), &mut known).unwrap_err().to_string();
        assert!(err.contains("Transpose node 'e'") && err.contains("perm"), "{err}");
    }
}
