//! The AVX-512 VNNI kernel for B-blocks of 32: four blocks a step (`vpdpbusd`), the last
//! ones through the AVX2 kernels' [`blocks32`].

use std::arch::x86_64::*;

use super::block32::{blocks32, by_row_tiles, ROW_TILE};
use super::{available, correction, hsum, Group, Rows, PREFETCH_BYTES};

/// Whether this CPU has AVX-512 with VNNI (`vpdpbusd`: four u8 × i8 products added into each
/// i32 lane in one instruction).
pub(super) fn vnni_available() -> bool {
    available()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// [`super::block32::columns4_block32`] with AVX-512 VNNI, four blocks a step and [`ROW_TILE`] rows at a
/// time: 64 bytes of a column give the even and odd elements of four blocks, 128-bit lane k
/// holding block k; two `vpdpbusd` make each block's i32 sums, and one FMA adds them times each
/// lane's block scales. A's four blocks are rearranged once (two lane shuffles) for the four
/// columns. The last blocks take [`blocks32`].
// SAFETY: for callers: only `columns4` calls it, after asserting every bound it reads and
// checking AVX2, FMA, AVX-512F/BW and VNNI; with blocks of 32, block `ab` is A's bytes
// `32 ab..32 ab + 32` of the row and each column's bytes `16 ab..16 ab + 16` and scale `ab`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn columns4_block32_vnni(g: &Group, a: &Rows<'_>, rows: usize, out: &mut [f32]) {
    // SAFETY: the CPU has AVX2, FMA, AVX-512F/BW and VNNI (the callers checked), and each tile's rows are
    // below `rows`.
    by_row_tiles(rows, &mut |first, tiled, prefetch| unsafe {
        if tiled {
            rows_block32_vnni::<ROW_TILE>(g, a, first, rows, prefetch, out)
        } else {
            rows_block32_vnni::<1>(g, a, first, rows, prefetch, out)
        }
    });
}

/// Rows `first..first + R` of [`columns4_block32_vnni`].
// SAFETY: for callers: `columns4_block32_vnni`, with `first + R <= rows`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn rows_block32_vnni<const R: usize>(
    g: &Group,
    a: &Rows<'_>,
    first: usize,
    rows: usize,
    prefetch: bool,
    out: &mut [f32],
) {
    let uniform_zero_point = g.uniform_zero_point;
    let blocks = a.a_blocks;
    let low4 = _mm512_set1_epi8(0x0f);
    let quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    let minus_zero = _mm_set1_epi32(-i32::from(uniform_zero_point.unwrap_or(0)));
    let (weights, scales) = (&g.weights, &g.scales);
    let mut wide = [[_mm512_setzero_ps(); R]; 4];
    let mut acc = [[_mm256_setzero_ps(); R]; 4];
    let a_rows: [*const i8; R] = std::array::from_fn(|i| a.values.as_ptr().add((first + i) * blocks * 32));
    let a_scales: [*const f32; R] = std::array::from_fn(|i| a.scales.as_ptr().add((first + i) * blocks));
    let a_sums: [*const i32; R] = std::array::from_fn(|i| a.sums.as_ptr().add((first + i) * blocks));
    let mut ab = 0;
    while ab + 4 <= blocks {
        // Per row: `−zp · Σ a_q` of each block in its lane's first element (the products start
        // from the zero point's share, zero when the zero points differ per column); A's
        // even elements of the four blocks (lane k: block ab + k), their odd ones, and scales.
        let mut start = [_mm512_setzero_si512(); R];
        let mut a_even = [_mm512_setzero_si512(); R];
        let mut a_odd = [_mm512_setzero_si512(); R];
        let mut sa = [_mm512_setzero_ps(); R];
        for i in 0..R {
            let sums = _mm_mullo_epi32(_mm_loadu_si128(a_sums[i].add(ab) as *const _), minus_zero);
            start[i] = _mm512_maskz_permutexvar_epi32(0x1111, quad, _mm512_castsi128_si512(sums));
            // Lanes of z0: even elements of blocks ab, ab + 1, then their odd ones; of z1: the
            // same for ab + 2, ab + 3.
            let z0 = _mm512_loadu_si512(a_rows[i].add(32 * ab) as *const _);
            let z1 = _mm512_loadu_si512(a_rows[i].add(32 * ab + 64) as *const _);
            a_even[i] = _mm512_shuffle_i64x2(z0, z1, 0b01_00_01_00);
            a_odd[i] = _mm512_shuffle_i64x2(z0, z1, 0b11_10_11_10);
            sa[i] = _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_loadu_ps(a_scales[i].add(ab))));
        }
        for k in 0..4 {
            if prefetch {
                _mm_prefetch::<_MM_HINT_T0>(weights[k].wrapping_add(16 * ab + PREFETCH_BYTES) as *const i8);
            }
            let bytes = _mm512_loadu_si512(weights[k].add(16 * ab) as *const _);
            let even = _mm512_and_si512(bytes, low4);
            let odd = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
            let sb = _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_loadu_ps(scales[k].add(ab))));
            for i in 0..R {
                let sums = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start[i], even, a_even[i]), odd, a_odd[i]);
                wide[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(sa[i], sb), wide[k][i]);
            }
        }
        ab += 4;
    }
    blocks32(&mut acc, weights, scales, &a_rows, &a_scales, ab, blocks, prefetch);
    // The zero points' share of the blocks not taken out above.
    let corrected = if uniform_zero_point.is_some() { ab } else { 0 };
    for i in 0..R {
        let r = first + i;
        let sums = &a.scaled_sums[r * blocks..][corrected..blocks];
        for k in 0..4 {
            out[k * rows + r] += _mm512_reduce_add_ps(wide[k][i]) + hsum(acc[k][i])
                - g.zero_factor() * correction(sums, &g.zero_scales(k, blocks)[corrected..], 1);
        }
    }
}
