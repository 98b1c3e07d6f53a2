//! Layout kernels: Transpose, Concat, Split, Slice, Pad, Tile, DepthToSpace, SpaceToDepth,
//! ReverseSequence.
//! Element-moving helpers shared with the shape, gather and resize families live in
//! [`elems`].

pub(crate) mod concat;
pub(crate) mod elems;
pub(crate) mod index_map;
mod pad;
mod reverse_sequence;
pub(crate) mod slice;
#[cfg(test)]
pub(crate) mod testkit;
mod tile;
pub(crate) mod transpose;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{Location, Result, Value};

use self::elems::{with_elem, Elem};
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Transpose", build_transpose);
    r.add("Concat", concat::build_concat);
    r.add("Split", concat::build_split);
    r.add("Slice", slice::build_slice);
    r.add("Pad", pad::build_pad);
    r.add("Tile", tile::build_tile);
    r.add("DepthToSpace", tile::build_depth_to_space);
    r.add("SpaceToDepth", tile::build_space_to_depth);
    r.add("ReverseSequence", reverse_sequence::build_reverse_sequence);
}

/// Transpose: output dim `i` is input dim `perm[i]` (reversed dims when `perm` is absent).
struct Transpose {
    perm: Option<Vec<i64>>,
    at: Location,
}

fn build_transpose(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let perm = ctx.node.get_ints("perm")?.map(<[i64]>::to_vec);
    Ok(Box::new(Transpose { perm, at: ctx.node.location() }))
}

impl Transpose {
    fn perm(&self, rank: usize) -> Result<Vec<usize>> {
        let perm: Vec<usize> = match &self.perm {
            None => (0..rank).rev().collect(),
            Some(p) => p.iter().map(|&x| usize::try_from(x).unwrap_or(usize::MAX)).collect(),
        };
        if let Some(p) = &self.perm {
            if perm.contains(&usize::MAX) {
                return Err(onyx_core::Error::attribute(
                    &self.at,
                    "perm",
                    format!("a permutation of 0..{rank}"),
                    format!("{p:?}"),
                ));
            }
        }
        transpose::check_perm(&perm, rank, &self.at)?;
        Ok(perm)
    }
}

impl Kernel for Transpose {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let perm = self.perm(x.rank())?;
        let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        if elems::count(x.shape(), &self.at)? == 0 || transpose::simplify(x.shape(), &perm).0.len() <= 1 {
            let input = elems::input_ref(inputs, 0, &self.at)?;
            return Ok(vec![elems::reshaped(input, out_shape, &self.at)?]);
        }
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let out = transpose::transpose(&data, x.shape(), &perm, &self.at)?;
            Ok(vec![elems::value(x.dtype(), out_shape, out)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use onyx_core::Tensor;

    #[test]
    fn transpose_op_defaults_and_errors() {
        let x = t(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let y = run1("Transpose", 13, vec![], &[Some(x.clone())]).unwrap();
        assert_eq!(f32s(&y), (vec![3, 2], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
        let s = strs(&[2, 2], &["a", "b", "c", "d"]);
        let y = run1("Transpose", 21, vec![ints("perm", &[1, 0])], &[Some(s)]).unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["a", "c", "b", "d"]);
        let b = Tensor::from_bools(vec![1, 3], vec![true, false, true]).unwrap();
        let y = run1("Transpose", 13, vec![], &[Some(b)]).unwrap();
        assert_eq!(y.shape(), &[3, 1]);
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[1, 0, 1]);
        for bad in [&[0, 0][..], &[0, 2], &[-1, 0], &[0]] {
            let err = run1("Transpose", 13, vec![ints("perm", bad)], &[Some(x.clone())]).unwrap_err();
            assert!(err.to_string().contains("perm"), "{err}");
        }
    }
}
