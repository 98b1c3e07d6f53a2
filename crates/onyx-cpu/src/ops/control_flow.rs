//! Control flow: If and Loop ([`looping`]). Subgraphs are compiled when the node is built; a
//! run executes them with the node's outer-scope values.

mod looping;

use std::collections::HashMap;
use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, SubgraphRunner, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("If", build_if);
    r.add("Loop", looping::build_loop);
}

/// The outer-scope values a node's subgraphs read, by name: the node's implicit inputs, which
/// the executor passes after its `formal` inputs.
pub(crate) fn outer_values<'r>(
    implicit: &'r [String],
    formal: usize,
    inputs: &[Option<ValueRef<'r>>],
    at: &Location,
) -> Result<HashMap<&'r str, ValueRef<'r>>> {
    implicit
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let i = formal + j;
            let v = inputs
                .get(i)
                .copied()
                .flatten()
                .ok_or_else(|| Error::input(at, i, format!("the outer value '{name}'"), "no input"))?;
            Ok((name.as_str(), v))
        })
        .collect()
}

/// If: runs `then_branch` or `else_branch`.
struct If {
    then_branch: Arc<dyn SubgraphRunner>,
    else_branch: Arc<dyn SubgraphRunner>,
    /// Number of the node's own inputs (the condition); implicit inputs follow them.
    formal_inputs: usize,
    /// Names of the outer-scope values the branches read, in the order the executor passes them.
    implicit: Vec<String>,
    outputs: usize,
    at: Location,
}

fn build_if(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let branch = |name: &str| -> Result<Arc<dyn SubgraphRunner>> {
        let g = node.get_graph(name)?.ok_or_else(|| Error::attribute(&at, name, "a graph", "nothing"))?;
        if g.outputs.len() != node.outputs.len() {
            let expected = format!("a graph with {} outputs (as many as the node)", node.outputs.len());
            return Err(Error::attribute(&at, name, expected, format!("{} outputs", g.outputs.len())));
        }
        (ctx.subgraphs)(g)
    };
    Ok(Box::new(If {
        then_branch: branch("then_branch")?,
        else_branch: branch("else_branch")?,
        formal_inputs: node.inputs.len(),
        implicit: node.implicit_inputs.clone(),
        outputs: node.outputs.len(),
        at,
    }))
}

/// A bool tensor of one element (If's and Loop's conditions), from input `i`.
pub(crate) fn condition(inputs: &[Option<ValueRef<'_>>], i: usize, at: &Location) -> Result<bool> {
    let c = util::input(inputs, i, at)?;
    util::expect_dtype(&c, &[DataType::Bool], i, at)?;
    match c.bytes()? {
        &[b] => Ok(b != 0),
        _ => Err(Error::input(at, i, "a bool tensor of one element", format!("{:?}", c.shape()))),
    }
}

impl Kernel for If {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let cond = condition(inputs, 0, &self.at)?;
        let outer = outer_values(&self.implicit, self.formal_inputs, inputs, &self.at)?;
        let branch = if cond { &self.then_branch } else { &self.else_branch };
        let outs = branch.run(&[], &outer)?;
        if outs.len() != self.outputs {
            let name = if cond { "then_branch" } else { "else_branch" };
            return Err(Error::node(
                &self.at,
                format!("{name} returned {} values for {} outputs", outs.len(), self.outputs),
            ));
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use onyx_core::ep::{SubgraphRunner, ValueRef};
    use onyx_core::ir::{AttrValue, Graph};
    use onyx_core::types::{ValueInfo, ValueType};
    use onyx_core::{Error, Result, Tensor, Value};

    use crate::ops::layout::testkit::*;

    /// A fake compiled branch: echoes the outer value named after the graph, or returns the
    /// graph's one initializer.
    struct Fake {
        graph: Graph,
    }

    impl SubgraphRunner for Fake {
        fn run(&self, inputs: &[ValueRef<'_>], outer: &HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>> {
            assert!(inputs.is_empty(), "If branches take no formal inputs");
            if let Some(v) = outer.get(self.graph.name.as_str()) {
                return Ok(vec![v.to_value()]);
            }
            let t =
                self.graph.initializers.values().next().ok_or_else(|| Error::InvalidArgument("empty fake".into()))?;
            Ok(vec![Value::Tensor(t.clone())])
        }
    }

    fn compile(g: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
        Ok(Arc::new(Fake { graph: g.clone() }))
    }

    fn branch(name: &str, constant: Option<Tensor>) -> Graph {
        Graph {
            name: name.into(),
            outputs: vec![ValueInfo::new("out", ValueType::Unknown)],
            initializers: constant.into_iter().map(|t| ("c".to_string(), t)).collect(),
            ..Default::default()
        }
    }

    fn if_node(then_g: Graph, else_g: Graph, implicit: &[&str]) -> onyx_core::ir::Node {
        let mut n = node(
            "If",
            &[true],
            1,
            vec![
                attr("then_branch", AttrValue::Graph(Box::new(then_g))),
                attr("else_branch", AttrValue::Graph(Box::new(else_g))),
            ],
        );
        n.implicit_inputs = implicit.iter().map(|s| s.to_string()).collect();
        n
    }

    #[test]
    fn runs_the_chosen_branch_with_outer_values() {
        let n = if_node(branch("outer_x", None), branch("else", Some(t(&[2], vec![7i64, 8]))), &["outer_x"]);
        let k = build_with(&n, 21, &compile).unwrap();
        let x = Value::Tensor(t(&[3], vec![1.5f32, 2.5, 3.5]));
        for (cond, want_then) in [(true, true), (false, false)] {
            let c = Value::Tensor(Tensor::from_bools(vec![], vec![cond]).unwrap());
            let out = k.run(&[Some(ValueRef::Value(&c)), Some(ValueRef::Value(&x))], &[true]).unwrap();
            let y = out[0].as_tensor().unwrap();
            if want_then {
                assert_eq!(y.as_slice::<f32>().unwrap(), &[1.5, 2.5, 3.5]);
            } else {
                assert_eq!(y.as_slice::<i64>().unwrap(), &[7, 8]);
            }
        }
    }

    #[test]
    fn bad_conditions_and_branches_are_errors() {
        let n = if_node(branch("t", Some(Tensor::scalar(1i64))), branch("e", Some(Tensor::scalar(2i64))), &["missing"]);
        let k = build_with(&n, 13, &compile).unwrap();
        let c = Value::Tensor(Tensor::from_bools(vec![2], vec![true, false]).unwrap());
        let err = k.run(&[Some(ValueRef::Value(&c))], &[true]).unwrap_err().to_string();
        assert!(err.contains("input 0") && err.contains("one element"), "{err}");
        let c = Value::Tensor(Tensor::scalar(1i64));
        let err = k.run(&[Some(ValueRef::Value(&c))], &[true]).unwrap_err().to_string();
        assert!(err.contains("input 0") && err.contains("int64"), "{err}");
        let c = Value::Tensor(Tensor::from_bools(vec![1], vec![true]).unwrap());
        let err = k.run(&[Some(ValueRef::Value(&c))], &[true]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("'missing'"), "{err}");

        let mut two = branch("t", None);
        two.outputs.push(ValueInfo::new("o2", ValueType::Unknown));
        let n = if_node(two, branch("e", None), &[]);
        let err = build_with(&n, 13, &compile).err().unwrap().to_string();
        assert!(err.contains("'then_branch'") && err.contains("2"), "{err}");
        let mut n = if_node(branch("t", None), branch("e", None), &[]);
        n.attributes.pop();
        let err = build_with(&n, 13, &compile).err().unwrap().to_string();
        assert!(err.contains("'else_branch'"), "{err}");
        let n = if_node(branch("t", None), branch("e", None), &[]);
        let err = build_with(&n, 13, &no_subgraphs).err().unwrap().to_string();
        assert!(err.contains("no subgraphs"), "{err}");
    }
}
