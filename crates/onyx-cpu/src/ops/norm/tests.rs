//! Normalization ops against naive f64 references on random data.

#![allow(clippy::type_complexity)] // the case tables are tuples

use onyx_core::ir::AttrValue;
use onyx_core::{Error, Tensor};

use super::*;
use crate::ops::matmul::test_support::{assert_close, build, ints, node, run, to_f64, Rng};

fn t64(shape: &[usize], v: &[f64]) -> Option<Tensor> {
    Some(Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap())
}

fn t32(shape: &[usize], v: &[f64]) -> Option<Tensor> {
    Some(Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as f32).collect::<Vec<f32>>()).unwrap())
}

fn t16(shape: &[usize], v: &[f64]) -> Option<Tensor> {
    Some(Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| half::f16::from_f64(x)).collect::<Vec<_>>()).unwrap())
}

fn f16_values(v: &Value) -> Vec<f64> {
    v.as_tensor().unwrap().as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f64()).collect()
}

/// Positive values (variances, LRN inputs that must not all be tiny).
fn positive(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| 0.1 + rng.f64().abs()).collect()
}

/// Mean and population variance of a slice.
fn stats(v: &[f64]) -> (f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (mean, v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64)
}

#[test]
fn batch_norm_matches_formula() {
    let mut rng = Rng::new(31);
    // (X shape, parameter length): per channel, rank 2, and the old non-spatial form.
    let cases: [(&[usize], usize); 4] = [(&[2, 5, 3, 7], 5), (&[4, 5], 5), (&[2, 3, 4], 12), (&[3, 16, 37, 29], 16)];
    for (shape, features) in cases {
        let x = rng.vec_f64(shape.iter().product());
        let (s, b, m) = (rng.vec_f64(features), rng.vec_f64(features), rng.vec_f64(features));
        let v = positive(&mut rng, features);
        let eps = 1e-3;
        let per_image: usize = shape[1..].iter().product();
        let inner = per_image / features;
        let want: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &xv)| {
                let f = (i % per_image) / inner.max(1);
                (xv - m[f]) / (v[f] + eps).sqrt() * s[f] + b[f]
            })
            .collect();
        let n =
            node("BatchNormalization", &["x", "s", "b", "m", "v"], 1, vec![("epsilon", AttrValue::Float(eps as f32))]);
        let k = build(build_batch_norm, &n, 15).unwrap();
        let p = [features];
        let out = run(k.as_ref(), &[t64(shape, &x), t64(&p, &s), t64(&p, &b), t64(&p, &m), t64(&p, &v)], 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-7, &format!("f64 {shape:?}"));
        let out = run(k.as_ref(), &[t32(shape, &x), t32(&p, &s), t32(&p, &b), t32(&p, &m), t32(&p, &v)], 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-4, &format!("f32 {shape:?}"));
        // Opset 15: X in float16, statistics in float.
        let out = run(k.as_ref(), &[t16(shape, &x), t32(&p, &s), t32(&p, &b), t32(&p, &m), t32(&p, &v)], 1).unwrap();
        assert_close(&f16_values(&out[0]), &want, 1e-2, &format!("f16 {shape:?}"));
    }
}

/// Training mode: Y normalized by the batch's statistics, running statistics updated by momentum.
#[test]
fn batch_norm_training_mode() {
    let mut rng = Rng::new(32);
    // Momenta exact in f32, the attribute's type.
    for (shape, momentum) in [(&[3usize, 5, 7, 2][..], 0.75), (&[2, 3][..], 0.875), (&[1, 4, 13][..], 0.0)] {
        let c = shape[1];
        let inner: usize = shape[2..].iter().product();
        let x: Vec<f64> = rng.vec_f64(shape.iter().product()).iter().map(|v| v * 3.0 + 1.5).collect();
        let (s, b, m) = (rng.vec_f64(c), rng.vec_f64(c), rng.vec_f64(c));
        let v = positive(&mut rng, c);
        let eps = 1e-2;
        let channel = |i: usize| (i / inner) % c;
        let count = (x.len() / c) as f64;
        let mean: Vec<f64> = (0..c)
            .map(|f| x.iter().enumerate().filter(|(i, _)| channel(*i) == f).map(|(_, v)| v).sum::<f64>() / count)
            .collect();
        let var: Vec<f64> = (0..c)
            .map(|f| {
                x.iter().enumerate().filter(|(i, _)| channel(*i) == f).map(|(_, v)| (v - mean[f]).powi(2)).sum::<f64>()
                    / count
            })
            .collect();
        let want_y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &xv)| (xv - mean[channel(i)]) / (var[channel(i)] + eps).sqrt() * s[channel(i)] + b[channel(i)])
            .collect();
        let run_mean: Vec<f64> = m.iter().zip(&mean).map(|(o, n)| o * momentum + n * (1.0 - momentum)).collect();
        let run_var: Vec<f64> = v.iter().zip(&var).map(|(o, n)| o * momentum + n * (1.0 - momentum)).collect();
        let attrs = vec![
            ("epsilon", AttrValue::Float(eps as f32)),
            ("momentum", AttrValue::Float(momentum as f32)),
            ("training_mode", AttrValue::Int(1)),
        ];
        let k = build(build_batch_norm, &node("BatchNormalization", &["x", "s", "b", "m", "v"], 3, attrs), 15).unwrap();
        let p = [c];
        let out = run(k.as_ref(), &[t64(shape, &x), t64(&p, &s), t64(&p, &b), t64(&p, &m), t64(&p, &v)], 3).unwrap();
        assert_close(&to_f64(&out[0]), &want_y, 1e-7, &format!("y {shape:?}"));
        assert_close(&to_f64(&out[1]), &run_mean, 1e-9, &format!("running mean {shape:?}"));
        assert_close(&to_f64(&out[2]), &run_var, 1e-9, &format!("running var {shape:?}"));
        let out = run(k.as_ref(), &[t32(shape, &x), t32(&p, &s), t32(&p, &b), t32(&p, &m), t32(&p, &v)], 3).unwrap();
        assert_close(&to_f64(&out[0]), &want_y, 1e-4, &format!("f32 y {shape:?}"));
        assert_close(&to_f64(&out[2]), &run_var, 1e-4, &format!("f32 running var {shape:?}"));
    }
}

#[test]
fn batch_norm_errors() {
    let n = node("BatchNormalization", &["x", "s", "b", "m", "v"], 1, vec![("training_mode", AttrValue::Int(2))]);
    let err = build(build_batch_norm, &n, 15).err().unwrap().to_string();
    assert!(err.contains("training_mode") && err.contains("0 or 1"), "{err}");
    let n = node("BatchNormalization", &["x", "s", "b", "m", "v"], 3, vec![]);
    let k = build(build_batch_norm, &n, 9).unwrap();
    let ones = |s: &[usize]| t32(s, &vec![1.0; s.iter().product()]);
    let inputs = [ones(&[1, 5, 2]), ones(&[5]), ones(&[5]), ones(&[5]), ones(&[4])];
    let err = run(k.as_ref(), &inputs, 1).unwrap_err().to_string();
    assert!(err.contains("input 4: expected 5 elements (like scale), found shape [4]"), "{err}");
    let inputs = [ones(&[1, 5, 2]), ones(&[3]), ones(&[5]), ones(&[5]), ones(&[5])];
    let err = run(k.as_ref(), &inputs, 1).unwrap_err().to_string();
    assert!(err.contains("input 1: expected 5 or 10 elements (one per channel), found shape [3]"), "{err}");
    let inputs = [ones(&[5]), ones(&[5]), ones(&[5]), ones(&[5]), ones(&[5])];
    let err = run(k.as_ref(), &inputs, 1).unwrap_err().to_string();
    assert!(err.contains("input 0: expected a tensor of rank 2 or more"), "{err}");
    // Asking for the training outputs.
    let inputs = [ones(&[1, 5, 2]), ones(&[5]), ones(&[5]), ones(&[5]), ones(&[5])];
    let err = run(k.as_ref(), &inputs, 3).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
}

/// Reference group normalization with per-channel scale and bias.
fn ref_group_norm(x: &[f64], shape: &[usize], groups: usize, s: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let c = shape[1];
    let inner: usize = shape[2..].iter().product();
    let block = c / groups * inner;
    let mut y = vec![0.0; x.len()];
    for (bi, chunk) in x.chunks(block).enumerate() {
        let (mean, var) = stats(chunk);
        for (j, &v) in chunk.iter().enumerate() {
            let ch = (bi % groups) * (c / groups) + j / inner;
            y[bi * block + j] = (v - mean) / (var + eps).sqrt() * s[ch] + b[ch];
        }
    }
    y
}

#[test]
fn instance_and_group_norm_match_reference() {
    let mut rng = Rng::new(32);
    for shape in [&[2usize, 5, 3, 7][..], &[3, 4, 11], &[1, 6, 2, 3, 5], &[2, 8, 64, 65]] {
        let c = shape[1];
        let x = rng.vec_f64(shape.iter().product());
        let (s, b) = (rng.vec_f64(c), rng.vec_f64(c));
        let want = ref_group_norm(&x, shape, c, &s, &b, 1e-4);
        let n = node("InstanceNormalization", &["x", "s", "b"], 1, vec![("epsilon", AttrValue::Float(1e-4))]);
        let k = build(build_instance_norm, &n, 6).unwrap();
        let out = run(k.as_ref(), &[t64(shape, &x), t64(&[c], &s), t64(&[c], &b)], 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-8, &format!("instance f64 {shape:?}"));
        let out = run(k.as_ref(), &[t32(shape, &x), t32(&[c], &s), t32(&[c], &b)], 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-4, &format!("instance f32 {shape:?}"));
    }
    // GroupNormalization-21 (per-channel parameters) and -18 (per-group parameters).
    for (shape, groups) in [(&[2usize, 6, 5, 7][..], 3), (&[2, 6, 5, 7], 1), (&[2, 6, 5, 7], 6), (&[1, 4, 13], 2)] {
        let c = shape[1];
        let x = rng.vec_f64(shape.iter().product());
        let (s, b) = (rng.vec_f64(c), rng.vec_f64(c));
        let want = ref_group_norm(&x, shape, groups, &s, &b, 1e-5);
        let n = node("GroupNormalization", &["x", "s", "b"], 1, vec![("num_groups", AttrValue::Int(groups as i64))]);
        let k = build(build_group_norm, &n, 21).unwrap();
        let out = run(k.as_ref(), &[t32(shape, &x), t32(&[c], &s), t32(&[c], &b)], 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-4, &format!("group-21 {shape:?} / {groups}"));
        let (sg, bg) = (rng.vec_f64(groups), rng.vec_f64(groups));
        let per = c / groups;
        let sc: Vec<f64> = (0..c).map(|ch| sg[ch / per]).collect();
        let bc: Vec<f64> = (0..c).map(|ch| bg[ch / per]).collect();
        let want = ref_group_norm(&x, shape, groups, &sc, &bc, 1e-5);
        let k = build(build_group_norm, &n, 18).unwrap();
        let out = run(k.as_ref(), &[t64(shape, &x), t64(&[groups], &sg), t64(&[groups], &bg)], 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-8, &format!("group-18 {shape:?} / {groups}"));
    }
}

#[test]
fn group_norm_errors() {
    let ones = |s: &[usize]| t32(s, &vec![1.0; s.iter().product()]);
    let n = node("GroupNormalization", &["x", "s", "b"], 1, vec![("num_groups", AttrValue::Int(4))]);
    let k = build(build_group_norm, &n, 21).unwrap();
    let err = run(k.as_ref(), &[ones(&[1, 6, 3]), ones(&[6]), ones(&[6])], 1).unwrap_err().to_string();
    assert!(
        err.contains("input 0: expected a channel count divisible by num_groups 4, found shape [1, 6, 3]"),
        "{err}"
    );
    let err = run(k.as_ref(), &[ones(&[1, 8, 3]), ones(&[4]), ones(&[4])], 1).unwrap_err().to_string();
    assert!(err.contains("input 1: expected 8 elements (one per channel), found shape [4]"), "{err}");
    let err = build(build_group_norm, &node("GroupNormalization", &["x", "s", "b"], 1, vec![]), 21)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("'num_groups': expected an int, found no attribute"), "{err}");
    let bad = node(
        "GroupNormalization",
        &["x", "s", "b"],
        1,
        vec![("num_groups", AttrValue::Int(2)), ("stash_type", AttrValue::Int(7))],
    );
    let err = build(build_group_norm, &bad, 21).err().unwrap().to_string();
    assert!(err.contains("'stash_type': expected a float type code"), "{err}");
}

#[test]
fn layer_norm_matches_reference_with_statistics() {
    let mut rng = Rng::new(33);
    // (X shape, axis, scale shape, with bias)
    let cases: [(&[usize], i64, &[usize], bool); 6] = [
        (&[3, 5, 7], -1, &[7], true),
        (&[3, 5, 7], 1, &[5, 7], true),
        (&[3, 5, 7], 1, &[1, 7], false),
        (&[3, 5, 7], 0, &[3, 5, 7], true),
        (&[11], 0, &[11], true),
        (&[64, 1000], -1, &[1000], true),
    ];
    for (shape, axis, sshape, with_bias) in cases {
        let a = if axis < 0 { shape.len() as i64 + axis } else { axis } as usize;
        let row: usize = shape[a..].iter().product();
        let x = rng.vec_f64(shape.iter().product());
        let s = rng.vec_f64(sshape.iter().product());
        let b = rng.vec_f64(sshape.iter().product());
        // The scale's index for element j of a row, broadcasting size-1 dims.
        let norm = &shape[a..];
        let lead = norm.len() - sshape.len();
        let param_at = |j: usize| -> usize {
            let mut rem = j;
            let mut idx = vec![0; norm.len()];
            for d in (0..norm.len()).rev() {
                idx[d] = rem % norm[d];
                rem /= norm[d];
            }
            (0..sshape.len()).fold(0, |acc, d| acc * sshape[d] + if sshape[d] == 1 { 0 } else { idx[lead + d] })
        };
        let (mut want, mut means, mut invs) = (vec![], vec![], vec![]);
        for r in x.chunks(row) {
            let (mean, var) = stats(r);
            let inv = 1.0 / (var + 1e-5).sqrt();
            means.push(mean);
            invs.push(inv);
            want.extend(
                r.iter()
                    .enumerate()
                    .map(|(j, &v)| (v - mean) * inv * s[param_at(j)] + if with_bias { b[param_at(j)] } else { 0.0 }),
            );
        }
        let inputs: &[&str] = if with_bias { &["x", "s", "b"] } else { &["x", "s"] };
        let n = node("LayerNormalization", inputs, 3, vec![("axis", AttrValue::Int(axis))]);
        let k = build(build_layer_norm, &n, 17).unwrap();
        let mut tensors = vec![t32(shape, &x), t32(sshape, &s)];
        if with_bias {
            tensors.push(t32(sshape, &b));
        }
        let out = run(k.as_ref(), &tensors, 3).unwrap();
        let what = format!("{shape:?} axis {axis} scale {sshape:?}");
        assert_close(&to_f64(&out[0]), &want, 1e-4, &what);
        let mut stat_shape = shape[..a].to_vec();
        stat_shape.resize(shape.len(), 1);
        assert_eq!(out[1].as_tensor().unwrap().shape(), &stat_shape[..], "{what}");
        assert_close(&to_f64(&out[1]), &means, 1e-5, &format!("{what} mean"));
        assert_close(&to_f64(&out[2]), &invs, 1e-4, &format!("{what} inv std"));
        // float16 X: statistics stay float (stash_type 1); stash_type 11 gives doubles.
        let mut tensors16 = vec![t16(shape, &x), t16(sshape, &s)];
        if with_bias {
            tensors16.push(t16(sshape, &b));
        }
        let out = run(k.as_ref(), &tensors16, 3).unwrap();
        assert_close(&f16_values(&out[0]), &want, 2e-2, &format!("{what} f16"));
        assert_eq!(out[1].as_tensor().unwrap().dtype(), DataType::Float);
        let n = node(
            "LayerNormalization",
            inputs,
            3,
            vec![("axis", AttrValue::Int(axis)), ("stash_type", AttrValue::Int(11))],
        );
        let k = build(build_layer_norm, &n, 17).unwrap();
        let out = run(k.as_ref(), &tensors, 3).unwrap();
        assert_eq!(out[2].as_tensor().unwrap().dtype(), DataType::Double);
        assert_close(&to_f64(&out[0]), &want, 1e-5, &format!("{what} stash double"));
    }
    // Only Y wanted: one output.
    let n = node("LayerNormalization", &["x", "s"], 1, vec![]);
    let k = build(build_layer_norm, &n, 17).unwrap();
    assert_eq!(
        run(k.as_ref(), &[t32(&[2, 3], &[1., 2., 3., 4., 5., 7.]), t32(&[3], &[1., 1., 1.])], 1).unwrap().len(),
        1
    );
}

#[test]
fn layer_norm_errors() {
    let ones = |s: &[usize]| t32(s, &vec![1.0; s.iter().product()]);
    let k = build(build_layer_norm, &node("LayerNormalization", &["x", "s"], 1, vec![("axis", AttrValue::Int(2))]), 17)
        .unwrap();
    let err = run(k.as_ref(), &[ones(&[2, 3]), ones(&[3])], 1).unwrap_err().to_string();
    assert!(err.contains("axis 2 is out of range for rank 2"), "{err}");
    let k = build(build_layer_norm, &node("LayerNormalization", &["x", "s"], 1, vec![]), 17).unwrap();
    let err = run(k.as_ref(), &[ones(&[2, 3]), ones(&[2])], 1).unwrap_err().to_string();
    assert!(
        err.contains("input 1: expected a shape broadcastable to [3] (X's dims from axis 1), found shape [2]"),
        "{err}"
    );
    let xi = Some(Tensor::from_vec(vec![3], vec![1i32; 3]).unwrap());
    let err = run(k.as_ref(), &[xi, ones(&[3])], 1).unwrap_err().to_string();
    assert!(err.contains("input 0: expected one of float/double/float16/bfloat16, found int32"), "{err}");
}

#[test]
fn lrn_matches_formula() {
    let mut rng = Rng::new(34);
    for (shape, size) in
        [(&[2usize, 7, 3, 5][..], 3usize), (&[1, 6, 4], 4), (&[1, 5, 2, 2, 3], 1), (&[2, 16, 40, 41], 5)]
    {
        let c = shape[1];
        let inner: usize = shape[2..].iter().product();
        let x = rng.vec_f64(shape.iter().product());
        let (alpha, beta, bias) = (0.02, 0.6, 1.5);
        let lo = (size - 1) / 2;
        let hi = (size - 1).div_ceil(2);
        let want: Vec<f64> = (0..x.len())
            .map(|i| {
                let (n, ch, j) = (i / (c * inner), i / inner % c, i % inner);
                let sum: f64 =
                    (ch.saturating_sub(lo)..=(ch + hi).min(c - 1)).map(|cc| x[(n * c + cc) * inner + j].powi(2)).sum();
                x[i] / (bias + alpha / size as f64 * sum).powf(beta)
            })
            .collect();
        let n = node(
            "LRN",
            &["x"],
            1,
            vec![
                ("size", AttrValue::Int(size as i64)),
                ("alpha", AttrValue::Float(alpha as f32)),
                ("beta", AttrValue::Float(beta as f32)),
                ("bias", AttrValue::Float(bias as f32)),
            ],
        );
        let k = build(build_lrn, &n, 13).unwrap();
        assert_close(
            &to_f64(&run(k.as_ref(), &[t64(shape, &x)], 1).unwrap()[0]),
            &want,
            1e-7,
            &format!("f64 {shape:?} size {size}"),
        );
        assert_close(
            &to_f64(&run(k.as_ref(), &[t32(shape, &x)], 1).unwrap()[0]),
            &want,
            1e-5,
            &format!("f32 {shape:?}"),
        );
    }
    let err = build(build_lrn, &node("LRN", &["x"], 1, vec![]), 13).err().unwrap().to_string();
    assert!(err.contains("'size': expected an int, found no attribute"), "{err}");
    let err =
        build(build_lrn, &node("LRN", &["x"], 1, vec![("size", AttrValue::Int(0))]), 13).err().unwrap().to_string();
    assert!(err.contains("'size': expected a positive integer, found 0"), "{err}");
}

#[test]
fn mean_variance_normalization_matches_reference() {
    let mut rng = Rng::new(35);
    // (shape, axes attribute, reduced axes)
    let cases: [(&[usize], Option<&[i64]>, &[usize]); 4] = [
        (&[2, 3, 4, 5], None, &[0, 2, 3]),
        (&[2, 3, 4, 5], Some(&[1]), &[1]),
        (&[3, 5, 7], Some(&[-1, 0]), &[0, 2]),
        (&[4, 6], Some(&[0, 1]), &[0, 1]),
    ];
    for (shape, axes, reduced) in cases {
        let x = rng.vec_f64(shape.iter().product());
        // Group elements by their indices along the kept axes.
        let strides = util::strides(shape);
        let key = |i: usize| -> Vec<usize> {
            (0..shape.len()).filter(|d| !reduced.contains(d)).map(|d| i / strides[d] % shape[d]).collect()
        };
        let mut groups: std::collections::BTreeMap<Vec<usize>, Vec<f64>> = Default::default();
        for (i, &v) in x.iter().enumerate() {
            groups.entry(key(i)).or_default().push(v);
        }
        let want: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (mean, var) = stats(&groups[&key(i)]);
                (v - mean) / (var.sqrt() + 1e-9)
            })
            .collect();
        let attrs = axes.map(|a| vec![("axes", ints(a))]).unwrap_or_default();
        let k = build(build_mvn, &node("MeanVarianceNormalization", &["x"], 1, attrs), 13).unwrap();
        assert_close(
            &to_f64(&run(k.as_ref(), &[t64(shape, &x)], 1).unwrap()[0]),
            &want,
            1e-9,
            &format!("{shape:?} {axes:?}"),
        );
        assert_close(
            &to_f64(&run(k.as_ref(), &[t32(shape, &x)], 1).unwrap()[0]),
            &want,
            1e-4,
            &format!("f32 {shape:?} {axes:?}"),
        );
    }
    let k = build(build_mvn, &node("MeanVarianceNormalization", &["x"], 1, vec![]), 9).unwrap();
    let err = run(k.as_ref(), &[t32(&[2, 3], &[1.0; 6])], 1).unwrap_err().to_string();
    assert!(err.contains("'axes': expected axes within rank 2 of X [2, 3], found [0, 2, 3]"), "{err}");
}
