//! Depthwise convolution (`group == C_in`, `C_out = C_in * multiplier`): each output plane is
//! a weighted sum of shifted copies of one input plane. The input plane's rows are first copied,
//! zero-padded, into one array per stride phase, so that every kernel tap reads a contiguous run
//! of the same length as an output row: the inner loops are plain multiply-adds over output
//! widths, which the compiler vectorizes, with no bounds or padding tests inside.

use rayon::prelude::*;

use std::any::TypeId;

use super::geometry::Axis;
use super::kernels::{ConvShape, Epilogue};
use super::microkernel::{self, NR};
use crate::ops::matmul::gemm::PARALLEL_WORK;
use crate::ops::matmul::real::Real;
use crate::ops::util;

/// How one input row is laid out in the scratch buffer: `stride` phases of `phase_len`
/// elements, phase `p` holding padded positions `p, p + stride, p + 2 * stride, ...`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowLayout {
    phase_len: usize,
}

impl RowLayout {
    /// The layout of the rows along axis `ax`.
    pub fn new(ax: &Axis) -> Self {
        // Tap kx reads phase (kx * d) % s from offset (kx * d) / s, for ow outputs.
        let reach = (ax.kernel.max(1) - 1) * ax.dilation / ax.stride.max(1);
        RowLayout { phase_len: ax.output + reach }
    }

    /// Elements of one laid-out row.
    pub fn row_len(&self, ax: &Axis) -> usize {
        self.phase_len * ax.stride.max(1)
    }

    /// Offset, inside a laid-out row, of the run (of `ax.output` elements) that tap `kx` reads.
    pub fn tap_offset(&self, ax: &Axis, kx: usize) -> usize {
        let (s, off) = (ax.stride.max(1), kx * ax.dilation);
        (off % s) * self.phase_len + off / s
    }
}

/// Writes the padded, phase-split copy of one input row into `dst` (`layout.row_len` elements):
/// `phase[j] = src[p + s * j - pad_begin]`, `fill` outside the row.
#[inline(always)]
pub(crate) fn lay_out_row<T: Copy + 'static>(src: &[T], ax: &Axis, layout: RowLayout, fill: T, dst: &mut [T]) {
    let s = ax.stride.max(1);
    let (len, pad) = (src.len() as isize, ax.pad_begin);
    for (p, phase) in dst.chunks_exact_mut(layout.phase_len).enumerate() {
        let p = p as isize;
        // The j with 0 <= p + s * j - pad < len.
        let lo = ((pad - p).max(0) as usize).div_ceil(s).min(phase.len());
        let hi = ((len + pad - p).max(0) as usize).div_ceil(s).clamp(lo, phase.len());
        phase[..lo].fill(fill);
        phase[hi..].fill(fill);
        if hi == lo {
            continue;
        }
        let first = (p + (s * lo) as isize - pad) as usize;
        if s == 1 {
            phase[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
        } else if s == 2 && TypeId::of::<T>() == TypeId::of::<f32>() && microkernel::available() {
            let dst = &mut phase[lo..hi];
            // SAFETY: T is f32 (same TypeId), so both slices keep their lengths and elements.
            let (src, dst) = unsafe {
                (
                    std::slice::from_raw_parts(src.as_ptr().cast::<f32>(), src.len()),
                    std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<f32>(), dst.len()),
                )
            };
            for (i, run) in dst.chunks_mut(NR).enumerate() {
                // SAFETY: `available()` was checked; `copy_run` checks its own bounds.
                unsafe { microkernel::copy_run(src, first + 2 * i * NR, 2, run.len(), run) };
            }
        } else {
            for (d, &v) in phase[lo..hi].iter_mut().zip(src[first..].iter().step_by(s)) {
                *d = v;
            }
        }
    }
}

/// `y += w0 * a + w1 * b + w2 * c`, elementwise (three taps of a row in one pass).
#[inline(always)]
fn axpy3<T: Real>(y: &mut [T], w: [T; 3], a: &[T], b: &[T], c: &[T]) {
    let n = y.len();
    let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
    for i in 0..n {
        y[i] += w[0] * a[i] + w[1] * b[i] + w[2] * c[i];
    }
}

/// `y += w * a`, elementwise.
#[inline(always)]
fn axpy<T: Real>(y: &mut [T], w: T, a: &[T]) {
    let a = &a[..y.len()];
    for (y, &a) in y.iter_mut().zip(a) {
        *y += w * a;
    }
}

/// Adds the taps `kx` of one kernel row `w_row` reading the laid-out input row `row`.
#[inline(always)]
fn row_taps<T: Real>(y: &mut [T], w_row: &[T], row: &[T], ax: &Axis, layout: RowLayout) {
    let ow = y.len();
    let run = |kx: usize| &row[layout.tap_offset(ax, kx)..][..ow];
    let mut kx = 0;
    while kx + 3 <= w_row.len() {
        axpy3(y, [w_row[kx], w_row[kx + 1], w_row[kx + 2]], run(kx), run(kx + 1), run(kx + 2));
        kx += 3;
    }
    for (k, &w) in w_row.iter().enumerate().skip(kx) {
        axpy(y, w, run(k));
    }
}

/// Adds to the output plane `y_plane` the convolution of one input plane,
/// with `scratch` reused for the laid-out rows.
#[inline(always)]
fn plane<T: Real>(x_plane: &[T], w: &[T], axes: &[Axis; 3], y_plane: &mut [T], scratch: &mut Vec<T>) {
    let [az, ay, ax] = *axes;
    let layout = RowLayout::new(&ax);
    let row_len = layout.row_len(&ax);
    let rows = az.input * ay.input;
    scratch.resize(rows * row_len, T::ZERO);
    for (src, dst) in x_plane.chunks_exact(ax.input).zip(scratch.chunks_exact_mut(row_len)) {
        lay_out_row(src, &ax, layout, T::ZERO, dst);
    }
    let in_row = |z: isize, y: isize| -> Option<usize> {
        let ok = z >= 0 && (z as usize) < az.input && y >= 0 && (y as usize) < ay.input;
        ok.then(|| (z as usize * ay.input + y as usize) * row_len)
    };
    for (r, y_row) in y_plane.chunks_exact_mut(ax.output).enumerate() {
        let (oz, oy) = (r / ay.output, r % ay.output);
        for kz in 0..az.kernel {
            for ky in 0..ay.kernel {
                let Some(start) = in_row(az.input_index(oz, kz), ay.input_index(oy, ky)) else { continue };
                let w_row = &w[(kz * ay.kernel + ky) * ax.kernel..][..ax.kernel];
                row_taps(y_row, w_row, &scratch[start..][..row_len], &ax, layout);
            }
        }
    }
}

/// One output plane's work, run through [`util::simd_body`].
struct Plane<'a, T> {
    x: &'a [T],
    w: &'a [T],
    axes: &'a [Axis; 3],
    y: &'a mut [T],
    scratch: &'a mut Vec<T>,
}

impl<T: Real> util::SimdBody for Plane<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        plane(self.x, self.w, self.axes, self.y, self.scratch)
    }
}

/// Depthwise convolution of `x` by `w` into `y` (zero on entry), each plane then finished by
/// `epi` (bias, residual, activation) while in cache. Parallel over output planes.
pub(crate) fn depthwise<T: Real>(x: &[T], w: &[T], s: &ConvShape, y: &mut [T], epi: &Epilogue<'_, T>) {
    let (in_len, out_len, k_len) = (s.in_len(), s.out_len(), s.k_len());
    if out_len == 0 || in_len == 0 {
        return;
    }
    let multiplier = s.mg();
    let one = |scratch: &mut Vec<T>, (i, y_plane): (usize, &mut [T])| {
        let (n, m) = (i / s.c_out, i % s.c_out);
        let c = m / multiplier;
        let x_plane = &x[(n * s.c_in + c) * in_len..][..in_len];
        util::simd_body(Plane { x: x_plane, w: &w[m * k_len..][..k_len], axes: &s.axes, y: &mut *y_plane, scratch });
        epi.apply(m, i * out_len, y_plane);
    };
    if y.len().saturating_mul(k_len) >= PARALLEL_WORK {
        y.par_chunks_mut(out_len).enumerate().for_each_init(Vec::new, one);
    } else {
        let mut scratch = Vec::new();
        y.chunks_mut(out_len).enumerate().for_each(|item| one(&mut scratch, item));
    }
}
