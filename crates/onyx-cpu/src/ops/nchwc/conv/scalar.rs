//! NchwcConv one output element at a time: the path for block sizes without a vector form
//! (any `b`), written straight from the definition.

use super::depthwise::DepthwiseJob;
use super::direct::DirectJob;
use super::shape::{valid_taps, ConvGeometry};

/// The direct convolution of `job` (every output element written, epilogue included).
pub(super) fn direct(job: &DirectJob<'_>) {
    let g = &job.geometry;
    // SAFETY: the job's output holds `out_len()` elements that nothing else touches during the
    // call (the caller's contract of the job).
    let y = unsafe { std::slice::from_raw_parts_mut(job.y.0, g.out_len()) };
    let w = job.weights;
    each_output(g, y, |n, o, oh, ow| {
        let mut sum = 0.0;
        for c in 0..g.c_in {
            let (in_block, channel) = (c / g.in_block, c % g.in_block);
            let x_c = n * g.input.image + in_block * g.input.group + channel * g.input.channel;
            sum += taps_sum(g, oh, ow, |tap, at| {
                job.x[x_c + at] * w.data[w.at(o / g.block, in_block, tap, channel) + o % g.block]
            });
        }
        sum
    });
    finish(g, job.epilogue, y);
}

/// The depthwise convolution of `job`.
pub(super) fn depthwise(job: &DepthwiseJob<'_>) {
    let g = &job.geometry;
    // SAFETY: as in `direct`.
    let y = unsafe { std::slice::from_raw_parts_mut(job.y.0, g.out_len()) };
    let w = job.weights;
    each_output(g, y, |n, o, oh, ow| {
        let x_c = n * g.input.image + o / g.block * g.input.group + o % g.block * g.input.channel;
        let w_c = o / g.block * w.taps * g.block + o % g.block;
        taps_sum(g, oh, ow, |tap, at| job.x[x_c + at] * w.data[w_c + tap * g.block])
    });
    finish(g, job.epilogue, y);
}

/// Writes `value(n, channel, oh, ow)` at every real output channel, zero at padding channels.
fn each_output(g: &ConvGeometry, y: &mut [f32], value: impl Fn(usize, usize, usize, usize) -> f32) {
    let b = g.block;
    for (i, pixel) in y.chunks_exact_mut(b).enumerate() {
        let ow = i % g.cols.output;
        let oh = i / g.cols.output % g.rows.output;
        let block = i / (g.cols.output * g.rows.output);
        let (n, ob) = (block / g.out_blocks(), block % g.out_blocks());
        for (lane, v) in pixel.iter_mut().enumerate() {
            let o = ob * b + lane;
            *v = if o < g.c_out { value(n, o, oh, ow) } else { 0.0 };
        }
    }
}

/// The sum of `product(tap, offset)` over the taps of output (oh, ow) that read inside the
/// input, `offset` being the input pixel's offset from its channel's start.
fn taps_sum(g: &ConvGeometry, oh: usize, ow: usize, product: impl Fn(usize, usize) -> f32) -> f32 {
    let (h, w) = (valid_taps(&g.rows, oh), valid_taps(&g.cols, ow));
    let mut sum = 0.0;
    for kh in h.0..h.1 {
        for kw in w.0..w.1 {
            let (ih, iw) = (g.rows.input_index(oh, kh) as usize, g.cols.input_index(ow, kw) as usize);
            sum += product(kh * g.cols.kernel + kw, ih * g.input.row + iw * g.input.pixel);
        }
    }
    sum
}

/// Applies the epilogue to every output block.
fn finish(g: &ConvGeometry, epilogue: super::shape::BlockEpilogue<'_>, y: &mut [f32]) {
    for (i, block) in y.chunks_exact_mut(g.out_block_len().max(1)).enumerate() {
        epilogue.apply(i % g.out_blocks(), g.block, i * g.out_block_len(), block);
    }
}
