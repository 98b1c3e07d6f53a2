//! The AVX2 kernels for B-blocks of 32 (the model builder's): two blocks a step and
//! [`ROW_TILE`] rows at a time, reading A as [`super::permute_for_avx2`] stores it.

use std::arch::x86_64::*;

use super::{correction, hsum, Group, Rows, PREFETCH_BYTES};

/// Rows of A taken together by the block-32 kernels: each unpacked block of B serves them all
/// (with 4, the AVX-512 kernel runs out of registers and slows down).
pub(super) const ROW_TILE: usize = 2;

/// Calls `body(first, tiled, prefetch)` for each whole tile of [`ROW_TILE`] rows (`tiled`),
/// then for each row left (not `tiled`); `prefetch` is set for the first call only (the
/// weights stay in the cache for the next rows).
pub(super) fn by_row_tiles(rows: usize, body: &mut dyn FnMut(usize, bool, bool)) {
    let mut r = 0;
    while r + ROW_TILE <= rows {
        body(r, true, r == 0);
        r += ROW_TILE;
    }
    for r in r..rows {
        body(r, false, r == 0);
    }
}

/// [`columns4_avx2`] for blocks of 32 (the model builder's), two blocks a step and
/// [`ROW_TILE`] rows at a time: 32 bytes of a column (two blocks) give the even elements of
/// both blocks (low nibbles) and their odd ones (high nibbles) in two registers, whose lanes
/// 0-3 are the first block and 4-7 the second, as A's values are stored (see
/// [`super::permute_for_avx2`]). The two products per pair of bytes add in i16 (|sum| ≤ 4·15·127),
/// one `madd` makes the blocks' i32 sums, and one FMA adds them times each lane's block scales.
/// The first rows prefetch the weights (the next ones find them in the cache).
// SAFETY: for callers: only `columns` calls it, after asserting AVX2/FMA and every bound it
// reads; with blocks of 32, block `ab` is A's bytes `32 ab..32 ab + 32` of the row and each
// column's bytes `16 ab..16 ab + 16` and scale `ab`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn columns4_block32(g: &Group, a: &Rows<'_>, rows: usize, out: &mut [f32]) {
    // SAFETY: the CPU has AVX2 and FMA (this function's callers checked), and each tile's rows
    // are below `rows`.
    by_row_tiles(rows, &mut |first, tiled, prefetch| unsafe {
        if tiled {
            rows_block32::<ROW_TILE>(g, a, first, rows, prefetch, out)
        } else {
            rows_block32::<1>(g, a, first, rows, prefetch, out)
        }
    });
}

/// Rows `first..first + R` of [`columns4_block32`].
// SAFETY: for callers: `columns4_block32`, with `first + R <= rows`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn rows_block32<const R: usize>(
    g: &Group,
    a: &Rows<'_>,
    first: usize,
    rows: usize,
    prefetch: bool,
    out: &mut [f32],
) {
    let blocks = a.a_blocks;
    let mut acc = [[_mm256_setzero_ps(); R]; 4];
    let a_rows: [*const i8; R] = std::array::from_fn(|i| a.values.as_ptr().add((first + i) * blocks * 32));
    let a_scales: [*const f32; R] = std::array::from_fn(|i| a.scales.as_ptr().add((first + i) * blocks));
    blocks32(&mut acc, &g.weights, &g.scales, &a_rows, &a_scales, 0, blocks, prefetch);
    for i in 0..R {
        let r = first + i;
        let sums = &a.scaled_sums[r * blocks..][..blocks];
        for k in 0..4 {
            out[k * rows + r] += hsum(acc[k][i]) - g.zero_factor() * correction(sums, g.zero_scales(k, blocks), 1);
        }
    }
}

/// Blocks `ab` and `ab + 1` (of 32) of four columns, for `R` rows, into `acc[column][row]`, as
/// [`columns4_block32`] describes.
// SAFETY: for callers: `blocks32`, with `ab + 2` blocks within the bounds it was called with.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn pair32<const R: usize>(
    acc: &mut [[__m256; R]; 4],
    weights: &[*const u8; 4],
    scales: &[*const f32; 4],
    a_rows: &[*const i8; R],
    a_scales: &[*const f32; R],
    ab: usize,
    prefetch: bool,
) {
    let low4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    let sa: [__m256; R] = std::array::from_fn(|i| {
        _mm256_set_m128(_mm_set1_ps(*a_scales[i].add(ab + 1)), _mm_set1_ps(*a_scales[i].add(ab)))
    });
    for k in 0..4 {
        if prefetch {
            _mm_prefetch::<_MM_HINT_T0>(weights[k].wrapping_add(16 * ab + PREFETCH_BYTES) as *const i8);
        }
        let bytes = _mm256_loadu_si256(weights[k].add(16 * ab) as *const __m256i);
        let even = _mm256_and_si256(bytes, low4);
        let odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        let sb = _mm256_castpd_ps(_mm256_castpd128_pd256(_mm_load_sd(scales[k].add(ab) as *const f64)));
        let sb = _mm256_permutevar8x32_ps(sb, pair);
        for i in 0..R {
            let a_even = _mm256_loadu_si256(a_rows[i].add(32 * ab) as *const __m256i);
            let a_odd = _mm256_loadu_si256(a_rows[i].add(32 * ab + 32) as *const __m256i);
            let sums = _mm256_add_epi16(_mm256_maddubs_epi16(even, a_even), _mm256_maddubs_epi16(odd, a_odd));
            let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(sums, ones));
            acc[k][i] = _mm256_fmadd_ps(dot, _mm256_mul_ps(sa[i], sb), acc[k][i]);
        }
    }
}

/// Blocks `from..blocks` (of 32) of four columns, for `R` rows, into `acc`: two a step
/// ([`pair32`]), the last one alone ([`block32`]).
// SAFETY: for callers: as for [`pair32`], with every block below `blocks` within bounds.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn blocks32<const R: usize>(
    acc: &mut [[__m256; R]; 4],
    weights: &[*const u8; 4],
    scales: &[*const f32; 4],
    a_rows: &[*const i8; R],
    a_scales: &[*const f32; R],
    from: usize,
    blocks: usize,
    prefetch: bool,
) {
    // Locals, so that the accumulators and pointers stay in registers across the loop.
    let (mut sums, weights, scales) = (*acc, *weights, *scales);
    let mut ab = from;
    while ab + 2 <= blocks {
        pair32(&mut sums, &weights, &scales, a_rows, a_scales, ab, prefetch);
        ab += 2;
    }
    if ab < blocks {
        block32(&mut sums, &weights, &scales, a_rows, a_scales, ab);
    }
    *acc = sums;
}

/// Block `ab` (of 32) of four columns, for `R` rows, into `acc`: `acc[k][i] += dot(q_k, a_i) ·
/// sa_i · sb_k` (a block without a pair is stored as one group of 32).
// SAFETY: for callers: `blocks32`, within the bounds it was called with.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn block32<const R: usize>(
    acc: &mut [[__m256; R]; 4],
    weights: &[*const u8; 4],
    scales: &[*const f32; 4],
    a_rows: &[*const i8; R],
    a_scales: &[*const f32; R],
    ab: usize,
) {
    let low4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let shift = _mm256_set_epi64x(4, 4, 0, 0);
    for k in 0..4 {
        let bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(weights[k].add(16 * ab) as *const __m128i));
        let q = _mm256_and_si256(_mm256_srlv_epi64(bytes, shift), low4);
        for i in 0..R {
            let av = _mm256_loadu_si256(a_rows[i].add(32 * ab) as *const __m256i);
            let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), ones);
            let scale = _mm256_set1_ps(*a_scales[i].add(ab) * *scales[k].add(ab));
            acc[k][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[k][i]);
        }
    }
}
