use onyx_core::ir::AttrValue;
use onyx_core::{DataType, Tensor};

use super::*;
use crate::ops::elementwise::testing::{assert_close, floats, random_f32, tensor};
use crate::ops::matmul::test_support::{build, node, run};

fn run1(
    f: crate::BuildFn,
    op: &str,
    since: i64,
    attrs: Vec<(&str, AttrValue)>,
    inputs: Vec<Option<Tensor>>,
) -> Result<Tensor> {
    let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let k = build(f, &node(op, &names, 1, attrs), since)?;
    run(k.as_ref(), &inputs, 1)?.remove(0).into_tensor()
}

/// The DFT of one complex line straight from the definition (angles computed per term).
fn naive_dft(x: &[(f64, f64)], n: usize, inverse: bool) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n)
        .map(|k| {
            let mut s = (0.0, 0.0);
            for (m, &(re, im)) in x.iter().enumerate().take(n) {
                let a = sign * 2.0 * PI * (k * m) as f64 / n as f64;
                s.0 += re * a.cos() - im * a.sin();
                s.1 += re * a.sin() + im * a.cos();
            }
            if inverse {
                (s.0 / n as f64, s.1 / n as f64)
            } else {
                s
            }
        })
        .collect()
}

#[test]
fn dft_matches_the_definition_along_any_axis() {
    let mut rng = fastrand::Rng::with_seed(17);
    let shape = [2, 7, 3, 2];
    let x = random_f32(&mut rng, 84, -1.0, 1.0);
    let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for (axis, len) in [(1usize, None), (2, Some(5i64)), (1, Some(9)), (0, None)] {
        for inverse in [false, true] {
            let mut inputs =
                vec![Some(tensor(&shape, x.clone())), len.map(Tensor::scalar), Some(Tensor::scalar(axis as i64))];
            if len.is_none() {
                inputs[1] = None;
            }
            let y = run1(build_dft, "DFT", 20, vec![("inverse", AttrValue::Int(inverse as i64))], inputs).unwrap();
            let n = len.map_or(shape[axis], |l| l as usize);
            let mut out_shape = shape.to_vec();
            out_shape[axis] = n;
            assert_eq!(y.shape(), &out_shape[..]);
            let yf = floats(&y);
            let st = util::strides(&shape);
            let ost = util::strides(&out_shape);
            // Every line along `axis`.
            for flat in 0..84 / 2 {
                let idx = crate::ops::elementwise::testing::unravel(flat * 2, &shape);
                if idx[axis] != 0 {
                    continue;
                }
                let line: Vec<(f64, f64)> = (0..shape[axis])
                    .map(|k| {
                        let p = flat * 2 + k * st[axis];
                        (xf[p], xf[p + 1])
                    })
                    .collect();
                let want = naive_dft(&line, n, inverse);
                let base: usize = idx.iter().zip(&ost).map(|(i, s)| i * s).sum();
                let got: Vec<f64> =
                    (0..n).flat_map(|k| [yf[base + k * ost[axis]], yf[base + k * ost[axis] + 1]]).collect();
                let want: Vec<f64> = want.into_iter().flat_map(|(a, b)| [a, b]).collect();
                assert_close(&got, &want, 1e-4, 1e-5, &format!("axis={axis} len={len:?} inverse={inverse}"));
            }
        }
    }
}

#[test]
fn rfft_and_irfft_round_trip() {
    let mut rng = fastrand::Rng::with_seed(2);
    for n in [8usize, 9] {
        let x: Vec<f64> = random_f32(&mut rng, 3 * n, -1.0, 1.0).into_iter().map(f64::from).collect();
        // Opset 19: the axis attribute.
        let spec = run1(
            build_dft,
            "DFT",
            19,
            vec![("onesided", AttrValue::Int(1)), ("axis", AttrValue::Int(1))],
            vec![Some(tensor(&[3, n, 1], x.clone()))],
        )
        .unwrap();
        assert_eq!(spec.shape(), &[3, n / 2 + 1, 2]);
        let full = naive_dft(&x[..n].iter().map(|&v| (v, 0.0)).collect::<Vec<_>>(), n, false);
        let want: Vec<f64> = full[..n / 2 + 1].iter().flat_map(|&(a, b)| [a, b]).collect();
        assert_close(&floats(&spec)[..2 * (n / 2 + 1)], &want, 1e-9, 1e-9, "rfft");
        let attrs = vec![("onesided", AttrValue::Int(1)), ("inverse", AttrValue::Int(1)), ("axis", AttrValue::Int(1))];
        let len = (n % 2 == 1).then(|| Tensor::scalar(n as i64));
        let back = run1(build_dft, "DFT", 19, attrs, vec![Some(spec), len]).unwrap();
        assert_eq!(back.shape(), &[3, n, 1]);
        assert_close(&floats(&back), &x, 1e-9, 1e-9, &format!("irfft n={n}"));
    }
}

#[test]
fn stft_is_a_windowed_dft_per_frame() {
    let mut rng = fastrand::Rng::with_seed(8);
    let (len, frame, step) = (37usize, 8usize, 5usize);
    let x: Vec<f64> = random_f32(&mut rng, 2 * len, -1.0, 1.0).into_iter().map(f64::from).collect();
    let w: Vec<f64> = window(WindowKind::Hann, frame, true);
    for onesided in [1i64, 0] {
        let inputs = vec![
            Some(tensor(&[2, len, 1], x.clone())),
            Some(Tensor::scalar(step as i64)),
            Some(tensor(&[frame], w.clone())),
            None,
        ];
        let y = run1(build_stft, "STFT", 17, vec![("onesided", AttrValue::Int(onesided))], inputs).unwrap();
        let frames = 1 + (len - frame) / step;
        let bins = if onesided == 1 { frame / 2 + 1 } else { frame };
        assert_eq!(y.shape(), &[2, frames, bins, 2]);
        let mut want = vec![];
        for b in 0..2 {
            for f in 0..frames {
                let seg: Vec<(f64, f64)> = (0..frame).map(|k| (x[b * len + f * step + k] * w[k], 0.0)).collect();
                want.extend(naive_dft(&seg, frame, false)[..bins].iter().flat_map(|&(a, c)| [a, c]));
            }
        }
        assert_close(&floats(&y), &want, 1e-9, 1e-9, &format!("stft onesided={onesided}"));
    }
    let e =
        run1(build_stft, "STFT", 17, vec![], vec![Some(tensor(&[1, 4, 1], vec![0f32; 4])), Some(Tensor::scalar(0i64))])
            .unwrap_err()
            .to_string();
    assert!(e.contains("frame_step"), "{e}");
}

#[test]
fn windows_have_their_textbook_values() {
    let get = |op: &str, size: i64, periodic: i64| {
        let f = build_window;
        floats(
            &run1(f, op, 17, vec![("periodic", AttrValue::Int(periodic))], vec![Some(Tensor::scalar(size))]).unwrap(),
        )
    };
    assert_close(&get("HannWindow", 5, 0), &[0.0, 0.5, 1.0, 0.5, 0.0], 1e-6, 1e-7, "hann symmetric");
    assert_close(&get("HannWindow", 4, 1), &[0.0, 0.5, 1.0, 0.5], 1e-6, 1e-7, "hann periodic");
    let (a, b) = (25.0 / 46.0, 21.0 / 46.0);
    assert_close(&get("HammingWindow", 3, 0), &[a - b, a + b, a - b], 1e-6, 1e-7, "hamming");
    assert_close(&get("BlackmanWindow", 3, 0), &[0.0, 1.0, 0.0], 1e-6, 1e-6, "blackman");
    assert_eq!(get("HannWindow", 1, 0), vec![1.0]);
    let y = run1(
        build_window,
        "HannWindow",
        17,
        vec![("output_datatype", AttrValue::Int(11))],
        vec![Some(Tensor::scalar(3i32))],
    )
    .unwrap();
    assert_eq!(y.dtype(), DataType::Double);
    assert!(run1(build_window, "HannWindow", 17, vec![("output_datatype", AttrValue::Int(7))], vec![]).is_err());
    assert!(run1(build_window, "HannWindow", 17, vec![], vec![Some(Tensor::scalar(-1i64))]).is_err());
}

#[test]
fn mel_weight_matrix_has_triangles_between_its_edges() {
    let inputs = vec![
        Some(Tensor::scalar(4i64)),
        Some(Tensor::scalar(64i64)),
        Some(Tensor::scalar(16000i64)),
        Some(Tensor::scalar(300f32)),
        Some(Tensor::scalar(7000f32)),
    ];
    let y = run1(build_mel, "MelWeightMatrix", 17, vec![], inputs).unwrap();
    assert_eq!(y.shape(), &[33, 4]);
    // Edges of ONNX's reference for these arguments: bins 2, 2, 5, 8, 12, 19.
    let edges = [2usize, 2, 5, 8, 12, 19];
    let mut want = vec![0.0; 33 * 4];
    for i in 0..4 {
        let (l, c, h) = (edges[i] as f64, edges[i + 1] as f64, edges[i + 2] as f64);
        for j in 0..33 {
            let x = j as f64;
            let v = if x == c {
                1.0
            } else if l < x && x < c {
                (x - l) / (c - l)
            } else if c < x && x < h {
                (h - x) / (h - c)
            } else {
                0.0
            };
            want[j * 4 + i] = v;
        }
    }
    assert_close(&floats(&y), &want, 1e-6, 1e-7, "mel");
    let bad = vec![
        Some(Tensor::scalar(4i64)),
        Some(Tensor::scalar(64i64)),
        Some(Tensor::scalar(16000i64)),
        Some(Tensor::scalar(300f32)),
        Some(Tensor::scalar(30000f32)),
    ];
    assert!(run1(build_mel, "MelWeightMatrix", 17, vec![], bad).unwrap_err().to_string().contains("Nyquist"));
}

#[test]
fn invalid_dfts_are_errors() {
    let x = || Some(tensor(&[4, 3, 1], vec![0.5f32; 12]));
    let e = run1(build_dft, "DFT", 20, vec![], vec![x(), None, Some(Tensor::scalar(2i64))]).unwrap_err().to_string();
    assert!(e.contains("complex dimension"), "{e}");
    let e = run1(build_dft, "DFT", 20, vec![], vec![x(), Some(Tensor::scalar(0i64)), None]).unwrap_err().to_string();
    assert!(e.contains("dft_length"), "{e}");
    let e = run1(
        build_dft,
        "DFT",
        20,
        vec![("inverse", AttrValue::Int(1)), ("onesided", AttrValue::Int(1))],
        vec![x(), None, None],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("one-sided spectrum"), "{e}");
    let e = run1(
        build_dft,
        "DFT",
        20,
        vec![],
        vec![Some(tensor(&[4, 3], vec![0.5f32; 12])), None, Some(Tensor::scalar(0i64))],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("last dimension of 1"), "{e}");
    assert!(build(build_dft, &node("DFT", &["x"], 1, vec![("inverse", AttrValue::Int(2))]), 20).is_err());
}
