//! Pad: constant, reflect, edge and wrap modes; negative pads crop.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::elems::{self, with_elem, Elem};
use super::index_map::gather_axes;
use crate::ops::util;

/// How positions outside the input are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PadMode {
    /// A constant value.
    Constant,
    /// Mirror without repeating the edge element.
    Reflect,
    /// Repeat the edge element.
    Edge,
    /// Wrap around to the other side.
    Wrap,
}

impl PadMode {
    fn parse(s: &str, version: i64, at: &Location) -> Result<Self> {
        match s {
            "constant" => Ok(PadMode::Constant),
            "reflect" => Ok(PadMode::Reflect),
            "edge" => Ok(PadMode::Edge),
            "wrap" if version >= 19 => Ok(PadMode::Wrap),
            other => Err(Error::attribute(at, "mode", "constant, reflect, edge (or wrap from opset 19)", other)),
        }
    }
}

/// The input index each output index reads along an axis of `dim` elements padded by `begin`
/// and `end` (negative: cropped); `None` where the constant goes.
pub(crate) fn axis_map(dim: usize, begin: i64, end: i64, mode: PadMode, at: &Location) -> Result<Vec<Option<usize>>> {
    let d = dim as i64;
    let out = d.checked_add(begin).and_then(|x| x.checked_add(end)).filter(|&n| n >= 0);
    let Some(out) = out else {
        return Err(Error::node(at, format!("pads {begin} and {end} leave nothing of a dim of {d}")));
    };
    // The part of the input that survives cropping.
    let lo = begin.saturating_neg().max(0);
    let hi = d - end.saturating_neg().max(0);
    let n = (hi - lo).max(0);
    if n == 0 && mode != PadMode::Constant && out > 0 {
        return Err(Error::node(
            at,
            format!("{mode:?} padding needs a non-empty dim, found a dim of {d} after cropping"),
        ));
    }
    let source = |o: i64| -> Option<usize> {
        let s = o - begin;
        if (lo..hi).contains(&s) {
            return Some(s as usize);
        }
        let r = s - lo; // relative to the surviving part
        let rel = match mode {
            PadMode::Constant => return None,
            PadMode::Edge => r.clamp(0, n - 1),
            PadMode::Wrap => r.rem_euclid(n),
            PadMode::Reflect if n == 1 => 0,
            PadMode::Reflect => {
                let period = 2 * (n - 1);
                let m = r.rem_euclid(period);
                if m < n {
                    m
                } else {
                    period - m
                }
            }
        };
        Some((lo + rel) as usize)
    };
    let mut map = elems::with_capacity(out as usize, at)?;
    map.extend((0..out).map(source));
    Ok(map)
}

/// Pad.
pub(crate) struct Pad {
    mode: PadMode,
    /// Pads and constant from attributes (before opset 11).
    attr_pads: Option<Vec<i64>>,
    attr_value: f32,
    at: Location,
}

pub(crate) fn build_pad(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let node = ctx.node;
    let at = node.location();
    let mode = PadMode::parse(&node.string_or("mode", "constant")?, ctx.since_version, &at)?;
    let (attr_pads, attr_value) = if ctx.since_version < 11 {
        let pads = node.get_ints("pads")?.or(node.get_ints("paddings")?);
        let pads = pads.ok_or_else(|| Error::attribute(&at, "pads", "a list of ints", "nothing"))?;
        (Some(pads.to_vec()), node.float_or("value", 0.0)?)
    } else {
        (None, 0.0)
    };
    Ok(Box::new(Pad { mode, attr_pads, attr_value, at }))
}

impl Pad {
    /// Begin and end pads of every axis.
    fn pads(&self, inputs: &[Option<ValueRef<'_>>], rank: usize) -> Result<Vec<(i64, i64)>> {
        let ints = [DataType::Int32, DataType::Int64];
        let pads = match &self.attr_pads {
            Some(p) => p.clone(),
            None => elems::int_values(&util::input(inputs, 1, &self.at)?, 1, &[DataType::Int64], &self.at)?,
        };
        let axes: Vec<usize> = match util::opt_input(inputs, 3, &self.at)? {
            Some(a) => elems::int_values(&a, 3, &ints, &self.at)?
                .iter()
                .map(|&a| util::normalize_axis(a, rank, &self.at))
                .collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(Error::node(
                &self.at,
                format!("pads {pads:?} must hold a begin and an end for each of the {} axes", axes.len()),
            ));
        }
        let mut out = vec![(0, 0); rank];
        for (i, &axis) in axes.iter().enumerate() {
            out[axis] = (pads[i], pads[i + axes.len()]);
        }
        Ok(out)
    }
}

impl Kernel for Pad {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let x = util::input(inputs, 0, &self.at)?;
        let pads = self.pads(inputs, x.rank())?;
        let maps = x
            .shape()
            .iter()
            .zip(&pads)
            .map(|(&d, &(b, e))| axis_map(d, b, e, self.mode, &self.at))
            .collect::<Result<Vec<_>>>()?;
        let shape: Vec<usize> = maps.iter().map(Vec::len).collect();
        let constant = match (&self.attr_pads, util::opt_input(inputs, 2, &self.at)?) {
            (Some(_), _) => Some(elems::scalar(x.dtype(), f64::from(self.attr_value), &self.at)?),
            (None, Some(c)) if !c.is_empty() => {
                if c.dtype() != x.dtype() {
                    return Err(Error::input(&self.at, 2, format!("a {} scalar", x.dtype()), c.dtype().name()));
                }
                Some(c.to_tensor())
            }
            _ => None,
        };
        with_elem!(x.dtype(), &self.at, T => {
            let data = T::read(&x)?;
            let fill = match &constant {
                Some(c) => T::read(&c.view()?)?.first().cloned().unwrap_or_default(),
                None => T::default(),
            };
            let out = gather_axes(&data, x.shape(), &maps, &fill, &self.at)?;
            Ok(vec![elems::value(x.dtype(), shape, out)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    fn map(dim: usize, b: i64, e: i64, mode: PadMode) -> Vec<Option<usize>> {
        axis_map(dim, b, e, mode, &Location::default()).unwrap()
    }

    #[test]
    fn axis_maps_match_numpy_pad() {
        // np.pad(np.arange(4), (5, 6), mode) for reflect / edge / wrap
        let s = |v: &[usize]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
        assert_eq!(map(4, 5, 6, PadMode::Reflect), s(&[1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2, 3]));
        assert_eq!(map(4, 5, 6, PadMode::Edge), s(&[0, 0, 0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3, 3, 3]));
        assert_eq!(map(4, 5, 6, PadMode::Wrap), s(&[3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1]));
        assert_eq!(map(1, 2, 1, PadMode::Reflect), s(&[0, 0, 0, 0]));
        assert_eq!(map(3, 1, 1, PadMode::Constant), vec![None, Some(0), Some(1), Some(2), None]);
        // cropping: x[2:] then one constant at the end
        assert_eq!(map(5, -2, 1, PadMode::Constant), vec![Some(2), Some(3), Some(4), None]);
        // cropping then edge relative to what survives
        assert_eq!(map(5, -1, 2, PadMode::Edge), s(&[1, 2, 3, 4, 4, 4]));
        let at = Location::default();
        assert!(axis_map(3, -2, -2, PadMode::Constant, &at).unwrap_err().to_string().contains("leave nothing"));
        assert!(axis_map(0, 1, 0, PadMode::Edge, &at).is_err());
    }

    #[test]
    fn pads_like_numpy() {
        let data = rand_f32(2 * 3, 3);
        let x = t(&[2, 3], data.clone());
        // np.pad(x, ((1, 0), (2, 1)), constant_values=1.5)
        let y =
            run1("Pad", 11, vec![], &[Some(x.clone()), Some(i64s(&[1, 2, 0, 1])), Some(t(&[], vec![1.5f32]))]).unwrap();
        let c = 1.5;
        let d = &data;
        let want = vec![c, c, c, c, c, c, c, c, d[0], d[1], d[2], c, c, c, d[3], d[4], d[5], c];
        assert_eq!(f32s(&y), (vec![3, 6], want));
        // opset 2: attribute pads and value
        let y = run1("Pad", 2, vec![ints("pads", &[1, 2, 0, 1]), float("value", 1.5)], &[Some(x.clone())]).unwrap();
        assert_eq!(f32s(&y).1[8], d[0]);
        assert_eq!(f32s(&y).1[0], 1.5);
        // opset 18: axes input, reflect on the last axis only: np.pad(x, ((0,0),(2,2)), 'reflect')
        let y = run1(
            "Pad",
            18,
            vec![string("mode", "reflect")],
            &[Some(x.clone()), Some(i64s(&[2, 2])), None, Some(i64s(&[-1]))],
        )
        .unwrap();
        let want = vec![d[2], d[1], d[0], d[1], d[2], d[1], d[0], d[5], d[4], d[3], d[4], d[5], d[4], d[3]];
        assert_eq!(f32s(&y), (vec![2, 7], want));
        let b = onyx_core::Tensor::from_bools(vec![2], vec![true, false]).unwrap();
        let y = run1("Pad", 19, vec![string("mode", "wrap")], &[Some(b), Some(i64s(&[1, 2]))]).unwrap();
        assert_eq!(y.view().unwrap().bytes().unwrap(), &[0, 1, 0, 1, 0]);
    }

    #[test]
    fn pad_errors() {
        let x = t(&[2, 3], vec![1f32; 6]);
        let err = run1("Pad", 11, vec![], &[Some(x.clone()), Some(i64s(&[1, 2]))]).unwrap_err().to_string();
        assert!(err.contains("begin and an end"), "{err}");
        let err =
            run1("Pad", 11, vec![], &[Some(x.clone()), Some(t(&[4], vec![1i32, 1, 1, 1]))]).unwrap_err().to_string();
        assert!(err.contains("input 1") && err.contains("int32"), "{err}");
        let err = run1("Pad", 11, vec![], &[Some(x.clone()), Some(i64s(&[0, 0, 0, 0])), Some(t(&[], vec![1i64]))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 2") && err.contains("int64"), "{err}");
        let err = run1("Pad", 18, vec![string("mode", "wrap")], &[Some(x.clone()), Some(i64s(&[0, 0, 0, 0]))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("'mode'"), "{err}");
        assert!(run1("Pad", 2, vec![], &[Some(x)]).unwrap_err().to_string().contains("'pads'"));
    }
}
