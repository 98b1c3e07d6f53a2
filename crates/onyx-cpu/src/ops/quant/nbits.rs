//! `com.microsoft` MatMulNBits on the contract of `onyx_core::ops::contrib::nbits`: `Y = A ·
//! dequant(B)ᵀ + bias` with B kept packed (2, 4 or 8 bits per weight) — no float copy of the
//! weights is ever made, at load or per run.
//!
//! Two arithmetics, as ONNX Runtime's CPU EP has them:
//! - `accuracy_level` 4: each row of A is quantized to int8 per block of `block_size` (scale
//!   `max|a| / 127`, rounded half to even), each block's product is an integer dot product,
//!   `Σ a_q (q − zp)`, scaled by both scales and summed in f32;
//! - otherwise, in f32: `Σ_blocks scale · Σ a (q − zp)`.
//!
//! Weights are read in ONNX Runtime's layout (each column's blocks contiguous along K), a tile
//! of columns per task. A prompt (many rows of A) unpacks each block once for all its rows.
//! When the node's weights are constants (always in builder-made models) they are prepared
//! once: f32 scales are shared with the model, not copied; other float types are widened once,
//! zero points unpacked once (and not stored at all when every block has the same one).

use std::sync::Arc;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::contrib::nbits::{unpack, MatMulNBitsOp, ZeroPoints};
use onyx_core::{DataType, Error, Result, Tensor, TensorView, Value};

use crate::ops::util;
use crate::parallel;

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Columns of the output computed by one task.
const TILE_COLUMNS: usize = 8;

/// The constant operands in the form the kernel reads: B as given (shared, not copied),
/// scales and zero points per block as f32, the block of each row of B, the bias.
struct Weights {
    /// The scales' type, which A must have.
    dtype: DataType,
    b: Tensor,
    scales: util::ConstF32,
    zero_points: Zp,
    /// `zero_point · scale` per block, for per-block integer zero points.
    zero_scales: Option<Vec<f32>>,
    /// The block of each row of B, when it is not `k / block_size`.
    g_idx: Option<Vec<u32>>,
    bias: Option<Vec<f32>>,
}

/// Zero points per (column, block).
enum Zp {
    /// One integer zero point for every block: the midpoint when none were given.
    Uniform(u8),
    /// Integer zero points.
    Int(Vec<u8>),
    /// Float zero points.
    Float(util::ConstF32),
}

impl Zp {
    /// Whether the zero points are integers.
    fn is_int(&self) -> bool {
        !matches!(self, Zp::Float(_))
    }

    /// The integer zero point of block `i` (of all columns' blocks); 0 for float ones.
    fn int(&self, i: usize) -> u8 {
        match self {
            Zp::Uniform(z) => *z,
            Zp::Int(z) => z[i],
            Zp::Float(_) => 0,
        }
    }

    /// The zero point of block `i` as f32.
    fn float(&self, i: usize) -> f32 {
        match self {
            Zp::Float(z) => z.as_slice()[i],
            _ => f32::from(self.int(i)),
        }
    }
}

struct MatMulNBits {
    op: MatMulNBitsOp,
    /// The weights, when inputs 1 to 5 are constants.
    weights: Option<Arc<Weights>>,
}

/// Builds the kernel; prepares the weights when they are constants.
pub(crate) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let op = MatMulNBitsOp::from_node(ctx.node)?;
    let weight_inputs = MatMulNBitsOp::B..=MatMulNBitsOp::BIAS;
    let all_constant = weight_inputs.clone().all(|i| ctx.node.input(i).is_none() || ctx.constant(i).is_some());
    let weights = if all_constant {
        let tensors: Vec<_> = weight_inputs.map(|i| ctx.constant(i)).collect();
        let views = tensors.iter().map(|t| t.map(Tensor::view).transpose()).collect::<Result<Vec<_>>>()?;
        // A's type is checked against the scales' at run time; take it from the scales here.
        let a_type = views[1].as_ref().map_or(DataType::Float, |s| s.dtype());
        Some(Arc::new(prepare(&op, a_type, &views, &tensors)?))
    } else {
        None
    };
    Ok(Box::new(MatMulNBits { op, weights }))
}

/// Checks and prepares the operands (`views[i]` is input `i + 1`; `tensors[i]` the same
/// input's constant tensor, kept instead of a copy where the kernel reads it as it is).
fn prepare(
    op: &MatMulNBitsOp,
    a_type: DataType,
    views: &[Option<TensorView<'_>>],
    tensors: &[Option<&Tensor>],
) -> Result<Weights> {
    let at = &op.at;
    let meta = |i: usize| views[i - 1].as_ref().map(|v| (v.dtype(), v.shape()));
    let found = op.check_inputs([Some((a_type, &[op.k])), meta(1), meta(2), meta(3), meta(4), meta(5)])?;
    let view = |i: usize| views[i - 1].as_ref().ok_or_else(|| Error::input(at, i, "a tensor", "no input"));
    let constant = |i: usize| tensors.get(i - 1).copied().flatten();
    let b = match constant(MatMulNBitsOp::B) {
        Some(t) => t.clone(),
        None => view(MatMulNBitsOp::B)?.to_tensor(),
    };
    let scales = util::ConstF32::new(constant(MatMulNBitsOp::SCALES), view(MatMulNBitsOp::SCALES)?)?;
    let per_column = op.k_blocks();
    let zero_points = match found.zero_points {
        ZeroPoints::Midpoint => Zp::Uniform(op.midpoint()),
        ZeroPoints::Float => {
            let zp = MatMulNBitsOp::ZERO_POINTS;
            Zp::Float(util::ConstF32::new(constant(zp), view(zp)?)?)
        }
        ZeroPoints::Packed => {
            let bytes = view(MatMulNBitsOp::ZERO_POINTS)?.bytes()?;
            let row = op.zero_point_bytes();
            let z: Vec<u8> = (0..op.n)
                .flat_map(|n| (0..per_column).map(move |blk| unpack(&bytes[n * row..][..row], op.bits, blk)))
                .collect();
            match z.first() {
                Some(&first) if z.iter().all(|&v| v == first) => Zp::Uniform(first),
                _ => Zp::Int(z),
            }
        }
    };
    let g_idx = if found.g_idx {
        let g = view(MatMulNBitsOp::G_IDX)?.as_slice::<i32>()?;
        op.check_g_idx(g)?;
        let trivial = g.iter().enumerate().all(|(k, &b)| b as usize == k / op.block_size);
        (!trivial).then(|| g.iter().map(|&b| b as u32).collect())
    } else {
        None
    };
    let bias = if found.bias { Some(util::to_f32(view(MatMulNBitsOp::BIAS)?)?) } else { None };
    let zero_scales = match &zero_points {
        Zp::Int(z) => Some(z.iter().zip(scales.as_slice()).map(|(&z, s)| f32::from(z) * s).collect()),
        _ => None,
    };
    Ok(Weights { dtype: a_type, b, scales, zero_points, zero_scales, g_idx, bias })
}

impl Weights {
    /// Blocks `from..from + len`'s integer zero points as the AVX2 kernel takes them.
    #[cfg(target_arch = "x86_64")]
    fn avx2_zero_points(&self, from: usize, len: usize) -> Option<avx2::ZeroPoints<'_>> {
        match (&self.zero_points, &self.zero_scales) {
            (Zp::Uniform(z), _) => Some(avx2::ZeroPoints::Uniform(*z)),
            (_, Some(zero_scales)) => Some(avx2::ZeroPoints::PerBlock(&zero_scales[from..][..len])),
            _ => None,
        }
    }

    /// The packed bytes of column `n`.
    fn column<'a>(&self, bytes: &'a [u8], op: &MatMulNBitsOp, n: usize) -> &'a [u8] {
        let len = op.k_blocks() * op.blob_bytes();
        &bytes[n * len..][..len]
    }
}

/// Unpacks one block of `bits`-bit values (low bits first) into `out`.
#[inline(always)]
fn unpack_block(blob: &[u8], bits: usize, out: &mut [u8]) {
    match bits {
        4 => {
            for (pair, &byte) in out.chunks_exact_mut(2).zip(blob) {
                pair[0] = byte & 0x0f;
                pair[1] = byte >> 4;
            }
        }
        8 => out.copy_from_slice(&blob[..out.len()]),
        _ => {
            for (quad, &byte) in out.chunks_exact_mut(4).zip(blob) {
                for (j, q) in quad.iter_mut().enumerate() {
                    *q = (byte >> (2 * j)) & 3;
                }
            }
        }
    }
}

/// `Σ q·a` of unsigned weights and int8 activations.
#[inline(always)]
fn dot_u8_i8(q: &[u8], a: &[i8]) -> i32 {
    // i16 products pair up into i32 sums (pmaddwd): no overflow for 8-bit q and |a| <= 127.
    q.iter().zip(a).map(|(&q, &a)| i32::from(q as i16 * a as i16)).sum()
}

/// `Σ (q − zp)·a` in f32.
#[inline(always)]
fn dot_f32(q: &[u8], zp: f32, a: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (qc, ac) = (q.chunks_exact(8), a.chunks_exact(8));
    let (qr, ar) = (qc.remainder(), ac.remainder());
    for (q8, a8) in qc.zip(ac) {
        for l in 0..8 {
            lanes[l] += (f32::from(q8[l]) - zp) * a8[l];
        }
    }
    let tail: f32 = qr.iter().zip(ar).map(|(&q, &a)| (f32::from(q) - zp) * a).sum();
    lanes.iter().sum::<f32>() + tail
}

/// Rows of A quantized to int8 per block (zero-padded to whole blocks), with each block's
/// scale and the sum of its quantized values.
struct QuantizedRows {
    /// Values per block.
    block: usize,
    /// Whether each 32 values are stored evens first (for the AVX2 kernel).
    permuted: bool,
    /// Blocks per row.
    blocks: usize,
    values: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    /// `scale · Σ q` per block.
    scaled_sums: Vec<f32>,
}

/// `x` rounded half to even, for `|x| < 2^22`: adding and subtracting 1.5 · 2^23 leaves no
/// fraction bits and the addition rounds to nearest even (inlined where `round_ties_even`
/// calls libm's `rintf` on CPUs without SSE4.1 code).
fn round_half_even_small(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (x + SHIFT) - SHIFT
}

/// Quantizes each `k`-long row of `a` per block of `block` values, as ONNX Runtime's int8
/// path does: `scale = max|a| / 127`, `q = round_half_even(a · 127 / max|a|)`.
fn quantize_rows(a: &[f32], k: usize, block: usize) -> QuantizedRows {
    let rows = a.len() / k.max(1);
    let blocks = k.div_ceil(block);
    let mut values = vec![0i8; rows * blocks * block];
    let mut scales = vec![0f32; rows * blocks];
    let mut sums = vec![0i32; rows * blocks];
    for r in 0..rows {
        for b in 0..blocks {
            let src = &a[r * k + b * block..r * k + ((b + 1) * block).min(k)];
            let amax = src.iter().fold(0f32, |m, x| m.max(x.abs()));
            let inv = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let dst = &mut values[(r * blocks + b) * block..][..src.len()];
            let mut sum = 0i32;
            for (d, &x) in dst.iter_mut().zip(src) {
                *d = round_half_even_small(x * inv) as i8;
                sum += i32::from(*d);
            }
            scales[r * blocks + b] = amax / 127.0;
            sums[r * blocks + b] = sum;
        }
    }
    let scaled_sums = sums.iter().zip(&scales).map(|(&s, a)| s as f32 * a).collect();
    QuantizedRows { block, blocks, permuted: false, values, scales, sums, scaled_sums }
}

impl MatMulNBits {
    /// Computes one tile of columns `n0..n0 + width` for every row: `out[j * rows + r]`.
    fn tile(&self, w: &Weights, bytes: &[u8], a: &Activations, n0: usize, width: usize, out: &mut [f32]) {
        let op = &self.op;
        let (k, block, blocks, blob) = (op.k, op.block_size, op.k_blocks(), op.blob_bytes());
        let rows = out.len() / width;
        let scales = w.scales.as_slice();
        #[cfg(target_arch = "x86_64")]
        if let (Some(perm), Some(zero_points)) = (&self.avx2_rows(a), w.avx2_zero_points(n0 * blocks, width * blocks)) {
            let column_bytes = blocks * blob;
            let tile = avx2::Columns {
                weights: &bytes[n0 * column_bytes..][..width * column_bytes],
                scales: &scales[n0 * blocks..][..width * blocks],
                zero_points,
                block,
                count: width,
            };
            avx2::columns(&tile, perm, out);
            return;
        }
        // One block of unpacked weights (blocks may be longer than 256).
        let mut q = vec![0u8; block];
        for j in 0..width {
            let n = n0 + j;
            let column = w.column(bytes, op, n);
            for b in 0..blocks {
                let len = block.min(k - b * block);
                unpack_block(&column[b * blob..][..blob], op.bits, &mut q);
                let scale = scales[n * blocks + b];
                match a {
                    Activations::Int8(qa) => {
                        let zp = i32::from(w.zero_points.int(n * blocks + b));
                        // Blocks over 256 values are A-blocks of 256 sharing B's scale.
                        let per = block / qa.block;
                        for sub in 0..per {
                            let first = sub * qa.block;
                            if first >= len {
                                break;
                            }
                            let sub_len = qa.block.min(len - first);
                            let ab = b * per + sub;
                            for r in 0..rows {
                                let at = r * qa.blocks + ab;
                                let dot = dot_u8_i8(&q[first..first + sub_len], &qa.values[at * qa.block..][..sub_len])
                                    - zp * qa.sums[at];
                                out[j * rows + r] += dot as f32 * (qa.scales[at] * scale);
                            }
                        }
                    }
                    Activations::Float(af) => {
                        let zp = w.zero_points.float(n * blocks + b);
                        for r in 0..rows {
                            out[j * rows + r] += scale * dot_f32(&q[..len], zp, &af[r * k + b * block..][..len]);
                        }
                    }
                }
            }
        }
    }

    /// Like [`Self::tile`] for weights whose rows belong to blocks given by `g_idx`: each
    /// weight dequantized with its own row's block parameters (f32 arithmetic).
    fn tile_g_idx(
        &self,
        w: &Weights,
        g_idx: &[u32],
        bytes: &[u8],
        a: &[f32],
        n0: usize,
        width: usize,
        out: &mut [f32],
    ) {
        let op = &self.op;
        let (k, blocks) = (op.k, op.k_blocks());
        let rows = out.len() / width;
        let scales = w.scales.as_slice();
        for j in 0..width {
            let n = n0 + j;
            let column = w.column(bytes, op, n);
            let weights: Vec<f32> = (0..k)
                .map(|kk| {
                    let g = n * blocks + g_idx[kk] as usize;
                    (f32::from(unpack(column, op.bits, kk)) - w.zero_points.float(g)) * scales[g]
                })
                .collect();
            for r in 0..rows {
                out[j * rows + r] = a[r * k..][..k].iter().zip(&weights).map(|(x, y)| x * y).sum();
            }
        }
    }

    /// A's rows as the AVX2 kernel reads them, when it runs this product.
    #[cfg(target_arch = "x86_64")]
    fn avx2_rows<'a>(&self, a: &'a Activations) -> Option<avx2::Rows<'a>> {
        match a {
            Activations::Int8(qa) if qa.permuted => Some(avx2::Rows {
                values: &qa.values,
                scales: &qa.scales,
                scaled_sums: &qa.scaled_sums,
                sums: &qa.sums,
                a_block: qa.block,
                a_blocks: qa.blocks,
            }),
            _ => None,
        }
    }

    /// Whether the product quantizes A to int8, as ONNX Runtime's CPU EP does: at
    /// `accuracy_level` 4 with integer zero points and no `g_idx`, for 4- and 8-bit weights and
    /// 2-bit ones in blocks of 32, 64 or 128 (it has no int8 kernel for the others).
    fn int8_arithmetic(&self, w: &Weights) -> bool {
        let op = &self.op;
        let kernel = op.bits != 2 || [32, 64, 128].contains(&op.block_size);
        op.accuracy_level == 4 && kernel && w.g_idx.is_none() && w.zero_points.is_int()
    }

    fn compute(&self, w: &Weights, a: &TensorView<'_>) -> Result<Value> {
        let op = &self.op;
        let out_shape = op.output_shape(a.shape())?;
        let af = util::f32s(a)?;
        let rows = af.len() / op.k;
        let bytes = w.b.view()?.bytes()?;
        let acts = if self.int8_arithmetic(w) {
            Activations::Int8(quantize_rows(&af, op.k, op.block_size.min(256)))
        } else {
            Activations::Float(af.into_owned())
        };
        let acts = match acts {
            #[cfg(target_arch = "x86_64")]
            Activations::Int8(qa) if op.bits == 4 && qa.block % 32 == 0 && avx2::available() => {
                let permuted = avx2::permute_for_avx2(&qa.values, qa.block, qa.blocks);
                Activations::Int8(QuantizedRows { values: permuted, permuted: true, ..qa })
            }
            other => other,
        };
        // Columns in tiles; each tile computes its outputs column by column ([width][rows])
        // and stores them in Y's rows.
        let mut y = onyx_core::host_pool::take::<f32>(rows * op.n);
        parallel::for_each_column_band_mut(&mut y, op.n, TILE_COLUMNS, &|_, band| {
            let (n0, width) = (band.start(), band.width());
            let mut by_column = [0f32; TILE_COLUMNS];
            let mut scratch = Vec::new();
            let out = if rows == 1 {
                &mut by_column[..width]
            } else {
                scratch.resize(width * rows, 0f32);
                &mut scratch[..]
            };
            util::simd(|| match (&w.g_idx, &acts) {
                (Some(g), Activations::Float(af)) => self.tile_g_idx(w, g, bytes, af, n0, width, out),
                _ => self.tile(w, bytes, &acts, n0, width, out),
            });
            for r in 0..band.rows() {
                band.row(r).iter_mut().enumerate().for_each(|(j, y)| *y = out[j * rows + r]);
            }
        });
        if let Some(bias) = &w.bias {
            y.chunks_mut(op.n).for_each(|row| row.iter_mut().zip(bias).for_each(|(y, b)| *y += b));
        }
        util::from_f32(a.dtype(), out_shape, y)
    }
}

/// The activations as the chosen arithmetic reads them.
enum Activations {
    Int8(QuantizedRows),
    Float(Vec<f32>),
}

impl Kernel for MatMulNBits {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.op;
        let a = util::input(inputs, MatMulNBitsOp::A, &op.at)?;
        let prepared;
        let w = match &self.weights {
            Some(w) => w.as_ref(),
            None => {
                let views = (MatMulNBitsOp::B..=MatMulNBitsOp::BIAS)
                    .map(|i| util::opt_input(inputs, i, &op.at))
                    .collect::<Result<Vec<_>>>()?;
                prepared = prepare(op, a.dtype(), &views, &[])?;
                &prepared
            }
        };
        if a.dtype() != w.dtype {
            return Err(Error::input(
                &op.at,
                MatMulNBitsOp::A,
                format!("{} (the scales' type)", w.dtype.name()),
                a.dtype().name(),
            ));
        }
        let y = self.compute(w, &a)?;
        Ok(vec![y])
    }
}

#[cfg(test)]
mod rounding_tests {
    use super::round_half_even_small;

    #[test]
    fn rounds_half_to_even_as_the_library_does() {
        let mut rng = fastrand::Rng::with_seed(3);
        let halves = (-300..300).map(|i| i as f32 * 0.5);
        let random = (0..10_000).map(|_| (rng.f32() - 0.5) * 300.0);
        for x in halves.chain(random).chain([127.0, -127.0, 126.5, -0.5, 0.49999997]) {
            assert_eq!(round_half_even_small(x), x.round_ties_even(), "{x}");
        }
    }
}
