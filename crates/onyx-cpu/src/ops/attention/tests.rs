use onyx_core::ir::AttrValue;
use onyx_core::{DataType, Tensor};

use super::build_attention;
use crate::ops::elementwise::testing::{assert_close, floats, random_f32, tensor};
use crate::ops::matmul::test_support::{build, node, run};

/// One Attention configuration (sizes in the 4-D layout).
#[derive(Clone)]
struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    past: usize,
    d: usize,
    dv: usize,
    three_d: bool,
    /// Mask shape (its last dimension may be shorter than the keys) and whether it is bool.
    mask: Option<(Vec<usize>, bool)>,
    causal: bool,
    softcap: f64,
    scale: Option<f64>,
    mode: i64,
    nonpad: Option<Vec<usize>>,
}

fn base() -> Case {
    Case {
        b: 2,
        hq: 6,
        hkv: 2,
        sq: 5,
        skv: 7,
        past: 0,
        d: 5,
        dv: 3,
        three_d: false,
        mask: None,
        causal: false,
        softcap: 0.0,
        scale: None,
        mode: 0,
        nonpad: None,
    }
}

/// The inputs in the 4-D layout, as f64, plus the mask (f64: 0/−inf for bool masks).
struct Data {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    pk: Vec<f64>,
    pv: Vec<f64>,
    mask: Vec<f64>,
    mask_bool: Vec<bool>,
}

/// Naive attention straight from the definition: returns Y `[b, hq, sq, dv]` and the
/// `qk_matmul_output` of `c.mode` `[b, hq, sq, total]`.
fn naive(c: &Case, x: &Data) -> (Vec<f64>, Vec<f64>) {
    let total = c.past + c.skv;
    let key = |b: usize, h: usize, t: usize, i: usize, dim: usize, past: &[f64], new: &[f64]| {
        if t < c.past {
            past[((b * c.hkv + h) * c.past + t) * dim + i]
        } else {
            new[((b * c.hkv + h) * c.skv + t - c.past) * dim + i]
        }
    };
    let scale = c.scale.unwrap_or(1.0 / (c.d as f64).sqrt());
    let (mut y, mut qk) = (vec![], vec![]);
    for b in 0..c.b {
        for h in 0..c.hq {
            let kh = h / (c.hq / c.hkv);
            for i in 0..c.sq {
                let mut row = vec![0.0; total];
                for (t, r) in row.iter_mut().enumerate() {
                    let dot: f64 = (0..c.d).map(|e| c_q(c, x, b, h, i, e) * key(b, kh, t, e, c.d, &x.pk, &x.k)).sum();
                    *r = dot * scale;
                }
                let raw = row.clone();
                if c.softcap > 0.0 {
                    row.iter_mut().for_each(|r| *r = c.softcap * (*r / c.softcap).tanh());
                }
                let capped = row.clone();
                for (t, r) in row.iter_mut().enumerate() {
                    if let Some((shape, is_bool)) = &c.mask {
                        let m = mask_at(shape, b, h, i, t);
                        *r += match m {
                            None => f64::NEG_INFINITY,
                            Some(p) if *is_bool && x.mask_bool[p] => 0.0,
                            Some(_) if *is_bool => f64::NEG_INFINITY,
                            Some(p) => x.mask[p],
                        };
                    }
                    if (c.causal && t > c.past + i) || c.nonpad.as_ref().is_some_and(|n| t >= n[b]) {
                        *r = f64::NEG_INFINITY;
                    }
                }
                let masked = row.clone();
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> =
                    row.iter().map(|r| if m == f64::NEG_INFINITY { 0.0 } else { (r - m).exp() }).collect();
                let s: f64 = e.iter().sum();
                let p: Vec<f64> = e.iter().map(|v| if s > 0.0 { v / s } else { 0.0 }).collect();
                for o in 0..c.dv {
                    y.push((0..total).map(|t| p[t] * key(b, kh, t, o, c.dv, &x.pv, &x.v)).sum());
                }
                qk.extend(match c.mode {
                    0 => raw,
                    1 => capped,
                    2 => masked,
                    _ => p,
                });
            }
        }
    }
    (y, qk)
}

fn c_q(c: &Case, x: &Data, b: usize, h: usize, i: usize, e: usize) -> f64 {
    x.q[((b * c.hq + h) * c.sq + i) * c.d + e]
}

/// Flat index of mask element (b, h, i, t) under broadcasting; `None` past its last dimension.
fn mask_at(shape: &[usize], b: usize, h: usize, i: usize, t: usize) -> Option<usize> {
    let mut dims = vec![1; 4 - shape.len()];
    dims.extend_from_slice(shape);
    if t >= dims[3] {
        return None;
    }
    let idx = [b, h, i, t];
    Some((0..4).fold(0, |acc, a| acc * dims[a] + if dims[a] == 1 { 0 } else { idx[a] }))
}

/// `[b, h, s, d]` data as a 3-D `[b, s, h * d]` tensor's elements.
fn to_3d(x: &[f64], b: usize, h: usize, s: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for di in 0..d {
                    out[(bi * s + si) * h * d + hi * d + di] = x[((bi * h + hi) * s + si) * d + di];
                }
            }
        }
    }
    out
}

fn random(rng: &mut fastrand::Rng, n: usize) -> Vec<f64> {
    random_f32(rng, n, -2.0, 2.0).into_iter().map(f64::from).collect()
}

/// Runs the kernel on `c` with inputs of `dtype`; returns (Y as 4-D f64, qk output).
fn run_case(c: &Case, x: &Data, dtype: DataType) -> (Vec<f64>, Vec<f64>) {
    run_outputs(c, x, dtype, 4)
}

/// As [`run_case`], wanting the first `outputs` outputs (1: Y alone, an empty qk returned).
fn run_outputs(c: &Case, x: &Data, dtype: DataType, outputs: usize) -> (Vec<f64>, Vec<f64>) {
    let mk = |data: &[f64], shape4: [usize; 4]| -> Tensor {
        let [b, h, s, d] = shape4;
        let (shape, data) =
            if c.three_d { (vec![b, s, h * d], to_3d(data, b, h, s, d)) } else { (shape4.to_vec(), data.to_vec()) };
        cast(&shape, &data, dtype)
    };
    let mut inputs = vec![
        Some(mk(&x.q, [c.b, c.hq, c.sq, c.d])),
        Some(mk(&x.k, [c.b, c.hkv, c.skv, c.d])),
        Some(mk(&x.v, [c.b, c.hkv, c.skv, c.dv])),
        c.mask.as_ref().map(|(shape, is_bool)| {
            if *is_bool {
                Tensor::from_bools(shape.clone(), x.mask_bool.clone()).unwrap()
            } else {
                cast(shape, &x.mask, dtype)
            }
        }),
    ];
    if c.past > 0 {
        inputs.push(Some(cast(&[c.b, c.hkv, c.past, c.d], &x.pk, dtype)));
        inputs.push(Some(cast(&[c.b, c.hkv, c.past, c.dv], &x.pv, dtype)));
    } else {
        inputs.extend([None, None]);
    }
    if let Some(n) = &c.nonpad {
        inputs.push(Some(tensor(&[c.b], n.iter().map(|&v| v as i64).collect())));
    }
    let mut attrs =
        vec![("qk_matmul_output_mode", AttrValue::Int(c.mode)), ("is_causal", AttrValue::Int(c.causal as i64))];
    if c.softcap > 0.0 {
        attrs.push(("softcap", AttrValue::Float(c.softcap as f32)));
    }
    if let Some(s) = c.scale {
        attrs.push(("scale", AttrValue::Float(s as f32)));
    }
    if c.three_d {
        attrs.push(("q_num_heads", AttrValue::Int(c.hq as i64)));
        attrs.push(("kv_num_heads", AttrValue::Int(c.hkv as i64)));
    }
    let n = node("Attention", &["q", "k", "v", "m", "pk", "pv", "np"], 4, attrs);
    let kernel = build(build_attention, &n, 24).unwrap();
    let outs = run(kernel.as_ref(), &inputs, outputs).unwrap();
    let total = c.past + c.skv;
    let y = outs[0].as_tensor().unwrap();
    let y4 = if c.three_d {
        assert_eq!(y.shape(), &[c.b, c.sq, c.hq * c.dv]);
        let flat = floats(y);
        let mut out = vec![0.0; flat.len()];
        for bi in 0..c.b {
            for hi in 0..c.hq {
                for si in 0..c.sq {
                    for di in 0..c.dv {
                        out[((bi * c.hq + hi) * c.sq + si) * c.dv + di] =
                            flat[(bi * c.sq + si) * c.hq * c.dv + hi * c.dv + di];
                    }
                }
            }
        }
        out
    } else {
        assert_eq!(y.shape(), &[c.b, c.hq, c.sq, c.dv]);
        floats(y)
    };
    assert_eq!(y.dtype(), dtype);
    if outputs == 1 {
        return (y4, vec![]);
    }
    let pk = outs[1].as_tensor().unwrap();
    assert_eq!(pk.shape(), &[c.b, c.hkv, total, c.d]);
    assert_eq!(outs[2].as_tensor().unwrap().shape(), &[c.b, c.hkv, total, c.dv]);
    // The present key is the past followed by the new keys.
    let pkf = floats(pk);
    if c.past > 0 {
        assert_eq!(pkf[..c.d], x.pk[..c.d].iter().map(|&v| round(v, dtype)).collect::<Vec<_>>()[..]);
    }
    let qk = outs[3].as_tensor().unwrap();
    assert_eq!(qk.shape(), &[c.b, c.hq, c.sq, total]);
    (y4, floats(qk))
}

fn round(v: f64, dtype: DataType) -> f64 {
    match dtype {
        DataType::Float16 => half::f16::from_f64(v).to_f64(),
        DataType::Float => v as f32 as f64,
        _ => v,
    }
}

fn cast(shape: &[usize], data: &[f64], dtype: DataType) -> Tensor {
    match dtype {
        DataType::Double => tensor(shape, data.to_vec()),
        DataType::Float16 => tensor(shape, data.iter().map(|&v| half::f16::from_f64(v)).collect()),
        _ => tensor(shape, data.iter().map(|&v| v as f32).collect()),
    }
}

fn data(c: &Case, rng: &mut fastrand::Rng) -> Data {
    let mask_len = c.mask.as_ref().map_or(0, |(s, _)| s.iter().product());
    Data {
        q: random(rng, c.b * c.hq * c.sq * c.d),
        k: random(rng, c.b * c.hkv * c.skv * c.d),
        v: random(rng, c.b * c.hkv * c.skv * c.dv),
        pk: random(rng, c.b * c.hkv * c.past * c.d),
        pv: random(rng, c.b * c.hkv * c.past * c.dv),
        mask: random(rng, mask_len),
        mask_bool: (0..mask_len).map(|_| rng.u8(0..4) != 0).collect(),
    }
}

fn cases() -> Vec<(&'static str, Case)> {
    let b = base();
    vec![
        ("gqa 2-D float mask", Case { mask: Some((vec![5, 7], false)), ..b.clone() }),
        ("mha causal softcap", Case { hkv: 6, causal: true, softcap: 1.5, mode: 1, ..b.clone() }),
        (
            "past, causal, 4-D bool mask, mode 2",
            Case { past: 3, causal: true, mask: Some((vec![2, 1, 5, 10], true)), softcap: 0.75, mode: 2, ..b.clone() },
        ),
        (
            "3-D, short mask, scale, softmax output",
            Case {
                three_d: true,
                hkv: 3,
                past: 4,
                mask: Some((vec![1, 5, 9], false)),
                scale: Some(0.375),
                mode: 3,
                ..b.clone()
            },
        ),
        (
            "3-D mqa causal, more queries than keys",
            Case { three_d: true, hq: 3, hkv: 1, sq: 9, skv: 4, causal: true, ..b.clone() },
        ),
        ("padded kv", Case { nonpad: Some(vec![4, 7]), mask: Some((vec![2, 6, 5, 6], false)), mode: 2, ..b.clone() }),
        ("fully masked rows", Case { nonpad: Some(vec![0, 2]), mode: 3, ..b.clone() }),
        ("big", Case { b: 1, hq: 4, hkv: 2, sq: 67, skv: 131, d: 33, dv: 17, causal: true, ..b }),
    ]
}

#[test]
fn attention_matches_a_naive_reference() {
    let mut rng = fastrand::Rng::with_seed(23);
    for (name, c) in cases() {
        let x = data(&c, &mut rng);
        let (want_y, want_qk) = naive(&c, &x);
        for (dtype, tol) in [(DataType::Float, 1e-5), (DataType::Double, 1e-12)] {
            let (y, qk) = run_case(&c, &x, dtype);
            assert_close(&y, &want_y, tol, tol, &format!("{name} {dtype} Y"));
            assert_close(&qk, &want_qk, tol, tol, &format!("{name} {dtype} qk"));
        }
    }
}

/// Encoder attention wanting Y alone (the tiled path for f32 when the mask varies along the
/// keys only; the general path for the other masks and for f64).
#[test]
fn encoder_attention_wanting_y_alone_matches_the_reference() {
    let mut rng = fastrand::Rng::with_seed(29);
    let b = Case { three_d: true, ..base() };
    let awkward = Case { b: 2, hq: 4, hkv: 2, sq: 37, skv: 131, d: 33, dv: 17, ..b.clone() };
    let cases = [
        ("no mask", b.clone()),
        ("key mask", Case { mask: Some((vec![1, 1, 1, 7], false)), ..b.clone() }),
        ("short key mask", Case { mask: Some((vec![5], false)), ..b.clone() }),
        ("bool key mask per batch", Case { hq: 2, hkv: 2, skv: 2, mask: Some((vec![2, 1, 1, 2], true)), ..b.clone() }),
        ("mask per query", Case { mask: Some((vec![5, 7], false)), ..b.clone() }),
        (
            "awkward sizes, key mask per batch",
            Case { mask: Some((vec![2, 1, 1, 131], false)), scale: Some(0.3125), ..awkward.clone() },
        ),
        ("one query, one key", Case { b: 1, hq: 3, hkv: 1, sq: 1, skv: 1, ..b.clone() }),
        ("no keys", Case { skv: 0, ..b }),
    ];
    for (name, c) in cases {
        let x = data(&c, &mut rng);
        let (want, _) = naive(&c, &x);
        for (dtype, tol) in [(DataType::Float, 1e-5), (DataType::Double, 1e-12)] {
            let (y, _) = run_outputs(&c, &x, dtype, 1);
            assert_close(&y, &want, tol, tol, &format!("{name} {dtype} Y"));
        }
    }
}

#[test]
fn attention_in_f16_is_computed_in_f32() {
    let mut rng = fastrand::Rng::with_seed(5);
    let c = Case { past: 2, mask: Some((vec![5, 9], false)), ..base() };
    let mut x = data(&c, &mut rng);
    for v in [&mut x.q, &mut x.k, &mut x.v, &mut x.pk, &mut x.pv, &mut x.mask] {
        v.iter_mut().for_each(|e| *e = round(*e, DataType::Float16));
    }
    let (want_y, _) = naive(&c, &x);
    let (y, _) = run_case(&c, &x, DataType::Float16);
    assert_close(&y, &want_y, 2e-3, 2e-3, "f16 Y");
}

#[test]
fn invalid_attention_nodes_are_errors() {
    let err = |attrs: Vec<(&str, AttrValue)>, shapes: &[&[usize]]| -> String {
        let n = node("Attention", &["q", "k", "v"], 1, attrs);
        let kernel = match build(build_attention, &n, 23) {
            Ok(k) => k,
            Err(e) => return e.to_string(),
        };
        let inputs: Vec<Option<Tensor>> =
            shapes.iter().map(|s| Some(tensor(s, vec![0.5f32; s.iter().product()]))).collect();
        run(kernel.as_ref(), &inputs, 1).unwrap_err().to_string()
    };
    let e = err(vec![("qk_matmul_output_mode", AttrValue::Int(4))], &[]);
    assert!(e.contains("qk_matmul_output_mode") && e.contains("Attention node 'n'"), "{e}");
    assert!(err(vec![("softcap", AttrValue::Float(-1.0))], &[]).contains("softcap"));
    assert!(err(vec![("q_num_heads", AttrValue::Int(0))], &[]).contains("q_num_heads"));
    let e = err(vec![], &[&[1, 5, 2, 4], &[1, 2, 3, 4], &[1, 2, 3, 4]]);
    assert!(e.contains("not a multiple"), "{e}");
    let e = err(vec![], &[&[1, 2, 8], &[1, 3, 8], &[1, 3, 8]]);
    assert!(e.contains("q_num_heads"), "{e}");
    let e = err(
        vec![("q_num_heads", AttrValue::Int(3)), ("kv_num_heads", AttrValue::Int(3))],
        &[&[1, 2, 8], &[1, 3, 9], &[1, 3, 9]],
    );
    assert!(e.contains("divides into 3 heads"), "{e}");
    let e = err(vec![], &[&[1, 2, 3, 4], &[1, 2, 3, 5], &[1, 2, 3, 4]]);
    assert!(e.contains("do not agree"), "{e}");
    // A mask that does not broadcast, and a past key without its value.
    let n = node("Attention", &["q", "k", "v", "m", "pk"], 1, vec![]);
    let kernel = build(build_attention, &n, 23).unwrap();
    let q = tensor(&[1, 2, 3, 4], vec![0.5f32; 24]);
    let bad_mask = tensor(&[2, 2, 3], vec![0f32; 12]);
    let e = run(kernel.as_ref(), &[Some(q.clone()), Some(q.clone()), Some(q.clone()), Some(bad_mask)], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("input 3") && e.contains("attn_mask"), "{e}");
    let e = run(kernel.as_ref(), &[Some(q.clone()), Some(q.clone()), Some(q.clone()), None, Some(q.clone())], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("together"), "{e}");
    let ints = tensor(&[1, 2, 3, 4], vec![1i32; 24]);
    let e = run(kernel.as_ref(), &[Some(ints.clone()), Some(ints.clone()), Some(ints)], 1).unwrap_err().to_string();
    assert!(e.contains("input 0") && e.contains("float"), "{e}");
}
