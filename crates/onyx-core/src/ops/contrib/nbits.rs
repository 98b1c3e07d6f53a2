//! ONNX Runtime's block-quantized weights: `com.microsoft` `MatMulNBits` (a product by an
//! N x K matrix stored as `bits`-bit integers in blocks of `block_size` along K, each block
//! with a scale and an optional zero point) and `GatherBlockQuantized` (rows of such a matrix,
//! for quantized embeddings).
//!
//! Layout (ONNX Runtime's): B is `uint8 [N, k_blocks, blob]` with `blob = block_size * bits /
//! 8`, the values of a byte from its low bits up; scales are `[N * k_blocks]` (or
//! `[N, k_blocks]`); zero points are either packed like B, `ceil(k_blocks * bits / 8)` bytes
//! per column, or of the scales' float type, one per block; absent, they are `2^(bits-1)`.
//! A weight is `(q - zero_point) * scale`. K need not be a multiple of the block size: the
//! last block's padding values are ignored.

use crate::ir::Node;
use crate::{DataType, Error, Location, Result};

/// How a MatMulNBits node stores its zero points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroPoints {
    /// None: the midpoint `2^(bits-1)`.
    Midpoint,
    /// Packed like B: `ceil(k_blocks * bits / 8)` bytes per column.
    Packed,
    /// One float per block, of the scales' type.
    Float,
}

/// A decoded MatMulNBits node.
#[derive(Debug, Clone, PartialEq)]
pub struct MatMulNBitsOp {
    /// Rows of B (the product's inner dimension).
    pub k: usize,
    /// Columns of the output.
    pub n: usize,
    /// Bits per weight: 2, 4 or 8.
    pub bits: usize,
    /// Weights per block along K (a power of two, at least 16).
    pub block_size: usize,
    /// ONNX Runtime's `accuracy_level`: 4 quantizes A to int8 per block and uses integer dot
    /// products; 0 to 3 compute in float.
    pub accuracy_level: u8,
    /// Where the node is, for errors.
    pub at: Location,
}

/// Which optional inputs a MatMulNBits call has, with their checked forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NBitsInputs {
    /// The zero points' form.
    pub zero_points: ZeroPoints,
    /// Whether `g_idx` (the block of each row of B, for act-order quantization) is given.
    pub g_idx: bool,
    /// Whether `bias` `[N]` is given.
    pub bias: bool,
}

impl MatMulNBitsOp {
    /// Input positions.
    pub const A: usize = 0;
    /// The packed weights.
    pub const B: usize = 1;
    /// One scale per block.
    pub const SCALES: usize = 2;
    /// Optional zero points.
    pub const ZERO_POINTS: usize = 3;
    /// Optional block index per row of B.
    pub const G_IDX: usize = 4;
    /// Optional bias.
    pub const BIAS: usize = 5;

    /// Decodes the node.
    pub fn from_node(node: &Node) -> Result<Self> {
        let at = node.location();
        let k = super::positive(node, "K")?;
        let n = super::positive(node, "N")?;
        let bits = node.int_or("bits", 4)?;
        if ![2, 4, 8].contains(&bits) {
            return Err(Error::attribute(&at, "bits", "2, 4 or 8", bits.to_string()));
        }
        let block_size = super::positive(node, "block_size")?;
        if block_size < 16 || !block_size.is_power_of_two() {
            return Err(Error::attribute(&at, "block_size", "a power of two >= 16", block_size.to_string()));
        }
        let level = node.int_or("accuracy_level", 0)?;
        let accuracy_level = u8::try_from(level)
            .ok()
            .filter(|&l| l <= 4)
            .ok_or_else(|| Error::attribute(&at, "accuracy_level", "0 to 4", level.to_string()))?;
        Ok(MatMulNBitsOp { k, n, bits: bits as usize, block_size, accuracy_level, at })
    }

    /// Blocks per column.
    pub fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    /// Bytes per block of B.
    pub fn blob_bytes(&self) -> usize {
        self.block_size * self.bits / 8
    }

    /// Bytes of packed zero points per column.
    pub fn zero_point_bytes(&self) -> usize {
        (self.k_blocks() * self.bits).div_ceil(8)
    }

    /// The midpoint zero point used when none is given.
    pub fn midpoint(&self) -> u8 {
        1 << (self.bits - 1)
    }

    /// The output shape for A of shape `a`: A's with the last dimension replaced by N.
    pub fn output_shape(&self, a: &[usize]) -> Result<Vec<usize>> {
        match a.split_last() {
            Some((&k, lead)) if k == self.k => Ok(lead.iter().copied().chain([self.n]).collect()),
            _ => Err(Error::input(
                &self.at,
                Self::A,
                format!("a tensor whose last dimension is K = {}", self.k),
                format!("{a:?}"),
            )),
        }
    }

    /// Checks every input's type and shape (each `None` where the input is absent) and
    /// returns what the optional ones are.
    pub fn check_inputs(&self, inputs: [Option<(DataType, &[usize])>; 6]) -> Result<NBitsInputs> {
        let at = &self.at;
        let [a, b, scales, zp, g_idx, bias] = inputs;
        let (a_type, a_shape) = a.ok_or_else(|| Error::input(at, Self::A, "the activations", "none"))?;
        if !matches!(a_type, DataType::Float | DataType::Float16 | DataType::BFloat16) {
            return Err(Error::input(at, Self::A, "float, float16 or bfloat16", a_type.name()));
        }
        self.output_shape(a_shape)?;
        let (kb, blob) = (self.k_blocks(), self.blob_bytes());
        let (b_type, b_shape) = b.ok_or_else(|| Error::input(at, Self::B, "the packed weights", "none"))?;
        let b_ok = b_type == DataType::Uint8 && (b_shape == [self.n, kb, blob] || b_shape == [self.n, kb * blob]);
        if !b_ok {
            return Err(Error::input(
                at,
                Self::B,
                format!("uint8[{}, {kb}, {blob}]", self.n),
                format!("{}{b_shape:?}", b_type.name()),
            ));
        }
        let (s_type, s_shape) = scales.ok_or_else(|| Error::input(at, Self::SCALES, "the scales", "none"))?;
        let per_block = |s: &[usize]| s == [self.n * kb] || s == [self.n, kb];
        if s_type != a_type || !per_block(s_shape) {
            return Err(Error::input(
                at,
                Self::SCALES,
                format!("{}[{}] (one per block)", a_type.name(), self.n * kb),
                format!("{}{s_shape:?}", s_type.name()),
            ));
        }
        let zero_points = match zp {
            None => ZeroPoints::Midpoint,
            Some((DataType::Uint8, s))
                if s == [self.n * self.zero_point_bytes()] || s == [self.n, self.zero_point_bytes()] =>
            {
                ZeroPoints::Packed
            }
            Some((t, s)) if t == a_type && per_block(s) => ZeroPoints::Float,
            Some((t, s)) => {
                return Err(Error::input(
                    at,
                    Self::ZERO_POINTS,
                    format!(
                        "uint8[{}] (packed) or {}[{}]",
                        self.n * self.zero_point_bytes(),
                        a_type.name(),
                        self.n * kb
                    ),
                    format!("{}{s:?}", t.name()),
                ))
            }
        };
        if let Some((t, s)) = g_idx {
            if t != DataType::Int32 || s != [self.k] {
                return Err(Error::input(at, Self::G_IDX, format!("int32[{}]", self.k), format!("{}{s:?}", t.name())));
            }
        }
        if let Some((t, s)) = bias {
            if t != a_type || s != [self.n] {
                return Err(Error::input(
                    at,
                    Self::BIAS,
                    format!("{}[{}]", a_type.name(), self.n),
                    format!("{}{s:?}", t.name()),
                ));
            }
        }
        Ok(NBitsInputs { zero_points, g_idx: g_idx.is_some(), bias: bias.is_some() })
    }

    /// Checks a `g_idx`: every entry a block index below `k_blocks`.
    pub fn check_g_idx(&self, g_idx: &[i32]) -> Result<()> {
        let kb = self.k_blocks();
        match g_idx.iter().position(|&g| g < 0 || g as usize >= kb) {
            Some(i) => Err(Error::input(
                &self.at,
                Self::G_IDX,
                format!("block indices in 0..{kb}"),
                format!("{} at row {i}", g_idx[i]),
            )),
            None => Ok(()),
        }
    }
}

/// A decoded GatherBlockQuantized node: `Gather` over a block-quantized tensor, giving
/// `(q − zero_point) · scale` in the scales' type. The data is `int4`/`uint4` (zero point 0 by
/// default), or `uint8` holding `8 / bits` values a byte along the last axis, low bits first
/// (zero point `2^(bits-1)` by default; gathered along axis 0, quantized along the last);
/// scales (and zero points, of the data's type and packing) have the data's logical shape
/// with the quantized axis divided into blocks of `block_size`. As in ONNX Runtime, negative
/// indices count from the end and indices out of range give zeros.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherBlockQuantizedOp {
    /// The gathered axis (negative counts from the end).
    pub gather_axis: i64,
    /// The quantized axis (negative counts from the end).
    pub quantize_axis: i64,
    /// Elements per block along the quantized axis (a power of two, at least 16).
    pub block_size: usize,
    /// Bits per value of `uint8` data: 2, 4 or 8.
    pub bits: usize,
    /// Where the node is, for errors.
    pub at: Location,
}

/// One GatherBlockQuantized call's layout, from its inputs' shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherBlockGeometry {
    /// The data's logical shape (packed values unpacked).
    pub dims: Vec<usize>,
    /// The gathered axis, in `0..rank`.
    pub gather_axis: usize,
    /// The quantized axis, in `0..rank`.
    pub quantize_axis: usize,
    /// Bits per value.
    pub bits: usize,
    /// The zero point used where none is given.
    pub default_zero_point: i32,
    /// Whether values are signed (`int4`).
    pub signed: bool,
}

impl GatherBlockQuantizedOp {
    /// The quantized data.
    pub const DATA: usize = 0;
    /// The indices into the gathered axis.
    pub const INDICES: usize = 1;
    /// One scale per block.
    pub const SCALES: usize = 2;
    /// Optional zero points.
    pub const ZERO_POINTS: usize = 3;

    /// Decodes the node.
    pub fn from_node(node: &Node) -> Result<Self> {
        let at = node.location();
        let block_size = super::non_negative(node, "block_size", 128)?;
        if block_size < 16 || !block_size.is_power_of_two() {
            return Err(Error::attribute(&at, "block_size", "a power of two >= 16", block_size.to_string()));
        }
        let bits = node.int_or("bits", 4)?;
        if ![2, 4, 8].contains(&bits) {
            return Err(Error::attribute(&at, "bits", "2, 4 or 8", bits.to_string()));
        }
        Ok(GatherBlockQuantizedOp {
            gather_axis: node.int_or("gather_axis", 0)?,
            quantize_axis: node.int_or("quantize_axis", 1)?,
            block_size,
            bits: bits as usize,
            at,
        })
    }

    /// `axis` in `0..rank`.
    fn axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r {
            return Err(Error::attribute(&self.at, name, format!("an axis of the rank-{rank} data"), axis.to_string()));
        }
        Ok(a as usize)
    }

    /// The gathered axis of data of rank `rank`.
    pub fn gather_axis(&self, rank: usize) -> Result<usize> {
        self.axis("gather_axis", self.gather_axis, rank)
    }

    /// Bits per value, default zero point and signedness for data of type `dtype`.
    fn value_format(&self, dtype: DataType) -> Result<(usize, i32, bool)> {
        match dtype {
            DataType::Int4 => Ok((4, 0, true)),
            DataType::Uint4 => Ok((4, 0, false)),
            DataType::Uint8 => Ok((self.bits, 1 << (self.bits - 1), false)),
            other => Err(Error::input(&self.at, Self::DATA, "int4, uint4 or uint8 data", other.name())),
        }
    }

    /// Values per stored element of `dtype` data: `8 / bits` for `uint8`, else 1.
    pub fn per_element(&self, dtype: DataType) -> usize {
        if dtype == DataType::Uint8 {
            8 / self.bits
        } else {
            1
        }
    }

    /// The data's logical dims from its stored shape (symbolic dims kept; the last one
    /// multiplied by [`Self::per_element`]).
    pub fn logical_dims_sym(
        &self,
        dtype: DataType,
        shape: Option<&[crate::types::Dim]>,
    ) -> Option<Vec<crate::types::Dim>> {
        let mut dims = shape?.to_vec();
        let per = self.per_element(dtype);
        if per > 1 {
            let last = dims.last_mut()?;
            *last = last.fixed().map_or(crate::types::Dim::Unknown, |d| crate::types::Dim::Fixed(per * d));
        }
        Some(dims)
    }

    /// Checks the inputs (type and shape each; zero points `None` when absent).
    pub fn geometry(
        &self,
        data: (DataType, &[usize]),
        indices: DataType,
        scales: (DataType, &[usize]),
        zero_points: Option<(DataType, &[usize])>,
    ) -> Result<GatherBlockGeometry> {
        let at = &self.at;
        let (bits, default_zero_point, signed) = self.value_format(data.0)?;
        let per = self.per_element(data.0);
        let mut dims = data.1.to_vec();
        match dims.last_mut() {
            Some(d) => *d *= per,
            None => return Err(Error::input(at, Self::DATA, "data of rank >= 1", "a scalar")),
        }
        let gather_axis = self.gather_axis(dims.len())?;
        let quantize_axis = self.axis("quantize_axis", self.quantize_axis, dims.len())?;
        if data.0 == DataType::Uint8 && (gather_axis != 0 || quantize_axis != dims.len() - 1) {
            return Err(Error::attribute(
                at,
                "quantize_axis",
                "gather_axis 0 and the last axis quantized for uint8 data",
                format!("gather_axis {}, quantize_axis {}", self.gather_axis, self.quantize_axis),
            ));
        }
        if !matches!(indices, DataType::Int32 | DataType::Int64) {
            return Err(Error::input(at, Self::INDICES, "int32 or int64 indices", indices.name()));
        }
        let blocks: Vec<usize> = dims
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == quantize_axis { d.div_ceil(self.block_size) } else { d })
            .collect();
        if !matches!(scales.0, DataType::Float | DataType::Float16 | DataType::BFloat16)
            || scales.1 != blocks.as_slice()
        {
            return Err(Error::input(
                at,
                Self::SCALES,
                format!("float scales of shape {blocks:?}"),
                format!("{}{:?}", scales.0.name(), scales.1),
            ));
        }
        if let Some((t, s)) = zero_points {
            let mut want = blocks.clone();
            if let Some(last) = want.last_mut() {
                *last = last.div_ceil(per);
            }
            if t != data.0 || s != want.as_slice() {
                return Err(Error::input(
                    at,
                    Self::ZERO_POINTS,
                    format!("{}{want:?} (the data's type)", data.0.name()),
                    format!("{}{s:?}", t.name()),
                ));
            }
        }
        Ok(GatherBlockGeometry { dims, gather_axis, quantize_axis, bits, default_zero_point, signed })
    }
}

/// Unpacks value `i` of a packed `bits`-bit stream (low bits first).
#[inline]
pub fn unpack(bytes: &[u8], bits: usize, i: usize) -> u8 {
    let per_byte = 8 / bits;
    let byte = bytes[i / per_byte];
    let shift = (i % per_byte) * bits;
    (byte >> shift) & ((1u16 << bits) - 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute};

    fn node(attrs: &[(&str, i64)]) -> Node {
        Node {
            op_type: "MatMulNBits".into(),
            name: "q".into(),
            attributes: attrs.iter().map(|(n, v)| Attribute { name: (*n).into(), value: AttrValue::Int(*v) }).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn decodes_and_checks_inputs() {
        let op = MatMulNBitsOp::from_node(&node(&[("K", 77), ("N", 5), ("block_size", 16)])).unwrap();
        assert_eq!((op.bits, op.k_blocks(), op.blob_bytes(), op.zero_point_bytes(), op.midpoint()), (4, 5, 8, 3, 8));
        let f = DataType::Float;
        let ok = op
            .check_inputs([
                Some((f, &[2, 77])),
                Some((DataType::Uint8, &[5, 5, 8])),
                Some((f, &[25])),
                Some((DataType::Uint8, &[15])),
                None,
                Some((f, &[5])),
            ])
            .unwrap();
        assert_eq!(ok, NBitsInputs { zero_points: ZeroPoints::Packed, g_idx: false, bias: true });
        let err = op
            .check_inputs([
                Some((f, &[2, 76])),
                Some((DataType::Uint8, &[5, 5, 8])),
                Some((f, &[25])),
                None,
                None,
                None,
            ])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 0") && err.contains("K = 77"), "{err}");
        let err = op
            .check_inputs([Some((f, &[77])), Some((DataType::Uint8, &[5, 4, 8])), Some((f, &[25])), None, None, None])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 1") && err.contains("[5, 5, 8]"), "{err}");
        let err = op
            .check_inputs([Some((f, &[77])), Some((DataType::Uint8, &[5, 5, 8])), Some((f, &[24])), None, None, None])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 2"), "{err}");
        let err = op
            .check_inputs([
                Some((f, &[77])),
                Some((DataType::Uint8, &[5, 5, 8])),
                Some((f, &[25])),
                Some((DataType::Uint8, &[14])),
                None,
                None,
            ])
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 3"), "{err}");
        assert!(op.check_g_idx(&[0, 4, 5]).unwrap_err().to_string().contains("0..5"));
        for bad in [
            &[("K", 8), ("N", 5), ("block_size", 24)][..],
            &[("K", 8), ("N", 5), ("block_size", 16), ("bits", 3)],
            &[("N", 5), ("block_size", 16)],
        ] {
            assert!(MatMulNBitsOp::from_node(&node(bad)).is_err());
        }
    }

    #[test]
    fn unpacks_low_bits_first() {
        assert_eq!((0..2).map(|i| unpack(&[0x3a], 4, i)).collect::<Vec<_>>(), [0xa, 0x3]);
        assert_eq!((0..4).map(|i| unpack(&[0b11_10_01_00], 2, i)).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(unpack(&[7, 200], 8, 1), 200);
    }
}
