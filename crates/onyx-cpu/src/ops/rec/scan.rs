//! Scan: runs its body once per slice of the scan inputs, threading the state values through
//! the iterations and stacking the scan outputs. Opset 8 (a leading batch dim, optional
//! sequence lengths) and opsets 9+ (axes and directions per input and output).

use std::collections::HashMap;
use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, SubgraphRunner, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use crate::ops::control_flow::outer_values;
use crate::ops::layout::elems;
use crate::ops::sequence::join::{empty_stack, join, unstack};
use crate::ops::util;

struct Scan {
    body: Arc<dyn SubgraphRunner>,
    /// Declared types of the body's scan outputs (for empty ones).
    scan_out_types: Vec<ValueType>,
    /// Opset 8: input 0 is `sequence_lens` and every input and output has a batch dim.
    batched: bool,
    states: usize,
    scan_inputs: usize,
    scan_outputs: usize,
    in_axes: Vec<i64>,
    in_reverse: Vec<bool>,
    out_axes: Vec<i64>,
    out_reverse: Vec<bool>,
    formal_inputs: usize,
    implicit: Vec<String>,
    at: Location,
}

/// An INTS attribute of `n` entries (`default` each when absent).
fn per_item(ctx: &NodeContext<'_>, name: &str, n: usize, default: i64) -> Result<Vec<i64>> {
    let at = ctx.node.location();
    match ctx.node.get_ints(name)? {
        None => Ok(vec![default; n]),
        Some(v) if v.len() == n => Ok(v.to_vec()),
        Some(v) => Err(Error::attribute(&at, name, format!("{n} values"), format!("{v:?}"))),
    }
}

pub(super) fn build_scan(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let g = node.get_graph("body")?.ok_or_else(|| Error::attribute(&at, "body", "a graph", "nothing"))?;
    let m = node
        .get_int("num_scan_inputs")?
        .ok_or_else(|| Error::attribute(&at, "num_scan_inputs", "an int", "nothing"))?;
    let batched = ctx.since_version < 9;
    let data_inputs = node.inputs.len() - usize::from(batched && !node.inputs.is_empty());
    let m = usize::try_from(m).ok().filter(|&m| m >= 1 && m <= data_inputs).ok_or_else(|| {
        Error::attribute(&at, "num_scan_inputs", format!("a count in [1, {data_inputs}]"), m.to_string())
    })?;
    let states = data_inputs - m;
    if node.outputs.len() < states || g.inputs.len() != states + m || g.outputs.len() != node.outputs.len() {
        return Err(Error::attribute(
            &at,
            "body",
            format!("a graph of {} inputs and {} outputs", states + m, node.outputs.len()),
            format!("{} inputs and {} outputs", g.inputs.len(), g.outputs.len()),
        ));
    }
    let k = node.outputs.len() - states;
    let bool_list = |v: Vec<i64>, name: &str| -> Result<Vec<bool>> {
        v.iter()
            .map(|&d| match d {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(Error::attribute(&at, name, "directions of 0 or 1", format!("{v:?}"))),
            })
            .collect()
    };
    let (in_axes, in_reverse, out_axes, out_reverse) = if batched {
        (vec![0; m], bool_list(per_item(ctx, "directions", m, 0)?, "directions")?, vec![0; k], vec![false; k])
    } else {
        (
            per_item(ctx, "scan_input_axes", m, 0)?,
            bool_list(per_item(ctx, "scan_input_directions", m, 0)?, "scan_input_directions")?,
            per_item(ctx, "scan_output_axes", k, 0)?,
            bool_list(per_item(ctx, "scan_output_directions", k, 0)?, "scan_output_directions")?,
        )
    };
    Ok(Box::new(Scan {
        body: (ctx.subgraphs)(g)?,
        scan_out_types: g.outputs[states..].iter().map(|o| o.ty.clone()).collect(),
        batched,
        states,
        scan_inputs: m,
        scan_outputs: k,
        in_axes,
        in_reverse,
        out_axes,
        out_reverse,
        formal_inputs: node.inputs.len(),
        implicit: node.implicit_inputs.clone(),
        at,
    }))
}

impl Scan {
    /// One scan over unbatched values: `states` and the scan inputs (views), input `first`
    /// being the node input of the first state (for messages).
    fn scan(
        &self,
        states: Vec<Value>,
        xs: &[ValueRef<'_>],
        first: usize,
        outer: &HashMap<&str, ValueRef<'_>>,
    ) -> Result<Vec<Value>> {
        let mut slices: Vec<Vec<Tensor>> = vec![];
        let mut len = None;
        for (j, x) in xs.iter().enumerate() {
            let i = first + self.states + j;
            let v = x.tensor().map_err(|e| Error::input(&self.at, i, "a tensor", e.to_string()))?;
            if v.rank() == 0 {
                return Err(Error::input(&self.at, i, "a scan input of rank 1 or more", "a scalar"));
            }
            let axis = util::normalize_axis(self.in_axes[j], v.rank(), &self.at)?;
            let n = v.shape()[axis];
            if *len.get_or_insert(n) != n {
                return Err(Error::input(
                    &self.at,
                    i,
                    format!("{} steps along axis {axis} (as the first scan input)", len.unwrap_or(0)),
                    format!("shape {:?}", v.shape()),
                ));
            }
            let mut s = unstack(&v, axis, &self.at)?;
            if self.in_reverse[j] {
                s.reverse();
            }
            slices.push(s);
        }
        let steps = len.unwrap_or(0);
        let mut state = states;
        let mut outs: Vec<Vec<Tensor>> = vec![vec![]; self.scan_outputs];
        for t in 0..steps {
            let slice_values: Vec<Value> = slices.iter().map(|s| Value::Tensor(s[t].clone())).collect();
            let args: Vec<ValueRef<'_>> = state.iter().chain(&slice_values).map(ValueRef::Value).collect();
            let mut res = self.body.run(&args, outer)?;
            if res.len() != self.states + self.scan_outputs {
                return Err(Error::node(
                    &self.at,
                    format!("the body returned {} values, expected {}", res.len(), self.states + self.scan_outputs),
                ));
            }
            let rest = res.split_off(self.states);
            state = res;
            for (k, v) in rest.into_iter().enumerate() {
                outs[k].push(v.into_tensor().map_err(|e| Error::node(&self.at, format!("scan output {k}: {e}")))?);
            }
        }
        let mut result = state;
        for (k, mut parts) in outs.into_iter().enumerate() {
            if parts.is_empty() {
                result.push(empty_stack(&self.scan_out_types[k], 0)?);
                continue;
            }
            if self.out_reverse[k] {
                parts.reverse();
            }
            let views = parts.iter().map(|t| t.view()).collect::<Result<Vec<_>>>()?;
            let axis = util::normalize_axis(self.out_axes[k], views[0].rank() + 1, &self.at)?;
            let stacked = join(&views, axis, true, first, &self.at)
                .map_err(|e| Error::node(&self.at, format!("scan output {k} changes shape between iterations: {e}")))?;
            result.push(Value::Tensor(stacked));
        }
        Ok(result)
    }
}

impl Kernel for Scan {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let outer = outer_values(&self.implicit, self.formal_inputs, inputs, &self.at)?;
        let first = usize::from(self.batched);
        let data: Vec<ValueRef<'_>> = (first..first + self.states + self.scan_inputs)
            .map(|i| elems::input_ref(inputs, i, &self.at))
            .collect::<Result<_>>()?;
        if !self.batched {
            let states = data[..self.states].iter().map(|r| r.to_value()).collect();
            return self.scan(states, &data[self.states..], 0, &outer);
        }
        // Opset 8: one scan per batch entry, results stacked along a new batch axis.
        let views = data
            .iter()
            .enumerate()
            .map(|(j, r)| r.tensor().map_err(|e| Error::input(&self.at, first + j, "a tensor", e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        let batch = views.first().and_then(|v| v.shape().first().copied()).unwrap_or(0);
        for (j, v) in views.iter().enumerate() {
            let need = if j < self.states { 1 } else { 2 };
            if v.rank() < need || v.shape()[0] != batch {
                return Err(Error::input(
                    &self.at,
                    first + j,
                    format!("a tensor of rank {need} or more with batch dim {batch}"),
                    format!("shape {:?}", v.shape()),
                ));
            }
        }
        if let Some(lens) = util::opt_input(inputs, 0, &self.at)? {
            let lens = elems::int_values(&lens, 0, &[DataType::Int32, DataType::Int64], &self.at)?;
            let full = views.get(self.states).map_or(0, |v| v.shape()[1]) as i64;
            if lens.len() != batch || lens.iter().any(|&l| l != full) {
                return Err(Error::Unsupported(format!(
                    "{} with sequence_lens {lens:?} shorter than the {full} steps",
                    self.at
                )));
            }
        }
        let per_batch = views.iter().map(|v| unstack(v, 0, &self.at)).collect::<Result<Vec<_>>>()?;
        let mut results: Vec<Vec<Tensor>> = vec![vec![]; self.states + self.scan_outputs];
        for b in 0..batch {
            let values: Vec<Value> = per_batch.iter().map(|p| Value::Tensor(p[b].clone())).collect();
            let states = values[..self.states].to_vec();
            let xs: Vec<ValueRef<'_>> = values[self.states..].iter().map(ValueRef::Value).collect();
            for (o, v) in results.iter_mut().zip(self.scan(states, &xs, first, &outer)?) {
                o.push(v.into_tensor()?);
            }
        }
        results
            .iter()
            .map(|parts| {
                let views = parts.iter().map(|t| t.view()).collect::<Result<Vec<_>>>()?;
                join(&views, 0, true, first, &self.at).map(Value::Tensor)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use onyx_core::ep::{SubgraphRunner, ValueRef};
    use onyx_core::ir::{AttrValue, Graph, Node};
    use onyx_core::{Result, Tensor, Value};

    use crate::ops::layout::testkit::*;

    /// The body of a running sum: state `s` ([2]) and slice `x` ([2]) give `s + x` as the new
    /// state and `(s + x) * w` as the scan output (`w` an outer value).
    fn body(inputs: &[ValueRef<'_>], outer: &std::collections::HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>> {
        let s = inputs[0].tensor()?.as_slice::<f32>()?.to_vec();
        let x = inputs[1].tensor()?;
        let w = outer["w"].tensor()?.as_slice::<f32>()?[0];
        let n: Vec<f32> = s.iter().zip(x.as_slice::<f32>()?).map(|(a, b)| a + b).collect();
        let y: Vec<f32> = n.iter().map(|v| v * w).collect();
        Ok(vec![Value::Tensor(Tensor::from_vec(vec![2], n)?), Value::Tensor(Tensor::from_vec(vec![2], y)?)])
    }

    fn compile(_: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
        Ok(Arc::new(FnBody(body)))
    }

    fn scan_node(present: &[bool], attrs: Vec<Attr>) -> Node {
        let mut a = vec![attr("body", AttrValue::Graph(Box::new(graph_io(2, 2)))), int("num_scan_inputs", 1)];
        a.extend(attrs);
        let mut n = node("Scan", present, 2, a);
        n.implicit_inputs = vec!["w".into()];
        n
    }

    fn v(t: Tensor) -> Option<Value> {
        Some(Value::Tensor(t))
    }

    #[test]
    fn axes_and_directions() {
        let x = t(&[3, 2], vec![1f32, 2., 3., 4., 5., 6.]);
        let init = t(&[2], vec![0.5f32, -1.0]);
        let w = Tensor::scalar(2f32);
        let n = scan_node(&[true, true], vec![]);
        let out = run_values(&n, 11, &compile, &[v(init.clone()), v(x.clone()), v(w.clone())]).unwrap();
        assert_eq!(f32s(out[0].as_tensor().unwrap()), (vec![2], vec![9.5, 11.0]));
        assert_eq!(f32s(out[1].as_tensor().unwrap()), (vec![3, 2], vec![3., 2., 9., 10., 19., 22.]));
        // Reverse input, output stacked along axis 1 in reverse.
        let n = scan_node(
            &[true, true],
            vec![
                ints("scan_input_directions", &[1]),
                ints("scan_output_axes", &[-1]),
                ints("scan_output_directions", &[1]),
            ],
        );
        let out = run_values(&n, 16, &compile, &[v(init.clone()), v(x.clone()), v(w.clone())]).unwrap();
        // Steps: +[5,6] -> [5.5,5], +[3,4] -> [8.5,9], +[1,2] -> [9.5,11]; outputs *2, reversed.
        assert_eq!(f32s(out[1].as_tensor().unwrap()), (vec![2, 3], vec![19., 17., 11., 22., 18., 10.]));
        // Scan along axis 1 of a [2, 3] input (its columns).
        let xt = t(&[2, 3], vec![1f32, 3., 5., 2., 4., 6.]);
        let n = scan_node(&[true, true], vec![ints("scan_input_axes", &[1])]);
        let out = run_values(&n, 11, &compile, &[v(init.clone()), v(xt), v(w.clone())]).unwrap();
        assert_eq!(f32s(out[1].as_tensor().unwrap()).1, vec![3., 2., 9., 10., 19., 22.]);
        // Zero steps: the initial state and an empty output.
        let out =
            run_values(&n, 11, &compile, &[v(init.clone()), v(t(&[2, 0], Vec::<f32>::new())), v(w.clone())]).unwrap();
        assert_eq!(f32s(out[0].as_tensor().unwrap()).1, vec![0.5, -1.0]);
        assert_eq!(out[1].as_tensor().unwrap().shape(), &[0]);
    }

    #[test]
    fn opset_8_batches_and_errors() {
        let w = Tensor::scalar(1f32);
        let n = scan_node(&[false, true, true], vec![]);
        let init = t(&[2, 2], vec![0f32, 0., 10., 20.]);
        let x = t(&[2, 2, 2], vec![1f32, 2., 3., 4., 5., 6., 7., 8.]);
        let out = run_values(&n, 8, &compile, &[None, v(init.clone()), v(x.clone()), v(w.clone())]).unwrap();
        assert_eq!(f32s(out[0].as_tensor().unwrap()), (vec![2, 2], vec![4., 6., 22., 34.]));
        assert_eq!(f32s(out[1].as_tensor().unwrap()), (vec![2, 2, 2], vec![1., 2., 4., 6., 15., 26., 22., 34.]));
        let short = Tensor::from_vec(vec![2], vec![1i32, 2]).unwrap();
        let err = run_values(&n, 8, &compile, &[v(short), v(init), v(x.clone()), v(w.clone())]).unwrap_err();
        assert!(err.to_string().contains("sequence_lens"), "{err}");
        // Opset 9+: scan inputs of different lengths, bad attributes.
        let two = {
            let mut a = scan_node(&[true, true, true], vec![]);
            a.attributes[1] = int("num_scan_inputs", 2);
            a.attributes[0] = attr("body", AttrValue::Graph(Box::new(graph_io(3, 1))));
            a.outputs.truncate(1);
            a
        };
        let err = run_values(
            &two,
            11,
            &compile,
            &[v(t(&[2], vec![0f32; 2])), v(x.clone()), v(t(&[3, 2], vec![0f32; 6])), v(w.clone())],
        )
        .unwrap_err();
        assert!(err.to_string().contains("input 2"), "{err}");
        let err = build_with(&scan_node(&[true, true], vec![ints("scan_input_directions", &[2])]), 11, &compile)
            .err()
            .unwrap();
        assert!(err.to_string().contains("scan_input_directions"), "{err}");
        let err =
            build_with(&scan_node(&[true, true], vec![ints("scan_output_axes", &[0, 1])]), 11, &compile).err().unwrap();
        assert!(err.to_string().contains("scan_output_axes"), "{err}");
        let mut bad = scan_node(&[true, true], vec![]);
        bad.attributes[1] = int("num_scan_inputs", 3);
        assert!(build_with(&bad, 11, &compile).err().unwrap().to_string().contains("num_scan_inputs"));
    }
}
