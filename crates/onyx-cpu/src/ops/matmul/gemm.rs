//! The matrix product every kernel of the matmul, conv and norm families uses:
//! `C = alpha * A * B + beta * C` on strided operands (so transposes cost nothing), through
//! `matrixmultiply`, split across rayon threads when the product is large.

use rayon::prelude::*;

use onyx_core::{Error, Result};

use super::real::Real;

/// Products with fewer multiply-adds than this run on the calling thread.
pub(crate) const PARALLEL_WORK: usize = 1 << 16;
/// Fewest rows of C one thread computes when the rows are split.
const MIN_ROWS_PER_THREAD: usize = 16;
/// Fewest columns of C one thread computes when the columns are split.
const MIN_COLS_PER_THREAD: usize = 64;

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

    /// Rows `start..start + count` (clamped to the slice).
    fn rows_from(self, start: usize, count: usize) -> Self {
        let offset = (start * self.rs).min(self.data.len());
        MatRef { data: &self.data[offset..], rows: count, ..self }
    }

    /// Columns `start..start + count` (clamped to the slice).
    fn cols_from(self, start: usize, count: usize) -> Self {
        let offset = (start * self.cs).min(self.data.len());
        MatRef { data: &self.data[offset..], cols: count, ..self }
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

/// `C = alpha * A * B + beta * C`, split across threads when large. With `beta == 0`, C's old
/// contents are ignored (NaNs included). Errors when the shapes disagree or an operand does not
/// fit its slice.
pub(crate) fn gemm<T: Real>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, beta: T, c: MatMut<'_, T>) -> Result<()> {
    gemm_with(alpha, a, b, beta, c, true)
}

/// [`gemm`] on the calling thread only: for callers that already run in parallel.
pub(crate) fn gemm_serial<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
) -> Result<()> {
    gemm_with(alpha, a, b, beta, c, false)
}

fn gemm_with<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    parallel: bool,
) -> Result<()> {
    check_shapes(&a, &b, &c)?;
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        scale_rows(c, beta);
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(n).saturating_mul(k);
    if !parallel || threads < 2 || work < PARALLEL_WORK {
        run_checked(alpha, a, b, beta, c)
    } else if m >= 2 * MIN_ROWS_PER_THREAD {
        split_rows(alpha, a, b, beta, c, threads)
    } else if n >= 2 * MIN_COLS_PER_THREAD {
        split_cols(alpha, a, b, beta, c, threads)
    } else {
        run_checked(alpha, a, b, beta, c)
    }
}

/// Calls the kernel (which checks the operands again: the checks are what make it sound).
fn run_checked<T: Real>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, beta: T, c: MatMut<'_, T>) -> Result<()> {
    T::matmul(alpha, a, b, beta, c)
}

/// `C *= beta` (`C = 0` when beta is zero, whatever C held).
fn scale_rows<T: Real>(c: MatMut<'_, T>, beta: T) {
    for row in c.data.chunks_mut(c.rs).take(c.rows) {
        for x in row.iter_mut().take(c.cols) {
            *x = if beta == T::ZERO { T::ZERO } else { *x * beta };
        }
    }
}

/// Each thread computes a block of C's rows in place.
fn split_rows<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    threads: usize,
) -> Result<()> {
    let (m, n) = (c.rows, c.cols);
    let rows_per = m.div_ceil(threads).max(MIN_ROWS_PER_THREAD);
    let rs = c.rs;
    c.data.par_chunks_mut(rows_per * rs).enumerate().try_for_each(|(i, chunk)| {
        let start = i * rows_per;
        let rows = rows_per.min(m.saturating_sub(start));
        if rows == 0 {
            return Ok(());
        }
        let c_block = MatMut { data: chunk, rows, cols: n, rs };
        run_checked(alpha, a.rows_from(start, rows), b, beta, c_block)
    })
}

/// Each thread computes a block of C's columns into its own buffer; the blocks are then
/// merged into C (C's columns are not contiguous, so they cannot be lent to threads).
fn split_cols<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
    threads: usize,
) -> Result<()> {
    let (m, n) = (c.rows, c.cols);
    let cols_per = n.div_ceil(threads).max(MIN_COLS_PER_THREAD);
    let starts: Vec<usize> = (0..n).step_by(cols_per).collect();
    let blocks: Vec<(usize, usize, Vec<T>)> = starts
        .into_par_iter()
        .map(|start| {
            let cols = cols_per.min(n - start);
            let mut local = vec![T::ZERO; m * cols];
            run_checked(alpha, a, b.cols_from(start, cols), T::ZERO, MatMut::row_major(&mut local, m, cols))?;
            Ok((start, cols, local))
        })
        .collect::<Result<_>>()?;
    for (start, cols, local) in blocks {
        for (row, src) in c.data.chunks_mut(c.rs).zip(local.chunks(cols)) {
            for (y, &x) in row[start..start + cols].iter_mut().zip(src) {
                *y = if beta == T::ZERO { x } else { x + beta * *y };
            }
        }
    }
    Ok(())
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
