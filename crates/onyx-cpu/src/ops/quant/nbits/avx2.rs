//! The int4 × int8 dot products of MatMulNBits at `accuracy_level` 4 with AVX2: 32 weights a
//! step, unpacked from 16 bytes in registers and multiplied by A's int8 values with
//! `maddubs` (u8 × i8 pairs into i16, exact: |q·a| ≤ 15·127) and `madd` (pairs into i32); each
//! A-block's 8 i32 lanes are converted and added, times the block's two scales, to 8 f32
//! lanes summed once per output. A's values are stored per 32 with the even elements first
//! (see [`permute_for_avx2`]), so that the low and high nibbles of B's bytes meet them
//! without shuffles. Blocks of 32 (the model builder's) go two at a time, or four at a time with
//! AVX-512 VNNI where the CPU has it (`vpdpbusd` in place of `maddubs` and `madd`).

use std::arch::x86_64::*;

mod block32;
mod vnni;

use block32::columns4_block32;
use vnni::{columns4_block32_vnni, vnni_available};

/// Whether this CPU runs [`column`].
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// A's quantized values (`a_blocks` blocks of `a_block` per row) in the order the kernels
/// read them (B's byte `j` holds elements `2j` and `2j + 1`): each group of 32 as its 16 even
/// elements, then its 16 odd ones; with blocks of 32, each row's pairs of blocks as the evens
/// of both, then the odds of both (a last unpaired block as one group), so that
/// [`pair32`] loads them as they are.
pub(super) fn permute_for_avx2(values: &[i8], a_block: usize, a_blocks: usize) -> Vec<i8> {
    let mut out = vec![0i8; values.len()];
    let row = a_block * a_blocks;
    for (dst_row, src_row) in out.chunks_exact_mut(row.max(1)).zip(values.chunks_exact(row.max(1))) {
        let paired = if a_block == 32 { a_blocks / 2 * 64 } else { 0 };
        for (dst, src) in dst_row[..paired].chunks_exact_mut(64).zip(src_row[..paired].chunks_exact(64)) {
            for j in 0..16 {
                dst[j] = src[2 * j];
                dst[16 + j] = src[32 + 2 * j];
                dst[32 + j] = src[2 * j + 1];
                dst[48 + j] = src[32 + 2 * j + 1];
            }
        }
        for (dst, src) in dst_row[paired..].chunks_exact_mut(32).zip(src_row[paired..].chunks_exact(32)) {
            for j in 0..16 {
                dst[j] = src[2 * j];
                dst[16 + j] = src[2 * j + 1];
            }
        }
    }
    out
}

/// One output column over `rows` rows of A.
#[derive(Clone, Copy)]
pub(super) struct Column<'a> {
    /// The column's packed 4-bit weights, `blocks * block / 2` bytes.
    pub weights: &'a [u8],
    /// The column's scale per block.
    pub scales: &'a [f32],
    /// The column's zero points.
    pub zero_points: ZeroPoints<'a>,
    /// Weights per block of B (a multiple of `a_block`).
    pub block: usize,
}

/// The zero points of B's blocks.
#[derive(Clone, Copy)]
pub(super) enum ZeroPoints<'a> {
    /// The same zero point in every block (the midpoint when the node has none).
    Uniform(u8),
    /// `zero_point · scale` per block, laid out as the scales.
    PerBlock(&'a [f32]),
}

impl<'a> ZeroPoints<'a> {
    /// `(f, zs)` with `zero_point · scale = f · zs` per block, given the blocks' scales.
    fn factored(self, scales: &'a [f32]) -> (f32, &'a [f32]) {
        match self {
            ZeroPoints::Uniform(z) => (f32::from(z), scales),
            ZeroPoints::PerBlock(zero_scales) => (1.0, zero_scales),
        }
    }
}

/// A quantized as [`permute_for_avx2`] stores it, per row and A-block.
pub(super) struct Rows<'a> {
    /// `rows * a_blocks * a_block` values.
    pub values: &'a [i8],
    /// Scale per (row, A-block).
    pub scales: &'a [f32],
    /// Sum of the quantized values times the scale, per (row, A-block).
    pub scaled_sums: &'a [f32],
    /// Sum of the quantized values, per (row, A-block).
    pub sums: &'a [i32],
    /// Values per A-block (a multiple of 32).
    pub a_block: usize,
    /// A-blocks per row.
    pub a_blocks: usize,
}

/// `out[r] += Σ_blocks (Σ a_q (q − zp)) · sa · sb` for every row `r` of `a`, computed as
/// `Σ (Σ a_q q) · sa · sb − Σ (sa Σ a_q) · (zp · sb)`.
pub(super) fn column(c: &Column<'_>, a: &Rows<'_>, out: &mut [f32]) {
    let per_block = c.block / a.a_block;
    assert!(a.a_block % 32 == 0 && per_block >= 1, "A-blocks of whole 32s inside B's blocks");
    assert!(c.weights.len() * 2 >= a.a_blocks * a.a_block, "the column holds every A-block");
    let (_, zero_scales) = c.zero_points.factored(c.scales);
    assert!(c.scales.len() * per_block >= a.a_blocks && zero_scales.len() * per_block >= a.a_blocks);
    assert!(
        a.values.len() >= out.len() * a.a_blocks * a.a_block
            && a.scales.len() >= out.len() * a.a_blocks
            && a.scaled_sums.len() >= out.len() * a.a_blocks
    );
    assert!(available(), "AVX2 and FMA are checked by the caller");
    // SAFETY: the CPU has AVX2 and FMA (asserted above), and the assertions bound every read:
    // row r's A-blocks are at `(r * a_blocks + ab) * a_block`, below `values.len()`, and
    // A-block `ab`'s 32-groups read bytes `ab * a_block / 2 + 16 g .. + 16`, below
    // `weights.len()`.
    unsafe { column_avx2(c, a, per_block, out) }
}

// SAFETY: for callers: only `column` calls it, after asserting AVX2/FMA and every bound it reads.
#[target_feature(enable = "avx2,fma")]
unsafe fn column_avx2(c: &Column<'_>, a: &Rows<'_>, per_block: usize, out: &mut [f32]) {
    let rows = out.len();
    let mut r = 0;
    // Four rows at a time share each unpacked group of weights.
    while r + 4 <= rows {
        row_tile::<4>(c, a, per_block, r, &mut out[r..r + 4]);
        r += 4;
    }
    while r < rows {
        row_tile::<1>(c, a, per_block, r, &mut out[r..r + 1]);
        r += 1;
    }
}

/// Rows `first..first + R` of one column.
// SAFETY: for callers: only `column_avx2` calls it, under `column`'s checks; rows `first..first + R`
// are rows of `out`, whose count `column` checked against A's buffers.
#[target_feature(enable = "avx2,fma")]
unsafe fn row_tile<const R: usize>(c: &Column<'_>, a: &Rows<'_>, per_block: usize, first: usize, out: &mut [f32]) {
    let low4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let groups = a.a_block / 32;
    // Two accumulators per row, for alternate blocks: the FMAs of one chain overlap.
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for ab in 0..a.a_blocks {
        let scale = c.scales[ab / per_block];
        let wq = c.weights.as_ptr().add(ab * a.a_block / 2);
        let mut lanes = [_mm256_setzero_si256(); R];
        for g in 0..groups {
            // SAFETY: reads bounded as `column` asserts.
            let bytes = _mm_loadu_si128(wq.add(16 * g) as *const __m128i);
            let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes), low4);
            for (i, l) in lanes.iter_mut().enumerate() {
                let aq = a.values.as_ptr().add(((first + i) * a.a_blocks + ab) * a.a_block + 32 * g);
                let pairs = _mm256_maddubs_epi16(q, _mm256_loadu_si256(aq as *const __m256i));
                *l = _mm256_add_epi32(*l, _mm256_madd_epi16(pairs, ones));
            }
        }
        for i in 0..R {
            let combined = _mm256_set1_ps(a.scales[(first + i) * a.a_blocks + ab] * scale);
            acc[i][ab % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes[i]), combined, acc[i][ab % 2]);
        }
    }
    let (factor, zero_scales) = c.zero_points.factored(c.scales);
    for i in 0..R {
        let sums = &a.scaled_sums[(first + i) * a.a_blocks..][..a.a_blocks];
        out[i] += hsum(_mm256_add_ps(acc[i][0], acc[i][1])) - factor * correction(sums, zero_scales, per_block);
    }
}

/// Consecutive output columns of B (a tile), stored one after another as ONNX Runtime lays
/// them out.
pub(super) struct Columns<'a> {
    /// The columns' packed 4-bit weights, `blocks * block / 2` bytes each.
    pub weights: &'a [u8],
    /// Each column's scale per block, `blocks` each.
    pub scales: &'a [f32],
    /// The columns' zero points. A uniform one is taken out of A's sums in integers, with no
    /// per-column correction, where the kernel can.
    pub zero_points: ZeroPoints<'a>,
    /// Weights per block of B (a multiple of A's block).
    pub block: usize,
    /// How many columns.
    pub count: usize,
}

/// The base pointers of four columns.
struct Group {
    weights: [*const u8; 4],
    scales: [*const f32; 4],
    /// `zero_point · scale = zero_factor() · zero_scales` per block.
    zero_scales: [*const f32; 4],
    /// The zero point of every block, when it is the same.
    uniform_zero_point: Option<u8>,
}

impl Group {
    /// The factor of `zero_scales`: the uniform zero point (whose `zero_scales` are the scales),
    /// else 1.
    fn zero_factor(&self) -> f32 {
        self.uniform_zero_point.map_or(1.0, f32::from)
    }

    /// Column `k`'s `zero_point · scale / zero_factor` per block.
    // SAFETY: for callers: `blocks` is at most the column's block count, as `columns` checked.
    unsafe fn zero_scales(&self, k: usize, blocks: usize) -> &[f32] {
        // SAFETY: `columns` checked that each column has `blocks` values from its pointer,
        // inside a slice borrowed for the whole call.
        unsafe { std::slice::from_raw_parts(self.zero_scales[k], blocks) }
    }
}

/// Bytes ahead of each column's reading point loaded early into the cache: the columns of a
/// tile, and the tiles a thread takes, are consecutive in memory, so this runs over the next
/// columns too. The block-32 kernels (AVX2 and VNNI) prefetch: on a Zen 1 VM without AVX-512
/// it took Qwen2.5-0.5B decode from 14 to 21 tokens/s; 1 KiB and less gain less, 4-8 KiB no more.
const PREFETCH_BYTES: usize = 2048;

/// Every column of `c` over every row of `a`: `out[j * rows + r]` (added to). Four columns
/// at a time share each load of A's values and their four dependency chains overlap; the
/// block scales are read in order (no division per block).
pub(super) fn columns(c: &Columns<'_>, a: &Rows<'_>, out: &mut [f32]) {
    let rows = out.len() / c.count.max(1);
    let per_block = c.block / a.a_block;
    assert!(
        a.a_block % 32 == 0 && per_block >= 1 && c.block % a.a_block == 0,
        "A-blocks of whole 32s inside B's blocks"
    );
    let blocks = a.a_blocks.div_ceil(per_block);
    let column_bytes = blocks * c.block / 2;
    let (_, zero_scales) = c.zero_points.factored(c.scales);
    let uniform_zero_point = match c.zero_points {
        ZeroPoints::Uniform(z) => Some(z),
        ZeroPoints::PerBlock(_) => None,
    };
    assert!(
        c.count > 0
            && c.weights.len() >= c.count * column_bytes
            && c.scales.len() >= c.count * blocks
            && zero_scales.len() >= c.count * blocks,
        "the columns hold every A-block"
    );
    assert!(
        out.len() == c.count * rows
            && a.values.len() >= rows * a.a_blocks * a.a_block
            && a.scales.len() >= rows * a.a_blocks
            && a.scaled_sums.len() >= rows * a.a_blocks
            && a.sums.len() >= rows * a.a_blocks
    );
    assert!(available(), "AVX2 and FMA are checked by the caller");
    let block32 = a.a_block == 32 && per_block == 1;
    let vnni = block32 && vnni_available();
    // Columns `j..j + 4`, the last column standing in for those past the end.
    let group = |j: usize| {
        let at = |k: usize| (j + k).min(c.count - 1);
        Group {
            weights: std::array::from_fn(|k| c.weights[at(k) * column_bytes..].as_ptr()),
            scales: std::array::from_fn(|k| c.scales[at(k) * blocks..].as_ptr()),
            zero_scales: std::array::from_fn(|k| zero_scales[at(k) * blocks..].as_ptr()),
            uniform_zero_point,
        }
    };
    let run = |group: &Group, out4: &mut [f32]| {
        // SAFETY: the CPU has AVX2 and FMA (and AVX-512 VNNI for `vnni`), and the assertions
        // bound every read: each column of the group is `column_bytes` bytes and `blocks`
        // scales from its base pointer, each row's A-blocks are inside A's buffers, and
        // `out4` holds four columns of `rows`.
        unsafe {
            if vnni {
                columns4_block32_vnni(group, a, rows, out4)
            } else if block32 {
                columns4_block32(group, a, rows, out4)
            } else {
                columns4_avx2(group, a, per_block, rows, out4)
            }
        }
    };
    let mut j = 0;
    while j + 4 <= c.count {
        run(&group(j), &mut out[j * rows..][..4 * rows]);
        j += 4;
    }
    if j == c.count {
        return;
    }
    if block32 {
        // The last columns as a group of four (A's layout is the block-32 kernels' own).
        let mut four = vec![0f32; 4 * rows];
        run(&group(j), &mut four);
        out[j * rows..].iter_mut().zip(&four).for_each(|(o, f)| *o += f);
        return;
    }
    for j in j..c.count {
        let zero_points = match c.zero_points {
            ZeroPoints::PerBlock(zs) => ZeroPoints::PerBlock(&zs[j * blocks..][..blocks]),
            uniform => uniform,
        };
        let one = Column {
            weights: &c.weights[j * column_bytes..][..column_bytes],
            scales: &c.scales[j * blocks..][..blocks],
            zero_points,
            block: c.block,
        };
        column(&one, a, &mut out[j * rows..][..rows]);
    }
}

// SAFETY: for callers: only `columns4` calls it, after asserting AVX2/FMA and every bound it reads.
#[target_feature(enable = "avx2,fma")]
unsafe fn columns4_avx2(g: &Group, a: &Rows<'_>, per_block: usize, rows: usize, out: &mut [f32]) {
    let low4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let groups = a.a_block / 32;
    let half = a.a_block / 2;
    let weights = &g.weights;
    let blocks = a.a_blocks.div_ceil(per_block);
    for r in 0..rows {
        let mut acc = [_mm256_setzero_ps(); 4];
        let a_row = a.values.as_ptr().add(r * a.a_blocks * a.a_block);
        let a_scales = &a.scales[r * a.a_blocks..][..a.a_blocks];
        let mut ab = 0;
        for b in 0..a.a_blocks.div_ceil(per_block) {
            let sb: [f32; 4] = std::array::from_fn(|k| *g.scales[k].add(b));
            for _ in 0..per_block.min(a.a_blocks - ab) {
                let mut lanes = [_mm256_setzero_si256(); 4];
                for g in 0..groups {
                    // SAFETY: reads bounded as `columns4` asserts.
                    let av = _mm256_loadu_si256(a_row.add(ab * a.a_block + 32 * g) as *const __m256i);
                    for (k, l) in lanes.iter_mut().enumerate() {
                        let bytes = _mm_loadu_si128(weights[k].add(ab * half + 16 * g) as *const __m128i);
                        let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes), low4);
                        *l = _mm256_add_epi32(*l, _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), ones));
                    }
                }
                let sa = a_scales[ab];
                for k in 0..4 {
                    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes[k]), _mm256_set1_ps(sa * sb[k]), acc[k]);
                }
                ab += 1;
            }
        }
        let sums = &a.scaled_sums[r * a.a_blocks..][..a.a_blocks];
        for k in 0..4 {
            out[k * rows + r] += hsum(acc[k]) - g.zero_factor() * correction(sums, g.zero_scales(k, blocks), per_block);
        }
    }
}

/// `Σ_ab sums[ab] · zero_scales[ab / per_block]`: the zero points' share of a row's products.
// SAFETY: for callers: register arithmetic and bounds-checked slice reads; called from the AVX2
// functions above.
#[target_feature(enable = "avx2,fma")]
unsafe fn correction(sums: &[f32], zero_scales: &[f32], per_block: usize) -> f32 {
    if per_block > 1 {
        return sums.chunks(per_block).zip(zero_scales).map(|(s, z)| s.iter().sum::<f32>() * z).sum();
    }
    let n = sums.len().min(zero_scales.len());
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, the length of both slices' common part.
        let (s, z) = (_mm256_loadu_ps(sums.as_ptr().add(i)), _mm256_loadu_ps(zero_scales.as_ptr().add(i)));
        acc = _mm256_fmadd_ps(s, z, acc);
        i += 8;
    }
    hsum(acc) + sums[i..n].iter().zip(&zero_scales[i..n]).map(|(s, z)| s * z).sum::<f32>()
}

/// The sum of 8 lanes.
// SAFETY: for callers: register arithmetic only; called from the AVX2 functions above.
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same sums computed one weight at a time, in natural order.
    fn scalar(c: &Column<'_>, zero_points: &[u8], values: &[i8], a: &Rows<'_>, rows: usize) -> Vec<f32> {
        let per_block = c.block / a.a_block;
        (0..rows)
            .map(|r| {
                (0..a.a_blocks)
                    .map(|ab| {
                        let at = r * a.a_blocks + ab;
                        let b = ab / per_block;
                        let dot: i32 = (0..a.a_block)
                            .map(|i| {
                                let k = ab * a.a_block + i;
                                let q = (c.weights[k / 2] >> (4 * (k % 2))) & 15;
                                (i32::from(q) - i32::from(zero_points[b])) * i32::from(values[at * a.a_block + i])
                            })
                            .sum();
                        dot as f32 * (a.scales[at] * c.scales[b])
                    })
                    .sum()
            })
            .collect()
    }

    #[test]
    fn matches_one_weight_at_a_time() {
        if !available() {
            return;
        }
        let mut rng = fastrand::Rng::with_seed(5);
        // (B's block, A's block, A-blocks, rows, columns): odd block counts leave tails after
        // the steps of 2 and 4 blocks, column counts tails after the groups of 4.
        for (block, a_block, a_blocks, rows, count) in [
            (32usize, 32usize, 7usize, 1usize, 6usize),
            (32, 32, 8, 3, 4),
            (32, 32, 13, 2, 9),
            (32, 32, 6, 1, 5),
            (32, 32, 9, 5, 7),
            (64, 64, 3, 3, 7),
            (512, 256, 3, 2, 5),
            (128, 128, 1, 5, 4),
        ] {
            let blocks = a_blocks.div_ceil(block / a_block);
            let column_bytes = blocks * block / 2;
            let weights: Vec<u8> = (0..count * column_bytes).map(|_| rng.u8(..)).collect();
            let scales: Vec<f32> = (0..count * blocks).map(|_| rng.f32() - 0.5).collect();
            let values: Vec<i8> = (0..rows * a_blocks * a_block).map(|_| rng.i8(-127..=127)).collect();
            let a_scales: Vec<f32> = (0..rows * a_blocks).map(|_| rng.f32()).collect();
            let int_sums: Vec<i32> = values.chunks(a_block).map(|c| c.iter().map(|&v| i32::from(v)).sum()).collect();
            let sums: Vec<f32> = int_sums.iter().zip(&a_scales).map(|(&c, s)| c as f32 * s).collect();
            let natural =
                Rows { values: &values, scales: &a_scales, scaled_sums: &sums, sums: &int_sums, a_block, a_blocks };
            let permuted = permute_for_avx2(&values, a_block, a_blocks);
            let a = Rows { values: &permuted, ..natural };
            let uniform = rng.u8(0..16);
            for zero_points in [vec![uniform; count * blocks], (0..count * blocks).map(|_| rng.u8(0..16)).collect()] {
                let zero_scales: Vec<f32> = zero_points.iter().zip(&scales).map(|(&z, s)| f32::from(z) * s).collect();
                let uniform_zero_point = zero_points.iter().all(|&z| z == uniform).then_some(uniform);
                let given = |j: usize| match uniform_zero_point {
                    Some(z) => ZeroPoints::Uniform(z),
                    None => ZeroPoints::PerBlock(&zero_scales[j * blocks..]),
                };
                let column = |j: usize| Column {
                    weights: &weights[j * column_bytes..][..column_bytes],
                    scales: &scales[j * blocks..][..blocks],
                    zero_points: given(j),
                    block,
                };
                let want = |j: usize| scalar(&column(j), &zero_points[j * blocks..], &values, &natural, rows);
                let close = |kernel: &str, got: &[f32], j: usize| {
                    for (g, w) in got.iter().zip(&want(j)) {
                        assert!(
                            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                            "{kernel}, block {block}, column {j}, uniform {uniform_zero_point:?}: {g} vs {w}"
                        );
                    }
                };
                let first = column(0);
                let alone = Columns {
                    weights: first.weights,
                    scales: first.scales,
                    zero_points: first.zero_points,
                    block,
                    count: 1,
                };
                let mut one = vec![0f32; rows];
                columns(&alone, &a, &mut one);
                close("one column", &one, 0);
                let tile = Columns { weights: &weights, scales: &scales, zero_points: given(0), block, count };
                let mut got = vec![0f32; count * rows];
                columns(&tile, &a, &mut got);
                for j in 0..count {
                    close("dispatched", &got[j * rows..][..rows], j);
                }
                if block != 32 {
                    continue;
                }
                // Each block-32 kernel, whichever the dispatch picks on this CPU.
                let group = Group {
                    weights: std::array::from_fn(|k| weights[k * column_bytes..].as_ptr()),
                    scales: std::array::from_fn(|k| scales[k * blocks..].as_ptr()),
                    zero_scales: std::array::from_fn(|k| {
                        let factored = if uniform_zero_point.is_some() { &scales } else { &zero_scales };
                        factored[k * blocks..].as_ptr()
                    }),
                    uniform_zero_point,
                };
                let mut pairs = vec![0f32; 4 * rows];
                // SAFETY: `available()` was checked above; the bounds are those `columns` asserts.
                unsafe { columns4_block32(&group, &a, rows, &mut pairs) };
                let mut results = vec![("pairs", pairs)];
                if vnni_available() {
                    let mut quads = vec![0f32; 4 * rows];
                    // SAFETY: as above, and the CPU has AVX-512 VNNI.
                    unsafe { columns4_block32_vnni(&group, &a, rows, &mut quads) };
                    results.push(("vnni", quads));
                }
                for (kernel, got) in &results {
                    for j in 0..4 {
                        close(kernel, &got[j * rows..][..rows], j);
                    }
                }
            }
        }
    }
}
