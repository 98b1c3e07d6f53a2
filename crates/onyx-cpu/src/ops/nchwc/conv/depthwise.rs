//! The depthwise NCHWc convolution (one input channel per output channel): the `b` channels of
//! a block are the lanes, so every tap is one multiply-add of an input pixel vector by the
//! tap's weight vector, for [`WIDE`] output pixels at a time. A clamp epilogue (bias, residual,
//! Relu or Clip) is applied in registers; others run over each finished row.

use super::pack::DepthwiseWeights;
use super::shape::{interior, valid_taps, ConvGeometry, RegisterEpilogue};
use super::{ConvJob, Items, ITEM_BYTES};
use crate::ops::lanes::Lanes;

/// Output pixels of one interior tile.
const WIDE: usize = 8;

/// A depthwise convolution (`c_in == c_out`, a blocked input).
pub(crate) type DepthwiseJob<'a> = ConvJob<'a, DepthwiseWeights>;

impl DepthwiseJob<'_> {
    /// How the output is split into work items: (image, channel block, rows).
    pub(super) fn items(&self) -> Items {
        let g = &self.geometry;
        let row_bytes = (g.cols.output * g.block * 4).max(1);
        let rows = (ITEM_BYTES / row_bytes).clamp(1, g.rows.output.max(1));
        Items::new(g.batch, g.out_blocks(), g.rows.output, rows, g.cols.output, g.cols.output)
    }
}

/// Computes work item `item` of `job` with lanes `V` (`V::WIDTH == job.geometry.block`).
///
/// # Safety
/// As `direct::run_item`.
#[inline(always)]
pub(super) unsafe fn run_item<V: Lanes>(job: &DepthwiseJob<'_>, item: usize) {
    let g = &job.geometry;
    let b = g.block;
    debug_assert_eq!(V::WIDTH, b);
    let (n, block, rows, cols) = job.items().decode(item);
    let plane = n * g.input.image + block * g.input.group;
    let y_block = (n * g.out_blocks() + block) * g.out_block_len();
    let w = job.weights.data.as_ptr().wrapping_add(block * job.weights.taps * b);
    let (inner_lo, inner_hi) = interior(&g.cols);
    let x = job.x.as_ptr().wrapping_add(plane);
    let in_registers = RegisterEpilogue::new(&job.epilogue, block, b, y_block);
    for oh in rows.clone() {
        let taps_h = valid_taps(&g.rows, oh);
        let row = Row {
            y: job.y.0.wrapping_add(y_block + oh * g.cols.output * b),
            at: oh * g.cols.output * b,
            finish: in_registers,
        };
        let mut ow = cols.start;
        while ow < cols.end {
            // SAFETY: the pixels and taps below read inside X and write this item's row of Y
            // (interior pixels with every tap, edge pixels one by one with their valid taps);
            // the caller's contract covers the rest.
            unsafe {
                if (inner_lo..inner_hi).contains(&ow) {
                    let count = WIDE.min(inner_hi.min(cols.end) - ow);
                    let all = (0, g.cols.kernel);
                    match count {
                        8 => tile::<V, 8>(x, w, g, oh, ow, taps_h, all, &row),
                        7 => tile::<V, 7>(x, w, g, oh, ow, taps_h, all, &row),
                        6 => tile::<V, 6>(x, w, g, oh, ow, taps_h, all, &row),
                        5 => tile::<V, 5>(x, w, g, oh, ow, taps_h, all, &row),
                        4 => tile::<V, 4>(x, w, g, oh, ow, taps_h, all, &row),
                        3 => tile::<V, 3>(x, w, g, oh, ow, taps_h, all, &row),
                        2 => tile::<V, 2>(x, w, g, oh, ow, taps_h, all, &row),
                        _ => tile::<V, 1>(x, w, g, oh, ow, taps_h, all, &row),
                    }
                    ow += count;
                } else {
                    tile::<V, 1>(x, w, g, oh, ow, taps_h, valid_taps(&g.cols, ow), &row);
                    ow += 1;
                }
            }
        }
        if in_registers.is_none() {
            let offset = y_block + row.at;
            // SAFETY: this item's row of Y, all written above.
            let y = unsafe { std::slice::from_raw_parts_mut(job.y.0.add(offset), g.cols.output * b) };
            job.epilogue.apply(block, b, offset, y);
        }
    }
}

/// Where a tile's output row goes.
struct Row {
    /// Y at the row's first pixel of the block.
    y: *mut f32,
    /// The row's offset from the block's first pixel in Y (where the residual is read).
    at: usize,
    /// The epilogue applied in registers, if any.
    finish: Option<RegisterEpilogue>,
}

/// Writes `P` output pixels from `ow` of row `oh`: the sum over taps
/// `taps_h` x `taps_w` of input pixel vector times weight vector, finished by `row.finish`.
///
/// # Safety
/// The CPU has `V`'s instruction set; every listed tap of each pixel reads inside X; the
/// pixels lie in `row` of Y; the epilogue's bias and residual hold them (`RegisterEpilogue::new`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<V: Lanes, const P: usize>(
    x: *const f32,
    w: *const f32,
    g: &ConvGeometry,
    oh: usize,
    ow: usize,
    taps_h: (usize, usize),
    taps_w: (usize, usize),
    row: &Row,
) {
    let (b, layout) = (g.block, g.input);
    // Narrow tiles keep two sums per pixel (even and odd taps), so that two chains of
    // dependent multiply-adds overlap.
    let mut acc = [V::zero(); P];
    let mut odd = [V::zero(); P];
    let pixel_step = g.cols.stride * layout.pixel;
    for kh in taps_h.0..taps_h.1 {
        let row = x.wrapping_offset(g.rows.input_index(oh, kh) * layout.row as isize);
        let tap = |kw: usize| {
            let first = row.wrapping_offset(g.cols.input_index(ow, kw) * layout.pixel as isize);
            (first, w.wrapping_add((kh * g.cols.kernel + kw) * b))
        };
        let mut kw = taps_w.0;
        while kw < taps_w.1 {
            let (first, w_tap) = tap(kw);
            // SAFETY: the tap's weights are inside the block's packed weights; the inputs are
            // pixels of X read by valid taps (the caller's contract).
            unsafe {
                let wv = V::load(w_tap);
                for (p, acc) in acc.iter_mut().enumerate() {
                    *acc = V::mul_add(V::load(first.wrapping_add(p * pixel_step)), wv, *acc);
                }
                if P <= 4 && kw + 1 < taps_w.1 {
                    let (first, w_tap) = tap(kw + 1);
                    let wv = V::load(w_tap);
                    for (p, odd) in odd.iter_mut().enumerate() {
                        *odd = V::mul_add(V::load(first.wrapping_add(p * pixel_step)), wv, *odd);
                    }
                    kw += 1;
                }
            }
            kw += 1;
        }
    }
    if P <= 4 {
        for (acc, &odd) in acc.iter_mut().zip(&odd) {
            // SAFETY: the caller's contract (the instruction set).
            *acc = unsafe { V::add(*acc, odd) };
        }
    }
    for (p, &acc) in acc.iter().enumerate() {
        let at = (ow + p) * b;
        // SAFETY: pixel ow + p of the row, in Y and in the residual (the caller's contract).
        unsafe {
            let v = match &row.finish {
                Some(e) => e.apply(acc, 0, row.at + at),
                None => acc,
            };
            v.store(row.y.wrapping_add(at));
        }
    }
}
