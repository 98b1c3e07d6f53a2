//! The register tile of the packed f32 convolution ([`super::packed`]): an 8 x 32 block of C
//! (8 output channels, 32 output positions) kept in sixteen AVX-512 registers while the whole
//! reduction runs, reading A (the weights) in place and B from a packed panel.

/// Rows of C in one register tile (output channels).
pub(crate) const MR: usize = 8;
/// Columns of C in one register tile (output positions): two 16-lane vectors.
pub(crate) const NR: usize = 32;

/// True when this CPU runs the AVX-512 tile (checked once by the standard library's cache).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `C[r][j] = sum_p A[r][p] * B[p][j]` for one tile, `r < MR`, `j < NR`, written over C (added
/// to C when `accumulate`).
///
/// `a` holds A's rows (row r starts at `a_rows[r]`: rows past the matrix repeat its last row,
/// and their results are discarded by the caller); B's row p is the `NR` elements at
/// `b[b0 + p * ldb..]` (a packed panel: `b0 = 0`, `ldb = NR`; or the input itself); C's row r
/// starts at `c + r * ldc`.
///
/// # Safety
/// `available()` must be true. For every r, `a_rows[r]..a_rows[r] + k` must lie inside `a`;
/// when `k > 0`, `b0 + (k - 1) * ldb + NR <= b.len()`; the `MR` rows of `NR` elements at
/// `c + r * ldc` must be valid for reads and writes and touched by no other thread during the
/// call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    k: usize,
    a: &[f32],
    a_rows: &[usize; MR],
    b: &[f32],
    b0: usize,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    debug_assert!(k == 0 || b0 + (k - 1) * ldb + NR <= b.len());
    debug_assert!(a_rows.iter().all(|&r| r + k <= a.len()));
    let ap = a.as_ptr();
    let a: [*const f32; MR] = std::array::from_fn(|r| ap.wrapping_add(a_rows[r]));
    let bp = b.as_ptr().wrapping_add(b0);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..k {
        // SAFETY: p < k, so `b0 + p * ldb .. + NR` is inside `b` and `a[r] + p` inside row r of
        // A (a_rows[r] + k <= a.len()): the caller's contract.
        unsafe {
            let b0 = _mm512_loadu_ps(bp.add(p * ldb));
            let b1 = _mm512_loadu_ps(bp.add(p * ldb + 16));
            for r in 0..MR {
                let av = _mm512_set1_ps(*a[r].add(p));
                acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: row r of the tile, NR elements at c + r * ldc, is readable and writable
        // (caller's contract).
        unsafe {
            let (c0, c1) = (c.add(r * ldc), c.add(r * ldc + 16));
            let (v0, v1) = if accumulate {
                (_mm512_add_ps(acc[0], _mm512_loadu_ps(c0)), _mm512_add_ps(acc[1], _mm512_loadu_ps(c1)))
            } else {
                (acc[0], acc[1])
            };
            _mm512_storeu_ps(c0, v0);
            _mm512_storeu_ps(c1, v1);
        }
    }
}

/// Stand-in on other architectures: never called, since [`available`] is false there.
///
/// # Safety
/// Never sound to call: `available()` is false on this architecture.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    _k: usize,
    _a: &[f32],
    _a_rows: &[usize; MR],
    _b: &[f32],
    _b0: usize,
    _ldb: usize,
    _c: *mut f32,
    _ldc: usize,
    _accumulate: bool,
) {
    unreachable!("the AVX-512 tile is only built for x86_64")
}

/// `dst[i] = src[start + i * stride]` for `i < n` (`n <= NR`, `dst.len() >= n`): the packing
/// of one run of B, with 16-lane masked loads for strides 1 and 2.
///
/// # Safety
/// `available()` must be true.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn copy_run(src: &[f32], start: usize, stride: usize, n: usize, dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let last = start + n.saturating_sub(1) * stride;
    if n == 0 || n > NR || dst.len() < n || last >= src.len() || stride > 2 {
        for (d, s) in dst.iter_mut().zip(src.iter().skip(start).step_by(stride.max(1))).take(n) {
            *d = *s;
        }
        return;
    }
    let (sp, dp) = (src.as_ptr().wrapping_add(start), dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let m = (n - i).min(16);
        let out_mask: __mmask16 = ((1u32 << m) - 1) as __mmask16;
        // SAFETY: the lanes enabled by the masks read `src[start + (i + l) * stride]` for
        // l < m, i + m <= n: at most `last < src.len()`; they write `dst[i + l] `, i + l < n <=
        // dst.len(). Masked-off lanes are neither read nor written (no fault).
        unsafe {
            let v = if stride == 1 {
                _mm512_maskz_loadu_ps(out_mask, sp.wrapping_add(i))
            } else {
                // 2m - 1 inputs: the even ones are the run.
                let lanes = 2 * m - 1;
                let lo_mask = ((1u32 << lanes.min(16)) - 1) as __mmask16;
                let hi_mask = ((1u32 << lanes.saturating_sub(16)) - 1) as __mmask16;
                let lo = _mm512_maskz_loadu_ps(lo_mask, sp.wrapping_add(2 * i));
                let hi = _mm512_maskz_loadu_ps(hi_mask, sp.wrapping_add(2 * i + 16));
                let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                _mm512_permutex2var_ps(lo, evens, hi)
            };
            _mm512_mask_storeu_ps(dp.wrapping_add(i), out_mask, v);
        }
        i += m;
    }
}

/// Stand-in on other architectures: never called, since [`available`] is false there.
///
/// # Safety
/// Never sound to call: `available()` is false on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn copy_run(_src: &[f32], _start: usize, _stride: usize, _n: usize, _dst: &mut [f32]) {
    unreachable!("the AVX-512 packing is only built for x86_64")
}
