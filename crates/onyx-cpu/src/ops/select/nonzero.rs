//! NonZero (the coordinates of the non-zero elements) and Compress (the slices a boolean
//! condition selects along an axis).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use crate::ops::gather::gather_blocks;
use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;

/// Which elements of `x` are not zero (−0.0 is zero, NaN is not; strings: not empty).
fn nonzero_mask(x: &TensorView<'_>, at: &Location) -> Result<Vec<bool>> {
    if x.dtype() == DataType::String {
        return Ok(x.strings()?.iter().map(|s| !s.is_empty()).collect());
    }
    if x.dtype() == DataType::Bool {
        return Ok(x.bytes()?.iter().map(|&b| b != 0).collect());
    }
    crate::dispatch_numeric!(x.dtype(), T => {
        let zero = T::default();
        Ok(elems::typed::<T>(x.bytes()?).iter().map(|&v| v != zero).collect())
    }, _ => Err(elems::unsupported_dtype(at, x.dtype())))
}

/// NonZero: an int64 `[rank, count]` tensor of the coordinates of the non-zero elements, in
/// row-major order (a scalar counts as rank 1).
struct NonZero {
    at: Location,
}

pub(super) fn build_nonzero(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(NonZero { at: ctx.node.location() }))
}

/// The coordinates of the set entries of a row-major `mask` of `shape`, as `[rank, count]`.
pub(crate) fn coordinates(mask: &[bool], shape: &[usize]) -> (usize, Vec<i64>) {
    let rank = shape.len().max(1);
    let count = mask.iter().filter(|&&m| m).count();
    let mut out = vec![0i64; rank * count];
    let mut pos = vec![0usize; shape.len()];
    let mut j = 0;
    for &m in mask {
        if m {
            for (d, &p) in pos.iter().enumerate() {
                out[d * count + j] = p as i64;
            }
            j += 1;
        }
        for d in (0..pos.len()).rev() {
            pos[d] += 1;
            if pos[d] < shape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    (rank, out)
}

impl Kernel for NonZero {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let mask = nonzero_mask(&x, &self.at)?;
        let (rank, coords) = coordinates(&mask, x.shape());
        let count = coords.len() / rank;
        Ok(vec![util::out(vec![rank, count], coords)?])
    }
}

/// Compress: the slices along `axis` (of the flattened input when there is no axis) whose
/// condition entry is true. A condition shorter than the axis selects nothing past its end.
struct Compress {
    axis: Option<i64>,
    at: Location,
}

pub(super) fn build_compress(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Compress { axis: ctx.node.get_int("axis")?, at: ctx.node.location() }))
}

impl Kernel for Compress {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let c = util::input(inputs, 1, &self.at)?;
        util::expect_dtype(&c, &[DataType::Bool], 1, &self.at)?;
        if c.rank() != 1 {
            return Err(Error::input(&self.at, 1, "a 1-D bool condition", format!("shape {:?}", c.shape())));
        }
        let n = elems::count(x.shape(), &self.at)?;
        let (outer, dim, inner, axis) = match self.axis {
            None => (1, n, 1, None),
            Some(a) => {
                if x.rank() == 0 {
                    return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
                }
                let axis = util::normalize_axis(a, x.rank(), &self.at)?;
                let s = x.shape();
                (elems::count(&s[..axis], &self.at)?, s[axis], elems::count(&s[axis + 1..], &self.at)?, Some(axis))
            }
        };
        let cond = c.bytes()?;
        if let Some(p) = cond.iter().skip(dim).position(|&b| b != 0) {
            return Err(Error::input(
                &self.at,
                1,
                format!("a condition with no true entry past the {dim} slices of the axis"),
                format!("true at position {}", dim + p),
            ));
        }
        let idx: Vec<usize> = cond.iter().take(dim).enumerate().filter(|(_, &b)| b != 0).map(|(i, _)| i).collect();
        let shape = match axis {
            None => vec![idx.len()],
            Some(a) => {
                let mut s = x.shape().to_vec();
                s[a] = idx.len();
                s
            }
        };
        with_elem!(x.dtype(), &self.at, T => {
            let out = gather_blocks(&T::read(&x)?, outer, dim, inner, &idx, &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::ops::layout::testkit::*;

    fn bools(shape: &[usize], v: &[u8]) -> Tensor {
        Tensor::from_bools(shape.to_vec(), v.iter().map(|&b| b != 0).collect()).unwrap()
    }

    #[test]
    fn nonzero_matches_numpy() {
        // np.vstack(np.nonzero(x)) for x = [[[0,1.5],[-0.0,nan]],[[2,0],[0,-3]],[[0,0],[7,0]]]
        let x = t(&[3, 2, 2], vec![0f32, 1.5, -0.0, f32::NAN, 2., 0., 0., -3., 0., 0., 7., 0.]);
        let y = run1("NonZero", 13, vec![], &[Some(x)]).unwrap();
        assert_eq!(i64v(&y), (vec![3, 5], vec![0, 0, 1, 1, 2, 0, 1, 0, 1, 1, 1, 1, 0, 1, 0]));
        let y = run1("NonZero", 9, vec![], &[Some(bools(&[5], &[1, 0, 0, 1, 1]))]).unwrap();
        assert_eq!(i64v(&y), (vec![1, 3], vec![0, 3, 4]));
        let y = run1("NonZero", 13, vec![], &[Some(t(&[2, 3], vec![0i8; 6]))]).unwrap();
        assert_eq!(y.shape(), &[2, 0]);
        let y = run1("NonZero", 13, vec![], &[Some(Tensor::scalar(5u16))]).unwrap();
        assert_eq!(i64v(&y), (vec![1, 1], vec![0]));
        let y = run1("NonZero", 13, vec![], &[Some(strs(&[3], &["a", "", "b"]))]).unwrap();
        assert_eq!(i64v(&y).1, vec![0, 2]);
    }

    #[test]
    fn compress_matches_numpy() {
        let data: Vec<f32> = rand_f32(3 * 5 * 2, 4);
        let x = t(&[3, 5, 2], data.clone());
        // np.compress([0,1,1,0,1], x, axis=1)
        let y = run1("Compress", 11, vec![int("axis", 1)], &[Some(x.clone()), Some(bools(&[5], &[0, 1, 1, 0, 1]))])
            .unwrap();
        let want: Vec<f32> = (0..3)
            .flat_map(|a| [1, 2, 4].into_iter().flat_map(move |b| [0, 1].map(|c| (a, b, c))))
            .map(|(a, b, c)| data[a * 10 + b * 2 + c])
            .collect();
        assert_eq!(f32s(&y), (vec![3, 3, 2], want));
        // A short condition, negative axis.
        let y = run1("Compress", 11, vec![int("axis", -3)], &[Some(x.clone()), Some(bools(&[2], &[0, 1]))]).unwrap();
        assert_eq!(f32s(&y), (vec![1, 5, 2], data[10..20].to_vec()));
        // No axis: the flattened input.
        let y = run1("Compress", 9, vec![], &[Some(x.clone()), Some(bools(&[4], &[1, 0, 0, 1]))]).unwrap();
        assert_eq!(f32s(&y), (vec![2], vec![data[0], data[3]]));
        let y = run1("Compress", 11, vec![], &[Some(strs(&[2], &["x", "y"])), Some(bools(&[2], &[0, 1]))]).unwrap();
        assert_eq!(y.view().unwrap().strings().unwrap(), &["y"]);
        let err = run1("Compress", 11, vec![int("axis", 0)], &[Some(x.clone()), Some(bools(&[4], &[0, 0, 0, 1]))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 1") && err.contains("position 3"), "{err}");
        let err = run1("Compress", 11, vec![int("axis", 3)], &[Some(x.clone()), Some(bools(&[1], &[1]))]).unwrap_err();
        assert!(err.to_string().contains("axis 3"), "{err}");
        let err = run1("Compress", 11, vec![], &[Some(x), Some(t(&[1], vec![1i64]))]).unwrap_err();
        assert!(err.to_string().contains("input 1"), "{err}");
    }
}
