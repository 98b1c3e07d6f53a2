use onyx_core::ir::AttrValue;
use onyx_core::Tensor;

use super::build_loss;
use crate::ops::elementwise::testing::{assert_close, floats, random_f32, tensor};
use crate::ops::matmul::test_support::{build, node, run, string};

/// The loss per target straight from the definition, with weights; `(losses, weights)`.
fn naive(
    x: &[f64],
    shape: &[usize],
    target: &[i64],
    weight: Option<&[f64]>,
    ignore: Option<i64>,
    softmax: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (n, c) = (shape[0], shape[1]);
    let inner: usize = shape[2..].iter().product();
    let mut out = (vec![], vec![]);
    for i in 0..n {
        for k in 0..inner {
            let t = target[i * inner + k];
            if Some(t) == ignore {
                out.0.push(0.0);
                out.1.push(0.0);
                continue;
            }
            let val = |j: usize| x[(i * c + j) * inner + k];
            let lp = if softmax {
                let denom: f64 = (0..c).map(|j| val(j).exp()).sum();
                (val(t as usize).exp() / denom).ln()
            } else {
                val(t as usize)
            };
            let w = weight.map_or(1.0, |w| w[t as usize]);
            out.0.push(-lp * w);
            out.1.push(w);
        }
    }
    out
}

#[test]
fn losses_match_a_naive_reference() {
    let mut rng = fastrand::Rng::with_seed(7);
    let shapes: &[&[usize]] = &[&[5, 4], &[3, 7, 2], &[2, 3, 2, 3, 5]];
    for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"] {
        for &shape in shapes {
            for reduction in ["none", "sum", "mean"] {
                for (weighted, ignore) in [(false, None), (true, None), (false, Some(1i64)), (true, Some(-3))] {
                    let (n, c) = (shape[0], shape[1]);
                    let tshape: Vec<usize> = [n].into_iter().chain(shape[2..].iter().copied()).collect();
                    let count: usize = tshape.iter().product();
                    let x: Vec<f32> = random_f32(&mut rng, shape.iter().product(), -3.0, 3.0);
                    let mut target: Vec<i64> = (0..count).map(|_| rng.i64(0..c as i64)).collect();
                    if let Some(ig) = ignore {
                        target.iter_mut().step_by(3).for_each(|t| *t = ig);
                    }
                    let w: Vec<f32> = random_f32(&mut rng, c, 0.1, 2.0);
                    let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                    let wf: Vec<f64> = w.iter().map(|&v| v as f64).collect();
                    let (l, ws) =
                        naive(&xf, shape, &target, weighted.then_some(&wf[..]), ignore, op.starts_with("Softmax"));
                    let want = match reduction {
                        "none" => l.clone(),
                        "sum" => vec![l.iter().sum()],
                        _ => vec![l.iter().sum::<f64>() / ws.iter().sum::<f64>()],
                    };
                    let mut attrs = vec![("reduction", string(reduction))];
                    if let Some(ig) = ignore {
                        attrs.push(("ignore_index", AttrValue::Int(ig)));
                    }
                    let kernel = build(build_loss, &node(op, &["x", "t", "w"], 2, attrs), 13).unwrap();
                    let inputs = vec![
                        Some(tensor(shape, x.clone())),
                        Some(tensor(&tshape, target.clone())),
                        weighted.then(|| tensor(&[c], w.clone())),
                    ];
                    let outs = run(kernel.as_ref(), &inputs, 2).unwrap();
                    let what = format!("{op} {shape:?} {reduction} weighted={weighted} ignore={ignore:?}");
                    let loss = outs[0].as_tensor().unwrap();
                    assert_eq!(loss.shape(), if reduction == "none" { &tshape[..] } else { &[] }, "{what}");
                    assert_close(&floats(loss), &want, 1e-5, 1e-6, &what);
                    if op.starts_with("Softmax") {
                        let lp = floats(outs[1].as_tensor().unwrap());
                        // exp(log_prob) sums to 1 over the classes.
                        let inner: usize = shape[2..].iter().product();
                        for i in 0..n * inner {
                            let s: f64 = (0..c).map(|j| lp[((i / inner) * c + j) * inner + i % inner].exp()).sum();
                            assert!((s - 1.0).abs() < 1e-5, "{what}: probabilities sum to {s}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn losses_in_f64_and_f16() {
    let x = vec![0.5f64, -1.25, 2.0, 0.75, 0.0, -0.5];
    let t = tensor(&[2], vec![2i32, 0]);
    let kernel = build(build_loss, &node("SoftmaxCrossEntropyLoss", &["x", "t"], 1, vec![]), 13).unwrap();
    let y = run(kernel.as_ref(), &[Some(tensor(&[2, 3], x.clone())), Some(t.clone())], 1).unwrap();
    let (l, _) = naive(&x, &[2, 3], &[2, 0], None, None, true);
    assert_close(&floats(y[0].as_tensor().unwrap()), &[(l[0] + l[1]) / 2.0], 1e-14, 0.0, "f64 mean");
    let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f64(v)).collect();
    let y = run(kernel.as_ref(), &[Some(tensor(&[2, 3], h)), Some(t)], 1).unwrap();
    assert_eq!(y[0].as_tensor().unwrap().dtype(), onyx_core::DataType::Float16);
    assert_close(&floats(y[0].as_tensor().unwrap()), &[(l[0] + l[1]) / 2.0], 1e-3, 0.0, "f16 mean");
}

#[test]
fn invalid_losses_are_errors() {
    let nll = |attrs, inputs: Vec<Option<Tensor>>| -> String {
        match build(build_loss, &node("NegativeLogLikelihoodLoss", &["x", "t", "w"], 1, attrs), 13) {
            Ok(k) => run(k.as_ref(), &inputs, 1).unwrap_err().to_string(),
            Err(e) => e.to_string(),
        }
    };
    let x = tensor(&[2, 3], vec![0.1f32; 6]);
    let e = nll(vec![("reduction", string("max"))], vec![]);
    assert!(e.contains("reduction") && e.contains("max"), "{e}");
    let e = nll(vec![], vec![Some(x.clone()), Some(tensor(&[2], vec![0i64, 3]))]);
    assert!(e.contains("input 1") && e.contains("0..3"), "{e}");
    let e = nll(vec![], vec![Some(x.clone()), Some(tensor(&[3], vec![0i64, 1, 2]))]);
    assert!(e.contains("targets of shape [2]"), "{e}");
    let e = nll(vec![], vec![Some(x.clone()), Some(tensor(&[2], vec![0i64, 1])), Some(tensor(&[2], vec![1f32, 1.0]))]);
    assert!(e.contains("input 2"), "{e}");
    let e = nll(vec![], vec![Some(tensor(&[3], vec![0.1f32; 3])), Some(tensor(&[3], vec![0i64; 3]))]);
    assert!(e.contains("rank 2"), "{e}");
    let e = nll(vec![], vec![Some(x), Some(tensor(&[2], vec![0f32, 1.0]))]);
    assert!(e.contains("int32 or int64"), "{e}");
}
