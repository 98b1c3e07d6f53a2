//! `com.microsoft` GatherBlockQuantized (quantized, tied embeddings) on the contract of
//! `onyx_core::ops::contrib::nbits`, for data gathered along its first axis and quantized
//! along its last (what the model builder emits): one thread per output value reads its
//! packed value, its block's scale and zero point, and writes `(q − zp) · scale` in the
//! scales' type. Negative indices count from the end; indices out of range give zeros.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ops::contrib::nbits::GatherBlockQuantizedOp as Op;
use onyx_core::{DataType, Error, Result, Value};

use super::{input_dtype, is_float_input, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, known_dims, opt_gpu_input, u32_of, wgsl_type, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers GatherBlockQuantized.
pub(crate) fn register(r: &mut Registry) {
    r.add_in("com.microsoft", "GatherBlockQuantized", supports, build);
}

/// Data of a known rank gathered along axis 0 and quantized along the last axis; float
/// scales the device computes in; int32 or int64 indices.
fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let Ok(op) = Op::from_node(ctx.node) else { return false };
    let Some(rank) = known_dims(ctx, Op::DATA).map(|d| d.len() as i64) else { return false };
    let axes = rank >= 1
        && (op.gather_axis == 0 || op.gather_axis == -rank)
        && (op.quantize_axis == rank - 1 || op.quantize_axis == -1);
    let data = input_dtype(ctx, Op::DATA);
    let data_ok = matches!(data, Some(DataType::Uint8 | DataType::Int4 | DataType::Uint4));
    let zp_ok = ctx.node.input(Op::ZERO_POINTS).is_none() || input_dtype(ctx, Op::ZERO_POINTS) == data;
    let idx_ok = matches!(input_dtype(ctx, Op::INDICES), Some(DataType::Int32 | DataType::Int64));
    axes && data_ok && zp_ok && idx_ok && is_float_input(ctx, gpu, Op::SCALES)
}

/// A GatherBlockQuantized node.
struct GatherBlock {
    op: Op,
    pipeline: Arc<Pipeline>,
    dtype: DataType,
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = Op::from_node(ctx.node)?;
    let dtype =
        input_dtype(ctx, Op::SCALES).ok_or_else(|| Error::Unsupported(format!("wgpu: {}: untyped scales", op.at)))?;
    let ty = wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {} on {dtype}", op.at)))?;
    let pipeline = gpu.pipeline(&format!("gather_block/{ty}"), || shader(ty, enables(dtype)))?;
    Ok(Box::new(GatherBlock { op, pipeline, dtype }))
}

/// Parameters: n, (unused), index words (1 int32, 2 int64), rows (the gathered dim), inner
/// (values per gathered row), last (the last dim), blocks per last dim, block size, bits,
/// signed, zero points (0 none, 1 rows of packed bytes, 2 a packed nibble stream), zero-point
/// bytes per row, default zero point.
fn shader(ty: &str, enable: &str) -> String {
    format!(
        "{enable}{FLAT_INDEX}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> data: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<{ty}>;
@group(0) @binding(4) var<storage, read> zp: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<{ty}>;
// Value i of a packed stream of `bits`-bit values (low bits first) in `words`.
fn packed(i: u32, bits: u32, from_zp: bool) -> u32 {{
    let per_word = 32u / bits;
    var word = 0u;
    if (from_zp) {{ word = zp[i / per_word]; }} else {{ word = data[i / per_word]; }}
    return (word >> ((i % per_word) * bits)) & ((1u << bits) - 1u);
}}
fn signed(q: u32) -> i32 {{
    if (p[9] == 1u && (q & 8u) != 0u) {{ return i32(q) - 16; }}
    return i32(q);
}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let e = flat_index(gid, nwg);
    if (e >= p[0]) {{ return; }}
    let inner = p[4];
    let j = e / inner;
    let rest = e % inner;
    let rows = p[3];
    var raw = i32(idx[j * p[2]]);
    var valid = true;
    if (p[2] == 2u) {{
        let hi = idx[2u * j + 1u];
        valid = hi == 0u || (hi == 0xffffffffu && raw < 0);
    }}
    if (raw < 0) {{ raw += i32(rows); }}
    if (!valid || raw < 0 || u32(raw) >= rows) {{ y[e] = {ty}(0.0); return; }}
    let flat = u32(raw) * inner + rest;
    let last = p[5];
    let r = flat / last;
    let blk = (flat % last) / p[7];
    let s = r * p[6] + blk;
    let bits = p[8];
    var z = i32(p[12]);
    if (p[10] == 1u) {{ z = i32(packed(r * p[11] * (8u / bits) + blk, bits, true)); }}
    if (p[10] == 2u) {{ z = signed(packed(s, 4u, true)); }}
    y[e] = {ty}(f32(signed(packed(flat, bits, false)) - z) * f32(scales[s]));
}}
"
    )
}

impl GpuOp for GatherBlock {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let (op, at) = (&self.op, &self.op.at);
        let data = gpu_input(run, inputs, Op::DATA, at)?;
        let indices = gpu_input(run, inputs, Op::INDICES, at)?;
        let scales = gpu_input(run, inputs, Op::SCALES, at)?;
        let zp = opt_gpu_input(run, inputs, Op::ZERO_POINTS, at)?;
        let g = op.geometry(
            (data.dtype(), data.shape()),
            indices.dtype(),
            (scales.dtype(), scales.shape()),
            zp.as_ref().map(|z| (z.dtype(), z.shape())),
        )?;
        if g.gather_axis != 0 || g.quantize_axis + 1 != g.dims.len() || scales.dtype() != self.dtype {
            return Err(Error::node(at, "the GPU kernel gathers along axis 0 of data quantized along its last axis"));
        }
        let shape: Vec<usize> = indices.shape().iter().chain(&g.dims[1..]).copied().collect();
        let y = run.alloc(self.dtype, shape)?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let last = *g.dims.last().expect("rank >= 1");
        let blocks = last.div_ceil(op.block_size);
        let per_byte = op.per_element(data.dtype());
        let zp_kind = match (&zp, data.dtype()) {
            (None, _) => 0,
            (Some(_), DataType::Uint8) => 1,
            (Some(_), _) => 2,
        };
        let params = [
            u32_of(y.len(), at)?,
            0,
            if indices.dtype() == DataType::Int64 { 2 } else { 1 },
            u32_of(g.dims[0], at)?,
            u32_of(g.dims[1..].iter().product::<usize>(), at)?,
            u32_of(last, at)?,
            u32_of(blocks, at)?,
            u32_of(op.block_size, at)?,
            g.bits as u32,
            g.signed as u32,
            zp_kind,
            u32_of(blocks.div_ceil(per_byte), at)?,
            g.default_zero_point as u32,
        ];
        let zp_buffer = zp.map_or(scales.buffer, |z| z.buffer);
        run.dispatch(
            &self.pipeline,
            &params,
            &[data.buffer, indices.buffer, scales.buffer, zp_buffer, y.gpu()?],
            grid(y.len()),
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::{DataType, Tensor};

    use crate::testkit::{int, rand, random_bytes, t, Case};

    /// Packed 4-bit data of `dtype` (int4 or uint4) from random bytes.
    fn nibbles(dtype: DataType, shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let b = onyx_core::HostBuffer::from_vec(random_bytes(n.div_ceil(2), seed));
        Tensor::from_bytes(dtype, shape.to_vec(), b).unwrap()
    }

    #[test]
    fn gather_block_quantized_matches_the_cpu() {
        let (rows, cols, block) = (11usize, 40usize, 16usize);
        let blocks = cols.div_ceil(block);
        let indices = t(&[2, 3], vec![0i64, 10, -1, 3, 11, -12]);
        for bits in [4usize, 8, 2] {
            let per = 8 / bits;
            let data = t(&[rows, cols / per], random_bytes(rows * cols / per, bits as u64));
            let scales = rand(&[rows, blocks], 0.01, 0.1, 5);
            let zp = t(&[rows, blocks.div_ceil(per)], random_bytes(rows * blocks.div_ceil(per), 6));
            let attrs = vec![int("block_size", block as i64), int("bits", bits as i64), int("quantize_axis", 1)];
            for inputs in [
                vec![data.clone(), indices.clone(), scales.clone()],
                vec![data.clone(), indices.clone(), scales.clone(), zp],
            ] {
                Case::new("GatherBlockQuantized", inputs)
                    .attrs(attrs.clone())
                    .domain("com.microsoft")
                    .check(1e-6, 1e-7);
            }
        }
        for dtype in [DataType::Int4, DataType::Uint4] {
            let data = nibbles(dtype, &[rows, cols], 7);
            let scales = rand(&[rows, blocks], 0.01, 0.1, 8);
            let zp = nibbles(dtype, &[rows, blocks], 9);
            let idx32 = t(&[4], vec![1i32, 0, 10, -2]);
            let attrs = vec![int("block_size", block as i64), int("quantize_axis", 1)];
            Case::new("GatherBlockQuantized", vec![data.clone(), idx32.clone(), scales.clone()])
                .attrs(attrs.clone())
                .domain("com.microsoft")
                .check(1e-6, 1e-7);
            Case::new("GatherBlockQuantized", vec![data, idx32, scales, zp])
                .attrs(attrs)
                .domain("com.microsoft")
                .check(1e-6, 1e-7);
        }
    }
}
