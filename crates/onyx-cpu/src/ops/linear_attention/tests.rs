//! LinearAttention against a direct f64 transcription of the spec's recurrences
//! (`S_t = exp(g_t) S_{t-1} + β_t k_t ⊗ (v_t − exp(g_t) S_{t-1}ᵀ k_t)`, `o_t = scale · q_tᵀ S_t`),
//! on random data of odd sizes, for every update rule, GQA/MQA, decay and beta layouts, a past
//! state and each float type; then the errors of bad inputs and attributes.

use onyx_core::ir::AttrValue;
use onyx_core::{DataType, Tensor, Value};

use super::*;
use crate::ops::matmul::test_support::{build, node, run, string, Rng};

/// One configuration.
#[derive(Clone, Copy)]
struct Case {
    rule: &'static str,
    batch: usize,
    seq: usize,
    q_heads: usize,
    kv_heads: usize,
    dk: usize,
    dv: usize,
    /// Decay values per KV head: 1 or dk.
    decay_width: usize,
    /// Beta heads: kv_heads or 1.
    beta_heads: usize,
    past: bool,
    scale: f32,
}

const BASE: Case = Case {
    rule: "gated_delta",
    batch: 2,
    seq: 7,
    q_heads: 6,
    kv_heads: 2,
    dk: 3,
    dv: 5,
    decay_width: 3,
    beta_heads: 2,
    past: true,
    scale: 0.0,
};

/// Random operands of a case: q, k, v, past, decay, beta (flat, packed layouts).
struct Data {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    past: Option<Vec<f64>>,
    decay: Option<Vec<f64>>,
    beta: Option<Vec<f64>>,
}

fn gating(rule: &str) -> bool {
    rule.starts_with("gated")
}

fn delta(rule: &str) -> bool {
    rule.ends_with("delta")
}

fn data(c: &Case, rng: &mut Rng) -> Data {
    let mut vec = |n: usize, lo: f64, hi: f64| -> Vec<f64> { (0..n).map(|_| lo + (hi - lo) * rng.f64()).collect() };
    let bt = c.batch * c.seq;
    Data {
        q: vec(bt * c.q_heads * c.dk, -1.0, 1.0),
        k: vec(bt * c.kv_heads * c.dk, -1.0, 1.0),
        v: vec(bt * c.kv_heads * c.dv, -1.0, 1.0),
        past: c.past.then(|| vec(c.batch * c.kv_heads * c.dk * c.dv, -0.5, 0.5)),
        decay: gating(c.rule).then(|| vec(bt * c.kv_heads * c.decay_width, -1.0, 0.0)),
        beta: delta(c.rule).then(|| vec(bt * c.beta_heads, 0.0, 1.0)),
    }
}

/// The spec's recurrence, element by element in f64: (output, present_state).
fn naive(c: &Case, x: &Data) -> (Vec<f64>, Vec<f64>) {
    let (dk, dv, g) = (c.dk, c.dv, c.q_heads / c.kv_heads);
    let scale = if c.scale == 0.0 { 1.0 / (dk as f64).sqrt() } else { c.scale as f64 };
    let mut out = vec![0.0; c.batch * c.seq * c.q_heads * dv];
    let mut present = Vec::new();
    for b in 0..c.batch {
        for h in 0..c.kv_heads {
            let mut s: Vec<Vec<f64>> = (0..dk)
                .map(|i| {
                    (0..dv)
                        .map(|j| x.past.as_ref().map_or(0.0, |p| p[((b * c.kv_heads + h) * dk + i) * dv + j]))
                        .collect()
                })
                .collect();
            for t in 0..c.seq {
                let bt = b * c.seq + t;
                let k = |i: usize| x.k[(bt * c.kv_heads + h) * dk + i];
                let v = |j: usize| x.v[(bt * c.kv_heads + h) * dv + j];
                let gate = |i: usize| -> f64 {
                    x.decay.as_ref().map_or(1.0, |d| {
                        let w = c.decay_width;
                        d[(bt * c.kv_heads + h) * w + if w == 1 { 0 } else { i }].exp()
                    })
                };
                let beta = x.beta.as_ref().map(|bs| bs[bt * c.beta_heads + if c.beta_heads == 1 { 0 } else { h }]);
                // exp(g) S_{t-1}, then S_{t-1}ᵀ k over the decayed state.
                let decayed: Vec<Vec<f64>> = (0..dk).map(|i| (0..dv).map(|j| gate(i) * s[i][j]).collect()).collect();
                let written: Vec<f64> = (0..dv)
                    .map(|j| match beta {
                        Some(bv) => bv * (v(j) - (0..dk).map(|i| decayed[i][j] * k(i)).sum::<f64>()),
                        None => v(j),
                    })
                    .collect();
                s = (0..dk).map(|i| (0..dv).map(|j| decayed[i][j] + k(i) * written[j]).collect()).collect();
                for hq in h * g..(h + 1) * g {
                    for j in 0..dv {
                        let o: f64 = (0..dk).map(|i| x.q[(bt * c.q_heads + hq) * dk + i] * s[i][j]).sum();
                        out[(bt * c.q_heads + hq) * dv + j] = scale * o;
                    }
                }
            }
            present.extend(s.into_iter().flatten());
        }
    }
    (out, present)
}

fn float_tensor(dtype: DataType, shape: &[usize], data: &[f64]) -> Tensor {
    let v = match dtype {
        DataType::Double => util::out(shape.to_vec(), data.to_vec()),
        _ => util::from_f32(dtype, shape.to_vec(), data.iter().map(|&x| x as f32).collect()),
    };
    v.unwrap().into_tensor().unwrap()
}

fn as_f64(v: &Value) -> Vec<f64> {
    crate::ops::elementwise::to_f64_vec(&v.as_tensor().unwrap().view().unwrap()).unwrap()
}

fn attrs(c: &Case) -> Vec<(&'static str, AttrValue)> {
    vec![
        ("q_num_heads", AttrValue::Int(c.q_heads as i64)),
        ("kv_num_heads", AttrValue::Int(c.kv_heads as i64)),
        ("update_rule", string(c.rule)),
        ("scale", AttrValue::Float(c.scale)),
    ]
}

fn inputs(c: &Case, x: &Data, dtype: DataType) -> Vec<Option<Tensor>> {
    let bt = [c.batch, c.seq];
    let t = |w: usize, d: &[f64]| float_tensor(dtype, &[bt[0], bt[1], w], d);
    vec![
        Some(t(c.q_heads * c.dk, &x.q)),
        Some(t(c.kv_heads * c.dk, &x.k)),
        Some(t(c.kv_heads * c.dv, &x.v)),
        x.past.as_ref().map(|p| float_tensor(dtype, &[c.batch, c.kv_heads, c.dk, c.dv], p)),
        x.decay.as_ref().map(|d| t(c.kv_heads * c.decay_width, d)),
        x.beta.as_ref().map(|b| t(c.beta_heads, b)),
    ]
}

fn check(c: Case, dtype: DataType, tol: f64) {
    let mut rng = Rng::new(c.seq as u64 * 31 + c.dk as u64);
    let x = data(&c, &mut rng);
    let k = build(build_linear_attention, &node("LinearAttention", &["q", "k", "v", "p", "g", "b"], 2, attrs(&c)), 27)
        .unwrap();
    let outs = run(k.as_ref(), &inputs(&c, &x, dtype), 2).unwrap();
    let (want_y, want_s) = naive(&c, &x);
    let y = outs[0].as_tensor().unwrap();
    assert_eq!(y.shape(), [c.batch, c.seq, c.q_heads * c.dv]);
    assert_eq!(y.dtype(), dtype);
    assert_eq!(outs[1].as_tensor().unwrap().shape(), [c.batch, c.kv_heads, c.dk, c.dv]);
    for (what, got, want) in [("output", as_f64(&outs[0]), want_y), ("present_state", as_f64(&outs[1]), want_s)] {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{} {what}[{i}]: got {g}, want {w}", c.rule);
        }
    }
}

#[test]
fn every_rule_matches_the_recurrence() {
    for rule in ["linear", "gated", "delta", "gated_delta"] {
        check(Case { rule, ..BASE }, DataType::Float, 1e-5);
        check(Case { rule, past: false, ..BASE }, DataType::Float, 1e-5);
    }
}

#[test]
fn decay_and_beta_layouts_heads_and_scale() {
    check(Case { decay_width: 1, beta_heads: 1, ..BASE }, DataType::Float, 1e-5);
    check(Case { q_heads: 5, kv_heads: 1, beta_heads: 1, ..BASE }, DataType::Float, 1e-5);
    check(Case { q_heads: 3, kv_heads: 3, beta_heads: 3, seq: 1, scale: 0.3, ..BASE }, DataType::Float, 1e-5);
    check(Case { batch: 1, seq: 13, dk: 7, dv: 1, decay_width: 7, ..BASE }, DataType::Float, 1e-5);
}

#[test]
fn half_and_double_inputs() {
    check(BASE, DataType::Double, 1e-12);
    check(BASE, DataType::Float16, 2e-2);
    check(BASE, DataType::BFloat16, 5e-2);
}

#[test]
fn the_state_carries_across_calls() {
    // Two runs over halves of the sequence, the second from the first's state, equal one run.
    let c = Case { past: false, seq: 8, ..BASE };
    let mut rng = Rng::new(5);
    let x = data(&c, &mut rng);
    let k = build(build_linear_attention, &node("LinearAttention", &["q", "k", "v", "p", "g", "b"], 2, attrs(&c)), 27)
        .unwrap();
    let full = run(k.as_ref(), &inputs(&c, &x, DataType::Float), 2).unwrap();
    let half = |d: &[f64], w: usize, part: usize| -> Vec<f64> {
        (0..c.batch).flat_map(|b| d[(b * c.seq + part * 4) * w..(b * c.seq + part * 4 + 4) * w].to_vec()).collect()
    };
    let h = Case { seq: 4, ..c };
    let part = |p: usize, past: Option<Vec<f64>>| Data {
        q: half(&x.q, c.q_heads * c.dk, p),
        k: half(&x.k, c.kv_heads * c.dk, p),
        v: half(&x.v, c.kv_heads * c.dv, p),
        past,
        decay: x.decay.as_ref().map(|d| half(d, c.kv_heads * c.decay_width, p)),
        beta: x.beta.as_ref().map(|d| half(d, c.beta_heads, p)),
    };
    let first = run(k.as_ref(), &inputs(&h, &part(0, None), DataType::Float), 2).unwrap();
    let second = run(k.as_ref(), &inputs(&h, &part(1, Some(as_f64(&first[1]))), DataType::Float), 2).unwrap();
    let (got, want) = (as_f64(&second[1]), as_f64(&full[1]));
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "state: {g} vs {w}");
    }
}

fn error(attrs: Vec<(&'static str, AttrValue)>, ins: Vec<Option<Tensor>>) -> String {
    let n = node("LinearAttention", &["q", "k", "v", "p", "g", "b"], 2, attrs);
    match build(build_linear_attention, &n, 27) {
        Err(e) => e.to_string(),
        Ok(k) => run(k.as_ref(), &ins, 2).err().expect("an error").to_string(),
    }
}

#[test]
fn bad_inputs_and_attributes_are_errors_naming_the_node() {
    let c = BASE;
    let mut rng = Rng::new(1);
    let x = data(&c, &mut rng);
    let good = inputs(&c, &x, DataType::Float);
    let heads = |q: i64, kv: i64| vec![("q_num_heads", AttrValue::Int(q)), ("kv_num_heads", AttrValue::Int(kv))];
    let e = error(heads(5, 2), good.clone());
    assert!(e.contains("LinearAttention") && e.contains("q_num_heads"), "{e}");
    let e = error(vec![("q_num_heads", AttrValue::Int(6))], good.clone());
    assert!(e.contains("kv_num_heads"), "{e}");
    let mut a = heads(6, 2);
    a.push(("update_rule", string("fast")));
    assert!(error(a, good.clone()).contains("update_rule"));
    // linear forbids decay and beta; gated_delta needs both.
    let mut a = heads(6, 2);
    a.push(("update_rule", string("linear")));
    let e = error(a, good.clone());
    assert!(e.contains("input 4") || e.contains("decay"), "{e}");
    let mut missing = good.clone();
    missing[5] = None;
    assert!(error(heads(6, 2), missing).contains("beta"));
    let mut bad_past = good.clone();
    bad_past[3] = Some(float_tensor(DataType::Float, &[2, 2, 5, 3], &[0.0; 60]));
    let e = error(heads(6, 2), bad_past);
    assert!(e.contains("[2, 2, 3, 5]"), "{e}");
    let mut bad_k = good.clone();
    bad_k[1] = Some(float_tensor(DataType::Float, &[2, 7, 5], &[0.0; 70]));
    assert!(error(heads(6, 2), bad_k).contains("[2, 7, 6]"));
    let mut int_q = good.clone();
    int_q[0] = Some(Tensor::from_vec(vec![2, 7, 18], vec![0i64; 252]).unwrap());
    assert!(error(heads(6, 2), int_q).contains("float"));
    let mut bad_decay = good;
    bad_decay[4] = Some(float_tensor(DataType::Float, &[2, 7, 4], &[0.0; 56]));
    let e = error(heads(6, 2), bad_decay);
    assert!(e.contains("[2, 7, 2 or 6]"), "{e}");
}
