//! Where elements go: the layout chains and masks of the attention pass evaluated on element
//! indices (u32 per element) or values, with fixed shapes.

/// `axis` of a rank-`rank` value, counted from the front.
pub(super) fn normalized_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

/// `data` of `shape`, gathered along `axis` at `indices` (negative ones count from the end).
pub(super) fn gather(data: &[u32], shape: &[usize], axis: usize, indices: &[i64]) -> Option<Vec<u32>> {
    let dim = *shape.get(axis)?;
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut result = Vec::with_capacity(outer * indices.len() * inner);
    for o in 0..outer {
        for &i in indices {
            let i = usize::try_from(if i < 0 { i + dim as i64 } else { i }).ok().filter(|&i| i < dim)?;
            let start = (o * dim + i) * inner;
            result.extend_from_slice(data.get(start..start + inner)?);
        }
    }
    Some(result)
}

/// `data` of `shape` transposed by `perm`.
pub(super) fn transpose(data: &[u32], shape: &[usize], perm: &[usize]) -> Option<Vec<u32>> {
    if perm.len() != shape.len() {
        return None;
    }
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape.get(p).copied()).collect::<Option<_>>()?;
    let mut result = Vec::with_capacity(data.len());
    let mut index = vec![0usize; shape.len()];
    for _ in 0..data.len() {
        let src: usize = index.iter().zip(perm).map(|(&i, &p)| i * strides[p]).sum();
        result.push(*data.get(src)?);
        advance(&mut index, &out_shape);
    }
    Some(result)
}

/// For rows `[B,S]` of width `w` whose columns `base..base + n * d` are split into `n` heads
/// of `d`: the element of the rows each element of the `[B,N,S,D]` (`transposed`:
/// `[B,N,D,S]`) result holds.
pub(super) fn split_indices(
    [b, s]: [usize; 2],
    n: usize,
    d: usize,
    [w, base]: [usize; 2],
    transposed: bool,
) -> Vec<u32> {
    let mut want = Vec::with_capacity(b * s * n * d);
    let (outer, inner) = if transposed { (d, s) } else { (s, d) };
    for bi in 0..b {
        for ni in 0..n {
            for o in 0..outer {
                for i in 0..inner {
                    let (si, di) = if transposed { (i, o) } else { (o, i) };
                    want.push(((bi * s + si) * w + base + ni * d + di) as u32);
                }
            }
        }
    }
    want
}

/// `values` of shape `from` broadcast (numpy's rules) to shape `to`, in `to`'s element order.
pub(super) fn broadcast(values: &[f64], from: &[usize], to: &[usize]) -> Option<Vec<f64>> {
    if from.len() > to.len() || values.len() != from.iter().product::<usize>() {
        return None;
    }
    let lead = to.len() - from.len();
    // Strides of `values` along `to`'s axes: 0 where `from` has no such axis or a size of 1.
    let mut strides = vec![0usize; to.len()];
    let mut stride = 1;
    for a in (0..from.len()).rev() {
        if from[a] != 1 && from[a] != to[lead + a] {
            return None;
        }
        strides[lead + a] = if from[a] == 1 { 0 } else { stride };
        stride *= from[a];
    }
    let count: usize = to.iter().product();
    let mut result = Vec::with_capacity(count);
    let mut index = vec![0usize; to.len()];
    for _ in 0..count {
        result.push(values[index.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()]);
        advance(&mut index, to);
    }
    Some(result)
}

/// Moves `index` to the next element of `shape` in row-major order (back to zeros after the last).
fn advance(index: &mut [usize], shape: &[usize]) {
    for a in (0..index.len()).rev() {
        index[a] += 1;
        if index[a] < shape[a] {
            return;
        }
        index[a] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        // [2,1] to [3,2,2]: each row's value repeated, the whole repeated 3 times.
        assert_eq!(broadcast(&[1.0, 2.0], &[2, 1], &[3, 2, 2]).unwrap(), [1.0, 1.0, 2.0, 2.0].repeat(3));
        assert_eq!(broadcast(&[1.0, 2.0, 3.0], &[3], &[2, 3]).unwrap(), [1.0, 2.0, 3.0].repeat(2));
        assert_eq!(broadcast(&[1.0, 2.0], &[2], &[3]), None);
    }

    #[test]
    fn transposes_move_elements() {
        // [2,3] → [3,2].
        assert_eq!(transpose(&[0, 1, 2, 3, 4, 5], &[2, 3], &[1, 0]).unwrap(), [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn split_indices_match_reshape_and_transpose() {
        // x [1, S=3, H=4] with N=2, D=2: reshape [1,3,2,2], transpose [0,2,1,3].
        let x: Vec<u32> = (0..12).collect();
        let q = transpose(&x, &[1, 3, 2, 2], &[0, 2, 1, 3]).unwrap();
        assert_eq!(split_indices([1, 3], 2, 2, [4, 0], false), q);
        let kt = transpose(&x, &[1, 3, 2, 2], &[0, 2, 3, 1]).unwrap();
        assert_eq!(split_indices([1, 3], 2, 2, [4, 0], true), kt);
    }
}
