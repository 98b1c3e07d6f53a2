//! Multidirectional (numpy) broadcasting and the fast loops of elementwise ops.
//!
//! [`map2`], [`map3`] and [`update2`] walk broadcast operands through a [`Plan`]: the output
//! shape with adjacent dimensions merged wherever every operand is contiguous (or broadcast)
//! across them. A same-shape op then becomes one contiguous row, a bias add becomes rows with
//! the bias repeated, and scalar operands have stride 0. The inner loop over a row is
//! specialised for each combination of contiguous and repeated operands so that it vectorizes.
//! Outputs of more than [`PAR_CHUNK`] elements are split into chunks computed in parallel.

use onyx_core::{element_count, host_pool, Error, Location, Result};

use crate::ops::util;
use crate::parallel;
use crate::Registry;

/// Elements per parallel task: outputs smaller than twice this run on one thread.
pub const PAR_CHUNK: usize = 32 * 1024;

/// Registers this family's kernels (none: broadcasting is a helper of the elementwise ops).
pub fn register(r: &mut Registry) {
    let _ = r;
}

/// The numpy broadcast of two shapes, or `None` when a dimension pair is neither equal nor 1.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() < rank { 1 } else { s[i + s.len() - rank] };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The numpy broadcast of any number of shapes (the scalar shape `[]` for none).
pub fn broadcast_all(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    shapes.iter().try_fold(Vec::new(), |acc, s| broadcast_shapes(&acc, s))
}

/// The error for two shapes that do not broadcast, naming both.
pub fn broadcast_error(at: &Location, a: &[usize], b: &[usize]) -> Error {
    Error::node(at, format!("shapes {a:?} and {b:?} cannot be broadcast together"))
}

/// The broadcast of `a` and `b`, or the error naming both shapes.
pub fn broadcast_or_error(at: &Location, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    broadcast_shapes(a, b).ok_or_else(|| broadcast_error(at, a, b))
}

/// How operands are read while writing an output of a given shape: dimensions merged where
/// possible and, per operand, the stride of each dimension in elements (0 where broadcast).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<const N: usize> {
    dims: Vec<usize>,
    strides: [Vec<usize>; N],
    len: usize,
}

impl<const N: usize> Plan<N> {
    /// Plans reading operands of `shapes` (each broadcastable to `out`) into an output of shape
    /// `out`. An error when an operand does not broadcast to `out`.
    pub fn new(out: &[usize], shapes: [&[usize]; N]) -> Result<Self> {
        let len = element_count(out)?;
        let aligned: Vec<Vec<usize>> = shapes.iter().map(|s| aligned_strides(s, out)).collect::<Result<_>>()?;
        let mut dims: Vec<usize> = Vec::with_capacity(out.len());
        let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(out.len()));
        for (d, &size) in out.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let merges =
                dims.last().is_some_and(|_| (0..N).all(|k| strides[k].last().copied() == Some(aligned[k][d] * size)));
            if merges {
                if let Some(last) = dims.last_mut() {
                    *last *= size;
                }
                for k in 0..N {
                    if let Some(s) = strides[k].last_mut() {
                        *s = aligned[k][d];
                    }
                }
            } else {
                dims.push(size);
                for k in 0..N {
                    strides[k].push(aligned[k][d]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in &mut strides {
                s.push(0);
            }
        }
        Ok(Plan { dims, strides, len })
    }

    /// Number of output elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the output is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The merged output dimensions (at least one).
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Length of the innermost merged dimension: how many elements one row has.
    fn inner(&self) -> usize {
        self.dims.last().copied().unwrap_or(1)
    }

    /// Stride of each operand along the innermost dimension (0 or 1).
    fn inner_strides(&self) -> [usize; N] {
        std::array::from_fn(|k| self.strides[k].last().copied().unwrap_or(0))
    }

    /// Calls `row(out_segment, offsets, steps)` for consecutive pieces of `out` (the whole
    /// output), each inside one row: `offsets[k]` is where operand `k`'s elements for the
    /// segment start and `steps[k]` (0 or 1) how they advance. Runs in parallel for large
    /// outputs.
    pub fn for_each_segment<O: Send>(&self, out: &mut [O], row: impl Fn(&mut [O], [usize; N], [usize; N]) + Sync) {
        debug_assert_eq!(out.len(), self.len);
        if self.len < 2 * PAR_CHUNK || rayon::current_num_threads() < 2 {
            self.segments_from(0, out, &row);
            return;
        }
        let chunk = PAR_CHUNK.max(self.len.div_ceil(4 * rayon::current_num_threads()));
        parallel::for_each_chunk_mut(out, chunk, &|i, piece| self.segments_from(i * chunk, piece, &row));
    }

    /// Walks `out`, which holds output elements `start..start + out.len()`, row segment by row
    /// segment.
    fn segments_from<O>(&self, start: usize, out: &mut [O], row: &impl Fn(&mut [O], [usize; N], [usize; N])) {
        let inner = self.inner();
        if inner == 0 || out.is_empty() {
            return;
        }
        let steps = self.inner_strides();
        let outer = &self.dims[..self.dims.len() - 1];
        // Multi-index of the first row over the outer dimensions, and each operand's offset.
        let mut index = vec![0usize; outer.len()];
        let mut r = start / inner;
        for d in (0..outer.len()).rev() {
            index[d] = r % outer[d];
            r /= outer[d];
        }
        let mut offsets: [usize; N] =
            std::array::from_fn(|k| index.iter().zip(&self.strides[k]).map(|(i, s)| i * s).sum());
        let mut col = start % inner;
        let mut rest = out;
        while !rest.is_empty() {
            let take = (inner - col).min(rest.len());
            let (segment, tail) = rest.split_at_mut(take);
            row(segment, std::array::from_fn(|k| offsets[k] + col * steps[k]), steps);
            rest = tail;
            col = 0;
            self.next_row(&mut index, &mut offsets);
        }
    }

    /// Advances the outer multi-index by one row, updating the operand offsets.
    fn next_row(&self, index: &mut [usize], offsets: &mut [usize; N]) {
        for d in (0..index.len()).rev() {
            index[d] += 1;
            for (o, s) in offsets.iter_mut().zip(&self.strides) {
                *o += s[d];
            }
            if index[d] < self.dims[d] {
                return;
            }
            for (o, s) in offsets.iter_mut().zip(&self.strides) {
                *o -= s[d] * self.dims[d];
            }
            index[d] = 0;
        }
    }
}

/// Strides (in elements) of a row-major operand of `shape` read as `out`: 0 along broadcast
/// dimensions. An error when `shape` does not broadcast to `out`.
fn aligned_strides(shape: &[usize], out: &[usize]) -> Result<Vec<usize>> {
    let incompatible = || Error::InvalidArgument(format!("shape {shape:?} cannot be broadcast to {out:?}"));
    if shape.len() > out.len() {
        return Err(incompatible());
    }
    let pad = out.len() - shape.len();
    let mut strides = vec![0; out.len()];
    let mut stride = 1usize;
    for d in (0..shape.len()).rev() {
        let (s, o) = (shape[d], out[d + pad]);
        if s == o && s != 1 {
            strides[d + pad] = stride;
            stride *= s;
        } else if s != 1 {
            return Err(incompatible());
        }
    }
    Ok(strides)
}

fn check_len(what: &str, len: usize, shape: &[usize]) -> Result<()> {
    let want = element_count(shape)?;
    if len == want {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("{what} has {len} elements but its shape {shape:?} needs {want}")))
    }
}

/// Applies `f` to every pair of elements of `a` and `b` broadcast together. Returns the output
/// shape and elements, or an error naming both shapes when they do not broadcast (use
/// [`Error::at`] to add the node).
pub fn map2<A: Sync, B: Sync, O: bytemuck::Pod + Send>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    f: impl Fn(&A, &B) -> O + Sync,
) -> Result<(Vec<usize>, Vec<O>)> {
    map2_in(a, a_shape, b, b_shape, f, host_pool::take::<O>)
}

/// [`map2`] for any output type (strings): the output is a new vector, not a pooled one.
pub fn map2_any<A: Sync, B: Sync, O: Send + Clone + Default>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    f: impl Fn(&A, &B) -> O + Sync,
) -> Result<(Vec<usize>, Vec<O>)> {
    map2_in(a, a_shape, b, b_shape, f, |n| vec![O::default(); n])
}

/// [`map2`] writing into a vector of the output's length from `alloc`.
fn map2_in<A: Sync, B: Sync, O: Send + Clone>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    f: impl Fn(&A, &B) -> O + Sync,
    alloc: impl FnOnce(usize) -> Vec<O>,
) -> Result<(Vec<usize>, Vec<O>)> {
    check_len("the first operand", a.len(), a_shape)?;
    check_len("the second operand", b.len(), b_shape)?;
    let shape = broadcast_shapes(a_shape, b_shape).ok_or_else(|| {
        Error::InvalidArgument(format!("shapes {a_shape:?} and {b_shape:?} cannot be broadcast together"))
    })?;
    let plan = Plan::new(&shape, [a_shape, b_shape])?;
    let mut out = alloc(plan.len());
    // Each segment's loop runs compiled for the CPU's SIMD level (same-shape, scalar and
    // row-broadcast operands are the three vectorizable cases).
    plan.for_each_segment(&mut out, |seg, [oa, ob], steps| {
        let n = seg.len();
        util::simd(|| match steps {
            [1, 1] => seg.iter_mut().zip(&a[oa..oa + n]).zip(&b[ob..ob + n]).for_each(|((o, x), y)| *o = f(x, y)),
            [1, _] => {
                let y = &b[ob];
                seg.iter_mut().zip(&a[oa..oa + n]).for_each(|(o, x)| *o = f(x, y));
            }
            [_, 1] => {
                let x = &a[oa];
                seg.iter_mut().zip(&b[ob..ob + n]).for_each(|(o, y)| *o = f(x, y));
            }
            _ => seg.fill(f(&a[oa], &b[ob])),
        })
    });
    Ok((shape, out))
}

/// Updates `acc` (of shape `acc_shape`) in place with `f(acc_elem, b_elem)`, `b` broadcast to
/// `acc_shape`. An error when `b` does not broadcast to `acc_shape` (it may not grow it).
pub fn update2<A: Send, B: Sync>(
    acc: &mut [A],
    acc_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    f: impl Fn(&mut A, &B) + Sync,
) -> Result<()> {
    check_len("the accumulator", acc.len(), acc_shape)?;
    check_len("the operand", b.len(), b_shape)?;
    let plan = Plan::new(acc_shape, [b_shape])?;
    plan.for_each_segment(acc, |seg, [ob], steps| {
        let n = seg.len();
        util::simd(|| {
            if steps[0] == 1 {
                seg.iter_mut().zip(&b[ob..ob + n]).for_each(|(o, y)| f(o, y));
            } else {
                let y = &b[ob];
                seg.iter_mut().for_each(|o| f(o, y));
            }
        })
    });
    Ok(())
}

/// Applies `f` chunk by chunk to `data` in place: in parallel for large slices.
pub fn par_chunks_in_place<T: Send>(data: &mut [T], f: impl Fn(&mut [T]) + Sync) {
    if data.len() < 2 * PAR_CHUNK || rayon::current_num_threads() < 2 {
        f(data);
        return;
    }
    let chunk = PAR_CHUNK.max(data.len().div_ceil(4 * rayon::current_num_threads()));
    parallel::for_each_chunk_mut(data, chunk, &|_, piece| f(piece));
}

/// Applies `f` to every triple of elements of `a`, `b` and `c` broadcast together (Where).
/// Returns the output shape and elements, or an error naming the shapes.
pub fn map3<A: Sync, B: Sync, C: Sync, O: bytemuck::Pod + Send>(
    a: (&[A], &[usize]),
    b: (&[B], &[usize]),
    c: (&[C], &[usize]),
    f: impl Fn(&A, &B, &C) -> O + Sync,
) -> Result<(Vec<usize>, Vec<O>)> {
    map3_in(a, b, c, f, host_pool::take::<O>)
}

/// [`map3`] for any output type (strings): the output is a new vector, not a pooled one.
pub fn map3_any<A: Sync, B: Sync, C: Sync, O: Send + Clone + Default>(
    a: (&[A], &[usize]),
    b: (&[B], &[usize]),
    c: (&[C], &[usize]),
    f: impl Fn(&A, &B, &C) -> O + Sync,
) -> Result<(Vec<usize>, Vec<O>)> {
    map3_in(a, b, c, f, |n| vec![O::default(); n])
}

/// [`map3`] writing into a vector of the output's length from `alloc`.
fn map3_in<A: Sync, B: Sync, C: Sync, O: Send>(
    (a, a_shape): (&[A], &[usize]),
    (b, b_shape): (&[B], &[usize]),
    (c, c_shape): (&[C], &[usize]),
    f: impl Fn(&A, &B, &C) -> O + Sync,
    alloc: impl FnOnce(usize) -> Vec<O>,
) -> Result<(Vec<usize>, Vec<O>)> {
    check_len("the first operand", a.len(), a_shape)?;
    check_len("the second operand", b.len(), b_shape)?;
    check_len("the third operand", c.len(), c_shape)?;
    let shape = broadcast_all(&[a_shape, b_shape, c_shape]).ok_or_else(|| {
        Error::InvalidArgument(format!("shapes {a_shape:?}, {b_shape:?} and {c_shape:?} cannot be broadcast together"))
    })?;
    let plan = Plan::new(&shape, [a_shape, b_shape, c_shape])?;
    let mut out = alloc(plan.len());
    plan.for_each_segment(&mut out, |seg, [oa, ob, oc], steps| {
        if steps == [1, 1, 1] {
            let n = seg.len();
            let inputs = a[oa..oa + n].iter().zip(&b[ob..ob + n]).zip(&c[oc..oc + n]);
            seg.iter_mut().zip(inputs).for_each(|(o, ((x, y), z))| *o = f(x, y, z));
        } else {
            let [sa, sb, sc] = steps;
            for (i, o) in seg.iter_mut().enumerate() {
                *o = f(&a[oa + i * sa], &b[ob + i * sb], &c[oc + i * sc]);
            }
        }
    });
    Ok((shape, out))
}

/// Copies `x` (of shape `x_shape`) broadcast to `out_shape` (numpy semantics; `x` may not be
/// larger than `out_shape` in any dimension). An error when it does not broadcast.
pub fn broadcast_to<T: Send + Sync + Clone + Default>(
    x: &[T],
    x_shape: &[usize],
    out_shape: &[usize],
) -> Result<Vec<T>> {
    check_len("the operand", x.len(), x_shape)?;
    let plan = Plan::new(out_shape, [x_shape])?;
    let mut out = vec![T::default(); plan.len()];
    plan.for_each_segment(&mut out, |seg, [o], steps| {
        if steps[0] == 1 {
            seg.clone_from_slice(&x[o..o + seg.len()]);
        } else {
            seg.fill(x[o].clone());
        }
    });
    Ok(out)
}

/// Applies `f` chunk by chunk to `src`, writing `dst` (of the same length): in parallel for
/// large slices. `f` receives matching chunks of the input and the output.
pub fn par_zip_chunks<A: Sync, B: Send>(src: &[A], dst: &mut [B], f: impl Fn(&[A], &mut [B]) + Sync) {
    debug_assert_eq!(src.len(), dst.len());
    if src.len() < 2 * PAR_CHUNK || rayon::current_num_threads() < 2 {
        f(src, dst);
        return;
    }
    let chunk = PAR_CHUNK.max(src.len().div_ceil(4 * rayon::current_num_threads()));
    parallel::for_each_chunk_pair(src, chunk, dst, chunk, &|_, s, d| f(s, d));
}

/// Maps every element of `src` through `f` into a new vector: in parallel for large slices.
pub fn par_map<A: Sync, O: Send + Clone + Default>(src: &[A], f: impl Fn(&A) -> O + Sync) -> Vec<O> {
    let mut out = vec![O::default(); src.len()];
    par_zip_chunks(src, &mut out, |s, d| d.iter_mut().zip(s).for_each(|(o, x)| *o = f(x)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row-major flat index of the element of an operand of `shape` read at output `index`.
    fn source_index(index: &[usize], shape: &[usize]) -> usize {
        let pad = index.len() - shape.len();
        shape.iter().enumerate().fold(0, |acc, (d, &s)| acc * s + if s == 1 { 0 } else { index[d + pad] })
    }

    fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
        idx
    }

    /// The obvious broadcasting loop, as the reference.
    fn naive_map2(a: &[i64], a_shape: &[usize], b: &[i64], b_shape: &[usize], out_shape: &[usize]) -> Vec<i64> {
        let n: usize = out_shape.iter().product();
        (0..n)
            .map(|i| {
                let idx = unravel(i, out_shape);
                a[source_index(&idx, a_shape)] * 1000 + b[source_index(&idx, b_shape)]
            })
            .collect()
    }

    fn iota(shape: &[usize], seed: i64) -> Vec<i64> {
        (0..shape.iter().product::<usize>() as i64).map(|i| i * 7 + seed).collect()
    }

    #[test]
    fn shapes_broadcast_like_numpy() {
        type Case<'a> = (&'a [usize], &'a [usize], Option<&'a [usize]>);
        let cases: &[Case<'_>] = &[
            (&[2, 3], &[2, 3], Some(&[2, 3])),
            (&[], &[4, 5], Some(&[4, 5])),
            (&[5, 1, 3], &[4, 1], Some(&[5, 4, 3])),
            (&[1], &[0], Some(&[0])),
            (&[0, 3], &[1, 3], Some(&[0, 3])),
            (&[2, 3], &[3, 2], None),
            (&[2, 0], &[2, 3], None),
        ];
        for &(a, b, want) in cases {
            assert_eq!(broadcast_shapes(a, b).as_deref(), want, "{a:?} with {b:?}");
            assert_eq!(broadcast_shapes(b, a).as_deref(), want, "{b:?} with {a:?}");
        }
        assert_eq!(broadcast_all(&[&[3, 1], &[1, 4], &[2, 1, 1]]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast_all(&[]), Some(vec![]));
    }

    #[test]
    fn plans_merge_contiguous_dimensions() {
        let same = Plan::new(&[2, 3, 5], [&[2, 3, 5], &[2, 3, 5]]).unwrap();
        assert_eq!(same.dims(), &[30]);
        let bias = Plan::new(&[4, 7, 9], [&[4, 7, 9], &[9]]).unwrap();
        assert_eq!((bias.dims(), bias.inner_strides()), (&[28, 9][..], [1, 1]));
        let column = Plan::new(&[6, 5], [&[6, 5], &[6, 1]]).unwrap();
        assert_eq!(column.inner_strides(), [1, 0]);
        let scalar = Plan::new(&[1, 1], [&[], &[1, 1]]).unwrap();
        assert_eq!((scalar.dims(), scalar.len()), (&[1][..], 1));
    }

    #[test]
    fn map2_matches_naive_broadcasting() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 5], &[3, 5]),
            (&[], &[7, 3]),
            (&[7, 3], &[]),
            (&[2, 3, 7], &[7]),
            (&[5, 1], &[1, 6]),
            (&[3, 1, 5], &[4, 1]),
            (&[2, 1, 3, 1], &[1, 4, 1, 5]),
            (&[1, 1], &[3, 1, 1]),
            (&[0, 3], &[3]),
            (&[4, 0], &[1]),
            // Big enough to run in parallel chunks that start mid-row.
            (&[3, 257, 131], &[257, 1]),
            (&[70001], &[1]),
            (&[2, 40_000], &[2, 1]),
        ];
        for &(sa, sb) in cases {
            let (a, b) = (iota(sa, 1), iota(sb, 3));
            let (shape, got) = map2(&a, sa, &b, sb, |x, y| x * 1000 + y).unwrap();
            assert_eq!(Some(shape.clone()), broadcast_shapes(sa, sb));
            assert_eq!(got, naive_map2(&a, sa, &b, sb, &shape), "{sa:?} with {sb:?}");
        }
    }

    #[test]
    fn map3_and_update2_match_naive_broadcasting() {
        let (sa, sb, sc): (&[usize], &[usize], &[usize]) = (&[3, 1, 5], &[4, 1], &[1, 4, 5]);
        let (a, b, c) = (iota(sa, 1), iota(sb, 2), iota(sc, 5));
        let (shape, got) = map3((&a, sa), (&b, sb), (&c, sc), |x, y, z| x * 1_000_000 + y * 1000 + z).unwrap();
        assert_eq!(shape, vec![3, 4, 5]);
        for (i, g) in got.iter().enumerate() {
            let idx = unravel(i, &shape);
            let want =
                a[source_index(&idx, sa)] * 1_000_000 + b[source_index(&idx, sb)] * 1000 + c[source_index(&idx, sc)];
            assert_eq!(*g, want, "element {i}");
        }
        let mut acc = iota(&[3, 4, 5], 9);
        let before = acc.clone();
        update2(&mut acc, &[3, 4, 5], &b, sb, |o, y| *o = *o * 1000 + y).unwrap();
        assert_eq!(acc, naive_map2(&before, &[3, 4, 5], &b, sb, &[3, 4, 5]));
        assert!(update2(&mut acc, &[3, 4, 5], &a, &[3, 2, 5], |_, _| ()).is_err());
    }

    #[test]
    fn broadcast_to_copies_and_repeats() {
        let x = [1, 2, 3];
        assert_eq!(broadcast_to(&x, &[3, 1], &[3, 2]).unwrap(), vec![1, 1, 2, 2, 3, 3]);
        assert_eq!(broadcast_to(&x, &[3], &[2, 3]).unwrap(), vec![1, 2, 3, 1, 2, 3]);
        assert!(broadcast_to(&x, &[3], &[2, 4]).is_err());
        assert!(broadcast_to(&x, &[3], &[]).is_err());
    }

    #[test]
    fn incompatible_shapes_are_errors_naming_both() {
        let err = map2(&[1, 2, 3], &[3], &[1, 2], &[2], |x: &i32, y: &i32| x + y).unwrap_err().to_string();
        assert!(err.contains("[3]") && err.contains("[2]"), "{err}");
        let err = map2(&[1, 2, 3], &[2], &[1], &[1], |x: &i32, y: &i32| x + y).unwrap_err().to_string();
        assert!(err.contains("3 elements"), "{err}");
        let at = Location { node: "n".into(), op: "Add".into() };
        let err = broadcast_or_error(&at, &[2, 3], &[4]).unwrap_err().to_string();
        assert!(err.contains("Add node 'n'") && err.contains("[2, 3]") && err.contains("[4]"), "{err}");
    }

    #[test]
    fn par_map_covers_every_element() {
        let src: Vec<u32> = (0..200_003).collect();
        let out = par_map(&src, |x| x * 2 + 1);
        assert!(out.iter().zip(&src).all(|(o, x)| *o == x * 2 + 1));
    }
}
