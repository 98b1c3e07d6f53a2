//! What a rule sees of a node: its inputs' inferred facts, typed access to constant inputs and
//! attributes, and errors that name the node.

use super::super::{Inferred, SymInt};
use super::dims::{dim_to_sym, fmt_dims};
use crate::error::Location;
use crate::ir::Node;
use crate::types::{Dim, TensorType, ValueType};
use crate::{DataType, Error, Result, Tensor};

/// Signature of one op's rule.
pub type Rule = fn(&Ctx<'_>) -> Result<Vec<Inferred>>;

/// Largest rank inference builds from a length it reads off a shape (larger ones stay unknown).
pub const MAX_RANK: usize = 1024;

/// Longest integer tensor whose elements inference tracks symbolically.
pub const MAX_SYM_LEN: usize = 64;

/// One node and what is known of its inputs.
pub struct Ctx<'a> {
    /// The node.
    pub node: &'a Node,
    /// The since-version of the op definition that applies.
    pub since: i64,
    /// Where the node is, for errors.
    pub at: Location,
    inputs: &'a [Option<&'a Inferred>],
}

impl<'a> Ctx<'a> {
    /// Wraps a node and its inputs.
    pub fn new(node: &'a Node, since: i64, inputs: &'a [Option<&'a Inferred>]) -> Self {
        Ctx { node, since, at: node.location(), inputs }
    }

    /// What is known of input `i` (`None` when omitted or unknown).
    pub fn input(&self, i: usize) -> Option<&'a Inferred> {
        self.inputs.get(i).copied().flatten()
    }

    /// Number of input slots of the node (omitted ones included).
    pub fn input_count(&self) -> usize {
        self.node.inputs.len()
    }

    /// Number of output slots of the node (omitted ones included).
    pub fn output_count(&self) -> usize {
        self.node.outputs.len()
    }

    /// The tensor type of input `i`.
    pub fn tensor(&self, i: usize) -> Option<&'a TensorType> {
        self.input(i)?.tensor_type()
    }

    /// The element type of input `i`.
    pub fn dtype(&self, i: usize) -> Option<DataType> {
        self.tensor(i).map(|t| t.dtype)
    }

    /// The dimensions of input `i`, when its rank is known.
    pub fn shape(&self, i: usize) -> Option<&'a [Dim]> {
        self.tensor(i)?.shape.as_deref()
    }

    /// The constant value of input `i`.
    pub fn constant(&self, i: usize) -> Option<&'a Tensor> {
        self.input(i)?.constant.as_ref()
    }

    /// The symbolic elements of input `i`; for a tensor of known rank 0 or 1 without tracked
    /// values, one `Unknown` per element when its length is known.
    pub fn sym(&self, i: usize) -> Option<Vec<SymInt>> {
        let inf = self.input(i)?;
        if let Some(v) = &inf.sym_value {
            return Some(v.clone());
        }
        if let Some(v) = self.small_constant(i).and_then(tensor_ints) {
            return Some(v.into_iter().map(SymInt::Known).collect());
        }
        match self.shape(i)? {
            [] => Some(vec![SymInt::Unknown]),
            [Dim::Fixed(n)] if *n <= MAX_SYM_LEN => Some(vec![SymInt::Unknown; *n]),
            _ => None,
        }
    }

    /// The constant value of input `i` when it has at most [`MAX_SYM_LEN`] elements (rules
    /// read arguments such as axes, sizes and scales from these).
    pub fn small_constant(&self, i: usize) -> Option<&'a Tensor> {
        self.constant(i).filter(|t| t.len() <= MAX_SYM_LEN)
    }

    /// The elements of input `i` when they are all known integers (small constants only).
    pub fn ints(&self, i: usize) -> Option<Vec<i64>> {
        let inf = self.input(i)?;
        if let Some(v) = self.small_constant(i).and_then(tensor_ints) {
            return Some(v);
        }
        inf.sym_value.as_ref()?.iter().map(known).collect()
    }

    /// The elements of a small constant numeric input `i`, as `f64`.
    pub fn floats(&self, i: usize) -> Option<Vec<f64>> {
        let t = self.small_constant(i)?;
        tensor_floats(t).or_else(|| tensor_ints(t).map(|v| v.into_iter().map(|x| x as f64).collect()))
    }

    /// The number of elements of 1-D input `i` (a list of axes, sizes or pads), when known
    /// and at most [`MAX_RANK`].
    pub fn len_1d(&self, i: usize) -> Option<usize> {
        match self.shape(i)? {
            [d] => d.fixed().filter(|&n| n <= MAX_RANK),
            _ => None,
        }
    }

    /// An INTS attribute.
    pub fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self.node.get_ints(name)?.map(<[i64]>::to_vec))
    }

    /// An INT attribute with a default.
    pub fn attr_int(&self, name: &str, default: i64) -> Result<i64> {
        self.node.int_or(name, default)
    }

    /// An error on the node as a whole.
    pub fn error(&self, message: impl Into<String>) -> Error {
        Error::node(&self.at, message)
    }

    /// An error on input `i`.
    pub fn input_error(&self, i: usize, expected: impl Into<String>, found: impl Into<String>) -> Error {
        Error::input(&self.at, i, expected, found)
    }

    /// An error on attribute `name`.
    pub fn attr_error(&self, name: &str, expected: impl Into<String>, found: impl Into<String>) -> Error {
        Error::attribute(&self.at, name, expected, found)
    }

    /// Resolves an axis given by attribute `name` against `rank` (negative counts from the back).
    pub fn attr_axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize> {
        normalize_axis(axis, rank).ok_or_else(|| self.attr_error(name, axis_range(rank), axis.to_string()))
    }

    /// Resolves an axis read from input `i` against `rank`.
    pub fn input_axis(&self, i: usize, axis: i64, rank: usize) -> Result<usize> {
        normalize_axis(axis, rank)
            .ok_or_else(|| self.input_error(i, format!("axes {}", axis_range(rank)), axis.to_string()))
    }

    /// Resolves a list of axes (from attribute `name`, or input `input` when it is `Some`),
    /// rejecting duplicates.
    pub fn axes(&self, axes: &[i64], rank: usize, name: &str, input: Option<usize>) -> Result<Vec<usize>> {
        let mut out: Vec<usize> = Vec::with_capacity(axes.len());
        for &a in axes {
            let ax = match input {
                Some(i) => self.input_axis(i, a, rank)?,
                None => self.attr_axis(name, a, rank)?,
            };
            if out.contains(&ax) {
                let what = format!("axes without repeats (rank {rank})");
                return Err(match input {
                    Some(i) => self.input_error(i, what, format!("{axes:?}")),
                    None => self.attr_error(name, what, format!("{axes:?}")),
                });
            }
            out.push(ax);
        }
        Ok(out)
    }

    /// Requires input `i` to have rank `want` when its rank is known.
    pub fn expect_rank(&self, i: usize, want: usize) -> Result<()> {
        match self.shape(i) {
            Some(s) if s.len() != want => Err(self.input_error(i, format!("a tensor of rank {want}"), describe(s))),
            _ => Ok(()),
        }
    }

    /// Requires inputs `a` and `b` to have the same element type when both are known.
    pub fn same_dtype(&self, a: usize, b: usize) -> Result<()> {
        match (self.dtype(a), self.dtype(b)) {
            (Some(x), Some(y)) if x != y => {
                Err(self.input_error(b, format!("element type {x} (as input {a})"), y.to_string()))
            }
            _ => Ok(()),
        }
    }
}

/// The accepted range of an axis for `rank`, for messages.
fn axis_range(rank: usize) -> String {
    format!("an axis in [-{rank}, {}]", rank as i64 - 1)
}

/// Resolves an axis against `rank`: `-rank..rank` maps to `0..rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Describes dims of a rank-known tensor for messages: `rank 3 [b,4,?]`.
pub fn describe(dims: &[Dim]) -> String {
    format!("rank {} {}", dims.len(), fmt_dims(dims))
}

/// A `SymInt`'s value when known.
pub fn known(s: &SymInt) -> Option<i64> {
    match s {
        SymInt::Known(v) => Some(*v),
        _ => None,
    }
}

/// The elements of an integer host tensor as `i64`.
pub fn tensor_ints(t: &Tensor) -> Option<Vec<i64>> {
    fn widen<T: crate::Element + Copy + Into<i64>>(t: &Tensor) -> Option<Vec<i64>> {
        t.as_slice::<T>().ok().map(|v| v.iter().map(|&x| x.into()).collect())
    }
    match t.dtype() {
        DataType::Int64 => t.as_slice::<i64>().ok().map(<[i64]>::to_vec),
        DataType::Int32 => widen::<i32>(t),
        DataType::Int16 => widen::<i16>(t),
        DataType::Int8 => widen::<i8>(t),
        DataType::Uint8 => widen::<u8>(t),
        DataType::Uint16 => widen::<u16>(t),
        DataType::Uint32 => widen::<u32>(t),
        DataType::Uint64 => t.as_slice::<u64>().ok()?.iter().map(|&x| i64::try_from(x).ok()).collect(),
        _ => None,
    }
}

/// The elements of a floating-point host tensor as `f64`.
pub fn tensor_floats(t: &Tensor) -> Option<Vec<f64>> {
    match t.dtype() {
        DataType::Float => t.as_slice::<f32>().ok().map(|v| v.iter().map(|&x| f64::from(x)).collect()),
        DataType::Double => t.as_slice::<f64>().ok().map(<[f64]>::to_vec),
        DataType::Float16 => t.as_slice::<half::f16>().ok().map(|v| v.iter().map(|x| x.to_f64()).collect()),
        DataType::BFloat16 => t.as_slice::<half::bf16>().ok().map(|v| v.iter().map(|x| x.to_f64()).collect()),
        _ => None,
    }
}

/// A tensor output of `dtype` with `shape` (`None`: unknown rank).
pub fn tensor_out(dtype: DataType, shape: Option<Vec<Dim>>) -> Inferred {
    Inferred::of_type(ValueType::Tensor(TensorType { dtype, shape }))
}

/// An output with exactly the type of `input` (nothing about its value).
pub fn same_type(input: &Inferred) -> Inferred {
    Inferred::of_type(input.ty.clone())
}

/// An unknown output.
pub fn unknown() -> Inferred {
    Inferred::of_type(ValueType::Unknown)
}

/// True for the integer types whose values inference tracks.
pub fn tracks_values(dtype: DataType) -> bool {
    matches!(dtype, DataType::Int64 | DataType::Int32)
}

/// An integer output of rank 0 (`scalar`) or 1 with symbolically known elements. Sets the
/// constant too when every element is known.
pub fn sym_out(dtype: DataType, scalar: bool, values: Vec<SymInt>) -> Inferred {
    let shape = if scalar { vec![] } else { vec![Dim::Fixed(values.len())] };
    let mut out = tensor_out(dtype, Some(shape.clone()));
    if !tracks_values(dtype) || values.len() > MAX_SYM_LEN || (scalar && values.len() != 1) {
        return out;
    }
    let dims: Vec<usize> = shape.iter().filter_map(Dim::fixed).collect();
    let ints: Option<Vec<i64>> = values.iter().map(known).collect();
    out.constant = ints.and_then(|v| int_tensor(dtype, dims, &v));
    out.sym_value = Some(values);
    out
}

/// An integer tensor of `dtype` holding `values` (`None` when a value does not fit).
pub fn int_tensor(dtype: DataType, shape: Vec<usize>, values: &[i64]) -> Option<Tensor> {
    match dtype {
        DataType::Int64 => Tensor::from_vec(shape, values.to_vec()).ok(),
        DataType::Int32 => {
            let v: Option<Vec<i32>> = values.iter().map(|&x| i32::try_from(x).ok()).collect();
            Tensor::from_vec(shape, v?).ok()
        }
        _ => None,
    }
}

/// The symbolic elements of a shape.
pub fn shape_syms(dims: &[Dim]) -> Vec<SymInt> {
    dims.iter().map(dim_to_sym).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_axis_table() {
        let cases = [
            (0, 3, Some(0)),
            (2, 3, Some(2)),
            (3, 3, None),
            (-1, 3, Some(2)),
            (-3, 3, Some(0)),
            (-4, 3, None),
            (0, 0, None),
        ];
        for (axis, rank, want) in cases {
            assert_eq!(normalize_axis(axis, rank), want, "axis {axis} rank {rank}");
        }
    }

    #[test]
    fn sym_out_sets_constant_only_when_known() {
        let out = sym_out(DataType::Int64, false, vec![SymInt::Known(3), SymInt::Known(-1)]);
        assert_eq!(out.constant.unwrap().as_slice::<i64>().unwrap(), &[3, -1]);
        let out = sym_out(DataType::Int64, false, vec![SymInt::Known(3), SymInt::Symbol("b".into())]);
        assert!(out.constant.is_none());
        assert_eq!(out.sym_value.unwrap().len(), 2);
        let out = sym_out(DataType::Int32, true, vec![SymInt::Known(7)]);
        let c = out.constant.unwrap();
        assert_eq!((c.shape(), c.as_slice::<i32>().unwrap()), (&[][..], &[7][..]));
        let out = sym_out(DataType::Float, false, vec![SymInt::Known(1)]);
        assert!(out.constant.is_none() && out.sym_value.is_none());
    }

    #[test]
    fn tensor_ints_widens() {
        let t = Tensor::from_vec(vec![3], vec![1u8, 200, 7]).unwrap();
        assert_eq!(tensor_ints(&t).unwrap(), vec![1, 200, 7]);
        let t = Tensor::from_vec(vec![2], vec![u64::MAX, 1]).unwrap();
        assert_eq!(tensor_ints(&t), None);
        let t = Tensor::from_vec(vec![2], vec![1.5f32, 2.0]).unwrap();
        assert_eq!(tensor_ints(&t), None);
        assert_eq!(tensor_floats(&t).unwrap(), vec![1.5, 2.0]);
    }
}
