//! A convolution of a plain NCHW input with fewer channels than a block: an image network's
//! stem (3 channels, 7x7/2). Read in place, each of its `kH * kW` taps would add only `C`
//! channels, `H * W` elements apart, with the padding checked pixel by pixel. Instead X is
//! copied, per run, into a zero-padded interleaved scratch `[N][H'][W'][C]`, where the
//! `kW * C` (column tap, channel) pairs of one kernel row are contiguous: the direct tiles then
//! run a `kH x 1` convolution over `kW * C` channels with no padding left (7 taps of 21
//! contiguous channels instead of 49 taps of 3).

use onyx_core::host_pool;

use super::pack::DenseWeights;
use super::shape::{ConvGeometry, InputLayout};
use crate::ops::conv::geometry::Axis;

/// Narrowest kernel that takes the stem form.
const MIN_KERNEL_WIDTH: usize = 5;

/// The weights of a stem, packed for the interleaved input.
#[derive(Debug)]
pub(crate) struct StemWeights(pub DenseWeights);

impl StemWeights {
    /// Whether a convolution of `c_in` channels in blocks of `block`, `kw` columns wide,
    /// takes the stem form when its input is plain NCHW (and its columns not dilated). A
    /// narrower kernel does too little work per input pixel to pay for the copy (mobilenet_v2's
    /// 3x3/2 stem: 0.58 ms read in place, 0.68 ms with the copy, one thread).
    pub fn applies(c_in: usize, block: usize, kw: usize) -> bool {
        c_in < block && kw >= MIN_KERNEL_WIDTH
    }

    /// Packs ONNX weights `w` `[oc, ic, kh, kw]` as those of a `kh x 1` convolution over
    /// `kw * ic` channels (channel `k * ic + c` is tap `k` of channel `c`), in one input block.
    pub fn pack(w: &[f32], [oc, ic, kh, kw]: [usize; 4], block: usize, max_blocks: usize) -> Self {
        let channels = kw * ic;
        let mut merged = vec![0.0; oc * channels * kh];
        for o in 0..oc {
            for c in 0..ic {
                for r in 0..kh {
                    for k in 0..kw {
                        merged[(o * channels + k * ic + c) * kh + r] = w[((o * ic + c) * kh + r) * kw + k];
                    }
                }
            }
        }
        StemWeights(DenseWeights::pack(&merged, [oc, channels, kh, 1], [block, channels], max_blocks))
    }
}

/// The interleaved, padded copy of a plain NCHW input and the geometry the tiles see on it.
pub(crate) struct StemInput {
    /// `[N][H'][W'][C]`, zero in the padding; from the host pool (give it back with
    /// [`StemInput::release`]).
    pub x: Vec<f32>,
    /// A `kH x 1` convolution over `kW * C` channels of `x`, unpadded.
    pub geometry: ConvGeometry,
}

impl StemInput {
    /// Copies NCHW `x` of convolution `g` (its input layout plain NCHW, pads not negative).
    pub fn new(x: &[f32], g: &ConvGeometry) -> Self {
        let (c, h, w) = (g.c_in, g.rows.input, g.cols.input);
        let (top, left) = (g.rows.pad_begin.max(0) as usize, g.cols.pad_begin.max(0) as usize);
        let rows = h + top + g.rows.pad_end.max(0) as usize;
        let cols = w + left + g.cols.pad_end.max(0) as usize;
        let row_len = cols * c;
        let mut scratch = host_pool::take::<f32>(g.batch * rows * row_len);
        crate::parallel::for_each_chunk_mut(&mut scratch, row_len, &|i, row| {
            let (n, r) = (i / rows, i % rows);
            row.fill(0.0);
            let Some(ih) = r.checked_sub(top).filter(|&ih| ih < h) else { return };
            for (ch, plane) in x[n * g.input.image..].chunks(h * w).take(c).enumerate() {
                let src = &plane[ih * w..][..w];
                for (dst, &v) in row[left * c + ch..].iter_mut().step_by(c).zip(src) {
                    *dst = v;
                }
            }
        });
        let channels = g.cols.kernel * c;
        let geometry = ConvGeometry {
            c_in: channels,
            in_block: channels,
            rows: Axis { input: rows, pad_begin: 0, pad_end: 0, ..g.rows },
            cols: Axis { input: cols, kernel: 1, dilation: 1, pad_begin: 0, pad_end: 0, ..g.cols },
            input: InputLayout { image: rows * row_len, group: rows * row_len, channel: 1, row: row_len, pixel: c },
            ..g.clone()
        };
        StemInput { x: scratch, geometry }
    }

    /// Gives the scratch back to the pool.
    pub fn release(self) {
        host_pool::give_back(self.x);
    }
}
