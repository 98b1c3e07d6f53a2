//! Tile, DepthToSpace and SpaceToDepth.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::elems::{self, with_elem, Elem};
use super::index_map::gather_axes;
use super::transpose::transpose;
use crate::ops::util;

/// Tile: repeats the input `repeats[d]` times along each axis `d`.
pub(crate) struct Tile {
    at: Location,
}

pub(crate) fn build_tile(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Tile { at: ctx.node.location() }))
}

/// The input index each output index reads for every axis of `shape` tiled by `repeats`.
pub(crate) fn tile_maps(shape: &[usize], repeats: &[i64], at: &Location) -> Result<Vec<Vec<Option<usize>>>> {
    shape
        .iter()
        .zip(repeats)
        .map(|(&d, &r)| {
            let r =
                usize::try_from(r).map_err(|_| Error::input(at, 1, "non-negative repeats", format!("{repeats:?}")))?;
            let n =
                d.checked_mul(r).ok_or_else(|| Error::node(at, format!("tiling a dim of {d} {r} times overflows")))?;
            let mut map = elems::with_capacity(n, at)?;
            map.extend((0..n).map(|o| Some(o % d)));
            Ok(map)
        })
        .collect()
}

impl Kernel for Tile {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let repeats = elems::int_values(&util::input(inputs, 1, &self.at)?, 1, &[DataType::Int64], &self.at)?;
        if repeats.len() != x.rank() {
            return Err(Error::input(
                &self.at,
                1,
                format!("{} repeats (the input's rank)", x.rank()),
                format!("{repeats:?}"),
            ));
        }
        let dims = x.shape().iter().zip(&repeats).map(|(&d, &r)| d as u128 * r.max(0) as u128);
        elems::check_output(x.dtype(), dims, &self.at)?;
        let maps = tile_maps(x.shape(), &repeats, &self.at)?;
        let shape: Vec<usize> = maps.iter().map(Vec::len).collect();
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let out = gather_axes(&data, x.shape(), &maps, &T::default(), &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

/// DepthToSpace (`to_space`) or SpaceToDepth: a reshape, a 6-D transpose and a reshape.
pub(crate) struct Rearrange {
    blocksize: usize,
    to_space: bool,
    /// Column-row-depth order (DepthToSpace mode CRD) instead of depth-column-row.
    crd: bool,
    at: Location,
}

fn build_rearrange(ctx: &NodeContext<'_>, to_space: bool) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let b = node.get_int("blocksize")?.ok_or_else(|| Error::attribute(&at, "blocksize", "an int", "nothing"))?;
    let blocksize = usize::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| Error::attribute(&at, "blocksize", "a positive int", b.to_string()))?;
    let crd = match (to_space && ctx.since_version >= 11).then(|| node.string_or("mode", "DCR")).transpose()? {
        None => false,
        Some(m) if m == "DCR" => false,
        Some(m) if m == "CRD" => true,
        Some(m) => return Err(Error::attribute(&at, "mode", "DCR or CRD", m)),
    };
    Ok(Box::new(Rearrange { blocksize, to_space, crd, at }))
}

pub(crate) fn build_depth_to_space(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build_rearrange(ctx, true)
}

pub(crate) fn build_space_to_depth(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build_rearrange(ctx, false)
}

impl Rearrange {
    /// The 6-D view of the input, the permutation and the output shape.
    fn plan(&self, shape: &[usize]) -> Result<([usize; 6], [usize; 6], Vec<usize>)> {
        let &[n, c, h, w] = shape else {
            return Err(Error::input(&self.at, 0, "a 4-D tensor [N, C, H, W]", format!("{shape:?}")));
        };
        let b = self.blocksize;
        let bb = b.checked_mul(b).ok_or_else(|| Error::node(&self.at, "blocksize is too large"))?;
        if self.to_space {
            if c % bb != 0 {
                return Err(Error::input(
                    &self.at,
                    0,
                    format!("channels divisible by blocksize² = {bb}"),
                    format!("{shape:?}"),
                ));
            }
            let too_large = || Error::node(&self.at, format!("blocksize {b} makes {shape:?} too large"));
            let out = vec![n, c / bb, h.checked_mul(b).ok_or_else(too_large)?, w.checked_mul(b).ok_or_else(too_large)?];
            Ok(if self.crd {
                ([n, c / bb, b, b, h, w], [0, 1, 4, 2, 5, 3], out)
            } else {
                ([n, b, b, c / bb, h, w], [0, 3, 4, 1, 5, 2], out)
            })
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(Error::input(
                    &self.at,
                    0,
                    format!("height and width divisible by blocksize {b}"),
                    format!("{shape:?}"),
                ));
            }
            let depth = c
                .checked_mul(bb)
                .ok_or_else(|| Error::node(&self.at, format!("blocksize {b} makes {shape:?} too large")))?;
            Ok(([n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4], vec![n, depth, h / b, w / b]))
        }
    }
}

impl Kernel for Rearrange {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let (view, perm, shape) = self.plan(x.shape())?;
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let out = transpose(&data, &view, &perm, &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;

    #[test]
    fn tiles_like_numpy() {
        let x = t(&[2, 3], vec![1i64, 2, 3, 4, 5, 6]);
        // np.tile(x, (2, 2))
        let y = run1("Tile", 13, vec![], &[Some(x.clone()), Some(i64s(&[2, 2]))]).unwrap();
        let want = vec![1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6];
        assert_eq!(i64v(&y), (vec![4, 6], want));
        let y = run1("Tile", 6, vec![], &[Some(x.clone()), Some(i64s(&[0, 3]))]).unwrap();
        assert_eq!(y.shape(), &[0, 9]);
        let err = run1("Tile", 13, vec![], &[Some(x.clone()), Some(i64s(&[2]))]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("2 repeats"), "{err}");
        let err = run1("Tile", 13, vec![], &[Some(x.clone()), Some(i64s(&[1, -1]))]).unwrap_err().to_string();
        assert!(err.contains("non-negative"), "{err}");
        let err = run1("Tile", 13, vec![], &[Some(x), Some(t(&[2], vec![1i32, 1]))]).unwrap_err().to_string();
        assert!(err.contains("int32"), "{err}");
    }

    #[test]
    fn depth_to_space_matches_spec_formula() {
        // x = np.arange(16).reshape(1, 8, 1, 2), blocksize 2; the spec's numpy formulas give:
        let x = t(&[1, 8, 1, 2], (0..16i64).collect());
        let dcr = run1("DepthToSpace", 13, vec![int("blocksize", 2)], &[Some(x.clone())]).unwrap();
        assert_eq!(i64v(&dcr), (vec![1, 2, 2, 4], vec![0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15]));
        let crd =
            run1("DepthToSpace", 13, vec![int("blocksize", 2), string("mode", "CRD")], &[Some(x.clone())]).unwrap();
        assert_eq!(i64v(&crd), (vec![1, 2, 2, 4], vec![0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15]));
        // SpaceToDepth inverts DCR DepthToSpace
        let back = run1("SpaceToDepth", 13, vec![int("blocksize", 2)], &[Some(dcr)]).unwrap();
        assert_eq!(i64v(&back), (vec![1, 8, 1, 2], (0..16).collect()));
        let err = run1("DepthToSpace", 13, vec![int("blocksize", 3)], &[Some(x.clone())]).unwrap_err().to_string();
        assert!(err.contains("divisible"), "{err}");
        let err = run1("SpaceToDepth", 13, vec![int("blocksize", 2)], &[Some(x.clone())]).unwrap_err().to_string();
        assert!(err.contains("divisible"), "{err}");
        let err = run1("DepthToSpace", 13, vec![int("blocksize", 0)], &[Some(x.clone())]).unwrap_err().to_string();
        assert!(err.contains("positive"), "{err}");
        let err = run1("DepthToSpace", 13, vec![int("blocksize", 2)], &[Some(t(&[8, 1, 2], vec![0i64; 16]))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("4-D"), "{err}");
    }
}
