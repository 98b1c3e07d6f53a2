//! Transposed convolution: GEMM of the transposed weights with the input into columns, then
//! col2im scatters (adds) the columns into the output planes.

use rayon::prelude::*;

use onyx_core::{Error, Result};

use super::geometry::Axis;
use super::kernels::{fill_bias, ConvShape};
use crate::ops::matmul::gemm::{gemm, gemm_serial, MatMut, MatRef, PARALLEL_WORK};
use crate::ops::matmul::real::{zeroed, Real};

/// Most elements of a column buffer: larger inputs are done in tiles of input rows.
const COL_TILE_ELEMS: usize = 1 << 20;

/// The axis seen from the input side: input position `i` and tap `k` write output index
/// `i * stride - pad_begin + k * dilation`.
fn mirror(a: Axis) -> Axis {
    Axis { input: a.output, output: a.input, ..a }
}

/// Transposed convolution of `x` (`[N, C_in, D, H, W]`) with `w` (`[C_in, C_out / group, kD,
/// kH, kW]`) plus an optional bias; `s.axes` map output positions (`output`) to input
/// positions (`input`) as for a convolution whose input is Y.
pub(crate) fn conv_transpose<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, s: &ConvShape) -> Result<Vec<T>> {
    let ok = s.group > 0
        && s.c_in % s.group == 0
        && s.c_out % s.group == 0
        && x.len() == s.batch * s.c_in * s.in_len()
        && w.len() == s.c_in * s.mg() * s.k_len()
        && bias.is_none_or(|b| b.len() == s.c_out);
    if !ok {
        return Err(Error::InvalidArgument(format!(
            "transposed convolution buffers of {} / {} elements do not match {s:?}",
            x.len(),
            w.len()
        )));
    }
    let mut y = zeroed(s.out_elems()?)?;
    if y.is_empty() {
        return Ok(y);
    }
    let (items, item_len) = (s.batch * s.group, s.mg() * s.out_len());
    let work = (s.batch * s.c_in * s.in_len()).saturating_mul(s.mg() * s.k_len());
    let outer_parallel = items >= rayon::current_num_threads() && work >= PARALLEL_WORK;
    let one = |scratch: &mut Vec<T>, (i, y_ng): (usize, &mut [T]), parallel: bool| -> Result<()> {
        let (n, g) = (i / s.group, i % s.group);
        let x_ng = &x[(n * s.c_in + g * s.cg()) * s.in_len()..][..s.cg() * s.in_len()];
        let w_g = &w[g * s.cg() * s.mg() * s.k_len()..][..s.cg() * s.mg() * s.k_len()];
        let bias_g = bias.map(|b| &b[g * s.mg()..][..s.mg()]);
        transpose_item(x_ng, w_g, bias_g, s, y_ng, scratch, parallel)
    };
    if outer_parallel {
        y.par_chunks_mut(item_len)
            .enumerate()
            .try_for_each_init(Vec::new, |scratch, item| one(scratch, item, false))?;
    } else {
        let mut scratch = Vec::new();
        y.chunks_mut(item_len).enumerate().try_for_each(|item| one(&mut scratch, item, true))?;
    }
    Ok(y)
}

/// One (image, group): for each tile of input rows, `col = W_g^T * X_tile`, then col2im.
fn transpose_item<T: Real>(
    x_ng: &[T],
    w_g: &[T],
    bias: Option<&[T]>,
    s: &ConvShape,
    y_ng: &mut [T],
    scratch: &mut Vec<T>,
    parallel: bool,
) -> Result<()> {
    let [az, ay, ax] = s.axes;
    let (cg, krows, in_len, iw) = (s.cg(), s.mg() * s.k_len(), s.in_len(), ax.input);
    let in_rows = az.input * ay.input;
    let tile = (COL_TILE_ELEMS / (krows * iw).max(1)).clamp(1, in_rows.max(1));
    fill_bias(y_ng, s.out_len(), bias);
    for r0 in (0..in_rows).step_by(tile) {
        let rows = tile.min(in_rows - r0);
        let ncols = rows * iw;
        scratch.resize(krows * ncols, T::ZERO);
        // W_g is [cg, mg * k] row-major; its transpose is read in place.
        let wt = MatRef { data: w_g, rows: krows, cols: cg, rs: 1, cs: krows };
        let xt = MatRef { data: &x_ng[r0 * iw..], rows: cg, cols: ncols, rs: in_len, cs: 1 };
        let col = MatMut::row_major(&mut scratch[..], krows, ncols);
        if parallel {
            gemm(T::ONE, wt, xt, T::ZERO, col)?;
        } else {
            gemm_serial(T::ONE, wt, xt, T::ZERO, col)?;
        }
        col2im(scratch, r0, rows, s, y_ng, parallel);
    }
    Ok(())
}

/// Adds the columns of input rows `r0..r0 + rows` into the output planes of `y_ng`.
fn col2im<T: Real>(col: &[T], r0: usize, rows: usize, s: &ConvShape, y_ng: &mut [T], parallel: bool) {
    let [mz, my, mx] = s.axes.map(mirror);
    let (k_len, out_len, ncols) = (s.k_len(), s.out_len(), rows * mx.output);
    let plane = |(m, y_plane): (usize, &mut [T])| {
        for tap in 0..k_len {
            let (kz, ky, kx) = (tap / (my.kernel * mx.kernel), tap / mx.kernel % my.kernel, tap % mx.kernel);
            let (i0, i1) = mx.valid_outputs(kx);
            if i0 == i1 {
                continue;
            }
            let src = &col[(m * k_len + tap) * ncols..][..ncols];
            let ox0 = mx.input_index(i0, kx) as usize;
            for (j, row) in (r0..r0 + rows).enumerate() {
                let (iz, iy) = (row / my.output, row % my.output);
                let (oz, oy) = (mz.input_index(iz, kz), my.input_index(iy, ky));
                if oz < 0 || oz >= mz.input as isize || oy < 0 || oy >= my.input as isize {
                    continue;
                }
                let dst = &mut y_plane[(oz as usize * my.input + oy as usize) * mx.input + ox0..];
                let seg = &src[j * mx.output..][i0..i1];
                add_strided(seg, mx.stride, dst);
            }
        }
    };
    if parallel && col.len() >= PARALLEL_WORK {
        y_ng.par_chunks_mut(out_len).enumerate().for_each(plane);
    } else {
        y_ng.chunks_mut(out_len).enumerate().for_each(plane);
    }
}

/// `dst[j * stride] += src[j]`.
fn add_strided<T: Real>(src: &[T], stride: usize, dst: &mut [T]) {
    if stride == 1 {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d += v;
        }
    } else {
        for (d, &v) in dst.iter_mut().step_by(stride).zip(src) {
            *d += v;
        }
    }
}
