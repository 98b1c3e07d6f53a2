//! Loop: runs its body while the trip count and the condition allow, threading the
//! loop-carried values through the iterations and stacking the scan outputs.

use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, SubgraphRunner, ValueRef};
use onyx_core::ir::Graph;
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use super::{condition, outer_values};
use crate::ops::layout::elems;
use crate::ops::sequence::join::{empty_stack, join};
use crate::ops::util;

struct Loop {
    body: Arc<dyn SubgraphRunner>,
    /// The body graph's declared outputs (for the type of empty scan outputs).
    body_graph: Graph,
    has_trip_count: bool,
    has_condition: bool,
    /// Loop-carried values (N).
    carried: usize,
    /// Scan outputs (K).
    scans: usize,
    formal_inputs: usize,
    implicit: Vec<String>,
    at: Location,
}

pub(super) fn build_loop(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let g = node.get_graph("body")?.ok_or_else(|| Error::attribute(&at, "body", "a graph", "nothing"))?;
    if node.inputs.len() < 2 {
        return Err(Error::node(&at, "Loop takes at least 2 inputs (trip count and condition, either may be empty)"));
    }
    let carried = node.inputs.len() - 2;
    if node.outputs.len() < carried {
        return Err(Error::node(
            &at,
            format!("Loop has {carried} loop-carried values but only {} outputs", node.outputs.len()),
        ));
    }
    let scans = node.outputs.len() - carried;
    if g.inputs.len() != 2 + carried || g.outputs.len() != 1 + carried + scans {
        return Err(Error::attribute(
            &at,
            "body",
            format!("a graph of {} inputs and {} outputs", 2 + carried, 1 + carried + scans),
            format!("{} inputs and {} outputs", g.inputs.len(), g.outputs.len()),
        ));
    }
    let (has_trip_count, has_condition) = (node.input(0).is_some(), node.input(1).is_some());
    if !has_trip_count && !has_condition {
        return Err(Error::node(&at, "a Loop with neither a trip count nor a condition never ends"));
    }
    Ok(Box::new(Loop {
        body: (ctx.subgraphs)(g)?,
        body_graph: Graph { outputs: g.outputs.clone(), ..Default::default() },
        has_trip_count,
        has_condition,
        carried,
        scans,
        formal_inputs: node.inputs.len(),
        implicit: node.implicit_inputs.clone(),
        at,
    }))
}

impl Kernel for Loop {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let outer = outer_values(&self.implicit, self.formal_inputs, inputs, &self.at)?;
        let max = if self.has_trip_count {
            let m = util::input(inputs, 0, &self.at)?;
            match elems::int_values(&m, 0, &[DataType::Int64], &self.at)?.as_slice() {
                &[m] => Some(m),
                _ => {
                    return Err(Error::input(
                        &self.at,
                        0,
                        "a trip count of one element",
                        format!("shape {:?}", m.shape()),
                    ))
                }
            }
        } else {
            None
        };
        let mut cond = if self.has_condition { condition(inputs, 1, &self.at)? } else { true };
        let mut carried: Vec<Value> = (0..self.carried)
            .map(|j| elems::input_ref(inputs, 2 + j, &self.at).map(|r| r.to_value()))
            .collect::<Result<_>>()?;
        let mut scans: Vec<Vec<Tensor>> = vec![vec![]; self.scans];
        let mut i = 0i64;
        while max.is_none_or(|m| i < m) && cond {
            let iteration = Value::Tensor(Tensor::scalar(i));
            let c = Value::Tensor(Tensor::from_bools(vec![], vec![cond])?);
            let mut args = vec![ValueRef::Value(&iteration), ValueRef::Value(&c)];
            args.extend(carried.iter().map(ValueRef::Value));
            let mut outs = self.body.run(&args, &outer)?;
            if outs.len() != 1 + self.carried + self.scans {
                return Err(Error::node(
                    &self.at,
                    format!("the body returned {} values, expected {}", outs.len(), 1 + self.carried + self.scans),
                ));
            }
            let rest = outs.split_off(1 + self.carried);
            if self.has_condition {
                let c = outs[0].as_tensor().map_err(|e| e.at(&self.at))?;
                let c = c.view()?;
                util::expect_dtype(&c, &[DataType::Bool], 0, &self.at).map_err(|_| {
                    Error::node(&self.at, format!("the body's condition output is a {} tensor, not bool", c.dtype()))
                })?;
                cond = match c.bytes()? {
                    &[b] => b != 0,
                    _ => {
                        return Err(Error::node(
                            &self.at,
                            format!("the body's condition output has shape {:?}", c.shape()),
                        ))
                    }
                };
            }
            carried = outs.split_off(1);
            for (k, v) in rest.into_iter().enumerate() {
                let t = v.into_tensor().map_err(|e| Error::node(&self.at, format!("scan output {k}: {e}")))?;
                scans[k].push(t);
            }
            i += 1;
        }
        let mut result = carried;
        for (k, parts) in scans.iter().enumerate() {
            if parts.is_empty() {
                result.push(empty_stack(&self.body_graph.outputs[1 + self.carried + k].ty, 0)?);
                continue;
            }
            let views = parts.iter().map(|t| t.view()).collect::<Result<Vec<_>>>()?;
            let stacked = join(&views, 0, true, 2 + self.carried, &self.at)
                .map_err(|e| Error::node(&self.at, format!("scan output {k} changes shape between iterations: {e}")))?;
            result.push(Value::Tensor(stacked));
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use onyx_core::ep::{SubgraphRunner, ValueRef};
    use onyx_core::ir::{AttrValue, Graph, Node};
    use onyx_core::{Error, Result, Tensor, Value};

    use crate::ops::layout::testkit::*;

    /// The body: `x -> x + i` (carried), cond_out = `i < 3` (or the input cond when
    /// `keep_cond`), scan output `[x * 2, i]`; it also reads the outer value `k` (added to x).
    fn body(inputs: &[ValueRef<'_>], outer: &std::collections::HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>> {
        let i = inputs[0].tensor()?.as_slice::<i64>()?[0];
        let x = inputs[2].tensor()?.as_slice::<f32>()?[0];
        let k = outer["k"].tensor()?.as_slice::<f32>()?[0];
        let nx = x + i as f32 + k;
        Ok(vec![
            Value::Tensor(Tensor::from_bools(vec![], vec![i < 3])?),
            Value::Tensor(Tensor::scalar(nx)),
            Value::Tensor(Tensor::from_vec(vec![2], vec![x * 2.0, i as f32])?),
        ])
    }

    fn compile(_: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
        Ok(Arc::new(FnBody(body)))
    }

    fn loop_node(m: bool, cond: bool) -> Node {
        let mut n = node("Loop", &[m, cond, true], 2, vec![attr("body", AttrValue::Graph(Box::new(graph_io(3, 3))))]);
        n.implicit_inputs = vec!["k".into()];
        n
    }

    fn run(m: Option<i64>, cond: Option<bool>) -> Result<Vec<Value>> {
        let n = loop_node(m.is_some(), cond.is_some());
        let inputs = [
            m.map(|m| Value::Tensor(Tensor::scalar(m))),
            cond.map(|c| Value::Tensor(Tensor::from_bools(vec![], vec![c]).unwrap())),
            Some(Value::Tensor(Tensor::scalar(1.5f32))),
            Some(Value::Tensor(Tensor::scalar(0.25f32))),
        ];
        run_values(&n, 16, &compile, &inputs)
    }

    #[test]
    fn trip_counts_and_conditions() {
        // for-loop: 5 trips, the body's condition ignored. x: 1.5, 1.75, 3, 5.25, 8.5, 12.75
        let out = run(Some(5), None).unwrap();
        assert_eq!(scalar_f32(&out[0]), 12.75);
        let s = out[1].as_tensor().unwrap();
        assert_eq!(s.shape(), &[5, 2]);
        assert_eq!(s.as_slice::<f32>().unwrap(), &[3.0, 0.0, 3.5, 1.0, 6.0, 2.0, 10.5, 3.0, 17.0, 4.0]);
        // while-loop: runs until the body's condition (i < 3) is false after i = 3.
        let out = run(None, Some(true)).unwrap();
        assert_eq!(scalar_f32(&out[0]), 8.5);
        assert_eq!(out[1].as_tensor().unwrap().shape(), &[4, 2]);
        // both: the trip count stops it first.
        let out = run(Some(2), Some(true)).unwrap();
        assert_eq!(scalar_f32(&out[0]), 3.0);
        // no iterations: the initial value and an empty scan output.
        for (m, c) in [(Some(0), Some(true)), (Some(-3), None), (Some(4), Some(false))] {
            let out = run(m, c).unwrap();
            assert_eq!(scalar_f32(&out[0]), 1.5);
            assert_eq!(out[1].as_tensor().unwrap().shape(), &[0]);
        }
    }

    #[test]
    fn bad_inputs_and_bodies_are_errors() {
        let err = build_with(&loop_node(false, false), 16, &compile).err().unwrap().to_string();
        assert!(err.contains("never ends"), "{err}");
        let n = loop_node(true, false);
        let inputs = [
            Some(Value::Tensor(i64s(&[1, 2]))),
            None,
            Some(Value::Tensor(Tensor::scalar(1f32))),
            Some(Value::Tensor(Tensor::scalar(0f32))),
        ];
        let err = run_values(&n, 16, &compile, &inputs).unwrap_err().to_string();
        assert!(err.contains("input 0") && err.contains("trip count"), "{err}");
        let missing_outer =
            [Some(Value::Tensor(Tensor::scalar(1i64))), None, Some(Value::Tensor(Tensor::scalar(1f32)))];
        let err = run_values(&n, 16, &compile, &missing_outer).unwrap_err().to_string();
        assert!(err.contains("'k'"), "{err}");
        // A scan output whose shape changes between iterations.
        let growing = |_: &Graph| -> Result<Arc<dyn SubgraphRunner>> {
            Ok(Arc::new(FnBody(|inputs: &[ValueRef<'_>], _: &std::collections::HashMap<&str, ValueRef<'_>>| {
                let i = inputs[0].tensor()?.as_slice::<i64>()?[0] as usize;
                Ok(vec![
                    Value::Tensor(Tensor::from_bools(vec![], vec![true])?),
                    inputs[2].to_value(),
                    Value::Tensor(Tensor::from_vec(vec![i + 1], vec![0f32; i + 1])?),
                ])
            })))
        };
        let ok = [
            Some(Value::Tensor(Tensor::scalar(3i64))),
            None,
            Some(Value::Tensor(Tensor::scalar(1f32))),
            Some(Value::Tensor(Tensor::scalar(0f32))),
        ];
        let err = run_values(&n, 16, &growing, &ok).unwrap_err().to_string();
        assert!(err.contains("scan output 0 changes shape"), "{err}");
        // A body of the wrong arity.
        let mut bad = loop_node(true, false);
        bad.attributes = vec![attr("body", AttrValue::Graph(Box::new(graph_io(2, 3))))];
        let err = build_with(&bad, 16, &compile).err().unwrap().to_string();
        assert!(err.contains("'body'"), "{err}");
        let short = |_: &Graph| -> Result<Arc<dyn SubgraphRunner>> {
            Ok(Arc::new(FnBody(|_: &[ValueRef<'_>], _: &std::collections::HashMap<&str, ValueRef<'_>>| {
                Err(Error::InvalidArgument("boom".into()))
            })))
        };
        assert!(run_values(&n, 16, &short, &ok).unwrap_err().to_string().contains("boom"));
    }
}
