//! Weights and bias repacked once, at build, into the order the NCHWc tiles read them.

/// The weights of a convolution with every input channel (group 1), as
/// `[ceil(OC/b)][ceil(IC/b)][kH * kW][b (input channel)][b (output channel)]`: at one tap and
/// one input channel, the `b` output channels of a block are one vector. Channels past OC or
/// IC are zero.
#[derive(Debug)]
pub(crate) struct DenseWeights {
    /// The packed elements.
    pub data: Vec<f32>,
    /// The block size `b`.
    pub block: usize,
    /// `ceil(IC / b)`.
    pub in_blocks: usize,
    /// `kH * kW`.
    pub taps: usize,
}

impl DenseWeights {
    /// Packs ONNX weights `w` of shape `[oc, ic, kh, kw]`.
    pub fn pack(w: &[f32], [oc, ic, kh, kw]: [usize; 4], block: usize) -> Self {
        let (taps, in_blocks, out_blocks) = (kh * kw, ic.div_ceil(block), oc.div_ceil(block));
        let mut data = vec![0.0; out_blocks * in_blocks * taps * block * block];
        for o in 0..oc {
            for i in 0..ic {
                for t in 0..taps {
                    let at = (((o / block * in_blocks + i / block) * taps + t) * block + i % block) * block + o % block;
                    data[at] = w[(o * ic + i) * taps + t];
                }
            }
        }
        DenseWeights { data, block, in_blocks, taps }
    }

    /// Elements between two output channel blocks.
    pub fn out_block_len(&self) -> usize {
        self.in_blocks * self.taps * self.block * self.block
    }
}

/// The weights of a depthwise convolution (one input channel per output channel), as
/// `[ceil(C/b)][kH * kW][b]`; channels past C are zero.
#[derive(Debug)]
pub(crate) struct DepthwiseWeights {
    /// The packed elements.
    pub data: Vec<f32>,
    /// `kH * kW`.
    pub taps: usize,
}

impl DepthwiseWeights {
    /// Packs ONNX weights `w` of shape `[c, 1, kh, kw]`.
    pub fn pack(w: &[f32], c: usize, taps: usize, block: usize) -> Self {
        let mut data = vec![0.0; c.div_ceil(block) * taps * block];
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
        let (oc, ic, taps, b) = (5, 3, 2, 4);
        let w: Vec<f32> = (0..oc * ic * taps).map(|v| v as f32 + 1.0).collect();
        let p = DenseWeights::pack(&w, [oc, ic, 1, 2], b);
        assert_eq!(p.data.len(), 2 * 1 * taps * b * b);
        // Output channel 4 is lane 0 of output block 1; input channel 2, tap 1.
        assert_eq!(p.data[p.out_block_len() + (b + 2) * b], w[(4 * ic + 2) * taps + 1]);
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
