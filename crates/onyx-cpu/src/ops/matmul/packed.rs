//! Products by a constant f32 B on the CPU EP's own register tiles, as ONNX Runtime's MLAS
//! does: B is packed once, when the session is built, into strips of two vectors' worth of
//! columns stored step by step along K, so that a tile reads it sequentially; A is read in
//! place (row-major), and C is written in place with an optional bias added in the tile
//! (MatMul+Add, Gemm's C). The `gemm` crate would pack B again on every call.
//!
//! A register tile is `R` rows of C (6 with AVX2, 12 with AVX-512) by one strip: per step
//! along K it loads the strip's two vectors of B and broadcasts one element of A per row (2R
//! multiply-adds for R + 2 loads). Work is cut into tasks of (rows, strips) and K into passes
//! of [`DEPTH`] steps: a task's block of B stays in L2 and each tile's rows of A in L1 while it
//! walks the task's strips.

use std::borrow::Cow;

use onyx_core::{Error, Result};

use super::gemm::{MatRef, PARALLEL_WORK};
use crate::ops::aligned::AlignedBuf;
use crate::ops::lanes::{Lanes, Portable};
use crate::ops::prefetch;

/// Most rows of C in one register tile (AVX-512's, see [`Isa::tile_rows`]).
const MAX_TILE_ROWS: usize = 12;

/// Steps along K of one pass: a tile keeps its accumulators in registers over a pass, and its
/// rows of A (up to 12 x 256 x 4 bytes) in L1 across the strips of its task.
const DEPTH: usize = 256;

/// Bytes of B one task walks in a pass (in L2 while it is reused by every row tile).
const TASK_B_BYTES: usize = 128 << 10;

/// Tasks per thread wanted, so that uneven tasks even out.
const TASKS_PER_THREAD: usize = 4;

/// The widest strip (AVX-512: 2 x 16 columns).
const MAX_STRIP: usize = 32;

/// Which vector the tiles use, chosen for the CPU when B is packed (the strip width follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512F: strips of 32 columns.
    Avx512,
    /// AVX2 with FMA: strips of 16 columns.
    Avx2,
    /// Plain arrays of 8 lanes (any CPU): strips of 16 columns.
    Portable,
}

impl Isa {
    /// The fastest form this CPU runs.
    pub fn best() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// True when this CPU can run the form.
    #[cfg(test)]
    pub fn runs(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Columns of one strip: two vectors.
    fn strip(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 | Isa::Portable => 16,
        }
    }

    /// Rows of C in one register tile: with 2 vectors of B and 1 broadcast, AVX2's 6 rows x 2
    /// vectors = 12 accumulators take 15 of its 16 registers; AVX-512's 12 x 2 = 24 take 27
    /// of its 32 (twice the multiply-adds per load of B).
    fn tile_rows(self) -> usize {
        match self {
            Isa::Avx512 => MAX_TILE_ROWS,
            Isa::Avx2 | Isa::Portable => 6,
        }
    }
}

/// A constant `K x N` f32 matrix packed for the tiles.
#[derive(Debug)]
pub(crate) struct PackedB {
    k: usize,
    n: usize,
    isa: Isa,
    /// Strip `s`, step `p`: columns `s * strip..` of B's row `p` at `((s * k) + p) * strip`;
    /// columns past N are zero.
    data: AlignedBuf,
}

impl PackedB {
    /// Packs `b` (any strides: a transposed B costs nothing more) times `scale` for `isa`.
    pub fn new(b: MatRef<'_, f32>, scale: f32, isa: Isa) -> Result<Self> {
        let (k, n, strip) = (b.rows, b.cols, isa.strip());
        if k > 0 && n > 0 {
            let last = (k - 1) * b.rs + (n - 1) * b.cs;
            if last >= b.data.len() {
                return Err(Error::InvalidArgument(format!(
                    "packing B: a {k} x {n} matrix with strides ({}, {}) needs {} elements, found {}",
                    b.rs,
                    b.cs,
                    last + 1,
                    b.data.len()
                )));
            }
        }
        let strips = n.div_ceil(strip);
        let len = strips * k * strip;
        let mut data = AlignedBuf::try_zeros(len)
            .ok_or_else(|| Error::InvalidArgument(format!("packing B: cannot allocate {len} elements")))?;
        if k > 0 {
            for (s, block) in data.chunks_exact_mut(k * strip).enumerate() {
                let cols = (n - s * strip).min(strip);
                let src = &b.data[s * strip * b.cs..];
                // Reads run along B's contiguous dimension: rows for a row-major B, columns for
                // a transposed one (Kᵀ in attention, Gemm's transB).
                if b.rs == 1 && b.cs != 1 {
                    for j in 0..cols {
                        let column = &src[j * b.cs..][..k];
                        for (d, x) in block[j..].iter_mut().step_by(strip).zip(column) {
                            *d = x * scale;
                        }
                    }
                } else {
                    for (p, dst) in block.chunks_exact_mut(strip).enumerate() {
                        let row = &src[p * b.rs..];
                        if b.cs == 1 {
                            dst.iter_mut().zip(&row[..cols]).for_each(|(d, x)| *d = x * scale);
                        } else {
                            dst[..cols].iter_mut().enumerate().for_each(|(j, d)| *d = row[j * b.cs] * scale);
                        }
                    }
                }
            }
        }
        Ok(PackedB { k, n, isa, data })
    }

    /// Rows of B (the inner dimension).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of B.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `c = a * B (+ bias)`: `a` is `m x k` and `c` `m x n`, both dense row-major; `bias` has
    /// one value per column. Every element of `c` is written. Runs on the current thread pool.
    pub fn matmul(&self, a: &[f32], m: usize, bias: Option<&[f32]>, c: &mut [f32]) -> Result<()> {
        self.matmul_strided(a, self.k, m, bias, c, self.n, true)
    }

    /// As [`PackedB::matmul`] with row strides: row `i` of A starts at `a[i * lda]` and row
    /// `i` of C at `c[i * ldc]` (`lda >= k`, `ldc >= n`; C's padding is left alone), on the
    /// calling thread alone unless `parallel`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_strided(
        &self,
        a: &[f32],
        lda: usize,
        m: usize,
        bias: Option<&[f32]>,
        c: &mut [f32],
        ldc: usize,
        parallel: bool,
    ) -> Result<()> {
        let (k, n) = (self.k, self.n);
        let short = |what: &str, need: usize, found: usize| {
            Error::InvalidArgument(format!(
                "packed matmul of {m} x {k} by {k} x {n}: {what} needs {need} elements, found {found}"
            ))
        };
        if lda < k || ldc < n {
            return Err(Error::InvalidArgument(format!(
                "packed matmul of {m} x {k} by {k} x {n}: row strides {lda} (A) and {ldc} (C) are shorter than the rows"
            )));
        }
        if m == 0 || n == 0 {
            return match bias.filter(|b| b.len() != n) {
                Some(b) => Err(short("the bias", n, b.len())),
                None => Ok(()),
            };
        }
        // Saturating: a product past usize is longer than any slice, so the check fails.
        let (a_len, c_len) =
            ((m - 1).saturating_mul(lda).saturating_add(k), (m - 1).saturating_mul(ldc).saturating_add(n));
        if a.len() < a_len {
            return Err(short("A", a_len, a.len()));
        }
        if c.len() < c_len {
            return Err(short("C", c_len, c.len()));
        }
        if let Some(bias) = bias.filter(|b| b.len() != n) {
            return Err(short("the bias", n, bias.len()));
        }
        let strip = self.isa.strip();
        let bias = bias.map(|b| pad_to(b, n.div_ceil(strip) * strip));
        let threads = if parallel { rayon::current_num_threads() } else { 1 };
        let job = Job {
            a: a.as_ptr(),
            lda,
            b: self,
            bias: bias.as_deref().map(<[f32]>::as_ptr),
            c: SharedC(c.as_mut_ptr()),
            ldc,
            m,
            tasks: Tasks::new(m, k, n, (self.isa.tile_rows(), strip), threads),
        };
        let run: unsafe fn(&Job<'_>, usize) = match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => x86::task_avx512,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => x86::task_avx2,
            _ => task_portable,
        };
        let count = job.tasks.count();
        // SAFETY: `isa` was chosen for this CPU when B was packed (`Isa::best`, or a test that
        // checked `Isa::runs`); A's rows (stride `lda >= k`), C's rows (stride `ldc >= n`) and
        // the padded bias were checked to be long enough above and B's strips are `k` steps
        // long; tasks cover disjoint blocks of C.
        let one = |t: usize| unsafe { run(&job, t) };
        if count > 1 && parallel && m.saturating_mul(k).saturating_mul(n) >= PARALLEL_WORK {
            crate::parallel::for_each_index(count, &one);
        } else {
            (0..count).for_each(one);
        }
        Ok(())
    }
}

/// `v` followed by zeros up to `len` elements (borrowed when it already has them).
fn pad_to(v: &[f32], len: usize) -> Cow<'_, [f32]> {
    if v.len() >= len {
        return Cow::Borrowed(v);
    }
    let mut padded = v.to_vec();
    padded.resize(len, 0.0);
    Cow::Owned(padded)
}

/// C, shared by the threads that write its disjoint blocks.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);
// SAFETY: every task writes only its own block of C (`Tasks::decode` cuts disjoint blocks),
// and f32 is Send.
unsafe impl Send for SharedC {}
// SAFETY: as above.
unsafe impl Sync for SharedC {}

/// One product: its operands and how it is cut into tasks.
struct Job<'a> {
    /// A: `m` rows of `b.k` elements, `lda` apart.
    a: *const f32,
    lda: usize,
    b: &'a PackedB,
    /// The bias padded to whole strips.
    bias: Option<*const f32>,
    /// C: `m` rows of `b.n` elements, `ldc` apart.
    c: SharedC,
    ldc: usize,
    m: usize,
    tasks: Tasks,
}

// SAFETY: the pointers are read only (A, the bias) or written in disjoint blocks (C, see
// `SharedC`) while the job lives, and the slices behind them outlive it (`PackedB::matmul`).
unsafe impl Sync for Job<'_> {}

/// The product cut into tasks of `rows` rows (whole tiles of `tile` rows) by `strips` strips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tasks {
    tile: usize,
    rows: usize,
    strips: usize,
    row_tasks: usize,
    strip_tasks: usize,
}

impl Tasks {
    /// Tasks whose block of B fits [`TASK_B_BYTES`], split further (strips first while B is
    /// the larger operand: rows split means B read once more) until every thread has
    /// [`TASKS_PER_THREAD`].
    fn new(m: usize, k: usize, n: usize, (tile, strip): (usize, usize), threads: usize) -> Tasks {
        let all_strips = n.div_ceil(strip);
        let all_tiles = m.div_ceil(tile);
        let mut strips = (TASK_B_BYTES / (DEPTH.min(k).max(1) * strip * 4)).clamp(1, all_strips);
        let mut tiles = all_tiles;
        let want = if threads > 1 && m.saturating_mul(k).saturating_mul(n) >= PARALLEL_WORK {
            threads * TASKS_PER_THREAD
        } else {
            1
        };
        let count = |tiles: usize, strips: usize| all_tiles.div_ceil(tiles) * all_strips.div_ceil(strips);
        while count(tiles, strips) < want && (tiles > 1 || strips > 1) {
            if strips > 1 && (m <= n || tiles == 1) {
                strips = strips.div_ceil(2);
            } else {
                tiles = tiles.div_ceil(2);
            }
        }
        Tasks {
            tile,
            rows: tiles * tile,
            strips,
            row_tasks: all_tiles.div_ceil(tiles),
            strip_tasks: all_strips.div_ceil(strips),
        }
    }

    fn count(&self) -> usize {
        self.row_tasks * self.strip_tasks
    }

    /// Task `t`'s first row and first strip.
    fn decode(&self, t: usize) -> (usize, usize) {
        (t / self.strip_tasks * self.rows, t % self.strip_tasks * self.strips)
    }
}

/// Where a tile's accumulators start.
#[derive(Clone, Copy)]
enum Start {
    /// At zero (first pass, no bias).
    Zero,
    /// At the bias of the strip (first pass).
    Bias(*const f32),
    /// At C's values (later passes).
    C,
}

/// Runs task `t` of `job` with lanes `V` (strips of `2 * V::WIDTH` columns).
///
/// # Safety
/// The CPU has `V`'s instruction set; `job` holds what `PackedB::matmul` checked, B packed
/// with strips of `2 * V::WIDTH`; no other thread writes the task's block of C.
#[inline(always)]
unsafe fn run_task<V: Lanes>(job: &Job<'_>, t: usize) {
    let (b, strip) = (job.b, 2 * V::WIDTH);
    let (k, n) = (b.k, b.n);
    let (row0, strip0) = job.tasks.decode(t);
    let rows = row0..(row0 + job.tasks.rows).min(job.m);
    let strips = strip0..(strip0 + job.tasks.strips).min(n.div_ceil(strip));
    let passes = k.div_ceil(DEPTH).max(1);
    let tile = job.tasks.tile;
    for pass in 0..passes {
        let steps = pass * DEPTH..((pass + 1) * DEPTH).min(k);
        for row in rows.clone().step_by(tile) {
            let tile_rows = (rows.end - row).min(tile);
            for s in strips.clone() {
                let cols = (n - s * strip).min(strip);
                // SAFETY: rows < m and steps < k keep A's reads inside its checked rows; the
                // strip has `k` steps of `strip` values; C's block is this task's, its
                // columns < n; the bias is padded to whole strips.
                unsafe {
                    let start = match (pass, job.bias) {
                        (0, Some(bias)) => Start::Bias(bias.add(s * strip)),
                        (0, None) => Start::Zero,
                        _ => Start::C,
                    };
                    let a = job.a.add(row * job.lda + steps.start);
                    let bp = b.data.as_ptr().add((s * k + steps.start) * strip);
                    let c = job.c.0.add(row * job.ldc + s * strip);
                    tile_any::<V>(tile_rows, a, job.lda, bp, steps.len(), c, job.ldc, cols, start);
                }
            }
        }
    }
}

/// A tile of `rows <= MAX_TILE_ROWS` rows and `cols <= strip` columns of C.
///
/// # Safety
/// As [`tile`], for `cols` columns of C (not a whole strip).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_any<V: Lanes>(
    rows: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    depth: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    start: Start,
) {
    let strip = 2 * V::WIDTH;
    if cols < strip {
        // A partial strip goes through a whole one on the stack.
        let mut scratch = [0.0f32; MAX_TILE_ROWS * MAX_STRIP];
        let s = scratch.as_mut_ptr();
        for r in 0..rows {
            // SAFETY: row r of C has `cols` elements here (the caller's contract), scratch
            // rows have `strip >= cols`.
            unsafe { std::ptr::copy_nonoverlapping(c.add(r * ldc), s.add(r * strip), cols) };
        }
        // SAFETY: the caller's contract, with C's block in the scratch.
        unsafe { tile_rows::<V>(rows, a, lda, b, depth, s, strip, start) };
        for r in 0..rows {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(s.add(r * strip), c.add(r * ldc), cols) };
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { tile_rows::<V>(rows, a, lda, b, depth, c, ldc, start) };
    }
}

/// A tile of `rows <= MAX_TILE_ROWS` rows and a whole strip (not recursive with [`tile_any`]: a
/// function that recurses is not inlined, and out of line it would lose the caller's
/// instruction set).
///
/// # Safety
/// As [`tile`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_rows<V: Lanes>(
    rows: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    depth: usize,
    c: *mut f32,
    ldc: usize,
    start: Start,
) {
    // SAFETY: the caller's contract.
    unsafe {
        match rows {
            12 => tile::<V, 12>(a, lda, b, depth, c, ldc, start),
            11 => tile::<V, 11>(a, lda, b, depth, c, ldc, start),
            10 => tile::<V, 10>(a, lda, b, depth, c, ldc, start),
            9 => tile::<V, 9>(a, lda, b, depth, c, ldc, start),
            8 => tile::<V, 8>(a, lda, b, depth, c, ldc, start),
            7 => tile::<V, 7>(a, lda, b, depth, c, ldc, start),
            6 => tile::<V, 6>(a, lda, b, depth, c, ldc, start),
            5 => tile::<V, 5>(a, lda, b, depth, c, ldc, start),
            4 => tile::<V, 4>(a, lda, b, depth, c, ldc, start),
            3 => tile::<V, 3>(a, lda, b, depth, c, ldc, start),
            2 => tile::<V, 2>(a, lda, b, depth, c, ldc, start),
            _ => tile::<V, 1>(a, lda, b, depth, c, ldc, start),
        }
    }
}

/// The register tile: `R` rows of A (row stride `lda`) times one strip of B over `depth`
/// steps, into `R` rows of C (row stride `ldc`), starting from `start`.
///
/// # Safety
/// The CPU has `V`'s instruction set; A's `R` rows have `depth` readable elements; B's strip
/// has `depth` steps of `2 * V::WIDTH` values; C's `R` rows have `2 * V::WIDTH` writable
/// (and, for [`Start::C`], readable) elements no other thread touches; a bias pointer has
/// `2 * V::WIDTH` readable values.
#[inline(always)]
unsafe fn tile<V: Lanes, const R: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    depth: usize,
    c: *mut f32,
    ldc: usize,
    start: Start,
) {
    let w = V::WIDTH;
    // SAFETY: every pointer stays inside the ranges the caller guarantees.
    unsafe {
        let mut acc = [[V::zero(); 2]; R];
        match start {
            Start::Zero => {}
            Start::Bias(bias) => acc = [[V::load(bias), V::load(bias.add(w))]; R],
            Start::C => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = [V::load(c.add(r * ldc)), V::load(c.add(r * ldc + w))];
                }
            }
        }
        // One pointer per row: each broadcast is then one load with a base + index address.
        let rows: [*const f32; R] = std::array::from_fn(|r| a.add(r * lda));
        let mut step = 0;
        // Unrolled, the 24 accumulators of a 12-row tile spill: LLVM loads B for several steps
        // ahead.
        let unroll = if R > 6 { 1 } else { UNROLL };
        while step + unroll <= depth {
            for u in 0..unroll {
                tile_step::<V, R>(&mut acc, &rows, b, step + u);
            }
            step += unroll;
        }
        while step < depth {
            tile_step::<V, R>(&mut acc, &rows, b, step);
            step += 1;
        }
        for (r, acc) in acc.iter().enumerate() {
            acc[0].store(c.add(r * ldc));
            acc[1].store(c.add(r * ldc + w));
        }
    }
}

/// Steps ahead of the tile that B is prefetched: a model's packed weights come from L3 or
/// memory (bert4's 28 MB each run), and the hardware prefetchers left the tiles waiting
/// (bert4 at 1 thread 1.13x of ORT without, 1.03x with; 16 and 32 steps alike).
const PREFETCH_STEPS: usize = 16;

/// Steps of a tile's loop body.
const UNROLL: usize = 4;

/// One step along K of a tile: `R x 2` multiply-adds.
///
/// # Safety
/// As [`tile`], for step `step`.
#[inline(always)]
unsafe fn tile_step<V: Lanes, const R: usize>(
    acc: &mut [[V; 2]; R],
    rows: &[*const f32; R],
    b: *const f32,
    step: usize,
) {
    let w = V::WIDTH;
    // SAFETY: the caller's contract.
    unsafe {
        let bs = b.add(step * 2 * w);
        prefetch::to_l1(bs.wrapping_add(PREFETCH_STEPS * 2 * w));
        if w == 16 {
            prefetch::to_l1(bs.wrapping_add(PREFETCH_STEPS * 2 * w + w));
        }
        let (b0, b1) = (V::load(bs), V::load(bs.add(w)));
        for (acc, row) in acc.iter_mut().zip(rows) {
            let x = V::splat(row.add(step));
            acc[0] = V::mul_add(x, b0, acc[0]);
            acc[1] = V::mul_add(x, b1, acc[1]);
        }
    }
}

/// # Safety
/// `run_task`'s contract (plain arrays need no instruction set), B packed for `Isa::Portable`.
unsafe fn task_portable(job: &Job<'_>, t: usize) {
    // SAFETY: the caller's contract.
    unsafe { run_task::<Portable<8>>(job, t) }
}

/// The tasks compiled for each instruction set.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{run_task, Job};
    use crate::ops::lanes::{Avx2, Avx512};

    /// # Safety
    /// AVX-512F, and `run_task`'s contract with B packed for `Isa::Avx512`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn task_avx512(job: &Job<'_>, t: usize) {
        // SAFETY: the caller's contract.
        unsafe { run_task::<Avx512>(job, t) }
    }

    /// # Safety
    /// AVX2 and FMA, and `run_task`'s contract with B packed for `Isa::Avx2`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn task_avx2(job: &Job<'_>, t: usize) {
        // SAFETY: the caller's contract.
        unsafe { run_task::<Avx2>(job, t) }
    }
}

#[cfg(test)]
mod tests;
