//! `com.microsoft` GroupQueryAttention on the contract of `onyx_core::ops::contrib::gqa`, in two
//! dispatches that read `seqlens_k` on the GPU (a decode step never waits for the device):
//!
//! 1. **cache**: the new keys and values, k rotated, go into the present cache. When the caller
//!    bound the past buffer as the present output too (onnxruntime-genai's shared buffer, see
//!    `RunState::bind_outputs`), only the new rows are written, in place: no cache bytes move.
//!    Otherwise the present is built whole: each row's kept past, the new tokens, zeros.
//! 2. **attention**: one workgroup of 64 threads per (batch row, query head, query) holds its
//!    rotated query in workgroup memory, walks the keys it sees in chunks of 64 with an online
//!    softmax (scale, softcap, bias; the sink logit at the end) and accumulates the values.
//!
//! What only `seqlens_k` tells (each row's past and length, positions) is clamped on the GPU:
//! a kernel cannot fail mid-run. The host checks every shape and total_sequence_length first.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ops::contrib::gqa::{GqaShapes, GroupQueryAttentionOp as Op};
use onyx_core::{DataType, Error, Result, Tensor, Value};

use super::super::{input_dtype, is_float_input};
use super::REDUCE_64;
use crate::buffer::GpuBuffer;
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, grid, host_input, known_dims, opt_gpu_input, u32_of, wgsl_type, GpuOp, GpuTensor, OnGpu};
use crate::run::GpuRun;

/// The largest head size the attention kernel holds (8 accumulators of 64 threads).
const MAX_HEAD: usize = 512;

/// Float q/k/v, past, caches, bias and sink of one type, int32 lengths, int64 positions; no
/// qk output; attributes the contract accepts; head size up to [`MAX_HEAD`].
pub(super) fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let node = ctx.node;
    // The windowed cache (sliding_window_cache) runs on the CPU.
    let Some(op) = Op::from_node(node).ok().filter(|op| !op.sliding_cache) else { return false };
    let present = |i: usize| node.input(i).is_some();
    let q = input_dtype(ctx, Op::QUERY);
    let same = [Op::KEY, Op::VALUE, Op::PAST_KEY, Op::PAST_VALUE, Op::ATTENTION_BIAS, Op::HEAD_SINK]
        .into_iter()
        .chain(if op.do_rotary { vec![Op::COS_CACHE, Op::SIN_CACHE] } else { vec![] })
        .all(|i| !present(i) || input_dtype(ctx, i) == q);
    let ints = input_dtype(ctx, Op::SEQLENS_K) == Some(DataType::Int32)
        && input_dtype(ctx, Op::TOTAL_SEQUENCE_LENGTH) == Some(DataType::Int32)
        && (!op.do_rotary || !present(Op::POSITION_IDS) || input_dtype(ctx, Op::POSITION_IDS) == Some(DataType::Int64));
    let no_qk = node.outputs.get(3).is_none_or(|o| o.is_empty());
    let head_ok = match known_dims(ctx, Op::QUERY) {
        Some(d) => match d.get(2).copied().flatten() {
            Some(hidden) => op.head_size(hidden, !present(Op::KEY)).is_ok_and(|h| h <= MAX_HEAD),
            None => true,
        },
        None => true,
    };
    let bindings = gpu.limits().max_storage_buffers_per_shader_stage >= 13;
    is_float_input(ctx, gpu, Op::QUERY) && same && ints && no_qk && head_ok && bindings
}

/// A GroupQueryAttention node.
struct Gqa {
    op: Op,
    cache: Arc<Pipeline>,
    attend: Arc<Pipeline>,
    dtype: DataType,
}

pub(super) fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = Op::from_node(ctx.node)?;
    let at = &op.at;
    let dtype = input_dtype(ctx, Op::QUERY).ok_or_else(|| Error::Unsupported(format!("wgpu: {at}: untyped query")))?;
    let ty = wgsl_type(dtype)
        .filter(|t| *t == "f32" || *t == "f16")
        .ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype}")))?;
    let cache = gpu.pipeline(&format!("gqa/cache/{ty}"), || cache_shader(ty, enables(dtype)))?;
    let attend = gpu.pipeline(&format!("gqa/attend/{ty}"), || attend_shader(ty, enables(dtype)))?;
    Ok(Box::new(Gqa { op, cache, attend, dtype }))
}

/// Parameter slots both shaders share.
const P_N: usize = 0; // threads (cache) or rows (attention)
const P_B: usize = 1;
const P_S: usize = 2;
const P_HQ: usize = 3;
const P_HKV: usize = 4;
const P_D: usize = 5;
const P_PAST: usize = 6; // the past buffer's capacity
const P_T: usize = 7; // the present cache's length
const P_PACKED: usize = 8;
const P_FIRST: usize = 9;
const P_HALF: usize = 10; // rotated pairs per head (0: no rotary)
const P_INTERLEAVED: usize = 11;
const P_MAXPOS: usize = 12;
const P_POSCOLS: usize = 13; // position_ids' columns (0: none)
const P_MODE: usize = 14; // cache: 0 build the present whole, 1 write the new rows in place
const P_SCALE: usize = 15;
const P_SOFTCAP: usize = 16;
const P_WINDOW: usize = 17; // keys a query sees (0: all)
const P_CAUSAL: usize = 18;
const P_BIAS: usize = 19; // 0 none, else 1 + the bias' batch dim (1 or B)
const P_BIAS_H: usize = 20; // the bias' head dim (1 or Hq)
const P_BIAS_T: usize = 21; // the bias' last dim
const P_SINK: usize = 22; // 0 none, 1 head_sink, 2 smooth softmax (a zero logit)
const P_LEN: usize = 23;

/// WGSL both shaders share: parameters, lengths from seqlens_k, rotary positions, and the new
/// tokens' q, k and v elements (packed or not) with the rotation.
fn common(ty: &str) -> String {
    format!(
        "
fn new_index(b: u32, s: u32, head: u32, heads: u32, d: u32) -> u32 {{
    return ((b * p[{P_S}] + s) * heads + head) * p[{P_D}] + d;
}}
// Element d of new token (b, s)'s head: which 0 q (head of Hq), 1 k, 2 v (heads of Hkv).
fn new_raw(which: u32, b: u32, s: u32, head: u32, d: u32) -> f32 {{
    let hq = p[{P_HQ}];
    let hkv = p[{P_HKV}];
    if (p[{P_PACKED}] == 1u) {{
        var h = head;
        if (which == 1u) {{ h = hq + head; }}
        if (which == 2u) {{ h = hq + hkv + head; }}
        return f32(qin[new_index(b, s, h, hq + 2u * hkv, d)]);
    }}
    if (which == 0u) {{ return f32(qin[new_index(b, s, head, hq, d)]); }}
    if (which == 1u) {{ return f32(kin[new_index(b, s, head, hkv, d)]); }}
    return f32(vin[new_index(b, s, head, hkv, d)]);
}}
// Row b's past tokens: none in a first prompt, else its length minus the new tokens.
fn past_len(b: u32) -> u32 {{
    if (p[{P_FIRST}] == 1u) {{ return 0u; }}
    return u32(clamp(seqlens[b] + 1 - i32(p[{P_S}]), 0, i32(p[{P_PAST}])));
}}
// Row b's tokens in all, at most the present cache's length.
fn row_total(b: u32) -> u32 {{
    return u32(clamp(seqlens[b] + 1, 0, i32(p[{P_T}])));
}}
// position_ids[i] (int64) as i32, saturated.
fn position_id(i: u32) -> i32 {{
    let lo = pos[2u * i];
    let hi = pos[2u * i + 1u];
    if (hi == 0u) {{ return i32(min(lo, 0x7fffffffu)); }}
    if (hi == 0xffffffffu && lo >= 0x80000000u) {{ return bitcast<i32>(lo); }}
    if (hi >= 0x80000000u) {{ return -1; }}
    return 0x7fffffff;
}}
// The cache row of new token (b, s), clamped to the caches.
fn position(b: u32, s: u32) -> u32 {{
    var q = 0;
    let cols = p[{P_POSCOLS}];
    if (p[{P_FIRST}] == 1u) {{
        q = i32(s);
        if (cols > 0u) {{ q = position_id(0u) + i32(s); }}
    }} else if (cols > 0u) {{
        q = position_id(b * cols + s);
    }} else {{
        q = i32(past_len(b) + s);
    }}
    return u32(clamp(q, 0, i32(p[{P_MAXPOS}]) - 1));
}}
// Element d of new token (b, s)'s q or k head, rotated and rounded to the input's type.
fn new_rotated(which: u32, b: u32, s: u32, head: u32, d: u32) -> f32 {{
    let half = p[{P_HALF}];
    let x = new_raw(which, b, s, head, d);
    if (which == 2u || d >= 2u * half) {{ return x; }}
    var j = d % half;
    var first = d < half;
    var partner = d + half;
    if (p[{P_INTERLEAVED}] == 1u) {{
        j = d / 2u;
        first = (d & 1u) == 0u;
        partner = select(d - 1u, d + 1u, first);
    }} else if (!first) {{
        partner = d - half;
    }}
    let row = position(b, s) * half + j;
    let c = f32(cos_cache[row]);
    let sn = f32(sin_cache[row]);
    let w = new_raw(which, b, s, head, partner);
    if (first) {{ return f32({ty}(x * c - w * sn)); }}
    return f32({ty}(w * sn + x * c));
}}
"
    )
}

/// The input bindings both shaders start with (1-7).
fn input_bindings(ty: &str) -> String {
    format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> qin: array<{ty}>;
@group(0) @binding(2) var<storage, read> kin: array<{ty}>;
@group(0) @binding(3) var<storage, read> vin: array<{ty}>;
@group(0) @binding(4) var<storage, read> seqlens: array<i32>;
@group(0) @binding(5) var<storage, read> cos_cache: array<{ty}>;
@group(0) @binding(6) var<storage, read> sin_cache: array<{ty}>;
@group(0) @binding(7) var<storage, read> pos: array<u32>;
"
    )
}

/// The cache shader: one thread per present element (mode 0) or per new element (mode 1).
fn cache_shader(ty: &str, enable: &str) -> String {
    let inputs = input_bindings(ty);
    let common = common(ty);
    format!(
        "{enable}{inputs}@group(0) @binding(8) var<storage, read> past_k: array<{ty}>;
@group(0) @binding(9) var<storage, read> past_v: array<{ty}>;
@group(0) @binding(10) var<storage, read_write> present_k: array<{ty}>;
@group(0) @binding(11) var<storage, read_write> present_v: array<{ty}>;
{common}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= p[{P_N}]) {{ return; }}
    let d_size = p[{P_D}];
    let hkv = p[{P_HKV}];
    let t_len = p[{P_T}];
    let d = e % d_size;
    if (p[{P_MODE}] == 1u) {{
        let s = (e / d_size) % p[{P_S}];
        let h = (e / (d_size * p[{P_S}])) % hkv;
        let b = e / (d_size * p[{P_S}] * hkv);
        let t = past_len(b) + s;
        if (t >= t_len) {{ return; }}
        let o = ((b * hkv + h) * t_len + t) * d_size + d;
        present_k[o] = {ty}(new_rotated(1u, b, s, h, d));
        present_v[o] = {ty}(new_raw(2u, b, s, h, d));
        return;
    }}
    let t = (e / d_size) % t_len;
    let h = (e / (d_size * t_len)) % hkv;
    let b = e / (d_size * t_len * hkv);
    let past = past_len(b);
    if (t < past) {{
        let src = ((b * hkv + h) * p[{P_PAST}] + t) * d_size + d;
        present_k[e] = past_k[src];
        present_v[e] = past_v[src];
    }} else if (t - past < p[{P_S}]) {{
        present_k[e] = {ty}(new_rotated(1u, b, t - past, h, d));
        present_v[e] = {ty}(new_raw(2u, b, t - past, h, d));
    }} else {{
        present_k[e] = {ty}(0.0);
        present_v[e] = {ty}(0.0);
    }}
}}
"
    )
}

/// The attention shader: one workgroup of 64 threads per (batch row, query head, query).
fn attend_shader(ty: &str, enable: &str) -> String {
    let inputs = input_bindings(ty);
    let common = common(ty);
    let acc = MAX_HEAD / 64;
    format!(
        "{enable}{inputs}@group(0) @binding(8) var<storage, read> keys: array<{ty}>;
@group(0) @binding(9) var<storage, read> values: array<{ty}>;
@group(0) @binding(10) var<storage, read> bias: array<{ty}>;
@group(0) @binding(11) var<storage, read> sink: array<{ty}>;
@group(0) @binding(12) var<storage, read_write> y: array<{ty}>;
{common}
fn neg_inf() -> f32 {{ return bitcast<f32>(0xff800000u); }}
var<workgroup> qs: array<f32, {MAX_HEAD}>;
var<workgroup> sc: array<f32, 64>;
{REDUCE_64}@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let NEG_INF = neg_inf();
    let r = wid.x + wid.y * nwg.x;
    if (r >= p[{P_N}]) {{ return; }}
    let seq = p[{P_S}];
    let hq = p[{P_HQ}];
    let hkv = p[{P_HKV}];
    let d_size = p[{P_D}];
    let t_len = p[{P_T}];
    let i = r % seq;
    let n = (r / seq) % hq;
    let b = r / (seq * hq);
    let kvh = n / (hq / hkv);
    for (var c = t; c < d_size; c += 64u) {{ qs[c] = new_rotated(0u, b, i, n, c); }}
    workgroupBarrier();
    let total_b = row_total(b);
    var end = total_b;
    if (p[{P_CAUSAL}] == 1u) {{ end = min(past_len(b) + i + 1u, total_b); }}
    var start = 0u;
    let window = p[{P_WINDOW}];
    if (window > 0u && end > window) {{ start = end - window; }}
    let kb = (b * hkv + kvh) * t_len;
    let scale = bitcast<f32>(p[{P_SCALE}]);
    let cap = bitcast<f32>(p[{P_SOFTCAP}]);
    var bias_row = 0u;
    if (p[{P_BIAS}] > 0u) {{
        let bb = select(b, 0u, p[{P_BIAS}] == 2u);
        let bh = select(n, 0u, p[{P_BIAS_H}] == 1u);
        bias_row = ((bb * p[{P_BIAS_H}] + bh) * seq + i) * p[{P_BIAS_T}];
    }}
    var m = NEG_INF;
    var l = 0.0;
    var acc: array<f32, {acc}>;
    for (var k = 0u; k < {acc}u; k++) {{ acc[k] = 0.0; }}
    for (var j0 = start; j0 < end; j0 += 64u) {{
        let j = j0 + t;
        var s = NEG_INF;
        if (j < end) {{
            var dot = 0.0;
            let ko = (kb + j) * d_size;
            for (var c = 0u; c < d_size; c++) {{ dot += qs[c] * f32(keys[ko + c]); }}
            s = dot * scale;
            if (cap > 0.0) {{ s = cap * tanh(s / cap); }}
            if (p[{P_BIAS}] > 0u && j < p[{P_BIAS_T}]) {{ s += f32(bias[bias_row + j]); }}
        }}
        let new_m = max(m, reduce_max(t, s));
        var corr = 0.0;
        if (m > NEG_INF) {{ corr = exp(m - new_m); }}
        var e = 0.0;
        if (s > NEG_INF) {{ e = exp(s - new_m); }}
        sc[t] = e;
        l = l * corr + reduce_sum(t, e);
        let count = min(64u, end - j0);
        for (var k = 0u; k < {acc}u; k++) {{
            let c = t + 64u * k;
            if (c < d_size) {{
                var a = acc[k] * corr;
                for (var jj = 0u; jj < count; jj++) {{ a += sc[jj] * f32(values[(kb + j0 + jj) * d_size + c]); }}
                acc[k] = a;
            }}
        }}
        m = new_m;
        workgroupBarrier();
    }}
    if (p[{P_SINK}] > 0u) {{
        var logit = 0.0;
        if (p[{P_SINK}] == 1u) {{ logit = f32(sink[n]); }}
        let new_m = max(m, logit);
        var corr = 0.0;
        if (m > NEG_INF) {{ corr = exp(m - new_m); }}
        l = l * corr + exp(logit - new_m);
        for (var k = 0u; k < {acc}u; k++) {{ acc[k] *= corr; }}
    }}
    var inv = 0.0;
    if (l > 0.0) {{ inv = 1.0 / l; }}
    let yo = ((b * seq + i) * hq + n) * d_size;
    for (var k = 0u; k < {acc}u; k++) {{
        let c = t + 64u * k;
        if (c < d_size) {{ y[yo + c] = {ty}(acc[k] * inv); }}
    }}
}}
"
    )
}

impl Gqa {
    /// Checks an input's dtype.
    fn expect_dtype(&self, i: usize, t: &GpuTensor<'_>, want: DataType) -> Result<()> {
        if t.dtype() != want {
            return Err(Error::input(&self.op.at, i, want.name(), t.dtype().name()));
        }
        Ok(())
    }

    /// The parameters of both shaders.
    fn params(&self, s: &GqaShapes, present: usize, first_prompt: bool) -> Result<Vec<u32>> {
        let (op, at) = (&self.op, &self.op.at);
        let mut p = vec![0u32; P_LEN];
        p[P_B] = u32_of(s.batch, at)?;
        p[P_S] = u32_of(s.seq, at)?;
        p[P_HQ] = u32_of(op.num_heads, at)?;
        p[P_HKV] = u32_of(op.kv_num_heads, at)?;
        p[P_D] = u32_of(s.head, at)?;
        p[P_PAST] = u32_of(s.past_capacity, at)?;
        p[P_T] = u32_of(present, at)?;
        p[P_PACKED] = s.packed as u32;
        p[P_FIRST] = first_prompt as u32;
        p[P_HALF] = u32_of(s.rotary_dim / 2, at)?;
        p[P_INTERLEAVED] = op.rotary_interleaved as u32;
        p[P_MAXPOS] = u32_of(s.max_position, at)?;
        p[P_POSCOLS] = u32_of(s.position_columns, at)?;
        p[P_SCALE] = op.scale_for(s.head).to_bits();
        p[P_SOFTCAP] = op.softcap.to_bits();
        p[P_WINDOW] = u32_of(op.local_window.unwrap_or(0), at)?;
        p[P_CAUSAL] = op.causal as u32;
        if let Some((bb, bh, bt)) = s.bias {
            p[P_BIAS] = if bb == 1 { 2 } else { 1 };
            p[P_BIAS_H] = u32_of(bh, at)?;
            p[P_BIAS_T] = u32_of(bt, at)?;
        }
        Ok(p)
    }
}

impl GpuOp for Gqa {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let (op, at) = (&self.op, &self.op.at);
        let mut t: Vec<Option<GpuTensor<'_>>> = vec![None; Op::HEAD_SINK + 1];
        for (i, slot) in t.iter_mut().enumerate() {
            let rotary_only = matches!(i, Op::COS_CACHE | Op::SIN_CACHE | Op::POSITION_IDS);
            if i != Op::TOTAL_SEQUENCE_LENGTH && (op.do_rotary || !rotary_only) {
                *slot = opt_gpu_input(run, inputs, i, at)?;
            }
        }
        let q = t[Op::QUERY].ok_or_else(|| Error::input(at, Op::QUERY, "a query", "none"))?;
        for i in [
            Op::KEY,
            Op::VALUE,
            Op::PAST_KEY,
            Op::PAST_VALUE,
            Op::ATTENTION_BIAS,
            Op::HEAD_SINK,
            Op::COS_CACHE,
            Op::SIN_CACHE,
        ] {
            if let Some(x) = &t[i] {
                self.expect_dtype(i, x, self.dtype)?;
            }
        }
        self.expect_dtype(Op::QUERY, &q, self.dtype)?;
        let seqlens = t[Op::SEQLENS_K].ok_or_else(|| Error::input(at, Op::SEQLENS_K, "seqlens_k", "none"))?;
        self.expect_dtype(Op::SEQLENS_K, &seqlens, DataType::Int32)?;
        if let Some(x) = &t[Op::POSITION_IDS] {
            self.expect_dtype(Op::POSITION_IDS, x, DataType::Int64)?;
        }
        let total = host_input(inputs, Op::TOTAL_SEQUENCE_LENGTH, at)?;
        if total.dtype() != DataType::Int32 {
            return Err(Error::input(at, Op::TOTAL_SEQUENCE_LENGTH, "int32", total.dtype().name()));
        }
        let mut shape_list: Vec<Option<&[usize]>> = t.iter().map(|x| x.map(|x| x.shape())).collect();
        shape_list[Op::TOTAL_SEQUENCE_LENGTH] = Some(total.shape());
        let shapes = op.shapes(&shape_list)?;
        let total = total.as_slice::<i32>()?.first().copied().unwrap_or(0);
        let (present_len, first_prompt) = op.phase(&shapes, total)?;

        let mut p = self.params(&shapes, present_len, first_prompt)?;
        p[P_SINK] = if t[Op::HEAD_SINK].is_some() {
            1
        } else if op.smooth_softmax {
            2
        } else {
            0
        };
        let (hkv, d) = (op.kv_num_heads, shapes.head);
        let present_shape = vec![shapes.batch, hkv, present_len, d];
        let y = run.alloc(self.dtype, vec![shapes.batch, shapes.seq, op.num_heads * d])?;
        // The shared buffer: past and present one caller buffer of the present's size.
        let shared = match (&t[Op::PAST_KEY], &t[Op::PAST_VALUE]) {
            (Some(pk), Some(pv))
                if pk.shape() == present_shape.as_slice()
                    && run.is_bound_output(pk.buffer)
                    && run.is_bound_output(pv.buffer) =>
            {
                Some((pk.tensor.clone(), pv.tensor.clone()))
            }
            _ => None,
        };
        let in_place = shared.is_some();
        let (present_k, present_v) = match shared {
            Some(pair) => pair,
            None => (run.alloc(self.dtype, present_shape.clone())?, run.alloc(self.dtype, present_shape)?),
        };
        if y.is_empty() && present_k.is_empty() {
            return Ok(vec![Value::Tensor(y), Value::Tensor(present_k), Value::Tensor(present_v)]);
        }
        let qb = q.buffer;
        let or_q = |i: usize| t[i].map_or(qb, |x| x.buffer);
        let inputs7 = [
            qb,
            or_q(Op::KEY),
            or_q(Op::VALUE),
            seqlens.buffer,
            or_q(Op::COS_CACHE),
            or_q(Op::SIN_CACHE),
            or_q(Op::POSITION_IDS),
        ];

        let cache_threads = if in_place { shapes.batch * hkv * shapes.seq * d } else { present_k.len() };
        p[P_N] = u32_of(cache_threads, at)?;
        p[P_MODE] = in_place as u32;
        let (past_k, past_v) = if in_place { (qb, qb) } else { (or_q(Op::PAST_KEY), or_q(Op::PAST_VALUE)) };
        let (pk_out, pv_out) = (present_buffer(run, &present_k)?, present_buffer(run, &present_v)?);
        let mut buffers: Vec<&GpuBuffer> = inputs7.to_vec();
        buffers.extend([past_k, past_v, pk_out, pv_out]);
        run.dispatch(&self.cache, &p, &buffers, grid(cache_threads))?;

        let rows = shapes.batch * op.num_heads * shapes.seq;
        p[P_N] = u32_of(rows, at)?;
        let mut buffers: Vec<&GpuBuffer> = inputs7.to_vec();
        buffers.extend([pk_out, pv_out, or_q(Op::ATTENTION_BIAS), or_q(Op::HEAD_SINK), y.gpu()?]);
        let x = rows.min(65535);
        run.dispatch(&self.attend, &p, &buffers, [x as u32, rows.div_ceil(x.max(1)) as u32, 1])?;
        Ok(vec![Value::Tensor(y), Value::Tensor(present_k), Value::Tensor(present_v)])
    }
}

/// The GPU buffer of a present cache tensor.
fn present_buffer<'t>(run: &GpuRun, t: &'t Tensor) -> Result<&'t GpuBuffer> {
    run.context().own_buffer(t)
}

#[cfg(test)]
mod tests {
    use onyx_core::{DataType, IoBinding, Session, SessionOptions, Tensor, Value};

    use crate::testkit::{assert_close, float, int, provider, rand, t, Case};

    /// One GroupQueryAttention call: sizes, lengths and which optional parts it has.
    #[derive(Clone)]
    struct Call {
        b: usize,
        s: usize,
        hq: usize,
        hkv: usize,
        d: usize,
        /// Past capacity (0: no past).
        past: usize,
        seqlens: Vec<i32>,
        total: i32,
        packed: bool,
        /// Rotary caches of this many positions (0: no rotary).
        rotary: usize,
        positions: bool,
        bias: bool,
        sink: bool,
        attrs: Vec<onyx_core::ir::Attribute>,
        f16: bool,
    }

    impl Call {
        fn case(&self, seed: u64) -> Case {
            let c = self;
            let (kvw, qw) = (c.hkv * c.d, c.hq * c.d);
            let cast = |x: Tensor| if c.f16 { to_f16(&x) } else { x };
            let mut inputs: Vec<Option<Tensor>> = vec![None; 12];
            if c.packed {
                inputs[0] = Some(cast(rand(&[c.b, c.s, qw + 2 * kvw], -1.0, 1.0, seed)));
            } else {
                inputs[0] = Some(cast(rand(&[c.b, c.s, qw], -1.0, 1.0, seed)));
                inputs[1] = Some(cast(rand(&[c.b, c.s, kvw], -1.0, 1.0, seed + 1)));
                inputs[2] = Some(cast(rand(&[c.b, c.s, kvw], -1.0, 1.0, seed + 2)));
            }
            if c.past > 0 {
                inputs[3] = Some(cast(rand(&[c.b, c.hkv, c.past, c.d], -1.0, 1.0, seed + 3)));
                inputs[4] = Some(cast(rand(&[c.b, c.hkv, c.past, c.d], -1.0, 1.0, seed + 4)));
            }
            inputs[5] = Some(t(&[c.b], c.seqlens.clone()));
            inputs[6] = Some(t(&[], vec![c.total]));
            let mut attrs = vec![int("num_heads", c.hq as i64), int("kv_num_heads", c.hkv as i64)];
            attrs.extend(c.attrs.iter().cloned());
            if c.rotary > 0 {
                let half = c.d / 2 - 1;
                inputs[7] = Some(cast(rand(&[c.rotary, half], -1.0, 1.0, seed + 5)));
                inputs[8] = Some(cast(rand(&[c.rotary, half], -1.0, 1.0, seed + 6)));
                attrs.push(int("do_rotary", 1));
                if c.positions {
                    let mut rng = fastrand::Rng::with_seed(seed + 7);
                    let ids: Vec<i64> = (0..c.b * c.s).map(|_| rng.i64(0..(c.rotary - c.s) as i64)).collect();
                    inputs[9] = Some(t(&[c.b, c.s], ids));
                }
            }
            if c.bias {
                inputs[10] = Some(cast(rand(&[1, c.hq, c.s, c.total as usize], -1.0, 1.0, seed + 8)));
            }
            if c.sink {
                inputs[11] = Some(cast(rand(&[c.hq], -1.0, 1.0, seed + 9)));
            }
            while inputs.last().is_some_and(Option::is_none) {
                inputs.pop();
            }
            let mut case = Case::new("GroupQueryAttention", vec![])
                .attrs(attrs)
                .domain("com.microsoft")
                .outputs(3)
                .constants(&[6]);
            case.inputs = inputs;
            case.attributes.push(float("scale", 0.0));
            case
        }
    }

    fn to_f16(x: &Tensor) -> Tensor {
        let v: Vec<half::f16> = x.as_slice::<f32>().unwrap().iter().map(|&v| half::f16::from_f32(v)).collect();
        t(x.shape(), v)
    }

    fn decode() -> Call {
        Call {
            b: 2,
            s: 1,
            hq: 4,
            hkv: 2,
            d: 10,
            past: 16,
            seqlens: vec![6, 3],
            total: 7,
            packed: false,
            rotary: 20,
            positions: false,
            bias: false,
            sink: false,
            attrs: vec![int("local_window_size", 3)],
            f16: false,
        }
    }

    #[test]
    fn group_query_attention_matches_the_cpu() {
        let prompt = Call {
            b: 2,
            s: 5,
            hq: 8,
            hkv: 1,
            d: 12,
            past: 0,
            seqlens: vec![4, 2],
            total: 5,
            rotary: 9 + 5,
            positions: true,
            bias: true,
            sink: true,
            attrs: vec![int("rotary_interleaved", 1)],
            ..decode()
        };
        let growing = Call {
            b: 1,
            s: 3,
            hq: 3,
            hkv: 3,
            d: 7,
            past: 4,
            seqlens: vec![6],
            total: 7,
            packed: true,
            rotary: 0,
            attrs: vec![int("smooth_softmax", 1)],
            ..decode()
        };
        let softcap = Call {
            attrs: vec![float("softcap", 2.0)],
            rotary: 0,
            b: 3,
            seqlens: vec![15, 0, 9],
            total: 16,
            ..decode()
        };
        let non_causal = Call { attrs: vec![int("causal", 0)], ..growing.clone() };
        // Head sizes past one thread's share of the accumulators (64 threads).
        let wide = Call { d: 136, hq: 2, hkv: 1, rotary: 0, ..decode() };
        let long = Call { s: 70, past: 0, seqlens: vec![69, 40], total: 70, rotary: 80, ..decode() };
        let calls = [decode(), prompt, growing, softcap, non_causal, wide, long];
        for (n, call) in calls.iter().enumerate() {
            call.case(10 * n as u64).check(1e-4, 1e-5);
        }
        let gpu = provider();
        if gpu.is_some_and(|g| g.context().is_ok_and(|c| c.capabilities().has_f16())) {
            let half = Call { f16: true, ..decode() };
            half.case(99).check(3e-3, 3e-3);
        }
    }

    /// A decode step whose past is bound as the present: the new rows are written into the
    /// caller's buffers, nothing is copied to or from the host, and the result is the CPU's
    /// present (on the rows the row lengths cover).
    #[test]
    fn a_bound_shared_cache_is_updated_in_place() {
        // A device of the test's own: others' uploads would count in its transfers.
        let Some(gpu) = crate::testkit::private_provider() else { return };
        let ctx = gpu.context().unwrap();
        let call = decode();
        let case = call.case(7);
        let want = case.run_cpu();
        let options = SessionOptions { providers: vec![gpu.clone()], ..Default::default() };
        let session = Session::new(case.model(), options).unwrap();
        let upload = |t: &Tensor| ctx.upload(t.view().unwrap()).unwrap();
        let inputs: Vec<Option<Tensor>> = case.inputs.iter().map(|t| t.as_ref().map(upload)).collect();
        let before = ctx.transfer_counts();
        let mut binding = IoBinding::new();
        for (i, x) in inputs.iter().enumerate().filter(|(i, _)| *i != 6) {
            if let Some(x) = x {
                binding.bind_input(format!("x{i}"), x.clone());
            }
        }
        let (pk, pv) = (inputs[3].clone().unwrap(), inputs[4].clone().unwrap());
        binding
            .bind_output_to_device("y0", ctx.onyx_device())
            .bind_output("y1", pk.clone())
            .bind_output("y2", pv.clone());
        let outputs = session.run_with_binding(binding).unwrap();
        assert_eq!(ctx.transfer_counts(), before, "a bound decode step made host copies");
        let y = ctx.download(outputs.get("y0").unwrap().as_tensor().unwrap()).unwrap();
        assert_close(&y, &want[0], 1e-4, 1e-5, "output");
        for (bound, want) in [(&pk, &want[1]), (&pv, &want[2])] {
            let got = ctx.download(bound).unwrap();
            let (g, w) = (got.as_slice::<f32>().unwrap(), want.as_slice::<f32>().unwrap());
            let per_row = call.hkv * call.past * call.d;
            for b in 0..call.b {
                let len = (call.seqlens[b] + 1) as usize * call.d;
                for h in 0..call.hkv {
                    let o = b * per_row + h * call.past * call.d;
                    let got = t(&[len], g[o..o + len].to_vec());
                    assert_close(&got, &t(&[len], w[o..o + len].to_vec()), 1e-6, 1e-6, "present");
                }
            }
        }
        // The past rows beyond each row's length are the caller's, untouched.
        let original = case.inputs[3].as_ref().unwrap().as_slice::<f32>().unwrap();
        let got = ctx.download(&pk).unwrap();
        let last = (call.past - 1) * call.d;
        assert_eq!(got.as_slice::<f32>().unwrap()[last], original[last]);
        assert!(matches!(outputs.get("y1").unwrap(), Value::Tensor(t) if t.dtype() == DataType::Float));
    }

    #[test]
    fn group_query_attention_rejects_bad_shapes() {
        let Some(gpu) = provider() else { return };
        let mut case = decode().case(3);
        case.inputs[3] = Some(rand(&[2, 2, 16, 8], -1.0, 1.0, 1));
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("input 3") && e.contains("[2, 2, 16, 10]"), "{e}");
        let mut case = decode().case(3);
        case.inputs[6] = Some(t(&[], vec![0i32]));
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("input 6"), "{e}");
    }
}
