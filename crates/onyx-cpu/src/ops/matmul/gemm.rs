//! The matrix product every kernel of the matmul, conv and norm families uses:
//! `C = alpha * A * B + beta * C` on strided operands (so transposes cost nothing), through
//! the `gemm` crate (packed panels, runtime SIMD dispatch), on rayon threads when the product
//! is large.

use onyx_core::{Error, Result};

use super::real::Real;

/// Products with fewer multiply-adds than this run on the calling thread.
pub(crate) const PARALLEL_WORK: usize = 1 << 16;

/// A borrowed matrix: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatRef<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A dense row-major `rows x cols` matrix at the start of `data`.
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        MatRef { data, rows, cols, rs: cols, cs: 1 }
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        MatRef { data: self.data, rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs }
    }

    /// The transpose when `transpose` is true, the matrix itself otherwise.
    pub fn t_if(self, transpose: bool) -> Self {
        if transpose {
            self.t()
        } else {
            self
        }
    }
}

/// A mutable row-major matrix whose rows may be padded: element `(i, j)` is `data[i * rs + j]`.
#[derive(Debug)]
pub(crate) struct MatMut<'a, T> {
    /// The elements.
    pub data: &'a mut [T],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Row stride in elements (at least `cols`).
    pub rs: usize,
}

impl<'a, T> MatMut<'a, T> {
    /// A dense row-major `rows x cols` matrix at the start of `data`.
    pub fn row_major(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        MatMut { data, rows, cols, rs: cols }
    }
}

/// Number of elements a strided matrix spans, `None` on overflow.
fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(rs)?.checked_add((cols - 1).checked_mul(cs)?)?.checked_add(1)
}

fn check_operand(name: &str, len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> Result<()> {
    let fits = span(rows, cols, rs, cs).is_some_and(|s| s <= len);
    if !fits || rs > isize::MAX as usize || cs > isize::MAX as usize {
        return Err(Error::InvalidArgument(format!(
            "gemm: {name} ({rows}x{cols}, strides {rs},{cs}) does not fit its {len} elements"
        )));
    }
    Ok(())
}

/// Checks that A (m x k), B (k x n) and C (m x n) agree and fit their slices.
pub(crate) fn check_shapes<T>(a: &MatRef<'_, T>, b: &MatRef<'_, T>, c: &MatMut<'_, T>) -> Result<()> {
    if a.cols != b.rows || a.rows != c.rows || b.cols != c.cols {
        return Err(Error::InvalidArgument(format!(
            "gemm: cannot multiply {}x{} by {}x{} into {}x{}",
            a.rows, a.cols, b.rows, b.cols, c.rows, c.cols
        )));
    }
    if c.rs < c.cols {
        return Err(Error::InvalidArgument(format!("gemm: C row stride {} is below its {} columns", c.rs, c.cols)));
    }
    check_operand("A", a.data.len(), a.rows, a.cols, a.rs, a.cs)?;
    check_operand("B", b.data.len(), b.rows, b.cols, b.rs, b.cs)?;
    check_operand("C", c.data.len(), c.rows, c.cols, c.rs, 1)
}

/// What a product does to each finished row segment of C while it is still in cache:
/// `post(row, first_column, segment)`, called once for every element of C, from the thread
/// that computed it (an epilogue: bias, residual, activation).
pub(crate) type RowPost<'a, T> = &'a (dyn Fn(usize, usize, &mut [T]) + Sync);

/// `C = alpha * A * B + beta * C`, split across threads when large. With `beta == 0`, C's old
/// contents are ignored (NaNs included). Errors when the shapes disagree or an operand does not
/// fit its slice.
pub(crate) fn gemm<T: Real>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, beta: T, c: MatMut<'_, T>) -> Result<()> {
    gemm_with(alpha, a, b, beta, c, true, None)
}

/// [`gemm`] (on many threads when `parallel` and large, else on this one) followed by `post` on
/// every row segment of C, each applied by the thread that computed it.
pub(crate) fn gemm_post<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    parallel: bool,
    post: Option<RowPost<'_, T>>,
) -> Result<()> {
    gemm_with(alpha, a, b, beta, c, parallel, post)
}

/// [`gemm`] on the calling thread only: for callers that already run in parallel.
pub(crate) fn gemm_serial<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
) -> Result<()> {
    gemm_with(alpha, a, b, beta, c, false, None)
}

fn gemm_with<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    parallel: bool,
    post: Option<RowPost<'_, T>>,
) -> Result<()> {
    check_shapes(&a, &b, &c)?;
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        let mut c = c;
        scale_rows(&mut c, beta);
        apply_post(c, 0, post);
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(n).saturating_mul(k);
    // One block of C per thread (fewer for small products), each a serial product: the crate's
    // own threading packs in lockstep across threads and scales worse.
    let blocks = (work / PARALLEL_WORK).clamp(1, threads);
    if !parallel || blocks < 2 {
        run_checked(alpha, a, b, beta, c, gemm::Parallelism::None, 0, post)
    } else if m >= n && m >= blocks * MIN_ROWS_PER_BLOCK {
        split_rows(alpha, a, b, beta, c, blocks, post)
    } else if n >= blocks * MIN_COLS_PER_BLOCK {
        split_cols(alpha, a, b, beta, c, blocks, post)
    } else {
        run_checked(alpha, a, b, beta, c, gemm::Parallelism::Rayon(threads), 0, post)
    }
}

/// Calls `post` on every row of `c` (whose first row is row `row0` of the whole C).
fn apply_post<T>(c: MatMut<'_, T>, row0: usize, post: Option<RowPost<'_, T>>) {
    let Some(post) = post else { return };
    for (i, row) in c.data.chunks_mut(c.rs.max(1)).take(c.rows).enumerate() {
        post(row0 + i, 0, &mut row[..c.cols]);
    }
}

/// Fewest rows of C in one block when the rows are split.
const MIN_ROWS_PER_BLOCK: usize = 8;
/// Fewest columns of C in one block when the columns are split.
const MIN_COLS_PER_BLOCK: usize = 16;

/// Each block of C's rows is computed on its own thread.
fn split_rows<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    blocks: usize,
    post: Option<RowPost<'_, T>>,
) -> Result<()> {
    let (m, n, rs) = (c.rows, c.cols, c.rs);
    let per = m.div_ceil(blocks).next_multiple_of(MIN_ROWS_PER_BLOCK);
    crate::parallel::try_for_each_chunk_mut(c.data, per * rs, &|i, chunk| {
        let start = i * per;
        let rows = per.min(m.saturating_sub(start));
        if rows == 0 {
            return Ok(());
        }
        let a_rows = MatRef { data: a.data.get(start * a.rs..).unwrap_or_default(), rows, ..a };
        run_checked(
            alpha,
            a_rows,
            b,
            beta,
            MatMut { data: chunk, rows, cols: n, rs },
            gemm::Parallelism::None,
            start,
            post,
        )
    })
}

/// A pointer to C's elements that threads writing disjoint columns share.
#[derive(Clone, Copy)]
struct SharedC<T>(*mut T);
// SAFETY: `split_cols` hands each thread a disjoint set of C's elements through this pointer;
// T is `Send` (`Real`), and no element is read or written by two threads.
unsafe impl<T: Send> Send for SharedC<T> {}
// SAFETY: as above: the pointer is only used to reach elements no other thread touches.
unsafe impl<T: Send> Sync for SharedC<T> {}

/// Each block of C's columns is computed on its own thread, in place (C's columns are not
/// contiguous, so the blocks are reached through a shared pointer rather than slices).
fn split_cols<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    blocks: usize,
    post: Option<RowPost<'_, T>>,
) -> Result<()> {
    check_shapes(&a, &b, &c)?;
    let (m, k, n, rs) = (a.rows, a.cols, c.cols, c.rs);
    let per = n.div_ceil(blocks).next_multiple_of(MIN_COLS_PER_BLOCK);
    let c_ptr = SharedC(c.data.as_mut_ptr());
    crate::parallel::for_each_index(n.div_ceil(per), &|i| {
        let c_ptr = c_ptr;
        let j0 = i * per;
        let cols = per.min(n - j0);
        // SAFETY: `check_shapes` verified that A, B and C (m x n, row stride rs >= n, column
        // stride 1) lie inside their slices with strides that fit `isize`. Block i covers
        // columns j0..j0 + cols < n of every row: the offsets `j0 * b.cs` and `j0` stay inside
        // B's and C's spans, and no two blocks share an element of C. `c` stays mutably
        // borrowed (so unaliased) until every block has finished.
        unsafe {
            call_gemm(
                m,
                cols,
                k,
                c_ptr.0.add(j0),
                rs,
                a,
                b.data.as_ptr().add(j0 * b.cs),
                b.rs,
                b.cs,
                alpha,
                beta,
                gemm::Parallelism::None,
            )
        }
        if let Some(post) = post {
            for i in 0..m {
                // SAFETY: row i's columns j0..j0 + cols are inside C (checked above) and belong
                // to this block only; the block's product has finished writing them.
                let seg = unsafe { std::slice::from_raw_parts_mut(c_ptr.0.add(i * rs + j0), cols) };
                post(i, j0, seg);
            }
        }
    });
    Ok(())
}

/// Calls the `gemm` crate's kernel (runtime dispatch to AVX-512, AVX2+FMA, NEON...) after
/// checking the operands (the checks are what make the call sound).
fn run_checked<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    parallelism: gemm::Parallelism,
    row0: usize,
    post: Option<RowPost<'_, T>>,
) -> Result<()> {
    check_shapes(&a, &b, &c)?;
    let (m, k, n) = (a.rows, a.cols, b.cols);
    // SAFETY: `check_shapes` verified that every element index `i * rs + j * cs` of A (m x k),
    // B (k x n) and C (m x n, column stride 1) lies inside its slice, that the strides fit
    // `isize`, and that C's rows do not overlap (row stride >= n). C is borrowed mutably, so it
    // aliases neither A nor B.
    unsafe {
        call_gemm(m, n, k, c.data.as_mut_ptr(), c.rs, a, b.data.as_ptr(), b.rs, b.cs, alpha, beta, parallelism);
    }
    apply_post(c, row0, post);
    Ok(())
}

/// `C = alpha * A * B + beta * C` on an `m x n` C at `c` (row stride `c_rs`, column stride 1)
/// and an `k x n` B at `b`.
///
/// # Safety
/// Every element `i * rs + j * cs` of A (in `a.data`), of B (from `b`) and of C (from `c`)
/// must be valid to read (and C's to write), with strides that fit `isize`; C must alias
/// neither A nor B, and no other thread may touch C's elements during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn call_gemm<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    c: *mut T,
    c_rs: usize,
    a: MatRef<'_, T>,
    b: *const T,
    b_rs: usize,
    b_cs: usize,
    alpha: T,
    beta: T,
    parallelism: gemm::Parallelism,
) {
    // The crate computes `dst = alpha * dst + beta * lhs * rhs`: our beta is its alpha, and
    // with `read_dst == false` it never reads C (NaNs included).
    let read_dst = beta != T::ZERO;
    // SAFETY: the caller's contract; the crate reads and writes nothing outside those elements
    // and accepts exactly f32 and f64 here (`T: Real`).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            c_rs as isize,
            read_dst,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            beta,
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `C *= beta` (`C = 0` when beta is zero, whatever C held).
fn scale_rows<T: Real>(c: &mut MatMut<'_, T>, beta: T) {
    for row in c.data.chunks_mut(c.rs.max(1)).take(c.rows) {
        for x in row.iter_mut().take(c.cols) {
            *x = if beta == T::ZERO { T::ZERO } else { *x * beta };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::test_support::{assert_close, Rng};

    /// Naive reference: C = alpha * op(A) * op(B) + beta * C on dense row-major storage.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: &[f64],
        ta: bool,
        b: &[f64],
        tb: bool,
        beta: f64,
        c: &[f64],
    ) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    let x = if ta { a[p * m + i] } else { a[i * k + p] };
                    let y = if tb { b[j * k + p] } else { b[p * n + j] };
                    s += x * y;
                }
                out[i * n + j] = alpha * s + beta * c[i * n + j];
            }
        }
        out
    }

    #[test]
    fn matches_naive_product_for_all_layouts_and_sizes() {
        let mut rng = Rng::new(7);
        // (m, k, n): small, odd, and large enough to split rows or columns across threads.
        let sizes = [(1, 1, 1), (3, 7, 5), (13, 1, 9), (5, 0, 4), (97, 33, 61), (19, 123, 515), (301, 29, 47)];
        for &(m, k, n) in &sizes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for (alpha, beta) in [(1.0, 0.0), (0.5, 2.0), (-1.25, 1.0)] {
                    let a = rng.vec_f64(m * k);
                    let b = rng.vec_f64(k * n);
                    let c0 = rng.vec_f64(m * n);
                    let want = reference(m, k, n, alpha, &a, ta, &b, tb, beta, &c0);
                    let am = if ta { MatRef::row_major(&a[..], k, m).t() } else { MatRef::row_major(&a[..], m, k) };
                    let bm = if tb { MatRef::row_major(&b[..], n, k).t() } else { MatRef::row_major(&b[..], k, n) };
                    let mut c = c0.clone();
                    gemm(alpha, am, bm, beta, MatMut::row_major(&mut c, m, n)).unwrap();
                    assert_close(&c, &want, 1e-12, &format!("f64 {m}x{k}x{n} ta={ta} tb={tb} a={alpha} b={beta}"));
                    let (a32, b32): (Vec<f32>, Vec<f32>) =
                        (a.iter().map(|&x| x as f32).collect(), b.iter().map(|&x| x as f32).collect());
                    let mut c32: Vec<f32> = c0.iter().map(|&x| x as f32).collect();
                    let am = if ta { MatRef::row_major(&a32[..], k, m).t() } else { MatRef::row_major(&a32[..], m, k) };
                    let bm = if tb { MatRef::row_major(&b32[..], n, k).t() } else { MatRef::row_major(&b32[..], k, n) };
                    gemm_serial(alpha as f32, am, bm, beta as f32, MatMut::row_major(&mut c32, m, n)).unwrap();
                    let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
                    assert_close(&c32, &want, 1e-4, &format!("f32 {m}x{k}x{n}"));
                }
            }
        }
    }

    #[test]
    fn row_and_column_blocks_on_many_threads_match_the_serial_product() {
        let mut rng = Rng::new(9);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(7).build().unwrap();
        // Rows split (m >= n), columns split (n > m, C with padded rows), and too small to split.
        for &(m, k, n, rs) in &[(203, 37, 45, 45), (21, 70, 389, 400), (3, 5, 7, 7)] {
            let a = rng.vec_f64(m * k);
            let b = rng.vec_f64(k * n);
            let c0 = rng.vec_f64(m * rs);
            let (am, bm) = (MatRef::row_major(&a[..], m, k), MatRef::row_major(&b[..], k, n).t().t());
            let mut want = c0.clone();
            gemm_serial(0.5, am, bm, 1.5, MatMut { data: &mut want, rows: m, cols: n, rs }).unwrap();
            let mut got = c0.clone();
            pool.install(|| gemm(0.5, am, bm, 1.5, MatMut { data: &mut got, rows: m, cols: n, rs })).unwrap();
            assert_close(&got, &want, 1e-12, &format!("{m}x{k}x{n} on 7 threads"));
        }
    }

    /// The epilogue sees every element of C once, after its product, with its row and column,
    /// whichever way the product is split (serial, rows, columns; C with padded rows).
    #[test]
    fn post_visits_every_element_once_after_the_product() {
        let mut rng = Rng::new(11);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for &(m, k, n, rs) in &[(203, 37, 45, 47), (21, 70, 389, 400), (3, 5, 7, 7), (40, 0, 33, 33)] {
            let a = rng.vec_f64(m * k);
            let b = rng.vec_f64(k * n);
            let c0 = rng.vec_f64(m * rs);
            let (am, bm) = (MatRef::row_major(&a[..], m, k), MatRef::row_major(&b[..], k, n));
            let mut want = c0.clone();
            gemm_serial(1.0, am, bm, 0.5, MatMut { data: &mut want, rows: m, cols: n, rs }).unwrap();
            for i in 0..m {
                for j in 0..n {
                    want[i * rs + j] = want[i * rs + j] * 3.0 + (i * 1000 + j) as f64;
                }
            }
            let post = |i: usize, j0: usize, seg: &mut [f64]| {
                for (j, v) in seg.iter_mut().enumerate() {
                    *v = *v * 3.0 + (i * 1000 + j0 + j) as f64;
                }
            };
            for parallel in [false, true] {
                let mut got = c0.clone();
                let c = MatMut { data: &mut got, rows: m, cols: n, rs };
                pool.install(|| gemm_post(1.0, am, bm, 0.5, c, parallel, Some(&post))).unwrap();
                assert_close(&got, &want, 1e-12, &format!("{m}x{k}x{n} parallel={parallel}"));
            }
        }
    }

    #[test]
    fn beta_zero_ignores_nan_in_c_and_padded_rows_are_kept() {
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2x3
        let b = [1.0f32, 0.5, -1.0, 2.0, 0.0, 1.0]; // 3x2
                                                    // C is 2x2 inside rows of stride 3; the padding column must be left alone.
        let mut c = [f32::NAN, f32::NAN, 7.0, f32::NAN, f32::NAN, 9.0];
        gemm(
            1.0,
            MatRef::row_major(&a, 2, 3),
            MatRef::row_major(&b, 3, 2),
            0.0,
            MatMut { data: &mut c, rows: 2, cols: 2, rs: 3 },
        )
        .unwrap();
        assert_eq!(c, [-1.0, 7.5, 7.0, -1.0, 18.0, 9.0]);
    }

    #[test]
    fn bad_operands_are_errors() {
        let a = [1.0f32; 6];
        let mut c = [0.0f32; 4];
        let err =
            gemm(1.0, MatRef::row_major(&a, 2, 3), MatRef::row_major(&a, 2, 3), 0.0, MatMut::row_major(&mut c, 2, 2))
                .unwrap_err();
        assert!(err.to_string().contains("2x3 by 2x3"), "{err}");
        // B claims more elements than its slice holds.
        let b = MatRef { data: &a[..], rows: 3, cols: 2, rs: 3, cs: 1 };
        let err = gemm(1.0, MatRef::row_major(&a, 2, 3), b, 0.0, MatMut::row_major(&mut c, 2, 2)).unwrap_err();
        assert!(err.to_string().contains("B (3x2"), "{err}");
        let huge = MatRef { data: &a[..], rows: 2, cols: 3, rs: usize::MAX, cs: 1 };
        assert!(gemm(1.0, huge, MatRef::row_major(&a, 3, 2), 0.0, MatMut::row_major(&mut c, 2, 2)).is_err());
    }
}
