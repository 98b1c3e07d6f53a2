//! TopK on the GPU in one dispatch: each input element counts the elements of its line that
//! come before it in the order (larger first, or smaller; ties by lower index, NaN above
//! everything as the CPU EP's total order has it) and, when that rank is below k, writes itself
//! and its index at that rank. The output is sorted whatever `sorted` says (ONNX allows it).
//!
//! The count costs up to one pass over the line per element (it stops once the rank reaches
//! k): fine for the short lines and small k of the models this EP runs; long lines with a large
//! k would want a sorting network.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::normalize_axis;
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, grid, host_ints, u32_of, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers TopK.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("TopK", supports_topk, build_topk, &[1]);
}

/// WGSL `key(s) -> vec2<u32>`: element `s` of `x` mapped to a (high, low) pair whose
/// unsigned lexicographic order is the dtype's total order (NaNs equal and largest, -0 = +0),
/// and the element's size in words.
fn key_fn(dtype: DataType) -> Option<(&'static str, u32)> {
    Some(match dtype {
        DataType::Float => (
            "fn key(s: u32) -> vec2<u32> {
    var b = x[s];
    if ((b & 0x7fffffffu) > 0x7f800000u) { return vec2<u32>(0xffffffffu, 0u); }
    if ((b & 0x7fffffffu) == 0u) { b = 0u; }
    return vec2<u32>(select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u), 0u);
}
",
            1,
        ),
        DataType::Int32 => ("fn key(s: u32) -> vec2<u32> { return vec2<u32>(x[s] ^ 0x80000000u, 0u); }\n", 1),
        DataType::Uint32 => ("fn key(s: u32) -> vec2<u32> { return vec2<u32>(x[s], 0u); }\n", 1),
        DataType::Int64 => {
            ("fn key(s: u32) -> vec2<u32> { return vec2<u32>(x[2u * s + 1u] ^ 0x80000000u, x[2u * s]); }\n", 2)
        }
        DataType::Uint64 => ("fn key(s: u32) -> vec2<u32> { return vec2<u32>(x[2u * s + 1u], x[2u * s]); }\n", 2),
        _ => return None,
    })
}

/// f32, int32, uint32, int64 or uint64 data.
fn supports_topk(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0).and_then(key_fn).is_some()
}

/// The kernel: one invocation per input element. Parameters: elements, line length n, inner,
/// k, largest.
const TOPK: &str = "
fn less(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x < b.x || (a.x == b.x && a.y < b.y); }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat_index(gid, nwg);
    if (e >= p[0]) { return; }
    let n = p[1];
    let inner = p[2];
    let k = p[3];
    let largest = p[4] == 1u;
    let r = e % inner;
    let t = e / inner;
    let a = t % n;
    let o = t / n;
    let base = o * n * inner + r;
    let ka = key(e);
    var rank = 0u;
    for (var b = 0u; b < n && rank < k; b++) {
        let kb = key(base + b * inner);
        let before = select(less(kb, ka), less(ka, kb), largest) || (b < a && kb.x == ka.x && kb.y == ka.y);
        if (before) { rank++; }
    }
    if (rank >= k) { return; }
    let out = (o * k + rank) * inner + r;
    for (var w = 0u; w < WORDS; w++) { vals[out * WORDS + w] = x[e * WORDS + w]; }
    idx[2u * out] = a;
    idx[2u * out + 1u] = 0u;
}
";

/// The WGSL source of the kernel for `dtype`.
fn source(dtype: DataType) -> Option<String> {
    let (key, words) = key_fn(dtype)?;
    let mut s = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    s += "@group(0) @binding(1) var<storage, read> x: array<u32>;\n";
    s += "@group(0) @binding(2) var<storage, read_write> vals: array<u32>;\n";
    s += "@group(0) @binding(3) var<storage, read_write> idx: array<u32>;\n";
    s += FLAT_INDEX;
    s += &format!("const WORDS: u32 = {words}u;\n");
    s += key;
    s += TOPK;
    Some(s)
}

/// TopK: the k largest (or smallest) values along `axis` and their int64 indices.
struct TopK {
    k_attr: Option<i64>,
    axis: i64,
    largest: bool,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_topk(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} untyped data")))?;
    let code = source(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype} data")))?;
    let pipeline = gpu.pipeline(&format!("topk/{}", dtype.name()), || code)?;
    let k_attr = if ctx.since_version < 10 {
        Some(ctx.node.get_int("k")?.ok_or_else(|| Error::attribute(&at, "k", "an int", "nothing"))?)
    } else {
        None
    };
    let largest = ctx.since_version < 11 || ctx.node.int_or("largest", 1)? != 0;
    Ok(Box::new(TopK { k_attr, axis: ctx.node.int_or("axis", -1)?, largest, pipeline, at }))
}

impl TopK {
    /// k from the attribute (before opset 10) or input 1.
    fn k(&self, inputs: &[Option<ValueRef<'_>>]) -> Result<i64> {
        if let Some(k) = self.k_attr {
            return Ok(k);
        }
        match host_ints(inputs, 1, &self.at)?.as_deref() {
            Some(&[k]) => Ok(k),
            other => Err(Error::input(&self.at, 1, "a 1-element int64 tensor k", format!("{other:?}"))),
        }
    }
}

impl GpuOp for TopK {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        if key_fn(x.dtype()).is_none() {
            return Err(Error::input(at, 0, "f32, int32, uint32, int64 or uint64 data", x.dtype().name()));
        }
        if x.shape().is_empty() {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, x.shape().len(), at)?;
        let n = x.shape()[axis];
        let k = self.k(inputs)?;
        if k < 0 || k as u64 > n as u64 {
            return Err(Error::node(at, format!("k = {k} is outside [0, {n}] (axis {axis} of {:?})", x.shape())));
        }
        let mut shape = x.shape().to_vec();
        shape[axis] = k as usize;
        let vals = run.alloc(x.dtype(), shape.clone())?;
        let idx = run.alloc(DataType::Int64, shape)?;
        if !vals.is_empty() {
            let inner: usize = x.shape()[axis + 1..].iter().product();
            let words = key_fn(x.dtype()).map_or(1, |(_, w)| w as usize);
            u32_of(x.len().saturating_mul(words).max(idx.len() * 2), at)?;
            let params = [
                u32_of(x.len(), at)?,
                u32_of(n, at)?,
                u32_of(inner, at)?,
                u32_of(k as usize, at)?,
                u32::from(self.largest),
            ];
            run.dispatch(&self.pipeline, &params, &[x.buffer, vals.gpu()?, idx.gpu()?], grid(x.len()))?;
        }
        Ok(vec![Value::Tensor(vals), Value::Tensor(idx)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::DataType;

    use super::super::layout::tests::{check_exact, random};
    use crate::testkit::{int, t, Case};

    #[test]
    fn topk_matches_the_cpu() {
        let shapes: &[(&[usize], i64)] =
            &[(&[37], 0), (&[5, 9], -1), (&[5, 9], 0), (&[3, 7, 5], 1), (&[2, 1, 3], 1), (&[4, 0], 0)];
        for (s, (shape, axis)) in shapes.iter().enumerate() {
            for dtype in [DataType::Float, DataType::Int32, DataType::Uint32, DataType::Int64, DataType::Uint64] {
                let mut x = random(dtype, shape, 5 + s as u64);
                if s % 2 == 0 && dtype == DataType::Float {
                    // Ties, signed zeros and NaNs.
                    let n: usize = shape.iter().product();
                    let v: Vec<f32> =
                        (0..n).map(|i| [1.0, -0.0, 0.0, f32::NAN, 2.5, -3.0][i % 6] * ((i % 4) as f32)).collect();
                    x = t(shape, v);
                }
                let n = shape[if *axis < 0 { shape.len() - 1 } else { *axis as usize }] as i64;
                for k in [0, 1, n / 2, n] {
                    for largest in [0, 1] {
                        let attrs = vec![int("axis", *axis), int("largest", largest), int("sorted", 1)];
                        let case = Case::new("TopK", vec![x.clone(), t(&[1], vec![k])]).attrs(attrs).outputs(2);
                        check_exact(&case.constants(&[1]));
                    }
                }
                let case =
                    Case::new("TopK", vec![x.clone()]).attrs(vec![int("axis", *axis), int("k", n.min(3))]).outputs(2);
                check_exact(&case.opset(1));
            }
        }
    }
}
