//! `com.microsoft` MatMulNBits on the contract of `onyx_core::ops::contrib::nbits`: `Y = A ·
//! dequant(B)ᵀ + bias` reading B packed (2, 4 or 8 bits a weight, as 32-bit words): no float
//! copy of the weights exists on the GPU either.
//!
//! A workgroup computes 4 columns of B for up to `ROWS` rows of A; the 32 threads of a column
//! take its blocks in turn, so that a block's product is one thread's sum, scaled once, as on
//! the CPU; the threads' sums are then added in workgroup memory. The arithmetic is the CPU
//! EP's (and ONNX Runtime's): at `accuracy_level` 4 with integer zero points and no `g_idx`,
//! a first dispatch quantizes each row of A to int8 per block (`max|a| / 127`, half to even)
//! and a block's product is an integer dot product; otherwise it is computed in f32. With
//! `g_idx`, each weight is dequantized with its own row's block's scale and zero point.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ops::contrib::nbits::{MatMulNBitsOp as Op, ZeroPoints};
use onyx_core::{DataType, Error, Result, Value};

use super::{input_dtype, is_float_input, Registry};
use crate::buffer::GpuBuffer;
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, opt_gpu_input, u32_of, wgsl_type, GpuOp, GpuTensor, OnGpu};
use crate::run::GpuRun;

/// Registers MatMulNBits.
pub(crate) fn register(r: &mut Registry) {
    r.add_in("com.microsoft", "MatMulNBits", supports, build);
}

/// Columns of the output one workgroup computes.
const COLS: u32 = 4;
/// Threads per column.
const LANES: u32 = 32;
/// Rows of A a workgroup of a prompt (more than one row) computes.
const PROMPT_ROWS: u32 = 8;

/// Float A (f32, or f16 on adapters with it), the contract's attributes, weights of the
/// contract's types.
fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let Ok(op) = Op::from_node(ctx.node) else { return false };
    let a = input_dtype(ctx, Op::A);
    let typed = |i: usize, want: Option<DataType>| ctx.node.input(i).is_none() || input_dtype(ctx, i) == want;
    let zp_ok = ctx.node.input(Op::ZERO_POINTS).is_none()
        || matches!(input_dtype(ctx, Op::ZERO_POINTS), Some(DataType::Uint8))
        || input_dtype(ctx, Op::ZERO_POINTS) == a;
    let bindings = gpu.limits().max_storage_buffers_per_shader_stage >= 11;
    is_float_input(ctx, gpu, Op::A)
        && input_dtype(ctx, Op::B) == Some(DataType::Uint8)
        && input_dtype(ctx, Op::SCALES) == a
        && zp_ok
        && typed(Op::G_IDX, Some(DataType::Int32))
        && typed(Op::BIAS, a)
        && op.k_blocks() <= u32::MAX as usize
        && bindings
}

/// A MatMulNBits node.
struct MatMulNBits {
    op: Op,
    dtype: DataType,
    /// The float products: one row of A (decode), and [`PROMPT_ROWS`] rows.
    float: [Arc<Pipeline>; 2],
    /// The int8 products, likewise, and the quantization of A.
    int8: Option<([Arc<Pipeline>; 2], Arc<Pipeline>)>,
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = Op::from_node(ctx.node)?;
    let at = &op.at;
    let dtype = input_dtype(ctx, Op::A).ok_or_else(|| Error::Unsupported(format!("wgpu: {at}: untyped A")))?;
    let ty = wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype}")))?;
    let enable = enables(dtype);
    let pipelines = |int8: bool| -> Result<[Arc<Pipeline>; 2]> {
        let make = |rows: u32| {
            gpu.pipeline(&format!("nbits/{ty}/{}/{rows}", if int8 { "int8" } else { "float" }), || {
                product_shader(ty, enable, rows, int8)
            })
        };
        Ok([make(1)?, make(PROMPT_ROWS)?])
    };
    // The int8 arithmetic as ONNX Runtime's CPU EP has it (see the CPU kernel).
    let int_zp =
        ctx.node.input(Op::ZERO_POINTS).is_none() || input_dtype(ctx, Op::ZERO_POINTS) == Some(DataType::Uint8);
    let kernel = op.bits != 2 || [32, 64, 128].contains(&op.block_size);
    let int8 = if op.accuracy_level == 4 && int_zp && kernel && ctx.node.input(Op::G_IDX).is_none() {
        let quantize = gpu.pipeline(&format!("nbits/{ty}/quantize"), || quantize_shader(ty, enable))?;
        Some((pipelines(true)?, quantize))
    } else {
        None
    };
    Ok(Box::new(MatMulNBits { float: pipelines(false)?, int8, op, dtype }))
}

/// Parameter slots.
const P_M: usize = 0;
const P_N: usize = 1;
const P_K: usize = 2;
const P_BITS: usize = 3;
const P_BLOCK: usize = 4;
const P_KB: usize = 5; // blocks per column
const P_BLOB_WORDS: usize = 6; // 32-bit words per block
const P_ZP: usize = 7; // 0 the midpoint, 1 packed, 2 float
const P_ZP_BYTES: usize = 8; // packed zero-point bytes per column
const P_G_IDX: usize = 9;
const P_BIAS: usize = 10;
const P_A_BLOCK: usize = 11; // int8: values per block of A (min(block, 256))
const P_A_BLOCKS: usize = 12; // int8: blocks per row of A
const P_COL_TILES: usize = 13; // workgroups along x
const P_LEN: usize = 14;

/// The product shader: `rows` rows of A a workgroup; A as floats, or (`int8`) as the
/// quantize shader's packed int8 values with their scales and sums.
fn product_shader(ty: &str, enable: &str, rows: u32, int8: bool) -> String {
    let a_bindings = if int8 {
        "@group(0) @binding(7) var<storage, read> aq: array<u32>;
@group(0) @binding(8) var<storage, read> a_scale: array<f32>;
@group(0) @binding(9) var<storage, read> a_sum: array<i32>;"
            .to_string()
    } else {
        format!("@group(0) @binding(7) var<storage, read> a: array<{ty}>;")
    };
    let y_binding = if int8 { 10 } else { 8 };
    let block_product = if int8 { INT8_BLOCK } else { FLOAT_BLOCK };
    let threads = COLS * LANES;
    format!(
        "{enable}@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read> scales: array<{ty}>;
@group(0) @binding(3) var<storage, read> zq: array<u32>;
@group(0) @binding(4) var<storage, read> zf: array<{ty}>;
@group(0) @binding(5) var<storage, read> g_idx: array<i32>;
@group(0) @binding(6) var<storage, read> bias: array<{ty}>;
{a_bindings}
@group(0) @binding({y_binding}) var<storage, read_write> y: array<{ty}>;
const ROWS: u32 = {rows}u;
var<workgroup> red: array<f32, {threads}u * ROWS>;
// Weight value i (0..K, along the column's packed stream) of column n.
fn weight(n: u32, i: u32) -> u32 {{
    let bits = p[{P_BITS}];
    let per_word = 32u / bits;
    let word = b[n * p[{P_KB}] * p[{P_BLOB_WORDS}] + i / per_word];
    return (word >> ((i % per_word) * bits)) & ((1u << bits) - 1u);
}}
// The zero point of block blk of column n.
fn zero_point(n: u32, blk: u32) -> f32 {{
    let bits = p[{P_BITS}];
    switch (p[{P_ZP}]) {{
        case 1u: {{
            let bit = blk * bits;
            let byte = n * p[{P_ZP_BYTES}] + bit / 8u;
            return f32((zq[byte / 4u] >> ((byte % 4u) * 8u + bit % 8u)) & ((1u << bits) - 1u));
        }}
        case 2u: {{ return f32(zf[n * p[{P_KB}] + blk]); }}
        default: {{ return f32(1u << (bits - 1u)); }}
    }}
}}
{block_product}
@compute @workgroup_size({threads})
fn main(@builtin(local_invocation_index) lt: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
    let col = lt / {LANES}u;
    let lane = lt % {LANES}u;
    let n = (wid.x + wid.y * p[{P_COL_TILES}]) * {COLS}u + col;
    let m0 = wid.z * ROWS;
    let m = p[{P_M}];
    let big_n = p[{P_N}];
    var acc: array<f32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {{ acc[r] = 0.0; }}
    if (n < big_n) {{
        let kb = p[{P_KB}];
        if (p[{P_G_IDX}] == 1u) {{
            for (var i = lane; i < p[{P_K}]; i += {LANES}u) {{
                let blk = min(u32(max(g_idx[i], 0)), kb - 1u);
                let w = (f32(weight(n, i)) - zero_point(n, blk)) * f32(scales[n * kb + blk]);
                for (var r = 0u; r < ROWS; r++) {{
                    if (m0 + r < m) {{ acc[r] += a_value(m0 + r, i) * w; }}
                }}
            }}
        }} else {{
            for (var blk = lane; blk < kb; blk += {LANES}u) {{ block_product(n, blk, m0, &acc); }}
        }}
    }}
    for (var r = 0u; r < ROWS; r++) {{ red[r * {threads}u + lt] = acc[r]; }}
    workgroupBarrier();
    for (var w = {LANES}u / 2u; w > 0u; w >>= 1u) {{
        if (lane < w) {{
            for (var r = 0u; r < ROWS; r++) {{ red[r * {threads}u + lt] += red[r * {threads}u + lt + w]; }}
        }}
        workgroupBarrier();
    }}
    if (lane == 0u && n < big_n) {{
        for (var r = 0u; r < ROWS; r++) {{
            if (m0 + r < m) {{
                var v = red[r * {threads}u + lt];
                if (p[{P_BIAS}] == 1u) {{ v += f32(bias[n]); }}
                y[(m0 + r) * big_n + n] = {ty}(v);
            }}
        }}
    }}
}}
"
    )
}

/// Block `blk` of column `n` against float rows of A: `scale · Σ (q − zp) a`.
const FLOAT_BLOCK: &str = "
fn a_value(r: u32, k: u32) -> f32 { return f32(a[r * p[2] + k]); }
fn block_product(n: u32, blk: u32, m0: u32, acc: ptr<function, array<f32, ROWS>>) {
    let k = p[2];
    let block = p[4];
    let scale = f32(scales[n * p[5] + blk]);
    let zp = zero_point(n, blk);
    var sums: array<f32, ROWS>;
    for (var r = 0u; r < ROWS; r++) { sums[r] = 0.0; }
    let first = blk * block;
    let last = min(first + block, k);
    let bits = p[3];
    let per_word = 32u / bits;
    let mask = (1u << bits) - 1u;
    let words = p[6];
    let base = (n * p[5] + blk) * words;
    // Each word of B is read once and unpacked in registers.
    for (var w = 0u; w < words; w++) {
        let word = b[base + w];
        let k0 = first + w * per_word;
        for (var e = 0u; e < per_word; e++) {
            let i = k0 + e;
            if (i < last) {
                let q = f32((word >> (e * bits)) & mask) - zp;
                for (var r = 0u; r < ROWS; r++) {
                    if (m0 + r < p[0]) { sums[r] += q * a_value(m0 + r, i); }
                }
            }
        }
    }
    for (var r = 0u; r < ROWS; r++) { (*acc)[r] += scale * sums[r]; }
}
";

/// Block `blk` of column `n` against int8 rows of A: per block of A, the integer
/// `Σ a_q q − zp Σ a_q`, scaled by both scales.
const INT8_BLOCK: &str = "
fn a_value(r: u32, k: u32) -> f32 { return 0.0; }
fn a_int(r: u32, k: u32) -> i32 {
    let row_words = p[12] * p[11] / 4u;
    let word = aq[r * row_words + k / 4u];
    return extractBits(i32(word), (k % 4u) * 8u, 8u);
}
fn block_product(n: u32, blk: u32, m0: u32, acc: ptr<function, array<f32, ROWS>>) {
    let k = p[2];
    let block = p[4];
    let a_block = p[11];
    let scale = f32(scales[n * p[5] + blk]);
    let zp = i32(zero_point(n, blk));
    for (var sub = blk * block; sub < min((blk + 1u) * block, k); sub += a_block) {
        let ab = sub / a_block;
        let last = min(sub + a_block, k);
        var dots: array<i32, ROWS>;
        for (var r = 0u; r < ROWS; r++) { dots[r] = 0; }
        let bits = p[3];
        let per_word = 32u / bits;
        let mask = (1u << bits) - 1u;
        let column = n * p[5] * p[6];
        // Each word of B is read once and unpacked in registers (A-blocks start on words).
        for (var i0 = sub; i0 < last; i0 += per_word) {
            let word = b[column + i0 / per_word];
            for (var e = 0u; e < per_word; e++) {
                let i = i0 + e;
                if (i < last) {
                    let q = i32((word >> (e * bits)) & mask);
                    for (var r = 0u; r < ROWS; r++) {
                        if (m0 + r < p[0]) { dots[r] += q * a_int(m0 + r, i); }
                    }
                }
            }
        }
        for (var r = 0u; r < ROWS; r++) {
            if (m0 + r < p[0]) {
                let at = (m0 + r) * p[12] + ab;
                let dot = dots[r] - zp * a_sum[at];
                (*acc)[r] += f32(dot) * (a_scale[at] * scale);
            }
        }
    }
}
";

/// Quantizes A to int8: one workgroup of 64 threads per (row, block of A), a packed word of 4
/// values a thread.
fn quantize_shader(ty: &str, enable: &str) -> String {
    format!(
        "{enable}@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<{ty}>;
@group(0) @binding(2) var<storage, read_write> aq: array<u32>;
@group(0) @binding(3) var<storage, read_write> a_scale: array<f32>;
@group(0) @binding(4) var<storage, read_write> a_sum: array<i32>;
var<workgroup> amax: array<f32, 64>;
var<workgroup> isum: array<i32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
    let k = p[{P_K}];
    let a_block = p[{P_A_BLOCK}];
    let a_blocks = p[{P_A_BLOCKS}];
    let at = wid.x + wid.y * 65535u;
    let r = at / a_blocks;
    let ab = at % a_blocks;
    let live = r < p[{P_M}];
    var x: vec4<f32>;
    for (var e = 0u; e < 4u; e++) {{
        let i = 4u * t + e;
        let kk = ab * a_block + i;
        if (live && i < a_block && kk < k) {{ x[e] = f32(a[r * k + kk]); }} else {{ x[e] = 0.0; }}
    }}
    amax[t] = max(max(abs(x.x), abs(x.y)), max(abs(x.z), abs(x.w)));
    workgroupBarrier();
    for (var w = 32u; w > 0u; w >>= 1u) {{
        if (t < w) {{ amax[t] = max(amax[t], amax[t + w]); }}
        workgroupBarrier();
    }}
    let m = amax[0];
    var inv = 0.0;
    if (m != 0.0) {{ inv = 127.0 / m; }}
    var word = 0u;
    var s = 0;
    for (var e = 0u; e < 4u; e++) {{
        let q = i32(clamp(round(x[e] * inv), -127.0, 127.0));
        s += q;
        word |= (u32(q) & 0xffu) << (8u * e);
    }}
    isum[t] = s;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w >>= 1u) {{
        if (t < w) {{ isum[t] += isum[t + w]; }}
        workgroupBarrier();
    }}
    if (!live) {{ return; }}
    if (4u * t < a_block) {{ aq[at * (a_block / 4u) + t] = word; }}
    if (t == 0u) {{
        a_scale[at] = m / 127.0;
        a_sum[at] = isum[0];
    }}
}}
"
    )
}

impl MatMulNBits {
    /// Checks the inputs against the contract; returns the zero points' form.
    fn check(&self, t: &[Option<GpuTensor<'_>>]) -> Result<ZeroPoints> {
        let meta = |i: usize| t[i].map(|x| (x.dtype(), x.shape()));
        let found = self.op.check_inputs([meta(0), meta(1), meta(2), meta(3), meta(4), meta(5)])?;
        if t[Op::A].map(|a| a.dtype()) != Some(self.dtype) {
            return Err(Error::input(&self.op.at, Op::A, self.dtype.name(), meta(0).map_or("none", |m| m.0.name())));
        }
        Ok(found.zero_points)
    }
}

impl GpuOp for MatMulNBits {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let (op, at) = (&self.op, &self.op.at);
        let a = gpu_input(run, inputs, Op::A, at)?;
        let mut t = vec![Some(a)];
        for i in Op::B..=Op::BIAS {
            t.push(opt_gpu_input(run, inputs, i, at)?);
        }
        let zero_points = self.check(&t)?;
        let y = run.alloc(self.dtype, op.output_shape(a.shape())?)?;
        let m = a.len() / op.k;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let col_tiles = (op.n as u32).div_ceil(COLS);
        let (x, yy) = (col_tiles.min(65535), col_tiles.div_ceil(65535));
        let rows = if m == 1 { 1 } else { PROMPT_ROWS };
        let row_tiles = u32_of(m, at)?.div_ceil(rows);
        let a_block = op.block_size.min(256);
        let a_blocks = op.k.div_ceil(a_block);
        let mut p = vec![0u32; P_LEN];
        p[P_M] = u32_of(m, at)?;
        p[P_N] = u32_of(op.n, at)?;
        p[P_K] = u32_of(op.k, at)?;
        p[P_BITS] = op.bits as u32;
        p[P_BLOCK] = u32_of(op.block_size, at)?;
        p[P_KB] = u32_of(op.k_blocks(), at)?;
        p[P_BLOB_WORDS] = u32_of(op.blob_bytes() / 4, at)?;
        p[P_ZP] = match zero_points {
            ZeroPoints::Midpoint => 0,
            ZeroPoints::Packed => 1,
            ZeroPoints::Float => 2,
        };
        p[P_ZP_BYTES] = u32_of(op.zero_point_bytes(), at)?;
        p[P_G_IDX] = t[Op::G_IDX].is_some() as u32;
        p[P_BIAS] = t[Op::BIAS].is_some() as u32;
        p[P_A_BLOCK] = u32_of(a_block, at)?;
        p[P_A_BLOCKS] = u32_of(a_blocks, at)?;
        p[P_COL_TILES] = x;
        let scales = t[Op::SCALES].expect("checked").buffer;
        let or_scales = |i: usize| t[i].map_or(scales, |x| x.buffer);
        let zp = or_scales(Op::ZERO_POINTS);
        let mut buffers: Vec<&GpuBuffer> =
            vec![t[Op::B].expect("checked").buffer, scales, zp, zp, or_scales(Op::G_IDX), or_scales(Op::BIAS)];
        let pick = |pipelines: &'_ [Arc<Pipeline>; 2]| pipelines[(rows > 1) as usize].clone();
        let groups = [x, yy, row_tiles];
        match &self.int8 {
            Some((products, quantize)) => {
                let blocks = m * a_blocks;
                let aq = run.alloc(DataType::Uint32, vec![blocks * a_block / 4])?;
                let a_scale = run.alloc(DataType::Float, vec![blocks])?;
                let a_sum = run.alloc(DataType::Int32, vec![blocks])?;
                let (qx, qy) = (blocks.min(65535) as u32, blocks.div_ceil(65535) as u32);
                run.dispatch(quantize, &p, &[a.buffer, aq.gpu()?, a_scale.gpu()?, a_sum.gpu()?], [qx, qy, 1])?;
                buffers.extend([aq.gpu()?, a_scale.gpu()?, a_sum.gpu()?, y.gpu()?]);
                run.dispatch(&pick(products), &p, &buffers, groups)?;
                for scratch in [aq, a_scale, a_sum] {
                    run.release_tensor(scratch);
                }
            }
            None => {
                buffers.extend([a.buffer, y.gpu()?]);
                run.dispatch(&pick(&self.float), &p, &buffers, groups)?;
            }
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::testkit::{int, provider, rand, random_bytes, t, Case};

    /// A MatMulNBits case: `rows` rows of A, K x N weights of `bits` bits in blocks of `block`;
    /// `zp` 0 none, 1 packed, 2 float; with `g_idx` and `bias` when asked.
    #[allow(clippy::too_many_arguments)]
    fn case(
        rows: usize,
        k: usize,
        n: usize,
        bits: usize,
        block: usize,
        zp: u8,
        g_idx: bool,
        bias: bool,
        level: i64,
        seed: u64,
    ) -> Case {
        let kb = k.div_ceil(block);
        let blob = block * bits / 8;
        let mut inputs: Vec<Option<Tensor>> = vec![
            Some(rand(&[rows, k], -1.0, 1.0, seed)),
            Some(t(&[n, kb, blob], random_bytes(n * kb * blob, seed + 1))),
            Some(rand(&[n * kb], 0.01, 0.1, seed + 2)),
            None,
            None,
            None,
        ];
        inputs[3] = match zp {
            1 => Some(t(&[n * (kb * bits).div_ceil(8)], random_bytes(n * (kb * bits).div_ceil(8), seed + 3))),
            2 => Some(rand(&[n * kb], 0.0, (1 << bits) as f32, seed + 3)),
            _ => None,
        };
        if g_idx {
            let mut rng = fastrand::Rng::with_seed(seed + 4);
            inputs[4] = Some(t(&[k], (0..k).map(|_| rng.i32(0..kb as i32)).collect::<Vec<i32>>()));
        }
        if bias {
            inputs[5] = Some(rand(&[n], -1.0, 1.0, seed + 5));
        }
        while inputs.last().is_some_and(Option::is_none) {
            inputs.pop();
        }
        let attrs = vec![
            int("K", k as i64),
            int("N", n as i64),
            int("bits", bits as i64),
            int("block_size", block as i64),
            int("accuracy_level", level),
        ];
        let constants: Vec<usize> = (1..inputs.len()).collect();
        let mut c = Case::new("MatMulNBits", vec![]).attrs(attrs).domain("com.microsoft").constants(&constants);
        c.inputs = inputs;
        c
    }

    #[test]
    fn matmul_nbits_matches_the_cpu() {
        let mut seed = 0;
        for &(bits, block) in &[(4, 32), (4, 16), (8, 64), (2, 32), (4, 512), (2, 16)] {
            for &(rows, k, n) in &[(1, 77, 13), (11, 200, 9), (1, 1024, 5)] {
                for zp in [0, 1, 2] {
                    for level in [0, 4] {
                        seed += 10;
                        // Integer dot products agree to float rounding (and to A's rare
                        // quantization ties, which a GPU's division may round apart).
                        let tol = if level == 4 { 2e-3 } else { 1e-4 };
                        case(rows, k, n, bits, block, zp, false, zp == 1, level, seed).check(tol, tol);
                    }
                }
                seed += 10;
                case(rows, k, n, bits, block, 1, true, true, 0, seed).check(1e-4, 1e-4);
            }
        }
    }

    #[test]
    fn matmul_nbits_rejects_bad_weights() {
        let Some(gpu) = provider() else { return };
        let mut c = case(1, 77, 13, 4, 32, 0, false, false, 0, 1);
        c.inputs[1] = Some(t(&[13, 3, 15], vec![0u8; 13 * 3 * 15]));
        let e = c.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("input 1") && e.contains("[13, 3, 16]"), "{e}");
    }
}
