//! Control flow: `If` takes its output types from the branches' declared outputs.

use super::super::Inferred;
use super::ctx::{Ctx, Rule};
use crate::ir::Graph;
use crate::types::{Dim, TensorType, ValueType};
use crate::Result;

/// The rule for `op`, if it is control flow.
pub fn rule(op: &str) -> Option<Rule> {
    Some(match op {
        "If" => if_,
        _ => return None,
    })
}

/// A required GRAPH attribute.
fn branch<'a>(cx: &Ctx<'a>, name: &str) -> Result<&'a Graph> {
    cx.node.get_graph(name)?.ok_or_else(|| cx.attr_error(name, "a graph", "nothing"))
}

fn if_(cx: &Ctx<'_>) -> Result<Vec<Inferred>> {
    let (then_g, else_g) = (branch(cx, "then_branch")?, branch(cx, "else_branch")?);
    if then_g.outputs.len() != else_g.outputs.len() {
        return Err(cx.error(format!(
            "the branches have different output counts: then_branch {}, else_branch {}",
            then_g.outputs.len(),
            else_g.outputs.len()
        )));
    }
    let declared = |g: &Graph| g.outputs.iter().map(|o| o.ty.clone()).collect::<Vec<_>>();
    Ok(match constant_condition(cx.input(0)) {
        Some(true) => declared(then_g).into_iter().map(Inferred::of_type).collect(),
        Some(false) => declared(else_g).into_iter().map(Inferred::of_type).collect(),
        None => merge_branch_lists(&declared(then_g), &declared(else_g)),
    })
}

/// The outputs of an `If` whose branches give these types.
pub fn merge_branch_lists(then_types: &[ValueType], else_types: &[ValueType]) -> Vec<Inferred> {
    then_types.iter().zip(else_types).map(|(t, e)| Inferred::of_type(merge_branches(t, e))).collect()
}

/// The value of a constant bool scalar condition.
pub fn constant_condition(cond: Option<&Inferred>) -> Option<bool> {
    let t = cond?.constant.as_ref()?;
    let bytes = t.view().ok()?.bytes().ok()?;
    match (t.dtype(), bytes) {
        (crate::DataType::Bool, [b]) => Some(*b != 0),
        _ => None,
    }
}

/// The type both branches agree on: equal dims stay, different dims become unknown, different
/// ranks give unknown rank; different element types give an unknown type.
pub fn merge_branches(a: &ValueType, b: &ValueType) -> ValueType {
    match (a, b) {
        (ValueType::Tensor(x), ValueType::Tensor(y)) if x.dtype == y.dtype => {
            let shape = match (&x.shape, &y.shape) {
                (Some(p), Some(q)) if p.len() == q.len() => {
                    Some(p.iter().zip(q).map(|(d, e)| if d == e { d.clone() } else { Dim::Unknown }).collect())
                }
                _ => None,
            };
            ValueType::Tensor(TensorType { dtype: x.dtype, shape })
        }
        (ValueType::Tensor(t), ValueType::Unknown) | (ValueType::Unknown, ValueType::Tensor(t)) => {
            ValueType::Tensor(TensorType { dtype: t.dtype, shape: None })
        }
        (x, y) if x == y => x.clone(),
        _ => ValueType::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::merge_branches;
    use crate::ir::{AttrValue, Attribute, Graph};
    use crate::types::{ValueInfo, ValueType};
    use crate::Tensor;

    fn graph(outputs: &[&str]) -> Graph {
        Graph {
            outputs: outputs.iter().enumerate().map(|(i, s)| ValueInfo::new(format!("y{i}"), ty(s).ty)).collect(),
            ..Default::default()
        }
    }

    fn if_node(then_out: &[&str], else_out: &[&str]) -> crate::ir::Node {
        let attrs = vec![
            Attribute { name: "then_branch".into(), value: AttrValue::Graph(Box::new(graph(then_out))) },
            Attribute { name: "else_branch".into(), value: AttrValue::Graph(Box::new(graph(else_out))) },
        ];
        node("If", 1, then_out.len(), attrs)
    }

    #[test]
    fn merges_branch_types() {
        let cases = [
            ("float[b,3,5]", "float[b,3,5]", "float[b,3,5]"),
            ("float[b,3,5]", "float[b,4,s]", "float[b,?,?]"),
            ("float[b,3]", "float[b,3,1]", "float[...]"),
            ("float[2]", "int64[2]", "?"),
            ("float[2]", "?", "float[...]"),
        ];
        for (a, b, want) in cases {
            assert_eq!(merge_branches(&ty(a).ty, &ty(b).ty).to_string(), want, "{a} | {b}");
        }
        let seq = ValueType::Sequence(Box::new(ty("float[2]").ty));
        assert_eq!(merge_branches(&seq, &seq), seq);
    }

    #[test]
    fn if_outputs() {
        let n = if_node(&["float[b,3]", "int64[]"], &["float[b,7]", "int64[]"]);
        let out = run(&n, 16, &[Some(ty("bool[]"))]).unwrap();
        assert_eq!(out.iter().map(show).collect::<Vec<_>>(), vec!["float[b,?]", "int64[]"]);
        let cond = crate::ops::infer::rules::from_constant(&Tensor::from_bools(vec![], vec![false]).unwrap());
        let out = run(&n, 16, &[Some(cond)]).unwrap();
        assert_eq!(show(&out[0]), "float[b,7]");
        let bad = if_node(&["float[2]"], &["float[2]", "float[3]"]);
        let err = run(&bad, 16, &[None]).unwrap_err().to_string();
        assert!(err.contains("If node 'n'") && err.contains("then_branch 1, else_branch 2"), "{err}");
        let err = run(&node("If", 1, 1, vec![]), 16, &[None]).unwrap_err().to_string();
        assert!(err.contains("'then_branch'"), "{err}");
    }
}
