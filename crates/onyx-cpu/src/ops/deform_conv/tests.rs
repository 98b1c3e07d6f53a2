use onyx_core::ir::AttrValue;

use super::*;
use crate::ops::elementwise::testing::{assert_close, floats, random_f32, tensor};
use crate::ops::matmul::test_support::{build, node, run};

/// Bilinear sampling written as a sum over every pixel with the tent weights
/// `max(0, 1 − |y − r|) · max(0, 1 − |x − c|)` (zero outside the image by construction).
fn tent_sample(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let mut s = 0.0;
    for r in 0..h {
        for c in 0..w {
            s += plane[r * w + c] * (1.0 - (y - r as f64).abs()).max(0.0) * (1.0 - (x - c as f64).abs()).max(0.0);
        }
    }
    s
}

struct Case {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    k: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    pads: [usize; 4],
    group: usize,
    og: usize,
    mask: bool,
    bias: bool,
}

#[test]
fn deform_conv_matches_a_direct_sum() {
    let mut rng = fastrand::Rng::with_seed(31);
    let cases = [
        Case {
            n: 1,
            c: 2,
            h: 5,
            w: 6,
            oc: 3,
            k: [2, 2],
            stride: [1, 1],
            dil: [1, 1],
            pads: [0; 4],
            group: 1,
            og: 1,
            mask: false,
            bias: false,
        },
        Case {
            n: 2,
            c: 4,
            h: 6,
            w: 5,
            oc: 4,
            k: [3, 2],
            stride: [2, 1],
            dil: [1, 2],
            pads: [1, 0, 2, 1],
            group: 2,
            og: 2,
            mask: true,
            bias: true,
        },
    ];
    for c in cases {
        let oh = (c.h + c.pads[0] + c.pads[2] - c.dil[0] * (c.k[0] - 1) - 1) / c.stride[0] + 1;
        let ow = (c.w + c.pads[1] + c.pads[3] - c.dil[1] * (c.k[1] - 1) - 1) / c.stride[1] + 1;
        let kk = c.k[0] * c.k[1];
        let cg = c.c / c.group;
        let f = |v: Vec<f32>| -> Vec<f64> { v.into_iter().map(f64::from).collect() };
        let x = f(random_f32(&mut rng, c.n * c.c * c.h * c.w, -1.0, 1.0));
        let wt = f(random_f32(&mut rng, c.oc * cg * kk, -1.0, 1.0));
        let off = f(random_f32(&mut rng, c.n * c.og * kk * 2 * oh * ow, -1.5, 1.5));
        let mask = f(random_f32(&mut rng, c.n * c.og * kk * oh * ow, 0.0, 1.0));
        let bias = f(random_f32(&mut rng, c.oc, -1.0, 1.0));
        let mut want = vec![];
        for b in 0..c.n {
            for o in 0..c.oc {
                for y in 0..oh {
                    for xo in 0..ow {
                        let mut s = if c.bias { bias[o] } else { 0.0 };
                        let g = o / (c.oc / c.group);
                        for ci in 0..cg {
                            let ch = g * cg + ci;
                            let og = ch / (c.c / c.og);
                            for i in 0..c.k[0] {
                                for j in 0..c.k[1] {
                                    let tap = og * kk + i * c.k[1] + j;
                                    let at = |t: usize| ((b * c.og * kk * 2 + t) * oh + y) * ow + xo;
                                    let py =
                                        (y * c.stride[0] + i * c.dil[0]) as f64 - c.pads[0] as f64 + off[at(2 * tap)];
                                    let px = (xo * c.stride[1] + j * c.dil[1]) as f64 - c.pads[1] as f64
                                        + off[at(2 * tap + 1)];
                                    let m = if c.mask { mask[((b * c.og * kk + tap) * oh + y) * ow + xo] } else { 1.0 };
                                    let plane = &x[(b * c.c + ch) * c.h * c.w..][..c.h * c.w];
                                    s += wt[((o * cg + ci) * c.k[0] + i) * c.k[1] + j]
                                        * m
                                        * tent_sample(plane, c.h, c.w, py, px);
                                }
                            }
                        }
                        want.push(s);
                    }
                }
            }
        }
        let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
        let attrs = vec![
            ("strides", ints(&c.stride)),
            ("dilations", ints(&c.dil)),
            ("pads", ints(&c.pads)),
            ("group", AttrValue::Int(c.group as i64)),
            ("offset_group", AttrValue::Int(c.og as i64)),
            ("kernel_shape", ints(&c.k)),
        ];
        let k = build(build_deform_conv, &node("DeformConv", &["x", "w", "o", "b", "m"], 1, attrs), 19).unwrap();
        let inputs = vec![
            Some(tensor(&[c.n, c.c, c.h, c.w], x.clone())),
            Some(tensor(&[c.oc, cg, c.k[0], c.k[1]], wt.clone())),
            Some(tensor(&[c.n, c.og * kk * 2, oh, ow], off.clone())),
            c.bias.then(|| tensor(&[c.oc], bias.clone())),
            c.mask.then(|| tensor(&[c.n, c.og * kk, oh, ow], mask.clone())),
        ];
        let y = run(k.as_ref(), &inputs, 1).unwrap().remove(0).into_tensor().unwrap();
        assert_eq!(y.shape(), &[c.n, c.oc, oh, ow]);
        assert_close(&floats(&y), &want, 1e-10, 1e-12, &format!("group={} og={}", c.group, c.og));
    }
}

#[test]
fn invalid_deform_convs_are_errors() {
    let k = build(build_deform_conv, &node("DeformConv", &["x", "w", "o"], 1, vec![]), 19).unwrap();
    let x = tensor(&[1, 1, 3, 3], vec![1f32; 9]);
    let w = tensor(&[1, 1, 2, 2], vec![1f32; 4]);
    let e = run(k.as_ref(), &[Some(x.clone()), Some(w.clone()), Some(tensor(&[1, 8, 3, 3], vec![0f32; 72]))], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("input 2") && e.contains("[1, 8, 2, 2]"), "{e}");
    let e = run(
        k.as_ref(),
        &[Some(x), Some(tensor(&[1, 2, 2, 2], vec![1f32; 8])), Some(tensor(&[1, 8, 2, 2], vec![0f32; 32]))],
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("input 1"), "{e}");
    assert!(build(build_deform_conv, &node("DeformConv", &["x"], 1, vec![("group", AttrValue::Int(0))]), 19).is_err());
}
