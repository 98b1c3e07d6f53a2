//! OneHot and Trilu.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use crate::ops::layout::elems::{self, with_elem, Elem};
use crate::ops::util;

/// OneHot: a new axis of `depth` elements, `on` where the index points and `off` elsewhere.
struct OneHot {
    axis: i64,
    at: Location,
}

pub(crate) fn build_one_hot(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(OneHot { axis: ctx.node.int_or("axis", -1)?, at: ctx.node.location() }))
}

/// Fills `[outer, depth, inner]` with `off`, then `on` at each in-range index.
pub(crate) fn one_hot<T: Elem>(
    idx: &[i64],
    outer: usize,
    inner: usize,
    depth: usize,
    off: &T,
    on: &T,
    at: &Location,
) -> Result<Vec<T>> {
    let n = outer.checked_mul(depth).and_then(|x| x.checked_mul(inner));
    let n = n.ok_or_else(|| Error::node(at, "the output of OneHot is too large"))?;
    let mut out = elems::alloc::<T>(n, at)?;
    out.fill(off.clone());
    let d = depth as i64;
    for (p, &i) in idx.iter().enumerate() {
        let i = if i < 0 { i + d } else { i };
        if (0..d).contains(&i) {
            let (o, r) = (p / inner, p % inner);
            out[(o * depth + i as usize) * inner + r] = on.clone();
        }
    }
    Ok(out)
}

impl Kernel for OneHot {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let iv = util::input(inputs, 0, &self.at)?;
        let dv = util::input(inputs, 1, &self.at)?;
        let vv = util::input(inputs, 2, &self.at)?;
        let depth = match elems::numeric_f64(&dv, 1, &self.at)?.as_slice() {
            &[d] if (1.0..1e15).contains(&d) => d as usize,
            other => return Err(Error::input(&self.at, 1, "one positive depth", format!("{other:?}"))),
        };
        if vv.len() != 2 {
            return Err(Error::input(&self.at, 2, "2 values [off, on]", format!("{:?}", vv.shape())));
        }
        let rank = iv.rank() as i64;
        if self.axis < -rank - 1 || self.axis > rank {
            return Err(Error::attribute(
                &self.at,
                "axis",
                format!("a value in [{}, {rank}]", -rank - 1),
                self.axis.to_string(),
            ));
        }
        let axis = if self.axis < 0 { self.axis + rank + 1 } else { self.axis } as usize;
        // Indices of any numeric type are truncated to integers.
        let idx: Vec<i64> = elems::numeric_f64(&iv, 0, &self.at)?.iter().map(|&x| x as i64).collect();
        let outer = elems::count(&iv.shape()[..axis], &self.at)?;
        let inner = elems::count(&iv.shape()[axis..], &self.at)?;
        let mut shape = iv.shape().to_vec();
        shape.insert(axis, depth);
        with_elem!(vv.dtype(), &self.at, T => {
            let values = T::read(&vv)?;
            let out = one_hot(&idx, outer, inner, depth, &values[0], &values[1], &self.at)?;
            Ok(vec![elems::value(vv.dtype(), shape, out)?])
        })
    }
}

/// Trilu: keeps the upper (`j - i >= k`) or lower (`j - i <= k`) triangle of each matrix.
struct Trilu {
    upper: bool,
    at: Location,
}

pub(crate) fn build_trilu(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Trilu { upper: ctx.node.int_or("upper", 1)? != 0, at: ctx.node.location() }))
}

/// Zeroes (`T::default()`) everything outside the kept triangle of `[.., rows, cols]` data.
pub(crate) fn trilu<T: Elem>(data: &[T], rows: usize, cols: usize, k: i64, upper: bool) -> Vec<T> {
    let mut out = data.to_vec();
    if rows == 0 || cols == 0 {
        return out;
    }
    for (p, row) in out.chunks_mut(cols).enumerate() {
        let i = (p % rows) as i64;
        // Columns j with j - i >= k (upper) or j - i <= k (lower) are kept.
        let edge = i.saturating_add(k).clamp(0, cols as i64) as usize;
        if upper {
            row[..edge].fill(T::default());
        } else {
            let keep_to = i.saturating_add(k).saturating_add(1).clamp(0, cols as i64) as usize;
            row[keep_to..].fill(T::default());
        }
    }
    out
}

impl Kernel for Trilu {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let k = match util::opt_input(inputs, 1, &self.at)? {
            Some(kv) => match elems::int_values(&kv, 1, &[DataType::Int64], &self.at)?.as_slice() {
                &[k] => k,
                other => return Err(Error::input(&self.at, 1, "one k", format!("{other:?}"))),
            },
            None => 0,
        };
        let &[.., rows, cols] = x.shape() else {
            return Err(Error::input(&self.at, 0, "a tensor of rank 2 or more", format!("{:?}", x.shape())));
        };
        with_elem!(x.dtype(), &self.at, T => {
            let out = trilu(&T::read(&x)?, rows, cols, k, self.upper);
            Ok(vec![elems::value(x.dtype(), x.shape().to_vec(), out)?])
        })
    }
}
