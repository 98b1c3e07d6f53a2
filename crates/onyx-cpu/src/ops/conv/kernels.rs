//! The convolution math: a depthwise kernel ([`depthwise`]), a direct GEMM for 1x1 stride-1
//! convolutions, and im2col + GEMM for the rest, on 3-D windows (1-D and 2-D are padded up with
//! unit axes).

use std::ops::Range;

use rayon::prelude::*;

use onyx_core::{DataType, Error, Result};

use super::depthwise::depthwise;
use super::geometry::Axis;
use super::packed;
use crate::ops::contrib::Activation;
use crate::ops::matmul::gemm::{gemm_post, MatMut, MatRef, RowPost, PARALLEL_WORK};
use crate::ops::matmul::real::{zeroed, Real};
use crate::ops::util;

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

/// What a convolution does to its output before handing it back, in the same pass as the
/// products (while the values are in cache): add each channel's bias, then a residual of the
/// output's shape, then an activation (FusedConv's epilogue).
#[derive(Clone, Copy)]
pub(crate) struct Epilogue<'a, T> {
    /// One value per output channel.
    pub bias: Option<&'a [T]>,
    /// Added elementwise: the whole `[N, C_out, spatial...]` output's worth.
    pub residual: Option<&'a [T]>,
    /// Applied last.
    pub activation: Activation,
}

impl<'a, T: Real> Epilogue<'a, T> {
    /// Only a bias (a plain Conv).
    pub fn bias(bias: Option<&'a [T]>) -> Self {
        Epilogue { bias, residual: None, activation: Activation::None }
    }

    /// True when it changes nothing.
    pub fn is_identity(&self) -> bool {
        self.bias.is_none() && self.residual.is_none() && self.activation == Activation::None
    }

    /// Finishes `seg`, the output elements from flat index `offset` on, all of channel `ch`.
    #[inline]
    pub fn apply(&self, ch: usize, offset: usize, seg: &mut [T]) {
        let b = self.bias.map_or(T::ZERO, |b| b[ch]);
        let (residual, act, has_bias) = (self.residual, self.activation, self.bias.is_some());
        util::simd(|| {
            match residual {
                Some(r) => {
                    let r = &r[offset..][..seg.len()];
                    for (y, &r) in seg.iter_mut().zip(r) {
                        *y = *y + b + r;
                    }
                }
                None if has_bias => seg.iter_mut().for_each(|y| *y += b),
                None => {}
            }
            act.apply(seg);
        })
    }

    /// Checks the residual's length against the output's.
    fn check(&self, out_elems: usize) -> Result<()> {
        match self.residual {
            Some(r) if r.len() != out_elems => Err(Error::InvalidArgument(format!(
                "convolution residual of {} elements for an output of {out_elems}",
                r.len()
            ))),
            _ => Ok(()),
        }
    }
}

/// Convolution of `x` (`[N, C_in, D, H, W]`) with `w` (`[C_out, C_in / group, kD, kH, kW]`) plus
/// an optional bias, giving `[N, C_out, oD, oH, oW]`.
pub(crate) fn conv<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, s: &ConvShape) -> Result<Vec<T>> {
    conv_fused(x, w, s, &Epilogue::bias(bias))
}

/// Output positions per image from which a conv takes the packed AVX-512 kernel.
const PACKED_MIN_OUTPUTS: usize = 512;

/// [`conv`] followed by an [`Epilogue`] (bias, residual, activation), applied to each block of
/// the output by the thread that computed it.
pub(crate) fn conv_fused<T: Real>(x: &[T], w: &[T], s: &ConvShape, epi: &Epilogue<'_, T>) -> Result<Vec<T>> {
    s.check(x.len(), w.len(), epi.bias.map(<[T]>::len))?;
    let depthwise_conv = s.cg() == 1 && s.group > 1;
    // The packed kernel wins on large output maps (resnet18's stem and 56x56 layers: 1.5-2.2x);
    // on small ones (14x14, 7x7 with thousands of taps) the gemm crate's blocking does (2x).
    let packed =
        !depthwise_conv && T::DTYPE == DataType::Float && s.out_len() >= PACKED_MIN_OUTPUTS && packed::available();
    // The packed path writes every element: a pooled buffer needs no clearing pass.
    let mut y = if packed { onyx_core::host_pool::take(s.out_elems()?) } else { zeroed(s.out_elems()?)? };
    epi.check(y.len())?;
    if y.is_empty() {
        return Ok(y);
    }
    if depthwise_conv {
        depthwise(x, w, s, &mut y, epi);
        return Ok(y);
    }
    if packed {
        packed_f32(x, w, s, &mut y, epi);
        return Ok(y);
    }
    gemm_paths(x, w, s, epi, &mut y)?;
    Ok(y)
}

/// The im2col / pointwise paths through the generic GEMM (every type; every CPU), into `y`
/// (zero on entry; checked by the caller).
pub(crate) fn gemm_paths<T: Real>(x: &[T], w: &[T], s: &ConvShape, epi: &Epilogue<'_, T>, y: &mut [T]) -> Result<()> {
    let pointwise = s.axes.iter().all(|a| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.output == a.input);
    let (items, item_len) = (s.batch * s.group, s.mg() * s.out_len());
    let work = y.len().saturating_mul(s.cg() * s.k_len());
    let outer_parallel = items >= rayon::current_num_threads() && work >= PARALLEL_WORK;
    let one = |scratch: &mut Vec<T>, (i, y_ng): (usize, &mut [T]), parallel: bool| -> Result<()> {
        let (n, g) = (i / s.group, i % s.group);
        let x_ng = &x[(n * s.c_in + g * s.cg()) * s.in_len()..][..s.cg() * s.in_len()];
        let w_g = &w[g * s.mg() * s.cg() * s.k_len()..][..s.mg() * s.cg() * s.k_len()];
        // Row r of this item's output is channel g * mg + r, at flat offset i * item_len + r * out_len.
        let post = |r: usize, col: usize, seg: &mut [T]| {
            epi.apply(g * s.mg() + r, i * item_len + r * s.out_len() + col, seg);
        };
        let post: Option<RowPost<'_, T>> = if epi.is_identity() { None } else { Some(&post) };
        if pointwise {
            pointwise_item(x_ng, w_g, s, y_ng, parallel, post)
        } else {
            im2col_item(x_ng, w_g, s, y_ng, scratch, parallel, post)
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
    Ok(())
}

/// [`packed::conv`] on `T = f32` (the caller checked `T::DTYPE`, so the casts keep every
/// element as it is).
fn packed_f32<T: Real>(x: &[T], w: &[T], s: &ConvShape, y: &mut [T], epi: &Epilogue<'_, T>) {
    fn f32s<T: Real>(v: &[T]) -> &[f32] {
        bytemuck::cast_slice(v)
    }
    let epi = Epilogue { bias: epi.bias.map(f32s), residual: epi.residual.map(f32s), activation: epi.activation };
    packed::conv(f32s(x), f32s(w), s, bytemuck::cast_slice_mut(y), &epi);
}

/// A 1x1 stride-1 unpadded convolution of one (image, group): the input already is the
/// `[C_in/group, H*W]` matrix, so it is one GEMM, each row then finished by `post`.
fn pointwise_item<T: Real>(
    x_ng: &[T],
    w_g: &[T],
    s: &ConvShape,
    y_ng: &mut [T],
    parallel: bool,
    post: Option<RowPost<'_, T>>,
) -> Result<()> {
    let (mg, cg, len) = (s.mg(), s.cg(), s.out_len());
    let c = MatMut::row_major(y_ng, mg, len);
    gemm_post(T::ONE, MatRef::row_major(w_g, mg, cg), MatRef::row_major(x_ng, cg, len), T::ZERO, c, parallel, post)
}

/// One (image, group) by im2col + GEMM, in tiles of output rows so the column buffer stays
/// under [`COL_TILE_ELEMS`]; `scratch` is reused between calls; each row segment is finished
/// by `post` (columns counted from the item's first).
fn im2col_item<T: Real>(
    x_ng: &[T],
    w_g: &[T],
    s: &ConvShape,
    y_ng: &mut [T],
    scratch: &mut Vec<T>,
    parallel: bool,
    post: Option<RowPost<'_, T>>,
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
        let col0 = r0 * ow;
        let shifted = post.map(|p| move |r: usize, col: usize, seg: &mut [T]| p(r, col0 + col, seg));
        let shifted = shifted.as_ref().map(|p| p as RowPost<'_, T>);
        let (a, b) = (MatRef::row_major(w_g, mg, krows), MatRef::row_major(&scratch[..], krows, ncols));
        gemm_post(T::ONE, a, b, T::ZERO, c, parallel, shifted)?;
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
