//! DynamicQuantizeLinear on f32: one single-workgroup dispatch finds the range of the input
//! (always including 0; any NaN makes it NaN, as in the CPU EP) and writes the scale and the
//! uint8 zero point, then one elementwise dispatch quantizes with them. No host round trip.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers DynamicQuantizeLinear.
pub(crate) fn register(r: &mut Registry) {
    r.add("DynamicQuantizeLinear", supports_dynamic, build_dynamic);
}

/// f32 input.
fn supports_dynamic(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float)
}

/// The range pass: 256 threads reduce min/max (from 0) and a NaN flag, then thread 0 writes
/// `scale = (max - min or 1) / 255` and `zp = round_half_even(clamp(-min / scale, 0, 255))`.
const RANGE: &str = "
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> s: array<u32>;
@group(0) @binding(3) var<storage, read_write> z: array<u32>;
var<workgroup> lo: array<f32, 256>;
var<workgroup> hi: array<f32, 256>;
var<workgroup> nan: array<u32, 256>;

// a / b correctly rounded like the CPU's: one residual step (WGSL's division may be 2.5 ulp off).
fn div(a: f32, b: f32) -> f32 {
    let q = a / b;
    if (b != 0.0 && abs(q) < 1e30) { return q + fma(-q, b, a) / b; }
    return q;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) l: u32) {
    var a = 0.0;
    var b = 0.0;
    var nn = 0u;
    for (var i = l; i < p[0]; i += 256u) {
        let bits = x[i];
        if ((bits & 0x7fffffffu) > 0x7f800000u) {
            nn = 1u;
        } else {
            let v = bitcast<f32>(bits);
            a = min(a, v);
            b = max(b, v);
        }
    }
    lo[l] = a;
    hi[l] = b;
    nan[l] = nn;
    workgroupBarrier();
    for (var w = 128u; w > 0u; w >>= 1u) {
        if (l < w) {
            lo[l] = min(lo[l], lo[l + w]);
            hi[l] = max(hi[l], hi[l + w]);
            nan[l] |= nan[l + w];
        }
        workgroupBarrier();
    }
    if (l == 0u) {
        if (nan[0] != 0u) {
            s[0] = 0x7fc00000u;
            z[0] = 0u;
            return;
        }
        let mn = lo[0];
        let mx = hi[0];
        var range = mx - mn;
        if (mx == mn) { range = 1.0; }
        let scale = div(range, 255.0);
        let q = 0.0 - div(mn, scale);
        var zp = 0.0;
        if ((bitcast<u32>(q) & 0x7fffffffu) <= 0x7f800000u) { zp = round(clamp(q, 0.0, 255.0)); }
        s[0] = bitcast<u32>(scale);
        z[0] = u32(zp);
    }
}
";

/// The quantize pass's `fetch`: `clamp(round_half_even(x / scale) + zp, 0, 255)`, NaN to 0.
const QUANT: &str = "
fn fetch(e: u32) -> E {
    let x = bitcast<f32>(load_x(e));
    let s = bitcast<f32>(load_s(0u));
    var q = x / s;
    // One residual step makes the quotient correctly rounded where division is not.
    if (s != 0.0 && abs(q) < 1e30) { q = q + fma(-q, s, x) / s; }
    var r = round(q);
    if ((bitcast<u32>(r) & 0x7fffffffu) > 0x7f800000u) { return 0u; }
    r = clamp(r + f32(load_z(0u) & 0xffu), 0.0, 255.0);
    return u32(r);
}
";

/// DynamicQuantizeLinear: y (uint8), y_scale (f32 scalar), y_zero_point (uint8 scalar).
struct DynamicQuantize {
    range: Arc<Pipeline>,
    quant: Arc<Pipeline>,
    at: Location,
}

fn build_dynamic(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let range = gpu.pipeline("dynamic_quantize/range", || RANGE.to_string())?;
    let quant =
        gpu.pipeline("dynamic_quantize/quant", || element_shader("", 1, &[("x", 4), ("s", 4), ("z", 4)], QUANT))?;
    Ok(Box::new(DynamicQuantize { range, quant, at: ctx.node.location() }))
}

impl GpuOp for DynamicQuantize {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        if x.dtype() != DataType::Float {
            return Err(Error::input(at, 0, "float", x.dtype().name()));
        }
        let scale = run.alloc(DataType::Float, vec![])?;
        let zp = run.alloc(DataType::Uint8, vec![])?;
        let y = run.alloc(DataType::Uint8, x.shape().to_vec())?;
        run.dispatch(&self.range, &[u32_of(x.len(), at)?], &[x.buffer, scale.gpu()?, zp.gpu()?], [1, 1, 1])?;
        if !y.is_empty() {
            let bufs = [x.buffer, scale.gpu()?, zp.gpu()?, y.gpu()?];
            dispatch_elements(run, &self.quant, Elements::new(1, y.len()), &[], &bufs, at)?;
        }
        Ok(vec![Value::Tensor(y), Value::Tensor(scale), Value::Tensor(zp)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{rand, t, Case};

    #[test]
    fn dynamic_quantize_matches_the_cpu() {
        let cases = [
            rand(&[7], -3.0, 5.0, 1),
            rand(&[3, 37, 5], 0.5, 9.0, 2),
            rand(&[1027], -9.0, -0.5, 3),
            rand(&[2, 0], -1.0, 1.0, 4),
            t(&[4], vec![0f32, 0.0, 0.0, 0.0]),
            t(&[5], vec![1f32, f32::NAN, -2.0, 3.0, 0.0]),
            t(&[3], vec![f32::INFINITY, 1.0, -1.0]),
        ];
        let Some(gpu) = crate::testkit::provider() else { return };
        for x in cases {
            let case = Case::new("DynamicQuantizeLinear", vec![x.clone()]).opset(11).outputs(3);
            let (want, got) = (case.run_cpu(), case.try_run_gpu(&gpu).unwrap());
            // A GPU may round the scale one ulp away from the CPU (WGSL's division is within
            // 2.5 ulp and Vulkan may split the fma of the residual step), and then a quantized
            // value lands one step away.
            let (w, g) = (want[1].as_slice::<f32>().unwrap()[0], got[1].as_slice::<f32>().unwrap()[0]);
            assert!(
                w.to_bits().abs_diff(g.to_bits()) <= 1 || (w.is_nan() && g.is_nan()),
                "{x:?}: scale {g}, expected {w}"
            );
            for o in [0, 2] {
                assert_eq!(got[o].shape(), want[o].shape(), "{x:?}: output {o}");
                let (w, g) = (want[o].as_slice::<u8>().unwrap(), got[o].as_slice::<u8>().unwrap());
                assert!(
                    w.iter().zip(g).all(|(a, b)| a.abs_diff(*b) <= 1),
                    "{x:?}: output {o} is {g:?}, expected {w:?}"
                );
            }
        }
    }
}
