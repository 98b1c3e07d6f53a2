//! Attention (opset 23 and 24) on f32 (and f16 with SHADER_F16), computed in f32, as the CPU
//! EP computes it: 3-D or 4-D Q/K/V, grouped-query heads, a bool or additive mask broadcast to
//! `[batch, q_heads, q_seq, <= total]`, causal masking, a KV cache (past/present), padded KV
//! lengths (`nonpad_kv_seqlen`), a softcap, and `qk_matmul_output` at any of its four points.
//! A query row whose every key is masked gets zero weights (a zero output row).
//!
//! Head sizes up to 128 without `qk_matmul_output` run the tiled kernel of `flash.rs` (online
//! softmax, no scratch), reading K and V in place when there is no cache and no present
//! output: one dispatch. Otherwise three: the present key and value (the past followed by the
//! new keys, in the 4-D layout; outputs 1 and 2), then the tiled kernel or, for the cases it
//! does not cover, the row kernel of `row.rs` (one workgroup per query row that computes the
//! row's scores into an f32 scratch row, its softmax, and the weighted sum of values).
//!
//! The row kernel also stands in for the tiled one while the tiled one compiles (startup
//! kernels, see `compile.rs`): on a cold NVIDIA driver the tiled kernel takes 90-120 ms to
//! compile, and a first run would otherwise wait for it.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use super::reduce::float_type;
use super::{input_dtype, is_float_input, Registry};
use crate::capabilities::Capabilities;
use crate::compile::Priority;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, opt_gpu_input, strides, u32_of, GpuOp, GpuTensor, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

mod flash;
mod gqa;
mod row;

use flash::{flash_shader, Tiling};
use row::row_shader;

/// Registers Attention.
pub(crate) fn register(r: &mut Registry) {
    r.add("Attention", supports, build);
    // The optimizer's fused attention in models below opset 23: the same contract.
    r.add_in(onyx_core::ir::ONYX_DOMAIN, "Attention", supports, build);
    r.add_in(onyx_core::ir::ONYX_DOMAIN, "PackedAttention", supports_packed, build_packed);
    r.add_in_with_host_inputs("com.microsoft", "GroupQueryAttention", gqa::supports, gqa::build, &[6]);
}

/// Whether input `i` is present.
fn has_input(ctx: &NodeContext<'_>, i: usize) -> bool {
    ctx.node.inputs.get(i).is_some_and(|n| !n.is_empty())
}

/// Float Q/K/V (and past) of one type, a bool or same-type mask, int64 lengths, valid
/// attributes.
fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let q = input_dtype(ctx, 0);
    let same = [1, 2, 4, 5].iter().all(|&i| !has_input(ctx, i) || input_dtype(ctx, i) == q);
    let mask_ok = !has_input(ctx, 3) || matches!(input_dtype(ctx, 3), Some(DataType::Bool)) || input_dtype(ctx, 3) == q;
    let nonpad_ok = !has_input(ctx, 6) || input_dtype(ctx, 6) == Some(DataType::Int64);
    let attrs_ok = n.int_or("qk_matmul_output_mode", 0).is_ok_and(|m| (0..4).contains(&m))
        && n.float_or("softcap", 0.0).is_ok_and(|c| c >= 0.0 && c.is_finite())
        && n.get_float("scale").is_ok_and(|s| s.is_none_or(f32::is_finite))
        && n.int_or("is_causal", 0).is_ok_and(|c| c == 0 || c == 1)
        && ["q_num_heads", "kv_num_heads"].iter().all(|a| n.get_int(a).is_ok_and(|h| h.is_none_or(|h| h > 0)));
    is_float_input(ctx, gpu, 0) && same && mask_ok && nonpad_ok && attrs_ok && has_input(ctx, 4) == has_input(ctx, 5)
}

/// `ai.onyx` PackedAttention(QKV, attn_mask?): q, k and v side by side in the rows of one
/// float tensor (the optimizer's fusion of a packed projection, read in place where Attention
/// would need a Split first), both head counts given, a bool or same-type mask.
fn supports_packed(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let qkv = input_dtype(ctx, 0);
    let heads = ["q_num_heads", "kv_num_heads"].iter().all(|a| n.get_int(a).is_ok_and(|h| h.is_some_and(|h| h > 0)));
    let mask_ok =
        !has_input(ctx, 1) || matches!(input_dtype(ctx, 1), Some(DataType::Bool)) || input_dtype(ctx, 1) == qkv;
    is_float_input(ctx, gpu, 0)
        && heads
        && mask_ok
        && n.inputs.len() <= 2
        && n.outputs.len() == 1
        && n.get_float("scale").is_ok_and(|s| s.is_none_or(f32::is_finite))
}

/// The index of the mask input: 1 in PackedAttention, 3 in Attention.
fn mask_input(packed: bool) -> usize {
    if packed {
        1
    } else {
        3
    }
}

/// An Attention node with its attributes decoded and pipelines built.
struct AttentionOp {
    present: Arc<Pipeline>,
    present_past: Arc<Pipeline>,
    row: Arc<Pipeline>,
    /// Tiled kernels by tiling (none when the node keeps `qk_matmul_output`).
    flash: Vec<(Tiling, Arc<Pipeline>)>,
    /// Whether runs take the row kernel while the tiled one is still compiling.
    row_stands_in: bool,
    /// Workgroup memory the device allows, in bytes.
    storage_limit: u32,
    dtype: DataType,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    scale: Option<f32>,
    softcap: f32,
    causal: bool,
    mode: u32,
    /// 0: no mask, 1: bool, 2: additive.
    mask: u32,
    nonpad: bool,
    outputs: usize,
    /// A PackedAttention: Q, K and V are the rows of input 0, the mask is input 1.
    packed: bool,
    at: Location,
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_op(ctx, gpu, false)
}

fn build_packed(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_op(ctx, gpu, true)
}

fn build_op(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>, packed: bool) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::input(&at, 0, "a float tensor", "an unknown type"))?;
    let ty = float_type(dtype)?;
    let en = enables(dtype);
    let mask = match (has_input(ctx, mask_input(packed)), input_dtype(ctx, mask_input(packed))) {
        (false, _) => 0,
        (true, Some(DataType::Bool)) => 1,
        _ => 2,
    };
    let nonpad = !packed && has_input(ctx, 6);
    let outputs = node.outputs.len().max(1);
    let qk = outputs > 3 && !node.outputs[3].is_empty();
    let present = gpu.pipeline(&format!("attention/present/{ty}/false"), || present_shader(ty, en, false))?;
    let present_past = gpu.pipeline(&format!("attention/present/{ty}/true"), || present_shader(ty, en, true))?;
    let row =
        gpu.pipeline(&format!("attention/row/{ty}/{mask}/{nonpad}/{qk}"), || row_shader(ty, en, mask, nonpad, qk))?;
    let heads = |name: &str| -> Result<Option<usize>> { Ok(node.get_int(name)?.map(|h| h.max(1) as usize)) };
    let storage_limit = gpu.device().limits().max_compute_workgroup_storage_size;
    let row_stands_in = gpu.startup_kernels();
    let priority = if row_stands_in { Priority::Background } else { Priority::Urgent };
    let mut flash = Vec::new();
    if !qk {
        for t in tilings(ctx, heads("q_num_heads")?, heads("kv_num_heads")?, packed, storage_limit) {
            let key = format!("attention/flash/{ty}/{mask}/{nonpad}/{}", t.name());
            flash.push((t, gpu.pipeline_with(&key, || flash_shader(ty, en, mask, nonpad, t), priority)?));
        }
    }
    Ok(Box::new(AttentionOp {
        present,
        present_past,
        row,
        flash,
        row_stands_in,
        storage_limit,
        dtype,
        q_heads: heads("q_num_heads")?,
        kv_heads: heads("kv_num_heads")?,
        scale: node.get_float("scale")?,
        softcap: node.float_or("softcap", 0.0)?,
        causal: node.int_or("is_causal", 0)? == 1,
        mode: node.int_or("qk_matmul_output_mode", 0)? as u32,
        mask,
        nonpad,
        outputs,
        packed,
        at,
    }))
}

/// The head size of input `i` when its shape says it: the last dim of a 4-D tensor, or that of
/// a 3-D one divided by `heads`.
fn head_size(ctx: &NodeContext<'_>, i: usize, heads: Option<usize>) -> Option<usize> {
    let Some(onyx_core::types::ValueType::Tensor(t)) = ctx.input_types.get(i) else { return None };
    let shape = t.shape.as_ref()?;
    let onyx_core::types::Dim::Fixed(last) = shape.last()? else { return None };
    match (shape.len(), heads) {
        (4, _) => Some(*last),
        (3, Some(h)) if h > 0 => Some(last / h),
        _ => None,
    }
}

/// The tilings of the tiled kernel the node may need: the one for its head sizes when the
/// input shapes give them, else every one the device can run.
fn tilings(
    ctx: &NodeContext<'_>,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    packed: bool,
    limit: u32,
) -> Vec<Tiling> {
    let sizes = if packed {
        let head = q_heads.zip(kv_heads).and_then(|(q, kv)| head_size(ctx, 0, Some(q + 2 * kv)));
        (head, head)
    } else {
        (head_size(ctx, 0, q_heads), head_size(ctx, 2, kv_heads))
    };
    match sizes {
        (Some(dh), Some(dv)) => Tiling::choose(dh, dv, limit).into_iter().collect(),
        _ => [1, flash::MAX_HEAD].iter().filter_map(|&d| Tiling::choose(d, d, limit)).collect(),
    }
}

/// Present key or value `[b, heads, total, d]`: the past's rows, then the new ones (3-D rows,
/// of their own or of a packed tensor, or 4-D). `p`: count, heads, total, d, past, new seq,
/// 3-D flag, then the 3-D rows' length and the offset of their first head.
fn present_shader(ty: &str, enable: &str, past: bool) -> String {
    let (bind, read_past) = if past {
        (
            format!("@group(0) @binding(2) var<storage, read> old: array<{ty}>;\n"),
            "if (j < past) { y[e] = old[(bh * past + j) * d + c]; return; }",
        )
    } else {
        (String::new(), "")
    };
    let out = if past { 3 } else { 2 };
    format!(
        "{enable}{FLAT_INDEX}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
{bind}@group(0) @binding({out}) var<storage, read_write> y: array<{ty}>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let e = flat_index(gid, nwg);
    if (e >= p[0]) {{ return; }}
    let heads = p[1]; let total = p[2]; let d = p[3]; let past = p[4]; let seq = p[5];
    let c = e % d;
    let j = (e / d) % total;
    let bh = e / (d * total);
    {read_past}
    let s = j - past;
    let h = bh % heads;
    let b = bh / heads;
    if (p[6] == 1u) {{ y[e] = x[(b * seq + s) * p[7] + p[8] + h * d + c]; }} else {{ y[e] = x[(bh * seq + s) * d + c]; }}
}}
"
    )
}

/// WGSL both row kernels (Attention's and GroupQueryAttention's) share: the maximum and the
/// sum of one value per thread over a workgroup of 64 (every thread gets the result).
const REDUCE_64: &str = "var<workgroup> red: array<f32, 64>;
fn reduce_max(t: u32, x: f32) -> f32 {
    red[t] = x;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) { red[t] = max(red[t], red[t + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
fn reduce_sum(t: u32, x: f32) -> f32 {
    red[t] = x;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) { red[t] = red[t] + red[t + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
";

/// Parameter slots of the row shader.
const P_ROWS: usize = 0;
const P_QH: usize = 1;
const P_KVH: usize = 2;
const P_QS: usize = 3;
const P_TOTAL: usize = 4;
const P_PAST: usize = 5;
const P_DH: usize = 6;
const P_DV: usize = 7;
const P_SCALE: usize = 8;
const P_SOFTCAP: usize = 9;
const P_CAUSAL: usize = 10;
const P_3D: usize = 11;
const P_MASK: usize = 12; // strides b, h, q, k, then the mask's key count
const P_MODE: usize = 17;
/// Tiled kernel only: K and V are read in the 3-D layout (no present copies were made).
const P_KV3D: usize = 18;
/// 3-D layouts: the elements between two sequence rows of Q, K and V, and where their first
/// head starts in a row (`heads * size` and 0, except in a packed QKV tensor).
const P_QROW: usize = 19;
const P_QOFF: usize = 20;
const P_KROW: usize = 21;
const P_KOFF: usize = 22;
const P_VROW: usize = 23;
const P_VOFF: usize = 24;
const P_LEN: usize = 25;

/// The shaders' bindings: the params, Q, K and V (0-3), the mask (u32 for bool, else `ty`)
/// and the valid lengths when bound, then `outputs`' declarations.
fn bindings(ty: &str, mask: u32, nonpad: bool, outputs: &[String]) -> String {
    let mut decls: Vec<String> = vec!["var<storage, read> p: array<u32>;".into()];
    decls.extend(["q", "k", "v"].map(|name| format!("var<storage, read> {name}: array<{ty}>;")));
    match mask {
        1 => decls.push("var<storage, read> m: array<u32>;".into()),
        2 => decls.push(format!("var<storage, read> m: array<{ty}>;")),
        _ => {}
    }
    if nonpad {
        decls.push("var<storage, read> valid: array<u32>;".into());
    }
    decls.extend(outputs.iter().cloned());
    decls.iter().enumerate().map(|(i, d)| format!("@group(0) @binding({i}) {d}\n")).collect()
}

/// WGSL applying the mask (0 none, 1 bool, 2 additive) to score `s` of query row `i`, key
/// `j`, batch `b`, head `h`: keys past the mask's last are masked out.
fn mask_code(mask: u32) -> String {
    let mask_add = match mask {
        1 => "if (((m[mi >> 2u] >> ((mi & 3u) * 8u)) & 0xffu) == 0u) { s = NEG_INF; }",
        2 => "s += f32(m[mi]);",
        _ => "",
    };
    if mask == 0 {
        return String::new();
    }
    format!(
        "if (j < p[{len}]) {{ let mi = b * p[{P_MASK}] + h * p[{}] + i * p[{}] + j * p[{}]; {mask_add} }} else {{ s = NEG_INF; }}",
        P_MASK + 1,
        P_MASK + 2,
        P_MASK + 3,
        len = P_MASK + 4
    )
}

/// A dispatch of `n` workgroups, numbered `x + y * width`.
fn groups_2d(n: usize) -> [u32; 3] {
    let x = n.clamp(1, 65535);
    [x as u32, n.div_ceil(x) as u32, 1]
}

/// Sizes of one call, in the 4-D layout.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_seq: usize,
    kv_seq: usize,
    past: usize,
    head: usize,
    v_head: usize,
    three_d: bool,
}

/// Where the heads of 3-D Q, K and V sit in their rows: (elements per sequence row, offset of
/// the first head).
struct Rows3d {
    q: (usize, usize),
    k: (usize, usize),
    v: (usize, usize),
}

impl Rows3d {
    /// Rows of their own (`heads * size` long), or the rows of one packed QKV tensor.
    fn new(d: &Dims, packed: bool) -> Rows3d {
        if packed {
            let row = (d.q_heads + 2 * d.kv_heads) * d.head;
            Rows3d { q: (row, 0), k: (row, d.q_heads * d.head), v: (row, (d.q_heads + d.kv_heads) * d.head) }
        } else {
            Rows3d { q: (d.q_heads * d.head, 0), k: (d.kv_heads * d.head, 0), v: (d.kv_heads * d.v_head, 0) }
        }
    }
}

impl AttentionOp {
    /// Whether a run may take tiled pipeline `p`: once compiled, where the row kernel stands in
    /// until then.
    fn usable(&self, gpu: &GpuContext, p: &Pipeline) -> bool {
        !self.row_stands_in || (p.is_ready() && !gpu.forces_startup())
    }

    /// `(batch, heads, seq, size)` of a 3-D or 4-D operand.
    fn split(&self, shape: &[usize], heads: Option<usize>, i: usize) -> Result<[usize; 4]> {
        match (shape.len(), heads) {
            (4, h) if h.is_none_or(|h| h == shape[1]) => Ok([shape[0], shape[1], shape[2], shape[3]]),
            (3, Some(h)) if shape[2].is_multiple_of(h) => Ok([shape[0], h, shape[1], shape[2] / h]),
            _ => Err(Error::input(
                &self.at,
                i,
                "a 4-D tensor, or a 3-D one whose last dim divides into q_num_heads/kv_num_heads",
                format!("{shape:?}"),
            )),
        }
    }

    /// The sizes of a packed QKV `[batch, seq, (q_heads + 2 * kv_heads) * head]`.
    fn packed_dims(&self, shape: &[usize]) -> Result<Dims> {
        let (qh, kvh) = (self.q_heads.unwrap_or(0), self.kv_heads.unwrap_or(0));
        match *shape {
            [batch, seq, w] if qh > 0 && kvh > 0 && qh % kvh == 0 && w % (qh + 2 * kvh) == 0 => {
                let head = w / (qh + 2 * kvh);
                let (q_heads, kv_heads, q_seq, kv_seq) = (qh, kvh, seq, seq);
                Ok(Dims { batch, q_heads, kv_heads, q_seq, kv_seq, past: 0, head, v_head: head, three_d: true })
            }
            _ => Err(Error::input(
                &self.at,
                0,
                format!("[batch, seq, (q_num_heads + 2 * kv_num_heads) * head size] with {qh} and {kvh} heads"),
                format!("{shape:?}"),
            )),
        }
    }

    fn dims(&self, q: &[usize], k: &[usize], v: &[usize], past: Option<(&[usize], &[usize])>) -> Result<Dims> {
        if q.len() != k.len() || q.len() != v.len() {
            return Err(Error::node(
                &self.at,
                format!("Q, K and V must have the same rank, found {q:?}, {k:?}, {v:?}"),
            ));
        }
        let [batch, q_heads, q_seq, head] = self.split(q, self.q_heads, 0)?;
        let [kb, kv_heads, kv_seq, k_head] = self.split(k, self.kv_heads, 1)?;
        let [vb, v_heads, v_seq, v_head] = self.split(v, self.kv_heads, 2)?;
        if kb != batch || vb != batch || v_heads != kv_heads || v_seq != kv_seq || k_head != head {
            return Err(Error::node(&self.at, format!("Q {q:?}, K {k:?} and V {v:?} do not agree")));
        }
        if kv_heads == 0 || q_heads % kv_heads != 0 {
            return Err(Error::node(
                &self.at,
                format!("{q_heads} query heads are not a multiple of {kv_heads} KV heads"),
            ));
        }
        let mut p = 0;
        if let Some((pk, pv)) = past {
            let ok = pk.len() == 4
                && pv.len() == 4
                && pk[..2] == [batch, kv_heads]
                && pv[..2] == [batch, kv_heads]
                && pk[2] == pv[2]
                && pk[3] == head
                && pv[3] == v_head;
            if !ok {
                return Err(Error::node(
                    &self.at,
                    format!("past_key {pk:?} and past_value {pv:?} do not match K and V"),
                ));
            }
            p = pk[2];
        }
        Ok(Dims { batch, q_heads, kv_heads, q_seq, kv_seq, past: p, head, v_head, three_d: q.len() == 3 })
    }

    /// The mask's strides over `[batch, q_heads, q_seq, keys]` and its key count.
    fn mask_params(&self, m: &GpuTensor<'_>, d: &Dims) -> Result<[u32; 5]> {
        let shape = m.shape();
        let total = d.past + d.kv_seq;
        let bad = || {
            Error::input(
                &self.at,
                mask_input(self.packed),
                format!("attn_mask broadcastable to [{}, {}, {}, <= {total}]", d.batch, d.q_heads, d.q_seq),
                format!("{shape:?}"),
            )
        };
        if shape.is_empty() || shape.len() > 4 || shape[shape.len() - 1] > total {
            return Err(bad());
        }
        let full = [d.batch, d.q_heads, d.q_seq, shape[shape.len() - 1]];
        let mut dims = [1usize; 4];
        dims[4 - shape.len()..].copy_from_slice(shape);
        let dense = strides(&dims);
        let mut out = [0u32; 5];
        for a in 0..4 {
            if dims[a] == full[a] {
                out[a] = if dims[a] == 1 { 0 } else { u32_of(dense[a], &self.at)? };
            } else if dims[a] != 1 {
                return Err(bad());
            }
        }
        out[4] = u32_of(full[3], &self.at)?;
        Ok(out)
    }

    /// Records a present key or value: `[b, kv_heads, total, size]`; `rows`: where 3-D new
    /// rows hold the heads (see [`Rows3d`]).
    fn present(
        &self,
        run: &mut GpuRun,
        new: &GpuTensor<'_>,
        past: Option<&GpuTensor<'_>>,
        d: &Dims,
        size: usize,
        rows: (usize, usize),
    ) -> Result<Tensor> {
        let total = d.past + d.kv_seq;
        let out = run.alloc(self.dtype, vec![d.batch, d.kv_heads, total, size])?;
        let n = out.len();
        let at = &self.at;
        let params = [
            u32_of(n, at)?,
            u32_of(d.kv_heads, at)?,
            u32_of(total.max(1), at)?,
            u32_of(size.max(1), at)?,
            u32_of(d.past, at)?,
            u32_of(d.kv_seq, at)?,
            u32::from(d.three_d),
            u32_of(rows.0, at)?,
            u32_of(rows.1, at)?,
        ];
        if n > 0 {
            match past {
                Some(p) => run.dispatch(&self.present_past, &params, &[new.buffer, p.buffer, out.gpu()?], grid(n))?,
                None => run.dispatch(&self.present, &params, &[new.buffer, out.gpu()?], grid(n))?,
            }
        }
        Ok(out)
    }
}

impl GpuOp for AttentionOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let [qi, ki, vi] = if self.packed { [0; 3] } else { [0, 1, 2] };
        let q = gpu_input(run, inputs, qi, at)?;
        let k = gpu_input(run, inputs, ki, at)?;
        let v = gpu_input(run, inputs, vi, at)?;
        let mask = opt_gpu_input(run, inputs, mask_input(self.packed), at)?;
        let (past, nonpad) = if self.packed {
            (None, None)
        } else {
            let past = match (opt_gpu_input(run, inputs, 4, at)?, opt_gpu_input(run, inputs, 5, at)?) {
                (Some(a), Some(b)) => Some((a, b)),
                (None, None) => None,
                _ => return Err(Error::node(at, "past_key and past_value must be given together")),
            };
            (past, opt_gpu_input(run, inputs, 6, at)?)
        };
        if (mask.is_some() as u32) != (self.mask != 0) as u32 || nonpad.is_some() != self.nonpad {
            return Err(Error::node(at, "inputs differ from those the node was built for"));
        }
        let d = if self.packed {
            self.packed_dims(q.shape())?
        } else {
            self.dims(q.shape(), k.shape(), v.shape(), past.as_ref().map(|(a, b)| (a.shape(), b.shape())))?
        };
        let rows3 = Rows3d::new(&d, self.packed);
        let total = d.past + d.kv_seq;
        if let Some(np) = &nonpad {
            if np.shape() != [d.batch] {
                return Err(Error::input(
                    at,
                    6,
                    format!("nonpad_kv_seqlen of shape [{}]", d.batch),
                    format!("{:?}", np.shape()),
                ));
            }
        }
        let rows = d.batch * d.q_heads * d.q_seq;
        let tiling = Tiling::choose(d.head, d.v_head, self.storage_limit);
        let tiled = self.flash.iter().find(|(t, p)| rows > 0 && Some(*t) == tiling && self.usable(run.context(), p));
        // Without a cache and with no present outputs, the tiled kernel reads K and V in place.
        let direct = tiled.is_some() && past.is_none() && self.outputs == 1;
        let presents = if direct {
            None
        } else {
            let pk = self.present(run, &k, past.as_ref().map(|p| &p.0), &d, d.head, rows3.k)?;
            let pv = self.present(run, &v, past.as_ref().map(|p| &p.1), &d, d.v_head, rows3.v)?;
            Some((pk, pv))
        };
        let y_shape = if d.three_d {
            vec![d.batch, d.q_seq, d.q_heads * d.v_head]
        } else {
            vec![d.batch, d.q_heads, d.q_seq, d.v_head]
        };
        let y = run.alloc(self.dtype, y_shape)?;
        let qk = if self.outputs > 3 {
            Some(run.alloc(self.dtype, vec![d.batch, d.q_heads, d.q_seq, total])?)
        } else {
            None
        };
        let mut p = vec![0u32; P_LEN];
        p[P_ROWS] = u32_of(rows, at)?;
        p[P_QH] = u32_of(d.q_heads, at)?;
        p[P_KVH] = u32_of(d.kv_heads, at)?;
        p[P_QS] = u32_of(d.q_seq.max(1), at)?;
        p[P_TOTAL] = u32_of(total, at)?;
        p[P_PAST] = u32_of(d.past, at)?;
        p[P_DH] = u32_of(d.head, at)?;
        p[P_DV] = u32_of(d.v_head, at)?;
        p[P_SCALE] = self.scale.unwrap_or(1.0 / (d.head as f32).sqrt()).to_bits();
        p[P_SOFTCAP] = self.softcap.to_bits();
        p[P_CAUSAL] = u32::from(self.causal);
        p[P_3D] = u32::from(d.three_d);
        p[P_MODE] = self.mode;
        u32_of(rows * total.max(d.head).max(d.v_head), at)?;
        p[P_KV3D] = u32::from(direct && d.three_d);
        for (i, (row, offset)) in [(P_QROW, rows3.q), (P_KROW, rows3.k), (P_VROW, rows3.v)] {
            p[i] = u32_of(row, at)?;
            p[i + 1] = u32_of(offset, at)?;
        }
        let mut buffers = match &presents {
            Some((pk, pv)) => vec![q.buffer, pk.gpu()?, pv.gpu()?],
            None => vec![q.buffer, k.buffer, v.buffer],
        };
        if let Some(m) = &mask {
            p[P_MASK..P_MASK + 5].copy_from_slice(&self.mask_params(m, &d)?);
            buffers.push(m.buffer);
        }
        if let Some(np) = &nonpad {
            buffers.push(np.buffer);
        }
        match tiled {
            Some((t, pipeline)) => {
                let groups = d.batch * d.q_heads * d.q_seq.div_ceil(t.rows);
                p[P_ROWS] = u32_of(groups, at)?;
                buffers.push(y.gpu()?);
                run.dispatch(pipeline, &p, &buffers, groups_2d(groups))?;
            }
            _ => {
                let scratch = run.alloc(DataType::Float, vec![(rows * total).max(1)])?;
                buffers.push(scratch.gpu()?);
                buffers.push(y.gpu()?);
                if let Some(t) = &qk {
                    buffers.push(t.gpu()?);
                }
                if rows > 0 {
                    run.dispatch(&self.row, &p, &buffers, groups_2d(rows))?;
                }
                run.release_tensor(scratch);
            }
        }
        let mut out = vec![Value::Tensor(y)];
        if let Some((pk, pv)) = presents {
            out.extend([Value::Tensor(pk), Value::Tensor(pv)]);
        }
        if let Some(t) = qk {
            out.push(Value::Tensor(t));
        }
        out.truncate(self.outputs);
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
