//! Weights and bias repacked once, at build, into the order the NCHWc tiles read them.

use rayon::prelude::*;

use super::BlockGroups;
use crate::ops::aligned::AlignedBuf;

/// The weights of a convolution with every input channel (group 1), in the order the register
/// tiles read them: output blocks in the groups of [`BlockGroups`] (at most `max_blocks` each),
/// and inside a group of `q` blocks `[ceil(IC/ib)][kH * kW][ib (input channel)][q][b (output
/// channel)]`, so that at one tap and one input channel the group's `q` weight vectors are
/// contiguous. `ib`, the input channels of a block, is `b` except for a stem's interleaved
/// input. Channels past OC or IC are zero.
#[derive(Debug)]
pub(crate) struct DenseWeights {
    /// The packed elements.
    pub data: AlignedBuf,
    /// The block size `b` (output channels).
    pub block: usize,
    /// Input channels per input block `ib`.
    pub in_block: usize,
    /// `ceil(IC / ib)`.
    pub in_blocks: usize,
    /// `kH * kW`.
    pub taps: usize,
    /// How output blocks are grouped.
    pub groups: BlockGroups,
}

impl DenseWeights {
    /// Packs ONNX weights `w` of shape `[oc, ic, kh, kw]` for tiles of at most `max_blocks`
    /// output blocks of `block` channels, reading input blocks of `in_block` channels. Each
    /// group is written in order by its own task (session creation packs every conv of a
    /// model: resnet50 has 25M weights).
    pub fn pack(w: &[f32], [oc, ic, kh, kw]: [usize; 4], [block, in_block]: [usize; 2], max_blocks: usize) -> Self {
        let (taps, in_blocks, out_blocks) = (kh * kw, ic.div_ceil(in_block), oc.div_ceil(block));
        let groups = BlockGroups::new(out_blocks, max_blocks);
        let per_block = in_blocks * taps * in_block * block;
        let mut data = AlignedBuf::zeros(out_blocks * per_block);
        let mut parts = Vec::with_capacity(groups.count);
        let mut rest = &mut data[..];
        for g in 0..groups.count {
            let (first, q) = groups.group(g);
            let (part, tail) = rest.split_at_mut(q * per_block);
            parts.push((first, q, part));
            rest = tail;
        }
        parts.into_par_iter().for_each(|(first, q, part)| {
            // Destination order: input block, tap, input channel, block of the group, lane.
            let mut dst = part.iter_mut();
            for ib in 0..in_blocks {
                for t in 0..taps {
                    for i in ib * in_block..(ib + 1) * in_block {
                        for o in first * block..(first + q) * block {
                            let Some(d) = dst.next() else { return };
                            if o < oc && i < ic {
                                *d = w[(o * ic + i) * taps + t];
                            }
                        }
                    }
                }
            }
        });
        DenseWeights { data, block, in_block, in_blocks, taps, groups }
    }

    /// Where the `b` lanes of output block `out_block` start, for input block `in_block`, tap
    /// `tap` and input channel `channel` of the block.
    pub fn at(&self, out_block: usize, in_block: usize, tap: usize, channel: usize) -> usize {
        let (first, q) = self.groups.of_block(out_block);
        let b = self.block;
        self.group_start(first) + (((in_block * self.taps + tap) * self.in_block + channel) * q + out_block - first) * b
    }

    /// Where the group whose first output block is `first_block` starts.
    pub fn group_start(&self, first_block: usize) -> usize {
        first_block * self.in_blocks * self.taps * self.in_block * self.block
    }
}

/// The weights of a depthwise convolution (one input channel per output channel), as
/// `[ceil(C/b)][kH * kW][b]`; channels past C are zero.
#[derive(Debug)]
pub(crate) struct DepthwiseWeights {
    /// The packed elements.
    pub data: AlignedBuf,
    /// `kH * kW`.
    pub taps: usize,
}

impl DepthwiseWeights {
    /// Packs ONNX weights `w` of shape `[c, 1, kh, kw]`.
    pub fn pack(w: &[f32], c: usize, taps: usize, block: usize) -> Self {
        let mut data = AlignedBuf::zeros(c.div_ceil(block) * taps * block);
        for ch in 0..c {
            for t in 0..taps {
                data[(ch / block * taps + t) * block + ch % block] = w[ch * taps + t];
            }
        }
        DepthwiseWeights { data, taps }
    }
}

/// A bias of `c` values padded with zeros to whole blocks of `block`.
pub(crate) fn pad_bias(bias: &[f32], block: usize) -> Vec<f32> {
    let mut padded = bias.to_vec();
    padded.resize(bias.len().div_ceil(block) * block, 0.0);
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_packing_puts_each_weight_at_its_block_lane() {
        let (oc, ic, taps, b) = (9, 3, 2, 4);
        let w: Vec<f32> = (0..oc * ic * taps).map(|v| v as f32 + 1.0).collect();
        // Three output blocks in groups of at most 2: (0, 1) and (2).
        let p = DenseWeights::pack(&w, [oc, ic, 1, 2], [b, b], 2);
        assert_eq!(p.data.len(), 3 * taps * b * b);
        // Output channel 5 is lane 1 of block 1 (second of its group); input channel 2, tap 1.
        assert_eq!(p.data[((b + 2) * 2 + 1) * b + 1], w[(5 * ic + 2) * taps + 1]);
        // Output channel 8: lane 0 of block 2, alone in its group.
        assert_eq!(p.data[2 * taps * b * b + (b + 2) * b], w[(8 * ic + 2) * taps + 1]);
        // Every weight lands once; the rest is padding.
        assert_eq!(p.data.iter().filter(|&&v| v != 0.0).count(), w.len());
    }

    #[test]
    fn depthwise_packing_and_bias_padding() {
        let w: Vec<f32> = (1..=18).map(|v| v as f32).collect();
        let p = DepthwiseWeights::pack(&w, 9, 2, 8);
        assert_eq!(p.data.len(), 2 * 2 * 8);
        assert_eq!(p.data[(2 + 1) * 8], w[8 * 2 + 1]);
        assert_eq!(pad_bias(&[1.0, 2.0, 3.0], 2), vec![1.0, 2.0, 3.0, 0.0]);
    }
}
