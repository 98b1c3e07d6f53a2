//! Where an NchwcConv reads and writes: the window geometry, the input layout (blocked or plain
//! NCHW) and the epilogue, resolved once per run and shared by every tile.

use crate::ops::contrib::Activation;
use crate::ops::conv::geometry::Axis;
use crate::ops::lanes::Lanes;

/// How input channel `c` at pixel (row, col) of image `n` is found: element
/// `n * image + (c / b) * group + (c % b) * channel + row * row_stride + col * pixel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InputLayout {
    /// Elements between images.
    pub image: usize,
    /// Elements between blocks of `b` channels.
    pub group: usize,
    /// Elements between channels of one block.
    pub channel: usize,
    /// Elements between rows.
    pub row: usize,
    /// Elements between pixels of a row.
    pub pixel: usize,
}

impl InputLayout {
    /// The blocked layout `[N, ceil(C/b), H, W, b]`.
    pub fn blocked(c: usize, h: usize, w: usize, b: usize) -> Self {
        InputLayout { image: c.div_ceil(b) * h * w * b, group: h * w * b, channel: 1, row: w * b, pixel: b }
    }

    /// Plain NCHW `[N, C, H, W]`, read in blocks of `b` channels.
    pub fn nchw(c: usize, h: usize, w: usize, b: usize) -> Self {
        InputLayout { image: c * h * w, group: b * h * w, channel: h * w, row: w, pixel: 1 }
    }
}

/// The sizes of one NchwcConv run.
#[derive(Clone, Debug)]
pub(crate) struct ConvGeometry {
    /// Batch size.
    pub batch: usize,
    /// Input channels (logical, without padding).
    pub c_in: usize,
    /// Output channels (logical).
    pub c_out: usize,
    /// The block size `b` of the output (and the lanes of the tiles).
    pub block: usize,
    /// Input channels per input block: `b`, except for a stem's interleaved input
    /// ([`super::stem`]).
    pub in_block: usize,
    /// The height axis.
    pub rows: Axis,
    /// The width axis.
    pub cols: Axis,
    /// Where X's elements are.
    pub input: InputLayout,
}

impl ConvGeometry {
    /// A pointwise (1x1, stride 1, unpadded) convolution seen as one row of `H * W` pixels, so
    /// that tiles run along the whole image; any other geometry unchanged.
    pub fn flattened(mut self) -> Self {
        let unit = |a: &Axis| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.pad_end == 0;
        if unit(&self.rows) && unit(&self.cols) {
            let pixels = self.rows.input * self.cols.input;
            self.cols = Axis { input: pixels, output: pixels, ..self.cols };
            self.rows = Axis::UNIT;
            self.input.row = pixels * self.input.pixel;
        }
        self
    }

    /// Blocks of input channels.
    pub fn in_blocks(&self) -> usize {
        self.c_in.div_ceil(self.in_block)
    }

    /// Blocks of output channels.
    pub fn out_blocks(&self) -> usize {
        self.c_out.div_ceil(self.block)
    }

    /// Elements of one output channel block of one image: `OH * OW * b`.
    pub fn out_block_len(&self) -> usize {
        self.rows.output * self.cols.output * self.block
    }

    /// Elements of the whole blocked output.
    pub fn out_len(&self) -> usize {
        self.batch * self.out_blocks() * self.out_block_len()
    }

    /// Real channels of input block `g` (the last block may be partial).
    pub fn channels_in_block(&self, g: usize) -> usize {
        self.in_block.min(self.c_in - g * self.in_block)
    }

    /// Multiply-adds of the whole convolution (`depthwise`: one input channel per output).
    pub fn work(&self, depthwise: bool) -> usize {
        let per_output = if depthwise { 1 } else { self.c_in };
        self.batch * self.c_out * self.rows.output * self.cols.output * per_output * self.rows.kernel * self.cols.kernel
    }
}

/// The kernel taps `lo..hi` of `axis` that read inside the input for output position `o`.
pub(crate) fn valid_taps(axis: &Axis, o: usize) -> (usize, usize) {
    let first = (o * axis.stride) as isize - axis.pad_begin;
    let inside = |k: usize| (0..axis.input as isize).contains(&(first + (k * axis.dilation) as isize));
    let lo = (0..axis.kernel).find(|&k| inside(k)).unwrap_or(axis.kernel);
    let hi = (lo..axis.kernel).rev().find(|&k| inside(k)).map_or(lo, |k| k + 1);
    (lo, hi)
}

/// The output positions `lo..hi` of `axis` whose every tap reads inside the input.
pub(crate) fn interior(axis: &Axis) -> (usize, usize) {
    let (lo, _) = axis.valid_outputs(0);
    let (_, hi) = axis.valid_outputs(axis.kernel - 1);
    (lo, hi.max(lo))
}

/// What follows the products: `activation(y + bias + residual)`, per output block.
#[derive(Clone, Copy)]
pub(crate) struct BlockEpilogue<'a> {
    /// The bias padded to whole blocks (`pack::pad_bias`).
    pub bias: Option<&'a [f32]>,
    /// A blocked tensor of the output's shape.
    pub residual: Option<&'a [f32]>,
    /// Applied last.
    pub activation: Activation,
}

impl BlockEpilogue<'_> {
    /// Finishes `y`, the output elements from flat index `offset` on, all in channel block
    /// `block_index` (`b` = `bias.len()` of that block).
    #[inline(always)]
    pub fn apply(&self, block_index: usize, b: usize, offset: usize, y: &mut [f32]) {
        if let Some(bias) = self.bias {
            let bias = &bias[block_index * b..][..b];
            match b {
                8 => add_per_pixel::<8>(y, bias),
                16 => add_per_pixel::<16>(y, bias),
                _ => y.chunks_exact_mut(b).for_each(|pixel| pixel.iter_mut().zip(bias).for_each(|(v, &c)| *v += c)),
            }
        }
        if let Some(residual) = self.residual {
            for (v, &r) in y.iter_mut().zip(&residual[offset..]) {
                *v += r;
            }
        }
        self.activation.apply(y);
    }
}

/// Adds `bias` (`B` values) to each pixel of `y`; `B` known at compile time makes it a few
/// vector additions per pixel.
fn add_per_pixel<const B: usize>(y: &mut [f32], bias: &[f32]) {
    let Some(bias) = bias.first_chunk::<B>() else { return };
    for pixel in y.as_chunks_mut::<B>().0 {
        for (v, &c) in pixel.iter_mut().zip(bias) {
            *v += c;
        }
    }
}

/// An epilogue simple enough for registers: bias, residual, then a clamp (Relu, Clip or none).
#[derive(Clone, Copy)]
pub(crate) struct RegisterEpilogue {
    /// The bias at the item's first output block ([`NO_BIAS`] when there is none).
    bias: *const f32,
    /// The residual at the item's first output block of the image (null: none); laid out as Y.
    residual: *const f32,
    /// Lower and upper bounds (infinite when absent).
    bounds: Option<(f32, f32)>,
}

/// The bias of a convolution without one: zeros for the widest tile (4 blocks of 16).
static NO_BIAS: [f32; 64] = [0.0; 64];

impl RegisterEpilogue {
    /// `v` finished: plus the bias at `bias_at`, plus the residual at `residual_at`, clamped.
    ///
    /// # Safety
    /// `V`'s instruction set; the offsets inside the bias and the residual when present.
    #[inline(always)]
    pub unsafe fn apply<V: Lanes>(&self, mut v: V, bias_at: usize, residual_at: usize) -> V {
        // SAFETY: the caller's contract.
        unsafe {
            v = V::add(v, V::load(self.bias.add(bias_at)));
            if !self.residual.is_null() {
                v = V::add(v, V::load(self.residual.add(residual_at)));
            }
            if let Some((lo, hi)) = self.bounds {
                v = V::at_most(V::value(hi), V::at_least(V::value(lo), v));
            }
        }
        v
    }

    /// Finishes a register tile `acc` of `P` pixels by `Q` blocks of `b` lanes whose residual
    /// vectors are at `at(p, q)` past the residual's start. Which steps apply is decided once
    /// per tile, not per vector.
    ///
    /// # Safety
    /// `V`'s instruction set (`V::WIDTH == b`); the tile's vectors inside the residual; the
    /// bias holds the `Q` blocks' lanes.
    #[inline(always)]
    pub unsafe fn apply_tile<V: Lanes, const P: usize, const Q: usize>(
        &self,
        acc: &mut [[V; Q]; P],
        b: usize,
        at: impl Fn(usize, usize) -> usize,
    ) {
        debug_assert!(self.bias != NO_BIAS.as_ptr() || Q * b <= NO_BIAS.len());
        let residual = !self.residual.is_null();
        // SAFETY: the caller's contract.
        unsafe {
            match self.bounds {
                None if residual => self.tile::<V, P, Q, true, false, false>(acc, b, at),
                None => self.tile::<V, P, Q, false, false, false>(acc, b, at),
                Some((_, hi)) if hi == f32::INFINITY && residual => self.tile::<V, P, Q, true, true, false>(acc, b, at),
                Some((_, hi)) if hi == f32::INFINITY => self.tile::<V, P, Q, false, true, false>(acc, b, at),
                Some(_) if residual => self.tile::<V, P, Q, true, true, true>(acc, b, at),
                Some(_) => self.tile::<V, P, Q, false, true, true>(acc, b, at),
            }
        }
    }

    /// [`RegisterEpilogue::apply_tile`] with its steps fixed at compile time.
    ///
    /// # Safety
    /// As [`RegisterEpilogue::apply_tile`].
    #[inline(always)]
    unsafe fn tile<
        V: Lanes,
        const P: usize,
        const Q: usize,
        const RESIDUAL: bool,
        const LOW: bool,
        const HIGH: bool,
    >(
        &self,
        acc: &mut [[V; Q]; P],
        b: usize,
        at: impl Fn(usize, usize) -> usize,
    ) {
        let (lo, hi) = self.bounds.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        // SAFETY: the caller's contract.
        unsafe {
            let (lo, hi) = (V::value(lo), V::value(hi));
            for (p, acc) in acc.iter_mut().enumerate() {
                for (q, v) in acc.iter_mut().enumerate() {
                    *v = V::add(*v, V::load(self.bias.add(q * b)));
                    if RESIDUAL {
                        *v = V::add(*v, V::load(self.residual.add(at(p, q))));
                    }
                    if LOW {
                        *v = V::at_least(lo, *v);
                    }
                    if HIGH {
                        *v = V::at_most(hi, *v);
                    }
                }
            }
        }
    }

    /// The register form of `epilogue` for the item whose Y starts at `y_item` (first output
    /// block `first_block`), when its activation is a clamp.
    pub fn new(epilogue: &BlockEpilogue<'_>, first_block: usize, b: usize, y_item: usize) -> Option<Self> {
        let bounds = match epilogue.activation {
            Activation::None => None,
            Activation::Relu => Some((0.0, f32::INFINITY)),
            Activation::Clip { min, max } => Some((min, max)),
            _ => return None,
        };
        Some(RegisterEpilogue {
            bias: epilogue.bias.map_or(NO_BIAS.as_ptr(), |bias| bias[first_block * b..].as_ptr()),
            residual: epilogue.residual.map_or(std::ptr::null(), |z| z[y_item..].as_ptr()),
            bounds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_taps_and_interior_match_brute_force() {
        for input in 1..8 {
            for kernel in 1..4 {
                for stride in 1..3 {
                    for dilation in 1..3 {
                        for pad in 0..3 {
                            let span = input + 2 * pad;
                            let eff = (kernel - 1) * dilation + 1;
                            if span < eff {
                                continue;
                            }
                            let output = (span - eff) / stride + 1;
                            let a = Axis {
                                input,
                                kernel,
                                stride,
                                dilation,
                                pad_begin: pad as isize,
                                pad_end: pad as isize,
                                output,
                            };
                            let inside = |o: usize, k: usize| (0..input as isize).contains(&a.input_index(o, k));
                            for o in 0..output {
                                let (lo, hi) = valid_taps(&a, o);
                                let want: Vec<usize> = (0..kernel).filter(|&k| inside(o, k)).collect();
                                assert_eq!((lo..hi).collect::<Vec<_>>(), want, "{a:?} o={o}");
                            }
                            let (lo, hi) = interior(&a);
                            let want: Vec<usize> = (0..output).filter(|&o| (0..kernel).all(|k| inside(o, k))).collect();
                            assert_eq!((lo..hi).collect::<Vec<_>>(), want, "{a:?}");
                        }
                    }
                }
            }
        }
    }
}
