//! RotaryEmbedding (opset 23) on f32: one dispatch, each output element rotated with its pair
//! partner by the angle whose cosine and sine the caches hold (`(x1 cos - x2 sin, x1 sin +
//! x2 cos)`); elements past `rotary_embedding_dim` are copied.
//!
//! The input is `[batch, heads, seq, head]`, or `[batch, seq, heads * head]` with `num_heads`.
//! The caches are `[max_position, rot / 2]` indexed by `position_ids[b, s]`, or `[batch, seq,
//! rot / 2]` without position ids. Position ids outside the cache are clamped on the GPU (the
//! CPU EP rejects them; a kernel cannot fail mid-run).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ops::contrib::rotary::{CacheRows, RotaryOp};
use onyx_core::{DataType, Error, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, opt_gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers RotaryEmbedding.
pub(crate) fn register(r: &mut Registry) {
    r.add("RotaryEmbedding", supports_rotary, build_rotary);
}

/// f32 input and caches, int64 position ids (or none), attributes in range.
fn supports_rotary(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let node = ctx.node;
    let f32_at = |i| input_dtype(ctx, i) == Some(DataType::Float);
    let pos_ok = node.input(3).is_none() || input_dtype(ctx, 3) == Some(DataType::Int64);
    f32_at(0)
        && f32_at(1)
        && f32_at(2)
        && pos_ok
        && node.int_or("interleaved", 0).is_ok_and(|v| v == 0 || v == 1)
        && node.int_or("rotary_embedding_dim", 0).is_ok_and(|v| (0..1 << 24).contains(&v))
        && node.int_or("num_heads", 0).is_ok_and(|v| (0..1 << 24).contains(&v))
}

/// `fetch(e)`: the rotated element `e`. Parameters: three_d, batch, heads, seq, head, half (rot
/// / 2), interleaved, max_position (0 without position ids).
const ROTARY: &str = "
fn fetch(e: u32) -> E {
    let heads = p[5];
    let seq = p[6];
    let head = p[7];
    let half = p[8];
    let i = e % head;
    let r = e / head;
    var s = 0u;
    var b = 0u;
    if (p[3] == 1u) {
        let t = r / heads;
        s = t % seq;
        b = t / seq;
    } else {
        s = r % seq;
        b = r / seq / heads;
    }
    if (i >= 2u * half) { return load_x(e); }
    var j = i % half;
    var first = i < half;
    var partner = e + half;
    if (p[9] == 1u) {
        j = i / 2u;
        first = (i & 1u) == 0u;
        partner = e + 1u;
        if (!first) { partner = e - 1u; }
    } else if (!first) {
        partner = e - half;
    }
    let row = cache_row(b * seq + s) * half + j;
    let c = bitcast<f32>(load_cos(row));
    let sn = bitcast<f32>(load_sin(row));
    let v = bitcast<f32>(load_x(e));
    let w = bitcast<f32>(load_x(partner));
    if (first) { return bitcast<u32>(c * v - sn * w); }
    return bitcast<u32>(sn * w + c * v);
}
";

/// The cache row of token `t` (`b * seq + s`) from the position ids, clamped to the cache.
const WITH_POSITIONS: &str = "
fn cache_row(t: u32) -> u32 {
    let id = load_pos(t);
    let last = p[10] - 1u;
    if (id.y != 0u) {
        if (id.y >= 0x80000000u) { return 0u; }
        return last;
    }
    return min(id.x, last);
}
";

/// The cache row of token `t` without position ids: the caches are per token.
const PER_TOKEN: &str = "fn cache_row(t: u32) -> u32 { return t; }\n";

/// A RotaryEmbedding node.
struct Rotary {
    op: RotaryOp,
    with_pos: Arc<Pipeline>,
    per_token: Arc<Pipeline>,
}

fn build_rotary(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let op = RotaryOp::from_node(ctx.node)?;
    let with_pos = gpu.pipeline("rotary/f32/pos", || {
        element_shader("", 4, &[("x", 4), ("cos", 4), ("sin", 4), ("pos", 8)], &format!("{ROTARY}{WITH_POSITIONS}"))
    })?;
    let per_token = gpu.pipeline("rotary/f32/token", || {
        element_shader("", 4, &[("x", 4), ("cos", 4), ("sin", 4)], &format!("{ROTARY}{PER_TOKEN}"))
    })?;
    Ok(Box::new(Rotary { op, with_pos, per_token }))
}

impl GpuOp for Rotary {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.op.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let cos = gpu_input(run, inputs, 1, at)?;
        let sin = gpu_input(run, inputs, 2, at)?;
        let pos = opt_gpu_input(run, inputs, 3, at)?;
        for (i, t) in [(0, &x), (1, &cos), (2, &sin)] {
            if t.dtype() != DataType::Float {
                return Err(Error::input(at, i, "float", t.dtype().name()));
            }
        }
        if let Some(p) = &pos {
            if p.dtype() != DataType::Int64 {
                return Err(Error::input(at, 3, "int64", p.dtype().name()));
            }
        }
        let d = self.op.dims(x.shape(), cos.shape())?;
        let max_pos = match self.op.cache_rows(&d, cos.shape(), sin.shape(), pos.as_ref().map(|p| p.shape()))? {
            CacheRows::Ids { max_position } | CacheRows::Offset { max_position } => max_position,
            CacheRows::PerToken => 0,
        };
        let y = run.alloc(DataType::Float, x.shape().to_vec())?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let params = [
            d.three_d as u32,
            u32_of(d.batch, at)?,
            u32_of(d.heads, at)?,
            u32_of(d.seq, at)?,
            u32_of(d.head, at)?,
            u32_of(d.rot / 2, at)?,
            self.op.interleaved as u32,
            u32_of(max_pos, at)?,
        ];
        let out = Elements::new(4, y.len());
        match &pos {
            Some(p) => {
                let buffers = [x.buffer, cos.buffer, sin.buffer, p.buffer, y.gpu()?];
                dispatch_elements(run, &self.with_pos, out, &params, &buffers, at)?;
            }
            None => {
                let buffers = [x.buffer, cos.buffer, sin.buffer, y.gpu()?];
                dispatch_elements(run, &self.per_token, out, &params, &buffers, at)?;
            }
        }
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
