//! The convolution math: a depthwise kernel ([`depthwise`]), a direct GEMM for 1x1 stride-1
//! convolutions, and im2col + GEMM for the rest, on 3-D windows (1-D and 2-D are padded up with
//! unit axes).

use std::ops::Range;

use rayon::prelude::*;

use onyx_core::{Error, Result};

use super::depthwise::depthwise;
use super::geometry::Axis;
use crate::ops::matmul::gemm::{gemm, gemm_serial, MatMut, MatRef, PARALLEL_WORK};
use crate::ops::matmul::real::{zeroed, Real};

/// Most elements of an im2col buffer: larger products are done in tiles of output rows.
const COL_TILE_ELEMS: usize = 1 << 20;

/// Sizes of a convolution (or transposed convolution) on 3-D windows.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConvShape {
    /// Batch size N.
    pub batch: usize,
    /// Channels of X.
    pub c_in: usize,
    /// Channels of Y.
    pub c_out: usize,
    /// Number of groups (divides both channel counts).
    pub group: usize,
    /// Depth, height and width axes.
    pub axes: [Axis; 3],
}

impl ConvShape {
    /// Elements of one input plane.
    pub fn in_len(&self) -> usize {
        self.axes.iter().map(|a| a.input).product()
    }

    /// Elements of one output plane.
    pub fn out_len(&self) -> usize {
        self.axes.iter().map(|a| a.output).product()
    }

    /// Elements of the whole output, or an error when that overflows.
    pub fn out_elems(&self) -> Result<usize> {
        let mut dims = vec![self.batch, self.c_out];
        dims.extend(self.axes.iter().map(|a| a.output));
        onyx_core::element_count(&dims)
    }

    /// Taps of the kernel.
    pub fn k_len(&self) -> usize {
        self.axes.iter().map(|a| a.kernel).product()
    }

    /// Input channels per group.
    pub fn cg(&self) -> usize {
        self.c_in / self.group.max(1)
    }

    /// Output channels per group.
    pub fn mg(&self) -> usize {
        self.c_out / self.group.max(1)
    }

    /// Checks that the group divides the channels and that the buffers have the sizes the
    /// shape implies (`w_len`: elements of the weights).
    pub fn check(&self, x_len: usize, w_len: usize, bias_len: Option<usize>) -> Result<()> {
        let ok = self.group > 0
            && self.c_in % self.group == 0
            && self.c_out % self.group == 0
            && x_len == self.batch * self.c_in * self.in_len()
            && w_len == self.c_out * self.cg() * self.k_len()
            && bias_len.is_none_or(|b| b == self.c_out);
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "convolution buffers of {x_len} / {w_len} / {bias_len:?} elements do not match {self:?}"
            )))
        }
    }
}

/// Sets every row (of `len` elements) of `y` to its bias value, or zero.
pub(crate) fn fill_bias<T: Real>(y: &mut [T], len: usize, bias: Option<&[T]>) {
    for (m, row) in y.chunks_mut(len.max(1)).enumerate() {
        row.fill(bias.and_then(|b| b.get(m)).copied().unwrap_or(T::ZERO));
    }
}

/// The output `[N, C_out, spatial...]` holding each channel's bias, or zero: the kernels
/// accumulate into it, so it is written once before them (no separate zeroing pass).
fn initial_output<T: Real>(s: &ConvShape, bias: Option<&[T]>) -> Result<Vec<T>> {
    let n = s.out_elems()?;
    let Some(bias) = bias else { return zeroed(n) };
    let mut y = Vec::new();
    y.try_reserve_exact(n)
        .map_err(|_| Error::InvalidArgument(format!("cannot allocate an output of {n} elements")))?;
    let len = s.out_len();
    for _ in 0..s.batch {
        for &b in bias {
            y.extend(std::iter::repeat_n(b, len));
        }
    }
    Ok(y)
}

/// Convolution of `x` (`[N, C_in, D, H, W]`) with `w` (`[C_out, C_in / group, kD, kH, kW]`) plus
/// an optional bias, giving `[N, C_out, oD, oH, oW]`.
pub(crate) fn conv<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, s: &ConvShape) -> Result<Vec<T>> {
    s.check(x.len(), w.len(), bias.map(<[T]>::len))?;
    let mut y = initial_output(s, bias)?;
    if y.is_empty() {
        return Ok(y);
    }
    if s.cg() == 1 && s.group > 1 {
        depthwise(x, w, s, &mut y);
        return Ok(y);
    }
    let pointwise = s.axes.iter().all(|a| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.output == a.input);
    let (items, item_len) = (s.batch * s.group, s.mg() * s.out_len());
    let work = y.len().saturating_mul(s.cg() * s.k_len());
    let outer_parallel = items >= rayon::current_num_threads() && work >= PARALLEL_WORK;
    // C (already holding the bias) is read only when there is a bias.
    let beta = if bias.is_some() { T::ONE } else { T::ZERO };
    let one = |scratch: &mut Vec<T>, (i, y_ng): (usize, &mut [T]), parallel: bool| -> Result<()> {
        let (n, g) = (i / s.group, i % s.group);
        let x_ng = &x[(n * s.c_in + g * s.cg()) * s.in_len()..][..s.cg() * s.in_len()];
        let w_g = &w[g * s.mg() * s.cg() * s.k_len()..][..s.mg() * s.cg() * s.k_len()];
        if pointwise {
            pointwise_item(x_ng, w_g, beta, s, y_ng, parallel)
        } else {
            im2col_item(x_ng, w_g, beta, s, y_ng, scratch, parallel)
        }
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

fn gemm_maybe_parallel<T: Real>(
    parallel: bool,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
) -> Result<()> {
    if parallel {
        gemm(T::ONE, a, b, beta, c)
    } else {
        gemm_serial(T::ONE, a, b, beta, c)
    }
}

/// A 1x1 stride-1 unpadded convolution of one (image, group): the input already is the
/// `[C_in/group, H*W]` matrix, so it is one GEMM (`beta`: one to add to C's bias, else zero).
fn pointwise_item<T: Real>(x_ng: &[T], w_g: &[T], beta: T, s: &ConvShape, y_ng: &mut [T], parallel: bool) -> Result<()> {
    let (mg, cg, len) = (s.mg(), s.cg(), s.out_len());
    let c = MatMut::row_major(y_ng, mg, len);
    gemm_maybe_parallel(parallel, MatRef::row_major(w_g, mg, cg), MatRef::row_major(x_ng, cg, len), beta, c)
}

/// One (image, group) by im2col + GEMM, in tiles of output rows so the column buffer stays
/// under [`COL_TILE_ELEMS`]; `scratch` is reused between calls (`beta` as for
/// [`pointwise_item`]).
fn im2col_item<T: Real>(
    x_ng: &[T],
    w_g: &[T],
    beta: T,
    s: &ConvShape,
    y_ng: &mut [T],
    scratch: &mut Vec<T>,
    parallel: bool,
) -> Result<()> {
    let [az, ay, ax] = s.axes;
    let (mg, out_len, ow) = (s.mg(), s.out_len(), ax.output);
    let krows = s.cg() * s.k_len();
    let out_rows = az.output * ay.output;
    let tile = (COL_TILE_ELEMS / (krows * ow).max(1)).clamp(1, out_rows.max(1));
    for r0 in (0..out_rows).step_by(tile) {
        let rows = r0..(r0 + tile).min(out_rows);
        let ncols = rows.len() * ow;
        scratch.resize(krows * ncols, T::ZERO);
        im2col(x_ng, s, rows.clone(), scratch, parallel);
        let c = MatMut { data: &mut y_ng[r0 * ow..], rows: mg, cols: ncols, rs: out_len };
        gemm_maybe_parallel(
            parallel,
            MatRef::row_major(w_g, mg, krows),
            MatRef::row_major(scratch, krows, ncols),
            beta,
            c,
        )?;
    }
    Ok(())
}

/// Fills `col` (`[C_in/group * kD*kH*kW, rows.len() * oW]`) with the input values each kernel
/// tap reads for the output rows `rows` (flattened `(oz, oy)` indices); zero where padding.
fn im2col<T: Real>(x_ng: &[T], s: &ConvShape, rows: Range<usize>, col: &mut [T], parallel: bool) {
    let [az, ay, ax] = s.axes;
    let (k_len, in_len) = (s.k_len(), s.in_len());
    let ncols = rows.len() * ax.output;
    let fill_row = |(r, dst): (usize, &mut [T])| {
        let (c, tap) = (r / k_len, r % k_len);
        let (kz, ky, kx) = (tap / (ay.kernel * ax.kernel), tap / ax.kernel % ay.kernel, tap % ax.kernel);
        let plane = &x_ng[c * in_len..][..in_len];
        let (x0, x1) = ax.valid_outputs(kx);
        for (out_row, seg) in rows.clone().zip(dst.chunks_mut(ax.output.max(1))) {
            let (oz, oy) = (out_row / ay.output, out_row % ay.output);
            let (iz, iy) = (az.input_index(oz, kz), ay.input_index(oy, ky));
            if iz < 0 || iz >= az.input as isize || iy < 0 || iy >= ay.input as isize || x0 == x1 {
                seg.fill(T::ZERO);
                continue;
            }
            let start = (iz as usize * ay.input + iy as usize) * ax.input + ax.input_index(x0, kx) as usize;
            seg[..x0].fill(T::ZERO);
            seg[x1..].fill(T::ZERO);
            copy_strided(&plane[start..], ax.stride, &mut seg[x0..x1]);
        }
    };
    if parallel && col.len() >= PARALLEL_WORK {
        col.par_chunks_mut(ncols.max(1)).enumerate().for_each(fill_row);
    } else {
        col.chunks_mut(ncols.max(1)).enumerate().for_each(fill_row);
    }
}

/// `dst[j] = src[j * stride]`.
fn copy_strided<T: Copy>(src: &[T], stride: usize, dst: &mut [T]) {
    if stride == 1 {
        let n = dst.len();
        dst.copy_from_slice(&src[..n]);
    } else {
        for (d, s) in dst.iter_mut().zip(src.iter().step_by(stride)) {
            *d = *s;
        }
    }
}
