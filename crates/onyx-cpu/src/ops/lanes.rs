//! The f32 vector the register tiles compute with: one channel block of the NCHWc convolutions
//! or one column strip of the packed GEMM. AVX-512 (16 lanes), AVX2 with FMA (8 lanes) or plain
//! arrays the compiler vectorizes for whatever CPU it builds for.
//!
//! Every method is `#[inline(always)]`: the tiles that use them are compiled inside one
//! `#[target_feature]` function per instruction set, where the intrinsics inline too.

/// One channel block's worth of f32 lanes.
pub(crate) trait Lanes: Copy {
    /// Lanes of the vector: the block size `b` it serves.
    const WIDTH: usize;
    /// Accumulator registers of one register tile: `pixels * blocks` of them (the rest hold
    /// the weights and a broadcast input).
    const ACCUMULATORS: usize;
    /// Most output channel blocks of one register tile.
    const BLOCKS: usize;

    /// All lanes zero.
    ///
    /// # Safety
    /// The CPU has the vector's instruction set.
    unsafe fn zero() -> Self;
    /// `WIDTH` elements from `p`.
    ///
    /// # Safety
    /// As [`Lanes::zero`]; `p..p + WIDTH` is readable.
    unsafe fn load(p: *const f32) -> Self;
    /// The element at `p` in every lane.
    ///
    /// # Safety
    /// As [`Lanes::zero`]; `p` is readable.
    unsafe fn splat(p: *const f32) -> Self;
    /// `a * b + c` lane by lane.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self;
    /// `a + b` lane by lane.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `v` in every lane.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn value(v: f32) -> Self;
    /// Lane by lane `if bound > x { bound } else { x }`: a NaN `x` stays NaN.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn at_least(bound: Self, x: Self) -> Self;
    /// Lane by lane `if bound < x { bound } else { x }`: a NaN `x` stays NaN.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn at_most(bound: Self, x: Self) -> Self;
    /// Writes the lanes to `p..p + WIDTH`.
    ///
    /// # Safety
    /// As [`Lanes::zero`]; `p..p + WIDTH` is writable and no other thread touches it.
    unsafe fn store(self, p: *mut f32);
}

/// `N` lanes as a plain array: the portable form (vectorized by the compiler for the baseline
/// instruction set), also what tests use to check the tiles on any CPU.
#[derive(Clone, Copy)]
pub(crate) struct Portable<const N: usize>([f32; N]);

impl<const N: usize> Lanes for Portable<N> {
    const WIDTH: usize = N;
    const ACCUMULATORS: usize = 8;
    const BLOCKS: usize = 2;

    #[inline(always)]
    unsafe fn zero() -> Self {
        Portable([0.0; N])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees `p..p + N` is readable.
        Portable(unsafe { std::ptr::read_unaligned(p as *const [f32; N]) })
    }
    #[inline(always)]
    unsafe fn splat(p: *const f32) -> Self {
        // SAFETY: the caller guarantees `p` is readable.
        Portable([unsafe { *p }; N])
    }
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] * b.0[i] + c.0[i]))
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] + b.0[i]))
    }
    #[inline(always)]
    unsafe fn value(v: f32) -> Self {
        Portable([v; N])
    }
    #[inline(always)]
    unsafe fn at_least(bound: Self, x: Self) -> Self {
        Portable(std::array::from_fn(|i| if bound.0[i] > x.0[i] { bound.0[i] } else { x.0[i] }))
    }
    #[inline(always)]
    unsafe fn at_most(bound: Self, x: Self) -> Self {
        Portable(std::array::from_fn(|i| if bound.0[i] < x.0[i] { bound.0[i] } else { x.0[i] }))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees `p..p + N` is writable.
        unsafe { std::ptr::write_unaligned(p as *mut [f32; N], self.0) }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Lanes;

    /// 16 lanes in one AVX-512 register (block 16).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512(__m512);

    impl Lanes for Avx512 {
        const WIDTH: usize = 16;
        // 24 accumulators (6 pixels x 4 blocks ... 24 x 1) + up to 4 weight vectors + 1
        // broadcast: at most 29 of the 32 registers.
        const ACCUMULATORS: usize = 24;
        const BLOCKS: usize = 4;

        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            Avx512(unsafe { _mm512_setzero_ps() })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: AVX-512F and 16 readable elements: the caller's contract.
            Avx512(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> Self {
            // SAFETY: AVX-512F and a readable `p`: the caller's contract.
            Avx512(unsafe { _mm512_set1_ps(*p) })
        }
        #[inline(always)]
        unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            Avx512(unsafe { _mm512_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            Avx512(unsafe { _mm512_add_ps(a.0, b.0) })
        }
        #[inline(always)]
        unsafe fn value(v: f32) -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            Avx512(unsafe { _mm512_set1_ps(v) })
        }
        #[inline(always)]
        unsafe fn at_least(bound: Self, x: Self) -> Self {
            // SAFETY: the caller guarantees AVX-512F. `max_ps(a, b)` answers b when either is
            // NaN: a NaN x stays.
            Avx512(unsafe { _mm512_max_ps(bound.0, x.0) })
        }
        #[inline(always)]
        unsafe fn at_most(bound: Self, x: Self) -> Self {
            // SAFETY: as `at_least`.
            Avx512(unsafe { _mm512_min_ps(bound.0, x.0) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: AVX-512F and 16 writable elements: the caller's contract.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
    }

    /// 8 lanes in one AVX2 register (block 8), with FMA.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2(__m256);

    impl Lanes for Avx2 {
        const WIDTH: usize = 8;
        // 12 accumulators: 3 pixels x 4 blocks with the 3 broadcasts held and one weight
        // vector at a time (16 registers, as MLAS's FMA3 kernel; 4-10% faster than 6 x 2 on
        // resnet18's convolutions), 6 x 2 and 12 x 1 with the weights held and one broadcast.
        // (4 x 3 with the 3 weights held needs 17: LLVM spills an accumulator, 1.6x slower.)
        const ACCUMULATORS: usize = 12;
        const BLOCKS: usize = 4;

        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: the caller guarantees AVX2.
            Avx2(unsafe { _mm256_setzero_ps() })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: AVX2 and 8 readable elements: the caller's contract.
            Avx2(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> Self {
            // SAFETY: AVX2 and a readable `p`: the caller's contract.
            Avx2(unsafe { _mm256_set1_ps(*p) })
        }
        #[inline(always)]
        unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller guarantees FMA.
            Avx2(unsafe { _mm256_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            // SAFETY: the caller guarantees AVX2.
            Avx2(unsafe { _mm256_add_ps(a.0, b.0) })
        }
        #[inline(always)]
        unsafe fn value(v: f32) -> Self {
            // SAFETY: the caller guarantees AVX2.
            Avx2(unsafe { _mm256_set1_ps(v) })
        }
        #[inline(always)]
        unsafe fn at_least(bound: Self, x: Self) -> Self {
            // SAFETY: the caller guarantees AVX2. `max_ps(a, b)` answers b when either is NaN.
            Avx2(unsafe { _mm256_max_ps(bound.0, x.0) })
        }
        #[inline(always)]
        unsafe fn at_most(bound: Self, x: Self) -> Self {
            // SAFETY: as `at_least`.
            Avx2(unsafe { _mm256_min_ps(bound.0, x.0) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: AVX2 and 8 writable elements: the caller's contract.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
    }
}
