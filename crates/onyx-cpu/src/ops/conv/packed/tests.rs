//! The packed AVX-512 convolution against a direct nested-loop convolution on random data of
//! awkward sizes (channels not multiples of the tile, odd spatial sizes, strides, dilations,
//! pads, groups, batches, 1x1, 1-D and 3-D windows), serial and on several threads.

use super::*;
use crate::ops::contrib::Activation;
use crate::ops::conv::geometry::Axis;
use crate::ops::matmul::test_support::{assert_close, Rng};

/// An axis of `input` elements with a kernel, stride, dilation and padding on both sides.
fn axis(input: usize, kernel: usize, stride: usize, dilation: usize, pad_begin: usize, pad_end: usize) -> Axis {
    let span = (kernel - 1) * dilation + 1;
    let output = (input + pad_begin + pad_end - span) / stride + 1;
    Axis { input, kernel, stride, dilation, pad_begin: pad_begin as isize, pad_end: pad_end as isize, output }
}

/// `y[n, m, o] = b[m] + sum x[n, c, o * s + k * d - p] * w[m, c, k]` (+ residual, activation).
fn direct(x: &[f32], w: &[f32], s: &ConvShape, epi: &Epilogue<'_, f32>) -> Vec<f64> {
    let [az, ay, ax] = s.axes;
    let (cg, mg) = (s.cg(), s.mg());
    let mut y = Vec::with_capacity(s.batch * s.c_out * s.out_len());
    for n in 0..s.batch {
        for m in 0..s.c_out {
            let g = m / mg;
            for (oz, oy, ox) in itertools3(az.output, ay.output, ax.output) {
                let mut acc = epi.bias.map_or(0.0, |b| b[m] as f64);
                for c in 0..cg {
                    for (kz, ky, kx) in itertools3(az.kernel, ay.kernel, ax.kernel) {
                        let (iz, iy, ix) = (az.input_index(oz, kz), ay.input_index(oy, ky), ax.input_index(ox, kx));
                        let inside = |i: isize, a: &Axis| i >= 0 && (i as usize) < a.input;
                        if inside(iz, &az) && inside(iy, &ay) && inside(ix, &ax) {
                            let xi = (((n * s.c_in + g * cg + c) * az.input + iz as usize) * ay.input + iy as usize)
                                * ax.input
                                + ix as usize;
                            let wi = ((m * cg + c) * az.kernel + kz) * ay.kernel * ax.kernel + ky * ax.kernel + kx;
                            acc += x[xi] as f64 * w[wi] as f64;
                        }
                    }
                }
                if let Some(r) = epi.residual {
                    acc += r[y.len()] as f64;
                }
                y.push(epi.activation.f64(acc));
            }
        }
    }
    y
}

/// Every `(a, b, c)` with `a < na`, `b < nb`, `c < nc`, in row-major order.
fn itertools3(na: usize, nb: usize, nc: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..na).flat_map(move |a| (0..nb).flat_map(move |b| (0..nc).map(move |c| (a, b, c))))
}

fn f32s(v: Vec<f64>) -> Vec<f32> {
    v.into_iter().map(|v| v as f32).collect()
}

/// Runs one shape through [`conv`] (on 1 and 3 threads, with and without an epilogue) and
/// compares with [`direct`].
fn check(s: &ConvShape, rng: &mut Rng) {
    let x = f32s(rng.vec_f64(s.batch * s.c_in * s.in_len()));
    let w = f32s(rng.vec_f64(s.c_out * s.cg() * s.k_len()));
    let b = f32s(rng.vec_f64(s.c_out));
    let out_elems = s.out_elems().unwrap();
    let z = f32s(rng.vec_f64(out_elems));
    let epis = [
        Epilogue { bias: None, residual: None, activation: Activation::None },
        Epilogue { bias: Some(&b[..]), residual: None, activation: Activation::Relu },
        Epilogue { bias: Some(&b[..]), residual: Some(&z[..]), activation: Activation::Clip { min: -0.5, max: 0.7 } },
    ];
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        for epi in &epis {
            let want = direct(&x, &w, s, epi);
            // NaN on entry: every element must be written.
            let mut y = vec![f32::NAN; out_elems];
            pool.install(|| conv(&x, &w, s, &mut y, epi));
            let what = format!("{s:?} on {threads} threads, {:?}, residual {}", epi.activation, epi.residual.is_some());
            assert_close(&y, &want, 1e-4, &what);
        }
    }
}

#[test]
fn packed_conv_matches_direct_convolution() {
    if !available() {
        eprintln!("no AVX-512 on this CPU: the packed convolution is not used here");
        return;
    }
    let mut rng = Rng::new(41);
    let unit = Axis::UNIT;
    let shape = |batch, c_in, c_out, group, axes| ConvShape { batch, c_in, c_out, group, axes };
    let cases = [
        // 3x3 pad 1, channels and positions not multiples of the 8 x 32 tile.
        shape(1, 5, 13, 1, [unit, axis(11, 3, 1, 1, 1, 1), axis(13, 3, 1, 1, 1, 1)]),
        // ResNet-like: 64 -> 64 channels on a 14 x 14 map (several column blocks, rows split).
        shape(1, 64, 64, 1, [unit, axis(14, 3, 1, 1, 1, 1), axis(14, 3, 1, 1, 1, 1)]),
        // The 7x7 stride-2 stem on 3 channels, odd size.
        shape(1, 3, 17, 1, [unit, axis(37, 7, 2, 1, 3, 3), axis(29, 7, 2, 1, 3, 3)]),
        // Stride 2 and dilation 2 with asymmetric pads; batch 2.
        shape(2, 7, 9, 1, [unit, axis(16, 3, 2, 2, 2, 1), axis(19, 3, 2, 2, 1, 0)]),
        // 1x1 (pointwise) and 1x1 stride 2 (downsample), with batch 3.
        shape(3, 19, 24, 1, [unit, axis(9, 1, 1, 1, 0, 0), axis(7, 1, 1, 1, 0, 0)]),
        shape(1, 16, 33, 1, [unit, axis(15, 1, 2, 1, 0, 0), axis(13, 1, 2, 1, 0, 0)]),
        // Groups (not depthwise) and batch: items one after another.
        shape(2, 12, 10, 2, [unit, axis(9, 3, 1, 1, 1, 1), axis(10, 3, 1, 1, 1, 1)]),
        // Pads wider than the kernel: whole rows and columns read padding.
        shape(1, 2, 3, 1, [unit, axis(3, 2, 1, 1, 3, 3), axis(4, 2, 1, 1, 3, 3)]),
        // 1-D and 3-D windows.
        shape(2, 6, 11, 1, [unit, unit, axis(70, 5, 3, 1, 2, 2)]),
        shape(1, 3, 5, 1, [axis(5, 3, 2, 1, 1, 1), axis(6, 2, 1, 1, 0, 1), axis(7, 3, 2, 1, 1, 0)]),
        // A long reduction (K = 4 608 > one block's panel budget) on a 7 x 7 map.
        shape(1, 512, 20, 1, [unit, axis(7, 3, 1, 1, 1, 1), axis(7, 3, 1, 1, 1, 1)]),
        // A single output position and a single output channel.
        shape(1, 4, 1, 1, [unit, axis(3, 3, 1, 1, 0, 0), axis(3, 3, 1, 1, 0, 0)]),
    ];
    for s in &cases {
        s.check(s.batch * s.c_in * s.in_len(), s.c_out * s.cg() * s.k_len(), None).unwrap();
        check(s, &mut rng);
    }
}
