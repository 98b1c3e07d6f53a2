//! Quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear ([`linear`]) with
//! per-tensor, per-axis and blocked scales over the 8/16-bit integers, the packed 4- and 2-bit
//! integers and the float8/float4 types; ConvInteger, QLinearMatMul and QLinearConv
//! ([`integer`]); ONNX Runtime's MatMulNBits ([`nbits`]) and GatherBlockQuantized ([`gather_block`]). MatMulInteger lives with MatMul.

mod gather_block;
mod integer;
mod linear;
mod nbits;
#[cfg(test)]
mod tests;

use onyx_core::{DataType, Error, Location, Result, TensorView};

use crate::ops::cast::small;
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("QuantizeLinear", linear::build_quantize);
    r.add("DequantizeLinear", linear::build_dequantize);
    r.add("DynamicQuantizeLinear", linear::build_dynamic_quantize);
    r.add("ConvInteger", integer::build_conv_integer);
    r.add("QLinearMatMul", integer::build_qlinear_matmul);
    r.add("QLinearConv", integer::build_qlinear_conv);
    r.add_in(onyx_core::ir::MS_DOMAIN, "MatMulNBits", nbits::build);
    r.add_in(onyx_core::ir::MS_DOMAIN, "GatherBlockQuantized", gather_block::build);
}

/// How a scale or zero point maps onto the elements of the quantized tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Params {
    /// One value for every element.
    Tensor,
    /// One value per index along an axis (`[outer, dim, inner]` view of the data).
    Axis { dim: usize, inner: usize },
    /// One value per block of `block` indices along an axis; the parameters are
    /// `[outer, blocks, inner]`.
    Block { dim: usize, inner: usize, block: usize, blocks: usize },
}

impl Params {
    /// Plans the parameters of `pshape` (input `input`) for data of `xshape`.
    pub(crate) fn new(
        xshape: &[usize],
        pshape: &[usize],
        axis: i64,
        block: i64,
        input: usize,
        at: &Location,
    ) -> Result<Self> {
        let n: usize = pshape.iter().product();
        if block == 0 && n == 1 && pshape.len() <= 1 {
            return Ok(Params::Tensor);
        }
        if xshape.is_empty() {
            return Err(Error::input(at, input, "one value for a scalar input", format!("shape {pshape:?}")));
        }
        let a = util::normalize_axis(axis, xshape.len(), at)?;
        let (dim, inner) = (xshape[a], xshape[a + 1..].iter().product::<usize>());
        if block == 0 {
            if pshape != [dim] {
                return Err(Error::input(
                    at,
                    input,
                    format!("one value or {dim} values (axis {a} of {xshape:?})"),
                    format!("shape {pshape:?}"),
                ));
            }
            return Ok(Params::Axis { dim, inner });
        }
        let b = usize::try_from(block)
            .map_err(|_| Error::attribute(at, "block_size", "a non-negative size", block.to_string()))?;
        let blocks = dim.div_ceil(b);
        let ok = pshape.len() == xshape.len()
            && (0..xshape.len()).all(|d| if d == a { pshape[d] == blocks } else { pshape[d] == xshape[d] });
        if !ok {
            return Err(Error::input(
                at,
                input,
                format!("the shape of X {xshape:?} with {blocks} blocks of {b} along axis {a}"),
                format!("shape {pshape:?}"),
            ));
        }
        Ok(Params::Block { dim, inner, block: b, blocks })
    }

    /// The parameter index of data element `i`.
    #[inline]
    pub(crate) fn index(&self, i: usize) -> usize {
        match *self {
            Params::Tensor => 0,
            Params::Axis { dim, inner } => (i / inner) % dim,
            Params::Block { dim, inner, block, blocks } => {
                let (o, r) = (i / (dim * inner), i % inner);
                let c = (i / inner) % dim;
                (o * blocks + c / block) * inner + r
            }
        }
    }
}

/// The elements of an integer, packed-integer or small-float tensor as f64 (exact).
pub(crate) fn wide_values(v: &TensorView<'_>, input: usize, at: &Location) -> Result<Vec<f64>> {
    if small::is_small(v.dtype()) {
        return small::to_f64s(v);
    }
    match v.dtype() {
        DataType::Int8 | DataType::Uint8 | DataType::Int16 | DataType::Uint16 | DataType::Int32 => {
            Ok(util::to_i64(v)?.into_iter().map(|x| x as f64).collect())
        }
        other => Err(Error::input(
            at,
            input,
            "a quantized tensor (8/16/32-bit or packed integers, float8 or float4)",
            other.name(),
        )),
    }
}

/// The range of an integer quantized type (`None` for float types).
pub(crate) fn int_range(dtype: DataType) -> Option<(i64, i64)> {
    Some(match dtype {
        DataType::Int8 => (-128, 127),
        DataType::Uint8 => (0, 255),
        DataType::Int16 => (-32768, 32767),
        DataType::Uint16 => (0, 65535),
        other => return small::int_range(other),
    })
}
