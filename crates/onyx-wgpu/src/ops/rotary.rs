//! RotaryEmbedding, ONNX's (opset 23) and ONNX Runtime's `com.microsoft` form, on the
//! contract of `onyx_core::ops::contrib::rotary`, in f32 or f16 (computed in f32): one
//! dispatch, each output element rotated with its pair partner by the angle whose cosine and
//! sine the caches hold (`(x1 cos - x2 sin, x1 sin + x2 cos)`); elements past the rotary
//! width are copied.
//!
//! The input is `[batch, heads, seq, head]`, or `[batch, seq, heads * head]`. The caches are
//! `[max_position, rot / 2]` indexed by `position_ids[b, s]` (or, in the Microsoft form, by a
//! scalar offset plus `s`), or `[batch, seq, rot / 2]` without position ids (ONNX form).
//! Positions outside the cache are clamped on the GPU (the CPU EP rejects them; a kernel
//! cannot fail mid-run).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ops::contrib::rotary::{CacheRows, RotaryOp};
use onyx_core::{DataType, Error, Result, Value};

use super::{input_dtype, is_float_input, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, opt_gpu_input, u32_of, wgsl_type, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers both forms.
pub(crate) fn register(r: &mut Registry) {
    r.add("RotaryEmbedding", supports_rotary, build_rotary);
    r.add_in(onyx_core::ir::MS_DOMAIN, "RotaryEmbedding", supports_rotary, build_rotary);
}

/// Float input and caches of one type, int64 position ids (or none), attributes in range.
fn supports_rotary(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let Ok(op) = RotaryOp::from_node(ctx.node) else { return false };
    let (c, s, p) = op.input_indices();
    let x = input_dtype(ctx, 0);
    let pos_ok = ctx.node.input(p).is_none() || input_dtype(ctx, p) == Some(DataType::Int64);
    is_float_input(ctx, gpu, 0)
        && input_dtype(ctx, c) == x
        && input_dtype(ctx, s) == x
        && pos_ok
        && op.rotary_dim < 1 << 24
        && op.num_heads < 1 << 24
}

/// Parameters: n, three_d, heads, seq, head, half (rot / 2), interleaved, rows (0 per token,
/// 1 position ids, 2 an offset), max_position.
fn shader(ty: &str, enable: &str) -> String {
    format!(
        "{enable}{FLAT_INDEX}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read> cos_cache: array<{ty}>;
@group(0) @binding(3) var<storage, read> sin_cache: array<{ty}>;
@group(0) @binding(4) var<storage, read> pos: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<{ty}>;
// position_ids[i] (int64) clamped to the cache.
fn position_id(i: u32, add: u32) -> u32 {{
    let lo = pos[2u * i];
    let hi = pos[2u * i + 1u];
    let last = p[8] - 1u;
    if (hi >= 0x80000000u) {{ return 0u; }}
    if (hi != 0u) {{ return last; }}
    return min(lo + min(add, last), last);
}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let e = flat_index(gid, nwg);
    if (e >= p[0]) {{ return; }}
    let heads = p[2];
    let seq = p[3];
    let head = p[4];
    let half = p[5];
    let i = e % head;
    let r = e / head;
    var s = 0u;
    var b = 0u;
    if (p[1] == 1u) {{
        let t = r / heads;
        s = t % seq;
        b = t / seq;
    }} else {{
        s = r % seq;
        b = r / seq / heads;
    }}
    if (i >= 2u * half) {{ y[e] = x[e]; return; }}
    var j = i % half;
    var first = i < half;
    var partner = e + half;
    if (p[6] == 1u) {{
        j = i / 2u;
        first = (i & 1u) == 0u;
        partner = select(e - 1u, e + 1u, first);
    }} else if (!first) {{
        partner = e - half;
    }}
    var row = b * seq + s;
    if (p[7] == 1u) {{ row = position_id(b * seq + s, 0u); }}
    if (p[7] == 2u) {{ row = position_id(0u, s); }}
    let c = f32(cos_cache[row * half + j]);
    let sn = f32(sin_cache[row * half + j]);
    let v = f32(x[e]);
    let w = f32(x[partner]);
    if (first) {{ y[e] = {ty}(c * v - sn * w); }} else {{ y[e] = {ty}(sn * w + c * v); }}
}}
"
    )
}

/// A RotaryEmbedding node.
struct Rotary {
    op: RotaryOp,
    dtype: DataType,
    pipeline: Arc<Pipeline>,
}

fn build_rotary(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = RotaryOp::from_node(ctx.node)?;
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {}: untyped input", op.at)))?;
    let ty = wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {} on {dtype}", op.at)))?;
    let pipeline = gpu.pipeline(&format!("rotary/{ty}"), || shader(ty, enables(dtype)))?;
    Ok(Box::new(Rotary { op, dtype, pipeline }))
}

impl GpuOp for Rotary {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.op.at;
        let (ci, si, pi) = self.op.input_indices();
        let x = gpu_input(run, inputs, 0, at)?;
        let cos = gpu_input(run, inputs, ci, at)?;
        let sin = gpu_input(run, inputs, si, at)?;
        let pos = opt_gpu_input(run, inputs, pi, at)?;
        for (i, t) in [(0, &x), (ci, &cos), (si, &sin)] {
            if t.dtype() != self.dtype {
                return Err(Error::input(at, i, self.dtype.name(), t.dtype().name()));
            }
        }
        if let Some(p) = &pos {
            if p.dtype() != DataType::Int64 {
                return Err(Error::input(at, pi, "int64", p.dtype().name()));
            }
        }
        let d = self.op.dims(x.shape(), cos.shape())?;
        let (rows, max_pos) = match self.op.cache_rows(&d, cos.shape(), sin.shape(), pos.as_ref().map(|p| p.shape()))? {
            CacheRows::PerToken => (0, 0),
            CacheRows::Ids { max_position } => (1, max_position),
            CacheRows::Offset { max_position } => (2, max_position),
        };
        let y = run.alloc(self.dtype, x.shape().to_vec())?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let params = [
            u32_of(y.len(), at)?,
            d.three_d as u32,
            u32_of(d.heads, at)?,
            u32_of(d.seq, at)?,
            u32_of(d.head, at)?,
            u32_of(d.rot / 2, at)?,
            self.op.interleaved as u32,
            rows,
            u32_of(max_pos, at)?,
        ];
        let pos_buffer = pos.map_or(x.buffer, |p| p.buffer);
        run.dispatch(
            &self.pipeline,
            &params,
            &[x.buffer, cos.buffer, sin.buffer, pos_buffer, y.gpu()?],
            grid(y.len()),
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, rand, t, Case};

    /// Random position ids in `0..max`.
    fn positions(b: usize, s: usize, max: i64, seed: u64) -> onyx_core::Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        t(&[b, s], (0..b * s).map(|_| rng.i64(0..max)).collect::<Vec<i64>>())
    }

    #[test]
    fn rotary_embedding_matches_the_cpu() {
        let (b, s, h, d) = (2, 5, 3, 10);
        for interleaved in [0, 1] {
            for rot in [0usize, 4, 6] {
                let r = if rot == 0 { d } else { rot };
                for three_d in [false, true] {
                    let shape: Vec<usize> = if three_d { vec![b, s, h * d] } else { vec![b, h, s, d] };
                    let x = rand(&shape, -2.0, 2.0, 70 + rot as u64);
                    let mut attrs = vec![int("interleaved", interleaved), int("rotary_embedding_dim", rot as i64)];
                    if three_d {
                        attrs.push(int("num_heads", h as i64));
                    }
                    // Caches indexed by position ids.
                    let max = 11;
                    let cos = rand(&[max, r / 2], -1.0, 1.0, 80);
                    let sin = rand(&[max, r / 2], -1.0, 1.0, 81);
                    let inputs = vec![x.clone(), cos, sin, positions(b, s, max as i64, 82)];
                    Case::new("RotaryEmbedding", inputs).attrs(attrs.clone()).opset(23).check(1e-5, 1e-6);
                    // Per-token caches.
                    let cos = rand(&[b, s, r / 2], -1.0, 1.0, 83);
                    let sin = rand(&[b, s, r / 2], -1.0, 1.0, 84);
                    Case::new("RotaryEmbedding", vec![x, cos, sin]).attrs(attrs).opset(23).check(1e-5, 1e-6);
                }
            }
        }
    }

    /// ONNX Runtime's form: inputs (x, position_ids, cos, sin), ids per token or one offset,
    /// the head count from the caches or the attribute, f32 and f16.
    #[test]
    fn microsoft_rotary_embedding_matches_the_cpu() {
        let (b, s, h, d) = (2, 5, 3, 12);
        let gpu_f16 = crate::testkit::provider().is_some_and(|g| g.context().is_ok_and(|c| c.capabilities().has_f16()));
        for interleaved in [0, 1] {
            for (rot, heads_attr) in [(0usize, false), (8, true)] {
                let r = if rot == 0 { d } else { rot };
                let max = 13;
                let x = rand(&[b, s, h * d], -2.0, 2.0, 90 + rot as u64);
                let cos = rand(&[max, r / 2], -1.0, 1.0, 91);
                let sin = rand(&[max, r / 2], -1.0, 1.0, 92);
                let mut attrs = vec![int("interleaved", interleaved), int("rotary_embedding_dim", rot as i64)];
                if heads_attr {
                    attrs.push(int("num_heads", h as i64));
                }
                for pos in [positions(b, s, max as i64, 93), t(&[1], vec![4i64])] {
                    let inputs = vec![x.clone(), pos.clone(), cos.clone(), sin.clone()];
                    Case::new("RotaryEmbedding", inputs).attrs(attrs.clone()).domain("com.microsoft").check(1e-5, 1e-6);
                    if gpu_f16 {
                        let half = |t: &onyx_core::Tensor| {
                            let v: Vec<half::f16> =
                                t.as_slice::<f32>().unwrap().iter().map(|&x| half::f16::from_f32(x)).collect();
                            crate::testkit::t(t.shape(), v)
                        };
                        let inputs = vec![half(&x), pos, half(&cos), half(&sin)];
                        Case::new("RotaryEmbedding", inputs)
                            .attrs(attrs.clone())
                            .domain("com.microsoft")
                            .check(1e-3, 1e-3);
                    }
                }
            }
        }
    }

    #[test]
    fn rotary_embedding_rejects_bad_caches() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let x = rand(&[1, 2, 3, 4], -1.0, 1.0, 1);
        let cos = rand(&[5, 3], -1.0, 1.0, 2);
        let case = Case::new("RotaryEmbedding", vec![x, cos.clone(), cos, positions(1, 3, 5, 3)]).opset(23);
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("cache"), "{e}");
    }
}
