//! Conv and ConvTranspose against direct nested-loop references on random data.

#![allow(clippy::type_complexity)] // the case tables are tuples

use onyx_core::ir::{AttrValue, Node};
use onyx_core::{Error, Tensor};

use super::*;
use crate::ops::matmul::test_support::{
    assert_close, build as build_kernel, indices, ints, node, run, string, to_f64, Rng,
};

/// Per-axis parameters of a reference convolution.
struct RefAxes<'a> {
    strides: &'a [usize],
    dilations: &'a [usize],
    pads_begin: &'a [isize],
    out: &'a [usize],
}

fn flat(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// Direct convolution: y[n, m, o] = b[m] + sum_{c in group, k} x[n, c, o*s - p + k*d] * w[m, c, k].
fn ref_conv(
    x: &[f64],
    xs: &[usize],
    w: &[f64],
    ws: &[usize],
    b: Option<&[f64]>,
    group: usize,
    a: &RefAxes<'_>,
) -> Vec<f64> {
    let (n_, c_in, m_) = (xs[0], xs[1], ws[0]);
    let (cg, mg) = (c_in / group, m_ / group);
    let mut y = Vec::new();
    for n in 0..n_ {
        for m in 0..m_ {
            let g = m / mg;
            for o in indices(a.out) {
                let mut acc = b.map_or(0.0, |b| b[m]);
                for c in 0..cg {
                    for k in indices(&ws[2..]) {
                        let pos: Vec<isize> = (0..o.len())
                            .map(|i| (o[i] * a.strides[i] + k[i] * a.dilations[i]) as isize - a.pads_begin[i])
                            .collect();
                        if pos.iter().zip(&xs[2..]).all(|(&p, &size)| p >= 0 && (p as usize) < size) {
                            let pos: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
                            let mut xi = vec![n, g * cg + c];
                            xi.extend(&pos);
                            let mut wi = vec![m, c];
                            wi.extend(&k);
                            acc += x[flat(&xi, xs)] * w[flat(&wi, ws)];
                        }
                    }
                }
                y.push(acc);
            }
        }
    }
    y
}

/// Direct transposed convolution: scatters x[n, c, i] * w[c, m, k] to y[n, g*mg + m, i*s - p + k*d].
fn ref_conv_transpose(
    x: &[f64],
    xs: &[usize],
    w: &[f64],
    ws: &[usize],
    b: Option<&[f64]>,
    group: usize,
    a: &RefAxes<'_>,
) -> Vec<f64> {
    let (n_, c_in, mg) = (xs[0], xs[1], ws[1]);
    let (cg, m_) = (c_in / group, mg * group);
    let mut ys = vec![n_, m_];
    ys.extend(a.out);
    let mut y = vec![0.0; ys.iter().product()];
    for n in 0..n_ {
        for m in 0..m_ {
            for o in indices(a.out) {
                let mut yi = vec![n, m];
                yi.extend(&o);
                y[flat(&yi, &ys)] = b.map_or(0.0, |b| b[m]);
            }
        }
        for c in 0..c_in {
            let g = c / cg;
            for i in indices(&xs[2..]) {
                let mut xi = vec![n, c];
                xi.extend(&i);
                let xv = x[flat(&xi, xs)];
                for m in 0..mg {
                    for k in indices(&ws[2..]) {
                        let pos: Vec<isize> = (0..i.len())
                            .map(|d| (i[d] * a.strides[d] + k[d] * a.dilations[d]) as isize - a.pads_begin[d])
                            .collect();
                        if pos.iter().zip(a.out).all(|(&p, &size)| p >= 0 && (p as usize) < size) {
                            let mut yi = vec![n, g * mg + m];
                            yi.extend(pos.iter().map(|&p| p as usize));
                            let mut wi = vec![c, m];
                            wi.extend(&k);
                            y[flat(&yi, &ys)] += xv * w[flat(&wi, ws)];
                        }
                    }
                }
            }
        }
    }
    y
}

/// One Conv or ConvTranspose case: shapes, attributes and what the reference needs.
struct Case {
    x: &'static [usize],
    w: &'static [usize],
    bias: bool,
    group: usize,
    strides: &'static [usize],
    dilations: &'static [usize],
    /// Explicit pads as the node gets them (`None`: attribute left out).
    pads: Option<&'static [usize]>,
    auto_pad: &'static str,
    /// Pads the reference applies at the beginning of each axis.
    ref_pads: &'static [isize],
    out: &'static [usize],
    /// ConvTranspose only.
    output_padding: Option<&'static [usize]>,
    output_shape: Option<&'static [usize]>,
}

const BASE: Case = Case {
    x: &[],
    w: &[],
    bias: true,
    group: 1,
    strides: &[],
    dilations: &[],
    pads: None,
    auto_pad: "NOTSET",
    ref_pads: &[],
    out: &[],
    output_padding: None,
    output_shape: None,
};

fn ones(rank: usize) -> &'static [usize] {
    [1usize, 1, 1].get(..rank).unwrap_or(&[])
}

impl Case {
    fn rank(&self) -> usize {
        self.x.len() - 2
    }

    fn strides(&self) -> &[usize] {
        if self.strides.is_empty() {
            ones(self.rank())
        } else {
            self.strides
        }
    }

    fn dilations(&self) -> &[usize] {
        if self.dilations.is_empty() {
            ones(self.rank())
        } else {
            self.dilations
        }
    }

    fn ref_pads(&self) -> Vec<isize> {
        if self.ref_pads.is_empty() {
            vec![0; self.rank()]
        } else {
            self.ref_pads.to_vec()
        }
    }

    fn node(&self, op: &str) -> Node {
        let inputs: &[&str] = if self.bias { &["x", "w", "b"] } else { &["x", "w"] };
        let u = |v: &[usize]| ints(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
        let mut attrs = vec![("group", AttrValue::Int(self.group as i64)), ("auto_pad", string(self.auto_pad))];
        if !self.strides.is_empty() {
            attrs.push(("strides", u(self.strides)));
        }
        if !self.dilations.is_empty() {
            attrs.push(("dilations", u(self.dilations)));
        }
        if let Some(p) = self.pads {
            attrs.push(("pads", u(p)));
        }
        if let Some(p) = self.output_padding {
            attrs.push(("output_padding", u(p)));
        }
        if let Some(p) = self.output_shape {
            attrs.push(("output_shape", u(p)));
        }
        node(op, inputs, 1, attrs)
    }

    /// Runs the case through the kernel in f64, f32 and float16 and compares with the reference.
    fn check(&self, transpose: bool, rng: &mut Rng) {
        let (op, build_fn): (&str, crate::BuildFn) =
            if transpose { ("ConvTranspose", build_conv_transpose) } else { ("Conv", build_conv) };
        let c_out = if transpose { self.w[1] * self.group } else { self.w[0] };
        let x = rng.vec_f64(self.x.iter().product());
        let w = rng.vec_f64(self.w.iter().product());
        let b = rng.vec_f64(c_out);
        let pads = self.ref_pads();
        let axes = RefAxes { strides: self.strides(), dilations: self.dilations(), pads_begin: &pads, out: self.out };
        let bias = self.bias.then_some(&b[..]);
        let want = if transpose {
            ref_conv_transpose(&x, self.x, &w, self.w, bias, self.group, &axes)
        } else {
            ref_conv(&x, self.x, &w, self.w, bias, self.group, &axes)
        };
        let mut out_shape = vec![self.x[0], c_out];
        out_shape.extend(self.out);
        let kernel = build_kernel(build_fn, &self.node(op), 11).unwrap();
        let what = format!("{op} x{:?} w{:?} group {} {:?}", self.x, self.w, self.group, self.auto_pad);
        let tensors = |conv: &dyn Fn(&[f64]) -> Tensor| {
            let mut t = vec![
                Some(conv(&x).reshaped(self.x.to_vec()).unwrap()),
                Some(conv(&w).reshaped(self.w.to_vec()).unwrap()),
            ];
            if self.bias {
                t.push(Some(conv(&b)));
            }
            t
        };
        let f64s = |v: &[f64]| Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap();
        let out = run(kernel.as_ref(), &tensors(&f64s), 1).unwrap();
        assert_eq!(out[0].as_tensor().unwrap().shape(), &out_shape[..], "{what}");
        assert_close(&to_f64(&out[0]), &want, 1e-12, &format!("{what} f64"));
        let f32s = |v: &[f64]| Tensor::from_vec(vec![v.len()], v.iter().map(|&x| x as f32).collect()).unwrap();
        let out = run(kernel.as_ref(), &tensors(&f32s), 1).unwrap();
        assert_close(&to_f64(&out[0]), &want, 1e-4, &format!("{what} f32"));
        let f16s =
            |v: &[f64]| Tensor::from_vec(vec![v.len()], v.iter().map(|&x| half::f16::from_f64(x)).collect()).unwrap();
        let out = run(kernel.as_ref(), &tensors(&f16s), 1).unwrap();
        let got: Vec<f64> =
            out[0].as_tensor().unwrap().as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f64()).collect();
        let taps: usize = self.w[1..].iter().product();
        assert_close(&got, &want, 2e-3 * (taps as f64).sqrt(), &format!("{what} f16"));
    }
}

#[test]
fn reference_is_right_on_a_hand_computed_case() {
    // y[i, j] = x[i, j] - x[i + 1, j + 1] = -4 everywhere for x = 1..9 in a 3x3 grid.
    let x: Vec<f64> = (1..=9).map(f64::from).collect();
    let axes = RefAxes { strides: &[1, 1], dilations: &[1, 1], pads_begin: &[0, 0], out: &[2, 2] };
    assert_eq!(ref_conv(&x, &[1, 1, 3, 3], &[1.0, 0.0, 0.0, -1.0], &[1, 1, 2, 2], None, 1, &axes), vec![-4.0; 4]);
}

#[test]
fn conv_matches_direct_convolution() {
    let mut rng = Rng::new(11);
    let cases = [
        // 1-D, asymmetric pads, stride 2.
        Case { x: &[2, 3, 11], w: &[5, 3, 3], strides: &[2], pads: Some(&[1, 2]), ref_pads: &[1], out: &[6], ..BASE },
        // 2-D, dilation, strides, asymmetric pads.
        Case {
            x: &[1, 3, 7, 11],
            w: &[5, 3, 3, 3],
            strides: &[2, 2],
            dilations: &[2, 1],
            pads: Some(&[1, 0, 2, 1]),
            ref_pads: &[1, 0],
            out: &[3, 5],
            ..BASE
        },
        // Odd group count.
        Case {
            x: &[2, 6, 7, 9],
            w: &[9, 2, 3, 2],
            group: 3,
            pads: Some(&[0, 1, 1, 0]),
            ref_pads: &[0, 1],
            out: &[6, 9],
            ..BASE
        },
        // Depthwise, then depthwise with a channel multiplier, stride and dilation 2.
        Case {
            x: &[2, 5, 7, 11],
            w: &[5, 1, 3, 3],
            group: 5,
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[7, 11],
            ..BASE
        },
        Case {
            x: &[1, 5, 9, 8],
            w: &[10, 1, 3, 3],
            group: 5,
            strides: &[2, 2],
            dilations: &[2, 2],
            pads: Some(&[2, 1, 0, 2]),
            ref_pads: &[2, 1],
            out: &[4, 4],
            bias: false,
            ..BASE
        },
        // 1x1: the direct GEMM path, grouped, and strided (not direct).
        Case { x: &[2, 7, 5, 9], w: &[4, 7, 1, 1], out: &[5, 9], ..BASE },
        Case { x: &[1, 6, 5, 5], w: &[9, 2, 1, 1], group: 3, out: &[5, 5], bias: false, ..BASE },
        Case { x: &[1, 3, 7, 9], w: &[4, 3, 1, 1], strides: &[2, 2], out: &[4, 5], ..BASE },
        // 3-D.
        Case {
            x: &[1, 2, 5, 6, 7],
            w: &[3, 2, 2, 3, 3],
            strides: &[1, 2, 1],
            pads: Some(&[1, 0, 1, 0, 1, 1]),
            ref_pads: &[1, 0, 1],
            out: &[5, 3, 7],
            ..BASE
        },
        // auto_pad.
        Case {
            x: &[1, 3, 7, 10],
            w: &[4, 3, 4, 3],
            strides: &[2, 3],
            auto_pad: "SAME_UPPER",
            ref_pads: &[1, 1],
            out: &[4, 4],
            ..BASE
        },
        Case {
            x: &[1, 3, 7, 10],
            w: &[4, 3, 4, 3],
            strides: &[2, 3],
            auto_pad: "SAME_LOWER",
            ref_pads: &[2, 1],
            out: &[4, 4],
            ..BASE
        },
        Case { x: &[1, 3, 7, 10], w: &[4, 3, 3, 3], strides: &[2, 2], auto_pad: "VALID", out: &[3, 4], ..BASE },
        // Large enough for the parallel paths (one image; then many images and groups).
        Case {
            x: &[1, 16, 33, 35],
            w: &[24, 16, 3, 3],
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[33, 35],
            ..BASE
        },
        Case { x: &[4, 8, 17, 19], w: &[12, 4, 3, 3], group: 2, strides: &[2, 1], out: &[8, 17], ..BASE },
        Case {
            x: &[1, 32, 40, 41],
            w: &[32, 1, 3, 3],
            group: 32,
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[40, 41],
            ..BASE
        },
        Case { x: &[1, 33, 31, 37], w: &[40, 33, 1, 1], out: &[31, 37], ..BASE },
        // Column buffer over the tile limit: done in tiles of output rows.
        Case { x: &[1, 8, 130, 129], w: &[5, 8, 3, 3], out: &[128, 127], ..BASE },
    ];
    for case in &cases {
        case.check(false, &mut rng);
    }
}

#[test]
fn depthwise_and_pointwise_fast_paths_match_direct_convolution() {
    let mut rng = Rng::new(23);
    let cases = [
        // MobileNet's depthwise layers: 3x3, pad 1, stride 1 and 2, odd sizes, no bias.
        Case {
            x: &[1, 7, 13, 15],
            w: &[7, 1, 3, 3],
            group: 7,
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[13, 15],
            bias: false,
            ..BASE
        },
        Case {
            x: &[2, 6, 13, 14],
            w: &[6, 1, 3, 3],
            group: 6,
            strides: &[2, 2],
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[7, 7],
            ..BASE
        },
        // 5x5 with multiplier 3, stride 3 along W only, asymmetric pads.
        Case {
            x: &[1, 4, 11, 17],
            w: &[12, 1, 5, 5],
            group: 4,
            strides: &[1, 3],
            pads: Some(&[2, 0, 1, 3]),
            ref_pads: &[2, 0],
            out: &[10, 6],
            ..BASE
        },
        // Dilation 3 with stride 2 (taps land in both phases), kernel wider than three.
        Case {
            x: &[1, 3, 12, 19],
            w: &[6, 1, 2, 4],
            group: 3,
            strides: &[2, 2],
            dilations: &[2, 3],
            pads: Some(&[1, 2, 0, 1]),
            ref_pads: &[1, 2],
            out: &[6, 7],
            ..BASE
        },
        // Pads larger than the kernel reach: whole rows and columns of zeros.
        Case {
            x: &[1, 2, 3, 4],
            w: &[2, 1, 2, 2],
            group: 2,
            pads: Some(&[3, 3, 3, 3]),
            ref_pads: &[3, 3],
            out: &[8, 9],
            ..BASE
        },
        // 1-D and 3-D depthwise.
        Case {
            x: &[3, 5, 29],
            w: &[10, 1, 7],
            group: 5,
            strides: &[2],
            pads: Some(&[3, 2]),
            ref_pads: &[3],
            out: &[14],
            ..BASE
        },
        Case {
            x: &[1, 3, 5, 6, 7],
            w: &[3, 1, 3, 2, 3],
            group: 3,
            strides: &[2, 1, 2],
            pads: Some(&[1, 0, 1, 1, 1, 0]),
            ref_pads: &[1, 0, 1],
            out: &[3, 6, 3],
            ..BASE
        },
        // Large enough for the parallel depthwise path, stride 2.
        Case {
            x: &[1, 40, 37, 29],
            w: &[40, 1, 3, 3],
            group: 40,
            strides: &[2, 2],
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[19, 15],
            bias: false,
            ..BASE
        },
        // 1x1 stride 1 (one GEMM, no im2col): batched, without bias, large and grouped.
        Case { x: &[3, 17, 7, 11], w: &[23, 17, 1, 1], out: &[7, 11], bias: false, ..BASE },
        Case { x: &[1, 96, 23, 21], w: &[130, 96, 1, 1], out: &[23, 21], ..BASE },
        Case { x: &[2, 12, 9, 7], w: &[8, 3, 1, 1], group: 4, out: &[9, 7], ..BASE },
        // 1x1 stride 2 and 1x1 with pads: im2col.
        Case { x: &[1, 16, 15, 13], w: &[24, 16, 1, 1], strides: &[2, 2], out: &[8, 7], bias: false, ..BASE },
        Case { x: &[1, 5, 6, 7], w: &[3, 5, 1, 1], pads: Some(&[1, 0, 0, 2]), ref_pads: &[1, 0], out: &[7, 9], ..BASE },
    ];
    for case in &cases {
        case.check(false, &mut rng);
    }
}

#[test]
fn conv_transpose_matches_direct_scatter() {
    let mut rng = Rng::new(12);
    let cases = [
        Case { x: &[1, 1, 5], w: &[1, 1, 3], strides: &[2], out: &[11], ..BASE },
        Case {
            x: &[2, 4, 5, 6],
            w: &[4, 3, 3, 2],
            strides: &[2, 3],
            dilations: &[1, 2],
            pads: Some(&[1, 0, 0, 1]),
            output_padding: Some(&[1, 2]),
            ref_pads: &[1, 0],
            out: &[11, 19],
            ..BASE
        },
        Case { x: &[1, 4, 5, 5], w: &[4, 2, 3, 3], group: 2, strides: &[2, 2], out: &[11, 11], bias: false, ..BASE },
        Case {
            x: &[1, 6, 4, 3],
            w: &[6, 1, 3, 3],
            group: 3,
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[4, 3],
            ..BASE
        },
        Case {
            x: &[1, 2, 3, 4, 3],
            w: &[2, 3, 2, 2, 3],
            strides: &[2, 1, 2],
            pads: Some(&[1, 0, 1, 0, 1, 1]),
            ref_pads: &[1, 0, 1],
            out: &[5, 4, 5],
            ..BASE
        },
        // auto_pad SAME: output = input * stride; the odd padding cell at the end (UPPER) or
        // beginning (LOWER).
        Case {
            x: &[1, 2, 4, 5],
            w: &[2, 3, 3, 4],
            strides: &[2, 2],
            auto_pad: "SAME_UPPER",
            ref_pads: &[0, 1],
            out: &[8, 10],
            ..BASE
        },
        Case {
            x: &[1, 2, 4, 5],
            w: &[2, 3, 3, 4],
            strides: &[2, 2],
            auto_pad: "SAME_LOWER",
            ref_pads: &[1, 1],
            out: &[8, 10],
            ..BASE
        },
        Case {
            x: &[1, 2, 4, 5],
            w: &[2, 3, 3, 3],
            strides: &[2, 2],
            auto_pad: "VALID",
            output_padding: Some(&[1, 0]),
            out: &[10, 11],
            ..BASE
        },
        // output_shape sets the pads: total 11 - 8 = 3, 2 at the beginning unless SAME_UPPER.
        Case {
            x: &[1, 1, 5],
            w: &[1, 2, 3],
            strides: &[2],
            output_shape: Some(&[8]),
            ref_pads: &[2],
            out: &[8],
            ..BASE
        },
        Case {
            x: &[1, 1, 5],
            w: &[1, 2, 3],
            strides: &[2],
            output_shape: Some(&[1, 2, 8]),
            auto_pad: "SAME_UPPER",
            ref_pads: &[1],
            out: &[8],
            ..BASE
        },
        // Large: parallel paths and tiles of input rows.
        Case {
            x: &[2, 16, 20, 21],
            w: &[16, 8, 4, 4],
            group: 2,
            strides: &[2, 2],
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[40, 42],
            ..BASE
        },
        Case {
            x: &[1, 4, 150, 151],
            w: &[4, 4, 4, 4],
            strides: &[2, 2],
            pads: Some(&[1, 1, 1, 1]),
            ref_pads: &[1, 1],
            out: &[300, 302],
            ..BASE
        },
    ];
    for case in &cases {
        case.check(true, &mut rng);
    }
}

#[test]
fn conv_transpose_agrees_with_onnxruntime() {
    // x = 1..5, w = [1, 10, 100], stride 2: values printed by onnxruntime 1.32.
    let x: Vec<f32> = (1..=5).map(|v| v as f32).collect();
    let w = [1.0f32, 10.0, 100.0];
    let cases: [(Vec<(&str, AttrValue)>, Vec<f32>); 4] = [
        (vec![], vec![1., 10., 102., 20., 203., 30., 304., 40., 405., 50., 500.]),
        (vec![("output_shape", ints(&[10]))], vec![10., 102., 20., 203., 30., 304., 40., 405., 50., 500.]),
        (
            vec![("output_shape", ints(&[10])), ("auto_pad", string("SAME_UPPER"))],
            vec![1., 10., 102., 20., 203., 30., 304., 40., 405., 50.],
        ),
        (
            vec![("pads", ints(&[1, 2])), ("output_padding", ints(&[1]))],
            vec![10., 102., 20., 203., 30., 304., 40., 405., 50.],
        ),
    ];
    for (mut attrs, want) in cases {
        attrs.push(("strides", ints(&[2])));
        let n = node("ConvTranspose", &["x", "w"], 1, attrs);
        let (shape, got) = crate::ops::matmul::test_support::run_f32(
            build_conv_transpose,
            &n,
            11,
            &[Some((&[1, 1, 5], &x)), Some((&[1, 1, 3], &w))],
        )
        .unwrap();
        assert_eq!(shape, vec![1, 1, want.len()]);
        assert_eq!(got, want);
    }
}

fn conv_error(op: &str, x: &[usize], w: &[usize], b: Option<&[usize]>, attrs: Vec<(&str, AttrValue)>) -> Error {
    let inputs: &[&str] = if b.is_some() { &["x", "w", "b"] } else { &["x", "w"] };
    let build_fn = if op == "Conv" { build_conv } else { build_conv_transpose };
    let n = node(op, inputs, 1, attrs);
    let t = |s: &[usize]| Some(Tensor::from_vec(s.to_vec(), vec![0.5f32; s.iter().product()]).unwrap());
    let kernel = match build_kernel(build_fn, &n, 11) {
        Ok(k) => k,
        Err(e) => return e,
    };
    run(kernel.as_ref(), &[t(x), t(w), b.and_then(t)], 1).unwrap_err()
}

#[test]
fn invalid_convolutions_are_errors_naming_the_shapes() {
    let cases: Vec<(&str, &[usize], &[usize], Option<&[usize]>, Vec<(&str, AttrValue)>, &str)> = vec![
        ("Conv", &[1, 4, 5, 5], &[2, 3, 3, 3], None, vec![], "input 1: expected W whose dim 1 times group 1 is the 4 channels of X [1, 4, 5, 5], found shape [2, 3, 3, 3] (3 * 1 = 3)"),
        ("Conv", &[1, 4, 5, 5], &[3, 2, 3, 3], None, vec![("group", AttrValue::Int(2))], "divisible by group 2"),
        ("Conv", &[1, 4, 5, 5], &[2, 4, 3], None, vec![], "input 1: expected a weight tensor of rank 4 like X [1, 4, 5, 5], found shape [2, 4, 3]"),
        ("Conv", &[1, 1, 2, 2], &[1, 1, 3, 3], None, vec![], "input 0: expected spatial axis 2 of at least 3 (kernel 3 with dilation 1) after pads 0+0, found shape [1, 1, 2, 2]"),
        ("Conv", &[1, 1, 5, 5], &[1, 1, 3, 3], None, vec![("dilations", ints(&[3, 1]))], "at least 7 (kernel 3 with dilation 3)"),
        ("Conv", &[1, 2, 5, 5], &[3, 2, 3, 3], Some(&[2]), vec![], "input 2: expected a bias of shape [3], found shape [2]"),
        ("Conv", &[1, 2, 5, 5], &[3, 2, 3, 3], None, vec![("kernel_shape", ints(&[3, 2]))], "'kernel_shape': expected [3, 3]"),
        ("Conv", &[1, 2, 5, 5], &[3, 2, 3, 3], None, vec![("pads", ints(&[1, 1]))], "'pads': expected 4 values"),
        ("Conv", &[1, 2, 5, 5], &[3, 2, 3, 3], None, vec![("strides", ints(&[1, 0]))], "'strides': expected positive integers up to 2147483647, found [1, 0]"),
        ("Conv", &[1, 2, 5, 5], &[3, 2, 3, 3], None, vec![("group", AttrValue::Int(0))], "'group': expected a positive integer"),
        ("Conv", &[1, 2, 5, 5], &[3, 2, 3, 3], None, vec![("auto_pad", string("SAME"))], "'auto_pad': expected NOTSET, SAME_UPPER, SAME_LOWER or VALID, found 'SAME'"),
        ("Conv", &[2, 5], &[3, 5], None, vec![], "input 0: expected a tensor of rank 3 to 5"),
        ("Conv", &[1, 1, 2, 2, 2, 2], &[1, 1, 1, 1, 1, 1], None, vec![], "4 spatial dimensions"),
        ("ConvTranspose", &[1, 4, 5, 5], &[3, 2, 3, 3], None, vec![], "input 1: expected W with 4 input channels (X [1, 4, 5, 5]) divisible by group 1, found shape [3, 2, 3, 3]"),
        ("ConvTranspose", &[1, 1, 5], &[1, 1, 3], None, vec![("strides", ints(&[2])), ("output_shape", ints(&[13, 13]))], "'output_shape': expected 1 values"),
        ("ConvTranspose", &[1, 1, 2], &[1, 1, 2], None, vec![("pads", ints(&[2, 2]))], "positive output size"),
        ("ConvTranspose", &[1, 1, 2], &[1, 1, 2], None, vec![("output_padding", ints(&[-1]))], "'output_padding': expected non-negative"),
    ];
    for (op, x, w, b, attrs, msg) in cases {
        let err = conv_error(op, x, w, b, attrs).to_string();
        assert!(err.contains(msg) && err.contains(&format!("{op} node 'n'")), "{op} {x:?} {w:?}: {err}");
    }
    // Hostile attributes: an output too large to count is an error, not a panic or an abort.
    let big = i64::from(i32::MAX);
    let err = conv_error("Conv", &[1, 1, 1, 1, 1], &[1, 1, 1, 1, 1], None, vec![("pads", ints(&[big; 6]))]).to_string();
    assert!(err.contains("Conv node 'n'") && err.contains("more elements than fit in memory"), "{err}");
    let err = conv_error(
        "ConvTranspose",
        &[1, 1, 1, 1, 1],
        &[1, 1, 1, 1, 1],
        None,
        vec![("output_padding", ints(&[big; 3])), ("strides", ints(&[big; 3]))],
    )
    .to_string();
    assert!(err.contains("ConvTranspose node 'n'") && err.contains("more elements than fit in memory"), "{err}");
    // Types: W of another float type, integer X.
    let n = node("Conv", &["x", "w"], 1, vec![]);
    let kernel = build_kernel(build_conv, &n, 11).unwrap();
    let x = Tensor::from_vec(vec![1, 1, 3], vec![1.0f32; 3]).unwrap();
    let err =
        run(kernel.as_ref(), &[Some(x), Some(Tensor::from_vec(vec![1, 1, 1], vec![1.0f64]).unwrap())], 1).unwrap_err();
    assert!(err.to_string().contains("input 1: expected float like X, found double"), "{err}");
    let xi = Tensor::from_vec(vec![1, 1, 3], vec![1i32; 3]).unwrap();
    let err = run(kernel.as_ref(), &[Some(xi.clone()), Some(xi)], 1).unwrap_err();
    assert!(err.to_string().contains("input 0: expected one of float/double/float16/bfloat16, found int32"), "{err}");
}

/// The fused epilogue (bias, residual, activation) on every kernel path and thread split: each
/// block of the output is finished by the thread that computed it, so the shapes are chosen to
/// reach row and column splits of the GEMM, im2col tiles, batch/group parallelism and
/// parallel depthwise planes, on a pool of 3 threads.
#[test]
fn fused_epilogue_matches_conv_plus_residual_and_activation_on_every_path() {
    use crate::ops::contrib::Activation;
    use kernels::{conv_fused, Epilogue};
    let mut rng = Rng::new(97);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    // (x, w, group, strides, pads (begin = end), out)
    let cases: [(&[usize], &[usize], usize, usize, usize, &[usize]); 7] = [
        (&[1, 16, 40, 41], &[37, 16, 1, 1], 1, 1, 0, &[40, 41]), // pointwise, columns split
        (&[1, 8, 6, 6], &[300, 8, 3, 3], 1, 1, 1, &[6, 6]),      // im2col, rows split
        (&[1, 6, 31, 27], &[19, 6, 3, 3], 1, 2, 1, &[16, 14]),   // im2col, stride 2, odd sizes
        (&[1, 3, 200, 201], &[5, 3, 3, 3], 1, 1, 1, &[200, 201]), // several im2col tiles
        (&[3, 8, 9, 10], &[6, 4, 3, 3], 2, 1, 1, &[9, 10]),      // batch x group items in parallel
        (&[1, 24, 33, 35], &[48, 1, 3, 3], 24, 1, 1, &[33, 35]), // depthwise, multiplier 2
        (&[2, 5, 3, 4], &[7, 5, 1, 1], 1, 1, 0, &[3, 4]),        // small: serial
    ];
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Clip { min: 0.0, max: 0.3 },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::Sigmoid,
        Activation::HardSigmoid { alpha: 0.2, beta: 0.5 },
    ];
    for (xs, ws, group, stride, pad, out) in cases {
        let (x, w, b) = (rng.vec_f64(xs.iter().product()), rng.vec_f64(ws.iter().product()), rng.vec_f64(ws[0]));
        let axes = RefAxes { strides: &[stride; 2], dilations: &[1, 1], pads_begin: &[pad as isize; 2], out };
        let plain = ref_conv(&x, xs, &w, ws, Some(&b[..]), group, &axes);
        let z = rng.vec_f64(plain.len());
        let node = node(
            "Conv",
            &["x", "w", "b"],
            1,
            vec![
                ("group", AttrValue::Int(group as i64)),
                ("strides", ints(&[stride as i64; 2])),
                ("pads", ints(&[pad as i64; 4])),
            ],
        );
        let op = conv_for(&node).unwrap();
        let s = op.shape(xs, ws, Some(&[ws[0]])).unwrap();
        let f32s = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        let (x32, w32, b32, z32) = (f32s(&x), f32s(&w), f32s(&b), f32s(&z));
        for act in acts {
            for with_z in [false, true] {
                let want: Vec<f64> =
                    plain.iter().zip(&z).map(|(&y, &r)| act.f64(if with_z { y + r } else { y })).collect();
                let what = format!("x{xs:?} w{ws:?} group {group} {act:?} residual {with_z}");
                let epi = Epilogue { bias: Some(&b[..]), residual: with_z.then_some(&z[..]), activation: act };
                let got = pool.install(|| conv_fused(&x, &w, &s, &epi)).unwrap();
                assert_close(&got, &want, 1e-12, &format!("{what} f64"));
                let epi = Epilogue { bias: Some(&b32[..]), residual: with_z.then_some(&z32[..]), activation: act };
                let got = pool.install(|| conv_fused(&x32, &w32, &s, &epi)).unwrap();
                assert_close(&got, &want, 1e-4, &format!("{what} f32"));
            }
        }
        // A residual of the wrong length is an error, not a panic.
        let epi = Epilogue { bias: None, residual: Some(&z[1..]), activation: Activation::None };
        assert!(conv_fused(&x, &w, &s, &epi).is_err());
    }
}
