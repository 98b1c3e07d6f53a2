//! Transpose: the generic permutation used by Transpose, DepthToSpace and SpaceToDepth.

use rayon::prelude::*;

use super::elems::{self, Elem};
pub(crate) use onyx_core::ops::layout::{check_perm, simplify_transpose as simplify};
use onyx_core::{Location, Result};

/// Transposes `data` of `shape`: output dim `i` is input dim `perm[i]`. `perm` must be a
/// valid permutation (see [`check_perm`]).
pub(crate) fn transpose<T: Elem>(data: &[T], shape: &[usize], perm: &[usize], at: &Location) -> Result<Vec<T>> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let (shape, perm) = simplify(shape, perm);
    let rank = shape.len();
    if rank <= 1 || perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(data.to_vec());
    }
    let mut out = elems::alloc::<T>(data.len(), at)?;
    if perm == [1, 0] {
        transpose_2d(data, shape[0], shape[1], &mut out);
    } else if rank == 3 && perm == [0, 2, 1] {
        let plane = shape[1] * shape[2];
        let run = |(src, dst): (&[T], &mut [T])| transpose_2d(src, shape[1], shape[2], dst);
        if elems::parallel(data.len()) {
            data.par_chunks(plane).zip(out.par_chunks_mut(plane)).for_each(run);
        } else {
            data.chunks(plane).zip(out.chunks_mut(plane)).for_each(run);
        }
    } else {
        strided_copy(data, &shape, &perm, &mut out);
    }
    Ok(out)
}

/// `out[c][r] = data[r][c]` for a `rows x cols` matrix, in cache-sized tiles.
fn transpose_2d<T: Clone + Send + Sync>(data: &[T], rows: usize, cols: usize, out: &mut [T]) {
    const TILE: usize = 32;
    let tile_rows = |(cb, out_band): (usize, &mut [T])| {
        let c0 = cb * TILE;
        let c1 = (c0 + TILE).min(cols);
        for r0 in (0..rows).step_by(TILE) {
            let r1 = (r0 + TILE).min(rows);
            for c in c0..c1 {
                let dst = &mut out_band[(c - c0) * rows..(c - c0 + 1) * rows];
                for r in r0..r1 {
                    dst[r] = data[r * cols + c].clone();
                }
            }
        }
    };
    let band = TILE * rows;
    if elems::parallel(data.len()) && rows > 0 {
        out.par_chunks_mut(band).enumerate().for_each(|(i, b)| tile_rows((i, b)));
    } else if rows > 0 {
        out.chunks_mut(band).enumerate().for_each(|(i, b)| tile_rows((i, b)));
    }
}

/// The general case: one output row (the last output dim) at a time, read with the stride of
/// the input dim it comes from (a block copy when that is the input's last dim).
fn strided_copy<T: Clone + Send + Sync>(data: &[T], shape: &[usize], perm: &[usize], out: &mut [T]) {
    let in_strides = crate::ops::util::strides(shape);
    let out_dims: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let rank = perm.len();
    let row_len = out_dims[rank - 1];
    let step = strides[rank - 1];
    let copy_row = |(row, dst): (usize, &mut [T])| {
        let mut rest = row;
        let mut base = 0;
        for d in (0..rank - 1).rev() {
            base += (rest % out_dims[d]) * strides[d];
            rest /= out_dims[d];
        }
        if step == 1 {
            dst.clone_from_slice(&data[base..base + row_len]);
        } else {
            for (j, o) in dst.iter_mut().enumerate() {
                *o = data[base + j * step].clone();
            }
        }
    };
    if row_len == 0 {
        return;
    }
    if elems::parallel(out.len()) {
        out.par_chunks_mut(row_len).enumerate().for_each(copy_row);
    } else {
        out.chunks_mut(row_len).enumerate().for_each(copy_row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive reference: iterate output multi-indices.
    fn reference(data: &[i64], shape: &[usize], perm: &[usize]) -> Vec<i64> {
        let strides = crate::ops::util::strides(shape);
        let out_dims: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut i| {
                let mut off = 0;
                for d in (0..perm.len()).rev() {
                    off += (i % out_dims[d]) * strides[perm[d]];
                    i /= out_dims[d];
                }
                data[off]
            })
            .collect()
    }

    #[test]
    fn simplify_merges_and_drops() {
        assert_eq!(simplify(&[2, 3, 4], &[0, 1, 2]), (vec![24], vec![0]));
        assert_eq!(simplify(&[2, 1, 3, 4], &[2, 3, 0, 1]), (vec![2, 12], vec![1, 0]));
        assert_eq!(simplify(&[5, 3, 4, 7], &[0, 2, 3, 1]), (vec![5, 3, 28], vec![0, 2, 1]));
        assert_eq!(simplify(&[1, 1], &[1, 0]), (vec![], vec![]));
    }

    #[test]
    fn matches_reference_on_many_shapes() {
        let at = Location::default();
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 5], &[1, 0]),
            (&[37, 45], &[1, 0]),
            (&[3, 5, 7], &[0, 2, 1]),
            (&[3, 5, 7], &[2, 0, 1]),
            (&[3, 5, 7], &[1, 2, 0]),
            (&[2, 3, 5, 7], &[0, 2, 1, 3]),
            (&[2, 3, 5, 7], &[3, 1, 0, 2]),
            (&[2, 1, 5, 7], &[1, 3, 0, 2]),
            (&[3, 1, 5], &[2, 1, 0]),
            (&[2, 3, 4, 5, 3], &[4, 2, 0, 3, 1]),
            (&[0, 3, 2], &[2, 0, 1]),
            (&[150, 260], &[1, 0]),
            (&[6, 70, 90], &[2, 1, 0]),
        ];
        for (k, &(shape, perm)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let data: Vec<i64> = crate::ops::layout::testkit::rand_i64(n, k as u64);
            let data_u: Vec<u64> = data.iter().map(|&x| x as u64).collect();
            let got = transpose(&data_u, shape, perm, &at).unwrap();
            let want = reference(&data, shape, perm);
            let got: Vec<i64> = got.iter().map(|&x| x as i64).collect();
            assert_eq!(got, want, "shape {shape:?} perm {perm:?}");
        }
    }

    #[test]
    fn bad_perms_are_errors() {
        let at = Location::default();
        assert!(check_perm(&[0, 1, 2], 3, &at).is_ok());
        for bad in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3], &[2, 1, 0, 3]] {
            let err = check_perm(bad, 3, &at).unwrap_err().to_string();
            assert!(err.contains("perm") && err.contains("permutation"), "{err}");
        }
    }
}
