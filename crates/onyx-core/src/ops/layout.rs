//! Shape arithmetic of the layout ops, shared by every EP so that they accept and reject the
//! same arguments: Slice clamping, Reshape's target, Split's piece sizes and the smallest
//! equivalent Transpose.

use crate::{element_count, Error, Location, Result};

/// One axis of a slice after clamping: `count` elements from `start`, `step` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AxisSlice {
    /// First input index read.
    pub start: i64,
    /// Distance between read indices (never 0).
    pub step: i64,
    /// Number of elements read.
    pub count: usize,
}

/// Clamps Slice's `start`/`end` into a dim of size `dim` the way the ONNX spec says
/// (negative values count from the end; `step` is not 0).
pub fn clamp_slice_axis(start: i64, end: i64, step: i64, dim: usize) -> AxisSlice {
    let d = dim as i64;
    let wrap = |x: i64| if x < 0 { x.saturating_add(d) } else { x };
    let (start, end) = (wrap(start), wrap(end));
    let (start, end) = if step > 0 {
        (start.max(0).min(d), end.max(0).min(d))
    } else {
        (start.max(0).min(d - 1), end.max(-1).min(d - 1))
    };
    let span = if step > 0 { end - start } else { start - end };
    let stride = step.unsigned_abs() as i128;
    let count = if span <= 0 { 0 } else { ((span as i128 + stride - 1) / stride) as usize };
    AxisSlice { start, step, count }
}

/// The output shape of Reshape: `0` copies the input dim (or is a real 0 with `allowzero`),
/// one `-1` takes what is left. Errors name input 1 (the shape).
pub fn reshape_dims(input: &[usize], spec: &[i64], allowzero: bool, at: &Location) -> Result<Vec<usize>> {
    let cannot =
        || Error::input(at, 1, format!("a shape with as many elements as the input {input:?}"), format!("{spec:?}"));
    let total = element_count(input).map_err(|e| e.at(at))?;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        let d = match s {
            -1 if infer.is_some() => return Err(Error::input(at, 1, "at most one -1", format!("{spec:?}"))),
            -1 => {
                infer = Some(i);
                1
            }
            0 if allowzero => 0,
            0 => *input.get(i).ok_or_else(|| {
                Error::input(
                    at,
                    1,
                    format!("0 only at positions below the input rank {}", input.len()),
                    format!("{spec:?}"),
                )
            })?,
            s if s < 0 => return Err(Error::input(at, 1, "dims >= -1", format!("{spec:?}"))),
            s => usize::try_from(s).map_err(|_| Error::input(at, 1, "dims that fit in memory", format!("{spec:?}")))?,
        };
        out.push(d);
    }
    if allowzero && infer.is_some() && spec.contains(&0) {
        return Err(Error::input(at, 1, "no -1 together with 0 when allowzero is set", format!("{spec:?}")));
    }
    let known = out.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(cannot)?;
    if let Some(i) = infer {
        out[i] = match (known, total) {
            (0, 0) => 0,
            (0, _) => return Err(cannot()),
            (k, t) if t % k == 0 => t / k,
            _ => return Err(cannot()),
        };
    } else if known != total {
        return Err(cannot());
    }
    Ok(out)
}

/// The size of each of Split's `outputs` pieces along an axis of `dim` elements: the `given`
/// sizes (attribute or input; empty means none), else `num_outputs` (opset 18, default
/// `outputs`) equal pieces, the last one smaller when `uneven_ok` (opset 18).
pub fn split_sizes(
    given: Option<Vec<i64>>,
    outputs: usize,
    num_outputs: Option<i64>,
    uneven_ok: bool,
    dim: usize,
    at: &Location,
) -> Result<Vec<usize>> {
    if let Some(sizes) = given.filter(|s| !s.is_empty()) {
        let ok = sizes.len() == outputs
            && sizes.iter().all(|&s| s >= 0)
            && sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s)) == Some(dim as i64);
        if !ok {
            return Err(Error::node(
                at,
                format!("split sizes {sizes:?} must be {outputs} non-negative sizes summing to the axis' dim {dim}"),
            ));
        }
        return Ok(sizes.iter().map(|&s| s as usize).collect());
    }
    let n = num_outputs.map_or(Some(outputs), |n| usize::try_from(n).ok()).unwrap_or(0);
    if n == 0 {
        return Err(Error::node(at, "Split needs at least one output"));
    }
    let chunk = dim.div_ceil(n);
    if chunk * n != dim && !uneven_ok {
        return Err(Error::node(at, format!("cannot split a dim of {dim} evenly into {n} outputs")));
    }
    let rest = dim.checked_sub(chunk * (n - 1)).ok_or_else(|| {
        Error::node(at, format!("cannot split a dim of {dim} into {n} pieces of {chunk} and a smaller last one"))
    })?;
    let mut sizes = vec![chunk; n - 1];
    sizes.push(rest);
    Ok(sizes)
}

/// Checks that Transpose's `perm` is a permutation of `0..rank`.
pub fn check_perm(perm: &[usize], rank: usize, at: &Location) -> Result<()> {
    let mut seen = vec![false; rank];
    let ok = perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if ok {
        Ok(())
    } else {
        Err(Error::attribute(at, "perm", format!("a permutation of 0..{rank}"), format!("{perm:?}")))
    }
}

/// The shape and permutation after dropping size-1 dims and merging input dims that stay
/// adjacent and in order: the smallest equivalent transpose (`perm` must be valid).
pub fn simplify_transpose(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    // Drop size-1 dims, renumbering the remaining input dims.
    let mut renumber = vec![usize::MAX; shape.len()];
    let mut kept_shape = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if n != 1 {
            renumber[d] = kept_shape.len();
            kept_shape.push(n);
        }
    }
    let kept_perm: Vec<usize> = perm.iter().map(|&p| renumber[p]).filter(|&p| p != usize::MAX).collect();
    // Group runs p, p+1, ... of the permutation into single dims.
    let mut groups: Vec<(usize, usize)> = Vec::new(); // (first input dim, last input dim)
    for &p in &kept_perm {
        match groups.last_mut() {
            Some(g) if g.1 + 1 == p => g.1 = p,
            _ => groups.push((p, p)),
        }
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&g| groups[g].0);
    let mut new_shape = vec![0; groups.len()];
    let mut new_perm = vec![0; groups.len()];
    for (new_dim, &g) in order.iter().enumerate() {
        let (first, last) = groups[g];
        new_shape[new_dim] = kept_shape[first..=last].iter().fold(1usize, |a, &b| a.saturating_mul(b));
        new_perm[g] = new_dim;
    }
    (new_shape, new_perm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Location {
        Location::default()
    }

    #[test]
    fn slices_clamp_like_the_spec() {
        assert_eq!(clamp_slice_axis(1, 100, 2, 7), AxisSlice { start: 1, step: 2, count: 3 });
        assert_eq!(clamp_slice_axis(-1, i64::MIN, -1, 5), AxisSlice { start: 4, step: -1, count: 5 });
        assert_eq!(clamp_slice_axis(-100, 2, 1, 5), AxisSlice { start: 0, step: 1, count: 2 });
        assert_eq!(clamp_slice_axis(3, 1, 1, 5).count, 0);
        assert_eq!(clamp_slice_axis(i64::MIN, i64::MAX, i64::MAX, 9).count, 1);
    }

    #[test]
    fn reshape_targets() {
        assert_eq!(reshape_dims(&[2, 3, 4], &[0, -1], false, &at()).unwrap(), [2, 12]);
        assert_eq!(reshape_dims(&[2, 0], &[0, 5], true, &at()).unwrap(), [0, 5]);
        assert_eq!(reshape_dims(&[0, 3], &[-1, 3], false, &at()).unwrap(), [0, 3]);
        for (spec, allowzero) in [
            (&[-1, -1][..], false),
            (&[7][..], false),
            (&[0, 0, 0, 0][..], false),
            (&[-2][..], false),
            (&[0, -1][..], true),
        ] {
            assert!(reshape_dims(&[2, 3], spec, allowzero, &at()).is_err(), "{spec:?}");
        }
        assert!(reshape_dims(&[2], &[i64::MAX, i64::MAX], false, &at()).is_err(), "overflow");
    }

    #[test]
    fn split_pieces() {
        assert_eq!(split_sizes(Some(vec![2, 5]), 2, None, false, 7, &at()).unwrap(), [2, 5]);
        assert_eq!(split_sizes(None, 3, None, false, 9, &at()).unwrap(), [3, 3, 3]);
        assert_eq!(split_sizes(Some(vec![]), 3, Some(3), true, 7, &at()).unwrap(), [3, 3, 1]);
        assert!(split_sizes(None, 3, None, false, 7, &at()).is_err(), "uneven");
        assert!(split_sizes(Some(vec![2, 6]), 2, None, false, 7, &at()).is_err(), "wrong sum");
        assert!(split_sizes(Some(vec![-1, 8]), 2, None, false, 7, &at()).is_err(), "negative");
        assert!(split_sizes(None, 0, None, false, 7, &at()).is_err(), "no outputs");
        assert!(split_sizes(None, 5, Some(5), true, 3, &at()).is_err(), "too many pieces");
    }

    #[test]
    fn transposes_simplify() {
        assert_eq!(simplify_transpose(&[2, 1, 3, 4], &[0, 2, 3, 1]), (vec![24], vec![0]));
        assert_eq!(simplify_transpose(&[2, 3, 4, 5], &[0, 2, 3, 1]), (vec![2, 3, 20], vec![0, 2, 1]));
        assert!(check_perm(&[0, 0], 2, &at()).is_err());
        assert!(check_perm(&[1, 0, 2], 3, &at()).is_ok());
    }
}
