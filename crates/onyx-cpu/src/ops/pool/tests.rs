//! Pooling against naive references, and against values printed by onnxruntime 1.32.

#![allow(clippy::type_complexity)] // the case tables are tuples

use onyx_core::ir::{AttrValue, Node};
use onyx_core::Tensor;

use super::*;
use crate::ops::matmul::test_support::{assert_close, build, indices, ints, node, run, run_f32, string, to_f64, Rng};

/// One windowed pooling case: attributes as the node gets them, and the resolved per-axis
/// pads (begin, end) and output sizes the reference uses.
struct Case {
    x: &'static [usize],
    kernel: &'static [usize],
    strides: &'static [usize],
    dilations: &'static [usize],
    pads: Option<&'static [usize]>,
    auto_pad: &'static str,
    ceil: bool,
    ref_pads: &'static [(isize, isize)],
    out: &'static [usize],
}

const BASE: Case = Case {
    x: &[],
    kernel: &[],
    strides: &[],
    dilations: &[],
    pads: None,
    auto_pad: "NOTSET",
    ceil: false,
    ref_pads: &[],
    out: &[],
};

/// The reference's view of one window: every tap's input position (or None in padding) and
/// whether it lies inside the padded input.
type Tap = (Option<Vec<usize>>, bool);

impl Case {
    fn param(v: &[usize], i: usize) -> usize {
        v.get(i).copied().unwrap_or(1)
    }

    fn node(&self, op: &str, extra: Vec<(&str, AttrValue)>) -> Node {
        let u = |v: &[usize]| ints(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
        let mut attrs = vec![
            ("kernel_shape", u(self.kernel)),
            ("auto_pad", string(self.auto_pad)),
            ("ceil_mode", AttrValue::Int(self.ceil as i64)),
        ];
        if !self.strides.is_empty() {
            attrs.push(("strides", u(self.strides)));
        }
        if !self.dilations.is_empty() {
            attrs.push(("dilations", u(self.dilations)));
        }
        if let Some(p) = self.pads {
            attrs.push(("pads", u(p)));
        }
        attrs.extend(extra);
        node(op, &["x"], 2, attrs)
    }

    /// The taps of the window at output position `o`.
    fn taps(&self, o: &[usize]) -> Vec<Tap> {
        let spatial = &self.x[2..];
        let mut taps = vec![(Some(vec![]), true)];
        for (i, &oi) in o.iter().enumerate() {
            let (pb, pe) = self.ref_pads.get(i).copied().unwrap_or((0, 0));
            let mut next = Vec::new();
            for (pos, in_padded) in &taps {
                for k in 0..self.kernel[i] {
                    let p = (oi * Self::param(self.strides, i) + k * Self::param(self.dilations, i)) as isize - pb;
                    let inside = p >= 0 && (p as usize) < spatial[i];
                    let padded = p >= -pb && p < spatial[i] as isize + pe;
                    let pos = pos.as_ref().filter(|_| inside).map(|v| {
                        let mut v = v.clone();
                        v.push(p as usize);
                        v
                    });
                    next.push((pos, *in_padded && padded));
                }
            }
            taps = next;
        }
        taps
    }

    /// Reference max (value, row-major index, column-major index), average (exclude pad,
    /// include pad) and L3 norm for every output element of every plane.
    fn reference(&self, x: &[f64]) -> Vec<(f64, usize, usize, f64, f64, f64)> {
        let spatial = &self.x[2..];
        let plane: usize = spatial.iter().product();
        let mut out = Vec::new();
        for p in 0..self.x[0] * self.x[1] {
            for o in indices(self.out) {
                let taps = self.taps(&o);
                let valid: Vec<&Vec<usize>> = taps.iter().filter_map(|t| t.0.as_ref()).collect();
                let row = |v: &Vec<usize>| v.iter().zip(spatial).fold(0, |acc, (&i, &s)| acc * s + i);
                let col = |v: &Vec<usize>| v.iter().zip(spatial).rev().fold(0, |acc, (&i, &s)| acc * s + i);
                let (mut best, mut arg) = (f64::NEG_INFINITY, None);
                for v in &valid {
                    let value = x[p * plane + row(v)];
                    if arg.is_none() || value > best {
                        best = value;
                        arg = Some(*v);
                    }
                }
                let arg = arg.expect("every window reads an input element");
                let sum: f64 = valid.iter().map(|v| x[p * plane + row(v)]).sum();
                let padded = taps.iter().filter(|t| t.1).count();
                let l3 = valid.iter().map(|v| x[p * plane + row(v)].abs().powi(3)).sum::<f64>().powf(1.0 / 3.0);
                out.push((
                    best,
                    p * plane + row(arg),
                    p * plane + col(arg),
                    sum / valid.len() as f64,
                    sum / padded as f64,
                    l3,
                ));
            }
        }
        out
    }

    fn check(&self, rng: &mut Rng) {
        let x = rng.vec_f64(self.x.iter().product());
        let want = self.reference(&x);
        let mut shape = self.x[..2].to_vec();
        shape.extend(self.out);
        let what = format!(
            "x{:?} k{:?} s{:?} d{:?} pads{:?} {} ceil={}",
            self.x, self.kernel, self.strides, self.dilations, self.pads, self.auto_pad, self.ceil
        );
        let xt = Tensor::from_vec(self.x.to_vec(), x.clone()).unwrap();
        let xf = Tensor::from_vec(self.x.to_vec(), x.iter().map(|&v| v as f32).collect::<Vec<f32>>()).unwrap();
        for (storage, pick) in [(0, 1), (1, 2)] {
            let k = build(
                |c| build_pool(c, Reduce::Max),
                &self.node("MaxPool", vec![("storage_order", AttrValue::Int(storage))]),
                12,
            )
            .unwrap();
            let out = run(k.as_ref(), &[Some(xt.clone())], 2).unwrap();
            assert_eq!(out[0].as_tensor().unwrap().shape(), &shape[..], "{what}");
            assert_close(&to_f64(&out[0]), &want.iter().map(|w| w.0).collect::<Vec<_>>(), 0.0, &format!("{what} max"));
            let idx: Vec<usize> =
                out[1].as_tensor().unwrap().as_slice::<i64>().unwrap().iter().map(|&i| i as usize).collect();
            let want_idx: Vec<usize> = want.iter().map(|w| if pick == 1 { w.1 } else { w.2 }).collect();
            assert_eq!(idx, want_idx, "{what} indices, storage_order {storage}");
        }
        for (include, col) in [(0, 3), (1, 4)] {
            let k = build(
                |c| build_pool(c, Reduce::Average),
                &self.node("AveragePool", vec![("count_include_pad", AttrValue::Int(include))]),
                19,
            )
            .unwrap();
            let want_avg: Vec<f64> = want.iter().map(|w| if col == 3 { w.3 } else { w.4 }).collect();
            assert_close(
                &to_f64(&run(k.as_ref(), &[Some(xt.clone())], 1).unwrap()[0]),
                &want_avg,
                1e-12,
                &format!("{what} avg include={include}"),
            );
            assert_close(
                &to_f64(&run(k.as_ref(), &[Some(xf.clone())], 1).unwrap()[0]),
                &want_avg,
                1e-5,
                &format!("{what} f32 avg"),
            );
        }
        let k = build(|c| build_pool(c, Reduce::Lp), &self.node("LpPool", vec![("p", AttrValue::Int(3))]), 18).unwrap();
        assert_close(
            &to_f64(&run(k.as_ref(), &[Some(xt.clone())], 1).unwrap()[0]),
            &want.iter().map(|w| w.5).collect::<Vec<_>>(),
            1e-12,
            &format!("{what} lp3"),
        );
    }
}

#[test]
fn tap_ranges_match_brute_force() {
    for input in 1..7 {
        for kernel in 1..5 {
            for stride in 1..3 {
                for dilation in 1..3 {
                    for (pb, pe) in [(0, 0), (1, 0), (0, 2), (2, 1), (3, 3)] {
                        let a = Axis { input, kernel, stride, dilation, pad_begin: pb, pad_end: pe, output: 6 };
                        for (o, t) in axis_taps(&a).iter().enumerate() {
                            let inside: Vec<usize> =
                                (0..kernel).filter(|&k| (0..input as isize).contains(&a.input_index(o, k))).collect();
                            let padded = (0..kernel)
                                .filter(|&k| (-pb..input as isize + pe).contains(&a.input_index(o, k)))
                                .count();
                            assert_eq!(t.k1 - t.k0, inside.len(), "{a:?} o={o}");
                            if let Some(&first) = inside.first() {
                                assert_eq!(t.k0, first, "{a:?} o={o}");
                            }
                            assert_eq!(t.padded, padded, "{a:?} o={o}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn pools_match_naive_references() {
    let mut rng = Rng::new(21);
    let cases = [
        Case {
            x: &[2, 3, 11],
            kernel: &[3],
            strides: &[2],
            pads: Some(&[1, 2]),
            ref_pads: &[(1, 2)],
            out: &[6],
            ..BASE
        },
        Case {
            x: &[1, 5, 7, 11],
            kernel: &[3, 2],
            strides: &[2, 2],
            pads: Some(&[1, 0, 1, 1]),
            ceil: true,
            ref_pads: &[(1, 1), (0, 1)],
            out: &[4, 6],
            ..BASE
        },
        // ceil_mode drops last windows that would start in the end padding.
        Case {
            x: &[1, 2, 3, 5],
            kernel: &[3, 3],
            strides: &[2, 2],
            pads: Some(&[1, 1, 2, 2]),
            ceil: true,
            ref_pads: &[(1, 2), (1, 2)],
            out: &[2, 3],
            ..BASE
        },
        Case {
            x: &[1, 3, 9, 8],
            kernel: &[2, 3],
            strides: &[1, 2],
            dilations: &[2, 2],
            pads: Some(&[0, 1, 1, 2]),
            ref_pads: &[(0, 1), (1, 2)],
            out: &[8, 4],
            ..BASE
        },
        Case {
            x: &[1, 2, 5, 6, 7],
            kernel: &[2, 3, 2],
            strides: &[2, 1, 2],
            pads: Some(&[1, 0, 1, 0, 1, 1]),
            ref_pads: &[(1, 0), (0, 1), (1, 1)],
            out: &[3, 5, 4],
            ..BASE
        },
        Case {
            x: &[1, 3, 7, 10],
            kernel: &[4, 3],
            strides: &[2, 3],
            auto_pad: "SAME_UPPER",
            ref_pads: &[(1, 2), (1, 1)],
            out: &[4, 4],
            ..BASE
        },
        Case {
            x: &[1, 3, 7, 10],
            kernel: &[4, 3],
            strides: &[2, 3],
            auto_pad: "SAME_LOWER",
            ref_pads: &[(2, 1), (1, 1)],
            out: &[4, 4],
            ..BASE
        },
        Case { x: &[1, 3, 7, 10], kernel: &[3, 3], strides: &[2, 2], auto_pad: "VALID", out: &[3, 4], ..BASE },
        // Large enough to run planes in parallel.
        Case {
            x: &[4, 16, 33, 35],
            kernel: &[3, 3],
            strides: &[2, 2],
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[(1, 1), (1, 1)],
            out: &[17, 18],
            ..BASE
        },
    ];
    for case in &cases {
        case.check(&mut rng);
    }
}

#[test]
fn pools_agree_with_onnxruntime() {
    let pool = |op: &str, x: &[f32], attrs: Vec<(&str, AttrValue)>| -> Vec<f32> {
        let n = node(op, &["x"], 1, attrs);
        let reduce = match op {
            "MaxPool" => Reduce::Max,
            "AveragePool" => Reduce::Average,
            _ => Reduce::Lp,
        };
        let build_fn: crate::BuildFn = match reduce {
            Reduce::Max => |c| build_pool(c, Reduce::Max),
            Reduce::Average => |c| build_pool(c, Reduce::Average),
            Reduce::Lp => |c| build_pool(c, Reduce::Lp),
        };
        run_f32(build_fn, &n, 19, &[Some((&[1, 1, x.len()], x))]).unwrap().1
    };
    let seq = |n: usize| (1..=n).map(|v| v as f32).collect::<Vec<f32>>();
    let ceil = ("ceil_mode", AttrValue::Int(1));
    let k = |v: i64| ("kernel_shape", ints(&[v]));
    let s2 = ("strides", ints(&[2]));
    let cases: Vec<(&str, Vec<f32>, Vec<(&str, AttrValue)>, Vec<f32>)> = vec![
        ("MaxPool", seq(5), vec![k(2), s2.clone(), ("pads", ints(&[0, 1])), ceil.clone()], vec![2., 4., 5.]),
        ("MaxPool", seq(3), vec![k(3), s2.clone(), ("pads", ints(&[1, 2])), ceil.clone()], vec![2., 3.]),
        (
            "AveragePool",
            seq(5),
            vec![k(3), s2.clone(), ("pads", ints(&[1, 1])), ceil.clone(), ("count_include_pad", AttrValue::Int(1))],
            vec![1., 3., 3.],
        ),
        (
            "AveragePool",
            seq(5),
            vec![
                k(2),
                s2.clone(),
                ("pads", ints(&[1, 1])),
                ceil.clone(),
                ("dilations", ints(&[2])),
                ("count_include_pad", AttrValue::Int(1)),
            ],
            vec![1., 3., 2.],
        ),
        (
            "AveragePool",
            seq(5),
            vec![k(2), s2.clone(), ("pads", ints(&[1, 1])), ceil.clone(), ("dilations", ints(&[2]))],
            vec![2., 3., 4.],
        ),
        // The last window reaches past the padded input: divided by the taps inside it.
        (
            "AveragePool",
            seq(6),
            vec![k(3), s2.clone(), ceil.clone(), ("count_include_pad", AttrValue::Int(1))],
            vec![2., 4., 5.5],
        ),
        (
            "LpPool",
            seq(6),
            vec![k(2), s2, ("pads", ints(&[1, 0])), ceil, ("dilations", ints(&[2])), ("p", AttrValue::Int(3))],
            vec![2., 4.160_167_7, 6.542_133],
        ),
    ];
    for (op, x, attrs, want) in cases {
        let got = pool(op, &x, attrs);
        assert_close(&got, &want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), 1e-6, op);
    }
    // Indices in both storage orders, 2-D and 3-D.
    let x = [3., 1., 4., 1., 5., 9., 2., 6., 5., 3., 5., 8., 9., 7., 9., 3., 2., 3., 8., 4., 6., 2., 6., 4.];
    let cases: [(&[usize], &[i64], &[i64], i64, &[i64]); 4] = [
        (&[1, 2, 3, 4], &[2, 2], &[1, 2], 0, &[5, 7, 5, 11, 12, 14, 20, 18]),
        (&[1, 2, 3, 4], &[2, 2], &[1, 2], 1, &[4, 10, 4, 11, 12, 18, 14, 19]),
        (&[1, 1, 2, 3, 4], &[2, 2, 2], &[1, 1, 2], 0, &[5, 14, 5, 11]),
        (&[1, 1, 2, 3, 4], &[2, 2, 2], &[1, 1, 2], 1, &[8, 13, 8, 22]),
    ];
    for (shape, kernel, strides, order, want) in cases {
        let n = node(
            "MaxPool",
            &["x"],
            2,
            vec![("kernel_shape", ints(kernel)), ("strides", ints(strides)), ("storage_order", AttrValue::Int(order))],
        );
        let k = build(|c| build_pool(c, Reduce::Max), &n, 12).unwrap();
        let out = run(k.as_ref(), &[Some(Tensor::from_vec(shape.to_vec(), x.to_vec()).unwrap())], 2).unwrap();
        assert_eq!(out[1].as_tensor().unwrap().as_slice::<i64>().unwrap(), want, "{shape:?} order {order}");
    }
}

#[test]
fn max_pool_integers_half_types_nan_and_unwanted_indices() {
    let n = node("MaxPool", &["x"], 2, vec![("kernel_shape", ints(&[2])), ("strides", ints(&[2]))]);
    let k = build(|c| build_pool(c, Reduce::Max), &n, 12).unwrap();
    let xi = Tensor::from_vec(vec![1, 1, 5], vec![-3i8, -7, 100, -128, 5]).unwrap();
    let out = run(k.as_ref(), &[Some(xi)], 2).unwrap();
    assert_eq!(out[0].as_tensor().unwrap().as_slice::<i8>().unwrap(), &[-3, 100]);
    assert_eq!(out[1].as_tensor().unwrap().as_slice::<i64>().unwrap(), &[0, 2]);
    let xu = Tensor::from_vec(vec![1, 1, 4], vec![3u8, 250, 0, 1]).unwrap();
    assert_eq!(run(k.as_ref(), &[Some(xu)], 1).unwrap()[0].as_tensor().unwrap().as_slice::<u8>().unwrap(), &[250, 1]);
    let xh = Tensor::from_vec(vec![1, 1, 4], [1.5f32, -2.0, f32::NAN, -1.0].map(half::f16::from_f32).to_vec()).unwrap();
    let v = Value::Tensor(xh);
    // Only Y wanted: no Indices output is computed.
    let out = k.run(&[Some(ValueRef::Value(&v))], &[true, false]).unwrap();
    assert_eq!(out.len(), 1);
    let got: Vec<f32> =
        out[0].as_tensor().unwrap().as_slice::<half::f16>().unwrap().iter().map(|h| h.to_f32()).collect();
    assert_eq!(got, vec![1.5, -1.0], "NaN never wins (as onnxruntime)");
}

#[test]
fn global_pools() {
    let mut rng = Rng::new(22);
    for shape in [&[2usize, 3][..], &[2, 3, 7], &[2, 3, 5, 7], &[1, 2, 3, 4, 5], &[3, 5, 61, 67]] {
        let x = rng.vec_f64(shape.iter().product());
        let plane: usize = shape[2..].iter().product();
        let mut out_shape = shape[..2].to_vec();
        out_shape.extend(vec![1; shape.len() - 2]);
        let planes: Vec<&[f64]> = x.chunks(plane).collect();
        let want_avg: Vec<f64> = planes.iter().map(|p| p.iter().sum::<f64>() / plane as f64).collect();
        let want_max: Vec<f64> = planes.iter().map(|p| p.iter().cloned().fold(f64::NEG_INFINITY, f64::max)).collect();
        let want_l2: Vec<f64> = planes.iter().map(|p| p.iter().map(|v| v * v).sum::<f64>().sqrt()).collect();
        let want_l3: Vec<f64> = planes.iter().map(|p| p.iter().map(|v| v.abs().powi(3)).sum::<f64>().cbrt()).collect();
        let xt = Tensor::from_vec(shape.to_vec(), x.clone()).unwrap();
        let cases: [(Reduce, Vec<(&str, AttrValue)>, &Vec<f64>); 4] = [
            (Reduce::Average, vec![], &want_avg),
            (Reduce::Max, vec![], &want_max),
            (Reduce::Lp, vec![], &want_l2),
            (Reduce::Lp, vec![("p", AttrValue::Int(3))], &want_l3),
        ];
        for (reduce, attrs, want) in cases {
            let n = node("GlobalPool", &["x"], 1, attrs);
            let build_fn: crate::BuildFn = match reduce {
                Reduce::Max => |c| build_global(c, Reduce::Max),
                Reduce::Average => |c| build_global(c, Reduce::Average),
                Reduce::Lp => |c| build_global(c, Reduce::Lp),
            };
            let k = build(build_fn, &n, 22).unwrap();
            let out = run(k.as_ref(), &[Some(xt.clone())], 1).unwrap();
            assert_eq!(out[0].as_tensor().unwrap().shape(), &out_shape[..]);
            assert_close(&to_f64(&out[0]), want, 1e-12, &format!("{reduce:?} {shape:?}"));
        }
    }
}

#[test]
fn invalid_pools_are_errors() {
    let x = |s: &[usize]| Some(Tensor::from_vec(s.to_vec(), vec![0.5f32; s.iter().product()]).unwrap());
    let max = |c: &NodeContext<'_>| build_pool(c, Reduce::Max);
    let lp = |c: &NodeContext<'_>| build_pool(c, Reduce::Lp);
    let no_kernel = node("MaxPool", &["x"], 1, vec![]);
    let err = build(max, &no_kernel, 12).err().unwrap().to_string();
    assert!(err.contains("'kernel_shape': expected a list of kernel sizes, found no attribute"), "{err}");
    let err = build(
        max,
        &node("MaxPool", &["x"], 1, vec![("kernel_shape", ints(&[2])), ("ceil_mode", AttrValue::Int(2))]),
        12,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("'ceil_mode': expected 0 or 1, found 2"), "{err}");
    let err = build(lp, &node("LpPool", &["x"], 1, vec![("kernel_shape", ints(&[2])), ("p", AttrValue::Int(0))]), 18)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("'p': expected a positive number, found 0"), "{err}");
    let err =
        build(max, &node("MaxPool", &["x"], 1, vec![("kernel_shape", ints(&[0, 2]))]), 12).err().unwrap().to_string();
    assert!(err.contains("'kernel_shape': expected positive integers up to 2147483647, found [0, 2]"), "{err}");

    let k2 = build(max, &node("MaxPool", &["x"], 1, vec![("kernel_shape", ints(&[3, 3]))]), 12).unwrap();
    let cases: [(&[usize], &str); 4] = [
        (&[1, 2, 5], "input 0: expected 2 spatial dimensions like kernel [3, 3], found shape [1, 2, 5]"),
        (&[1, 2, 2, 5], "input 0: expected spatial axis 2 of at least 3 (kernel 3 with dilation 1) after pads 0+0, found shape [1, 2, 2, 5]"),
        (&[4, 5], "input 0: expected a tensor of rank 3 or more"),
        (&[1, 1, 3, 3, 3, 3], "4 spatial dimensions"),
    ];
    for (shape, msg) in cases {
        let err = run(k2.as_ref(), &[x(shape)], 1).unwrap_err().to_string();
        assert!(err.contains(msg) && err.contains("MaxPool node 'n'"), "{err}");
    }
    // Hostile attributes: an output too large to count is an error, not a panic or an abort.
    let big = i64::from(i32::MAX);
    let huge = node("MaxPool", &["x"], 1, vec![("kernel_shape", ints(&[1, 1, 1])), ("pads", ints(&[big; 6]))]);
    let k = build(max, &huge, 12).unwrap();
    let err = run(k.as_ref(), &[x(&[1, 1, 1, 1, 1])], 1).unwrap_err().to_string();
    assert!(err.contains("MaxPool node 'n'") && err.contains("more elements than fit in memory"), "{err}");
    let err = build(
        max,
        &node("MaxPool", &["x"], 1, vec![("kernel_shape", ints(&[2])), ("dilations", ints(&[big + 1]))]),
        12,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("'dilations': expected positive integers up to 2147483647"), "{err}");
    let avg = build(
        |c| build_pool(c, Reduce::Average),
        &node("AveragePool", &["x"], 1, vec![("kernel_shape", ints(&[2]))]),
        19,
    )
    .unwrap();
    let xi = Tensor::from_vec(vec![1, 1, 4], vec![1i8; 4]).unwrap();
    let err = run(avg.as_ref(), &[Some(xi)], 1).unwrap_err().to_string();
    assert!(err.contains("input 0: expected a float, double, float16 or bfloat16 tensor, found int8"), "{err}");
}
