//! FlexAttention against a direct f64 computation (scores, modifier, softmax, modifier, `P V`)
//! on random data of odd sizes: default and explicit scale, GQA, different V head size, f64,
//! f16 and softmax precisions, with modifier subgraphs played by closures (the real subgraph
//! execution is covered by the ONNX node tests); then the errors of bad inputs.

use std::collections::HashMap;
use std::sync::Arc;

use onyx_core::ep::{NodeContext, SubgraphRunner, ValueRef};
use onyx_core::ir::{AttrValue, Attribute, Graph, Node, OpsetImports};
use onyx_core::types::{ValueInfo, ValueType};
use onyx_core::{DataType, Result, Tensor, Value};

use super::*;
use crate::ops::matmul::test_support::Rng;

/// A modifier played by a closure over (b, h, l, s, value), chosen by the graph's name.
struct Closure {
    name: String,
}

/// What each named fake modifier does to one element.
fn apply(name: &str, [_, h, l, s]: [usize; 4], x: f64) -> f64 {
    match name {
        "bias" => x + 0.5 + h as f64 * 0.1,
        "causal" if s > l => f64::NEG_INFINITY,
        "causal" => x,
        "softcap" => 2.0 * (x / 2.0).tanh(),
        "double_probs" => 2.0 * x,
        other => panic!("no fake modifier {other}"),
    }
}

impl SubgraphRunner for Closure {
    fn run(&self, inputs: &[ValueRef<'_>], _outer: &HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>> {
        let t = inputs[0].tensor()?;
        let shape: [usize; 4] = t.shape().try_into().unwrap();
        if self.name == "wrong_shape" {
            return Ok(vec![Value::Tensor(Tensor::from_vec(vec![1], vec![0f32])?)]);
        }
        let x = crate::ops::elementwise::to_f64_vec(&t)?;
        let st = util::strides(&shape);
        let y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                apply(&self.name, [i / st[0] % shape[0], i / st[1] % shape[1], i / st[2] % shape[2], i % shape[3]], v)
            })
            .collect();
        Ok(vec![float_output(t.dtype(), shape.to_vec(), y)?])
    }
}

fn graph(name: &str) -> AttrValue {
    AttrValue::Graph(Box::new(Graph {
        name: name.into(),
        inputs: vec![ValueInfo::new("x", ValueType::Unknown)],
        outputs: vec![ValueInfo::new("y", ValueType::Unknown)],
        ..Default::default()
    }))
}

fn compile(g: &Graph) -> Result<Arc<dyn SubgraphRunner>> {
    Ok(Arc::new(Closure { name: g.name.clone() }))
}

fn kernel(attrs: Vec<(&str, AttrValue)>) -> Result<Box<dyn Kernel>> {
    let node = Node {
        name: "n".into(),
        op_type: "FlexAttention".into(),
        domain: PREVIEW.into(),
        inputs: vec!["q".into(), "k".into(), "v".into()],
        outputs: vec!["y".into()],
        attributes: attrs.into_iter().map(|(name, value)| Attribute { name: name.into(), value }).collect(),
        ..Default::default()
    };
    let opsets = OpsetImports::from([(String::new(), 26), (PREVIEW.to_string(), 1)]);
    let ctx = NodeContext {
        node: &node,
        since_version: 1,
        opsets: &opsets,
        input_types: vec![],
        constant_inputs: vec![],
        subgraphs: &compile,
    };
    build_flex_attention(&ctx)
}

/// One configuration: [B, Hq, Hkv, L, S, E, Ev].
#[derive(Clone, Copy)]
struct Case {
    dims: [usize; 7],
    scale: Option<f32>,
    score_mod: Option<&'static str>,
    prob_mod: Option<&'static str>,
}

const BASE: Case = Case { dims: [2, 6, 2, 5, 7, 3, 4], scale: None, score_mod: None, prob_mod: None };

fn naive(c: &Case, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
    let [b, hq, hkv, l, s, e, ev] = c.dims;
    let scale = c.scale.map_or(1.0 / (e as f64).sqrt(), f64::from);
    let mut y = vec![0.0; b * hq * l * ev];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            for li in 0..l {
                let mut row: Vec<f64> = (0..s)
                    .map(|si| {
                        let dot: f64 = (0..e)
                            .map(|i| q[((bi * hq + h) * l + li) * e + i] * k[((bi * hkv + kh) * s + si) * e + i])
                            .sum();
                        let x = scale * dot;
                        c.score_mod.map_or(x, |m| apply(m, [bi, h, li, si], x))
                    })
                    .collect();
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
                row.iter_mut().enumerate().for_each(|(si, x)| {
                    let p = (*x - m).exp() / z;
                    *x = c.prob_mod.map_or(p, |pm| apply(pm, [bi, h, li, si], p));
                });
                for j in 0..ev {
                    y[((bi * hq + h) * l + li) * ev + j] =
                        (0..s).map(|si| row[si] * v[((bi * hkv + kh) * s + si) * ev + j]).sum();
                }
            }
        }
    }
    y
}

fn tensor(dtype: DataType, shape: &[usize], data: &[f64]) -> Tensor {
    let v = match dtype {
        DataType::Double => util::out(shape.to_vec(), data.to_vec()),
        _ => util::from_f32(dtype, shape.to_vec(), data.iter().map(|&x| x as f32).collect()),
    };
    v.unwrap().into_tensor().unwrap()
}

fn run_case(c: Case, dtype: DataType, extra: Vec<(&str, AttrValue)>) -> (Vec<f64>, Vec<f64>) {
    let [b, hq, hkv, l, s, e, ev] = c.dims;
    let mut rng = Rng::new((l * 7 + s) as u64);
    let mut rand = |n: usize| -> Vec<f64> { (0..n).map(|_| rng.f64() * 2.0 - 1.0).collect() };
    let (q, k, v) = (rand(b * hq * l * e), rand(b * hkv * s * e), rand(b * hkv * s * ev));
    let mut attrs = extra;
    if let Some(sc) = c.scale {
        attrs.push(("scale", AttrValue::Float(sc)));
    }
    for (name, m) in [("score_mod", c.score_mod), ("prob_mod", c.prob_mod)] {
        if let Some(m) = m {
            attrs.push((name, graph(m)));
        }
    }
    let kern = kernel(attrs).unwrap();
    let ins =
        [tensor(dtype, &[b, hq, l, e], &q), tensor(dtype, &[b, hkv, s, e], &k), tensor(dtype, &[b, hkv, s, ev], &v)];
    let values: Vec<Value> = ins.into_iter().map(Value::Tensor).collect();
    let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| Some(ValueRef::Value(v))).collect();
    let out = kern.run(&refs, &[true]).unwrap();
    let t = out[0].as_tensor().unwrap();
    assert_eq!((t.dtype(), t.shape()), (dtype, &[b, hq, l, ev][..]));
    (crate::ops::elementwise::to_f64_vec(&t.view().unwrap()).unwrap(), naive(&c, &q, &k, &v))
}

fn check(c: Case, dtype: DataType, extra: Vec<(&str, AttrValue)>, tol: f64) {
    let (got, want) = run_case(c, dtype, extra);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
    }
}

#[test]
fn plain_attention_with_gqa_and_scales() {
    check(BASE, DataType::Float, vec![], 1e-5);
    check(Case { scale: Some(0.37), ..BASE }, DataType::Float, vec![], 1e-5);
    check(Case { dims: [1, 3, 3, 1, 9, 5, 1], ..BASE }, DataType::Float, vec![], 1e-5);
    check(Case { dims: [3, 4, 1, 6, 2, 8, 3], ..BASE }, DataType::Float, vec![], 1e-5);
}

#[test]
fn modifiers_run_before_and_after_the_softmax() {
    check(Case { score_mod: Some("bias"), ..BASE }, DataType::Float, vec![], 1e-5);
    check(Case { score_mod: Some("causal"), ..BASE }, DataType::Float, vec![], 1e-5);
    check(Case { score_mod: Some("softcap"), prob_mod: Some("double_probs"), ..BASE }, DataType::Float, vec![], 1e-5);
}

#[test]
fn double_half_and_softmax_precision() {
    check(Case { score_mod: Some("causal"), ..BASE }, DataType::Double, vec![], 1e-12);
    check(BASE, DataType::Float16, vec![], 3e-3);
    check(BASE, DataType::BFloat16, vec![], 2e-2);
    // float inputs with a double softmax, and an f16 softmax handed to the modifier as f16.
    check(
        Case { score_mod: Some("bias"), ..BASE },
        DataType::Float,
        vec![("softmax_precision", AttrValue::Int(11))],
        1e-5,
    );
    check(
        Case { score_mod: Some("bias"), ..BASE },
        DataType::Float,
        vec![("softmax_precision", AttrValue::Int(10))],
        5e-3,
    );
}

#[test]
fn bad_inputs_and_attributes_are_errors_naming_the_node() {
    let run = |attrs: Vec<(&str, AttrValue)>, shapes: [&[usize]; 3], dtype: DataType| -> String {
        let kern = match kernel(attrs) {
            Ok(k) => k,
            Err(e) => return e.to_string(),
        };
        let values: Vec<Value> =
            shapes.iter().map(|s| Value::Tensor(tensor(dtype, s, &vec![0.5; s.iter().product()]))).collect();
        let refs: Vec<Option<ValueRef<'_>>> = values.iter().map(|v| Some(ValueRef::Value(v))).collect();
        kern.run(&refs, &[true]).err().expect("an error").to_string()
    };
    let good: [&[usize]; 3] = [&[1, 4, 3, 5], &[1, 2, 6, 5], &[1, 2, 6, 2]];
    let e = run(vec![("softmax_precision", AttrValue::Int(6))], good, DataType::Float);
    assert!(e.contains("FlexAttention") && e.contains("softmax_precision"), "{e}");
    let e = run(vec![], [&[1, 4, 3, 5], &[1, 3, 6, 5], &[1, 3, 6, 2]], DataType::Float);
    assert!(e.contains("input 1"), "{e}");
    let e = run(vec![], [&[1, 4, 3, 5], &[1, 2, 6, 4], &[1, 2, 6, 2]], DataType::Float);
    assert!(e.contains("input 1"), "{e}");
    let e = run(vec![], [&[1, 4, 3, 5], &[1, 2, 6, 5], &[1, 2, 7, 2]], DataType::Float);
    assert!(e.contains("input 2") && e.contains("[1, 2, 6, v_head_size]"), "{e}");
    let e = run(vec![], [&[4, 3, 5], &[1, 2, 6, 5], &[1, 2, 6, 2]], DataType::Float);
    assert!(e.contains("rank-4"), "{e}");
    let e = run(vec![("score_mod", graph("wrong_shape"))], good, DataType::Float);
    assert!(e.contains("score_mod") && e.contains("[1, 4, 3, 6]"), "{e}");
    let ints: Vec<Value> = good
        .iter()
        .map(|s| Value::Tensor(Tensor::from_vec(s.to_vec(), vec![1i64; s.iter().product()]).unwrap()))
        .collect();
    let refs: Vec<Option<ValueRef<'_>>> = ints.iter().map(|v| Some(ValueRef::Value(v))).collect();
    let e = kernel(vec![]).unwrap().run(&refs, &[true]).err().unwrap().to_string();
    assert!(e.contains("input 0"), "{e}");
}
