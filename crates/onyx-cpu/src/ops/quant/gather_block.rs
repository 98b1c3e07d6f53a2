//! `com.microsoft` GatherBlockQuantized on the contract of `onyx_core::ops::contrib::nbits`:
//! Gather over block-quantized data (quantized, tied embeddings), each gathered value
//! dequantized as `(q − zero_point) · scale` in f32 and rounded once to the scales' type.

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ops::contrib::nbits::{unpack, GatherBlockGeometry, GatherBlockQuantizedOp as Op};
use onyx_core::{DataType, Result, TensorView, Value};

use crate::ops::util;

struct GatherBlockQuantized(Op);

/// Builds the kernel.
pub(crate) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(GatherBlockQuantized(Op::from_node(ctx.node)?)))
}

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The scales, read in place: a gather touches a few rows of a table that may hold millions.
enum Scales<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
    BF16(&'a [half::bf16]),
}

impl<'a> Scales<'a> {
    fn new(v: &TensorView<'a>) -> Result<Self> {
        Ok(match v.dtype() {
            DataType::Float16 => Scales::F16(v.as_slice()?),
            DataType::BFloat16 => Scales::BF16(v.as_slice()?),
            _ => Scales::F32(v.as_slice()?),
        })
    }

    fn get(&self, i: usize) -> f32 {
        match self {
            Scales::F32(s) => s[i],
            Scales::F16(s) => s[i].to_f32(),
            Scales::BF16(s) => s[i].to_f32(),
        }
    }
}

/// Reads quantized values and their block parameters.
struct Source<'a> {
    g: &'a GatherBlockGeometry,
    block: usize,
    data: &'a [u8],
    scales: Scales<'a>,
    zero_points: Option<&'a [u8]>,
    /// Dims of the scales (blocks along the quantized axis).
    blocks: Vec<usize>,
    /// Row-major strides of `blocks`.
    block_strides: Vec<usize>,
    /// Values per zero-point byte along its last axis (1 for int4/uint4, packed flat).
    zp_row: Option<usize>,
}

impl Source<'_> {
    /// The quantized value at logical flat index `i`, as an integer.
    fn value(&self, i: usize) -> i32 {
        let q = unpack(self.data, self.g.bits, i);
        if self.g.signed && q & 0x8 != 0 {
            i32::from(q) - 16
        } else {
            i32::from(q)
        }
    }

    /// `(q − zp) · scale` of the element at logical coordinates `coords` (flat index `i`).
    fn dequantize(&self, coords: &[usize], i: usize) -> f32 {
        let axis = self.g.quantize_axis;
        let flat = (coords.iter().enumerate())
            .map(|(d, &c)| if d == axis { c / self.block } else { c } * self.block_strides[d])
            .sum::<usize>();
        let zp = match (self.zero_points, self.zp_row) {
            (None, _) => self.g.default_zero_point,
            // uint8: each row of zero points padded to whole bytes.
            (Some(z), Some(row)) => {
                let last = *self.blocks.last().unwrap_or(&1);
                let r = flat / last.max(1);
                i32::from(unpack(&z[r * row..], self.g.bits, flat % last.max(1)))
            }
            (Some(z), None) => {
                let q = unpack(z, 4, flat);
                if self.g.signed && q & 0x8 != 0 {
                    i32::from(q) - 16
                } else {
                    i32::from(q)
                }
            }
        };
        (self.value(i) - zp) as f32 * self.scales.get(flat)
    }
}

impl Kernel for GatherBlockQuantized {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let op = &self.0;
        let at = &op.at;
        let data = util::input(inputs, Op::DATA, at)?;
        let indices = util::input(inputs, Op::INDICES, at)?;
        let scales = util::input(inputs, Op::SCALES, at)?;
        let zp = util::opt_input(inputs, Op::ZERO_POINTS, at)?;
        let g = op.geometry(
            (data.dtype(), data.shape()),
            indices.dtype(),
            (scales.dtype(), scales.shape()),
            zp.as_ref().map(|z| (z.dtype(), z.shape())),
        )?;
        let per = op.per_element(data.dtype());
        let zp_row =
            (data.dtype() == DataType::Uint8).then(|| scales.shape().last().copied().unwrap_or(1).div_ceil(per));
        let src = Source {
            g: &g,
            block: op.block_size,
            data: data.bytes()?,
            scales: Scales::new(&scales)?,
            zero_points: zp.as_ref().map(TensorView::bytes).transpose()?,
            blocks: scales.shape().to_vec(),
            block_strides: strides(scales.shape()),
            zp_row,
        };
        let idx = util::to_i64(&indices)?;
        let axis = g.gather_axis;
        let dim = g.dims[axis];
        let outer: usize = g.dims[..axis].iter().product();
        let inner: usize = g.dims[axis + 1..].iter().product();
        let data_strides = strides(&g.dims);
        let mut out = vec![0f32; outer * idx.len() * inner];
        let mut coords = vec![0usize; g.dims.len()];
        for o in 0..outer {
            for (j, &raw) in idx.iter().enumerate() {
                let i = if raw < 0 { raw + dim as i64 } else { raw };
                // Out-of-range indices give zeros, as in ONNX Runtime.
                let Some(i) = usize::try_from(i).ok().filter(|&i| i < dim) else { continue };
                for r in 0..inner {
                    let flat = (o * dim + i) * inner + r;
                    let mut rest = flat;
                    for (c, s) in coords.iter_mut().zip(&data_strides) {
                        *c = rest / s;
                        rest %= s;
                    }
                    out[(o * idx.len() + j) * inner + r] = src.dequantize(&coords, flat);
                }
            }
        }
        let shape: Vec<usize> =
            g.dims[..axis].iter().chain(indices.shape()).chain(&g.dims[axis + 1..]).copied().collect();
        Ok(vec![util::from_f32(scales.dtype(), shape, out)?])
    }
}
