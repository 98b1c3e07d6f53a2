//! GridSample on f32 data, 1 to 3 spatial dims, every mode (nearest, linear, cubic) and
//! padding (zeros, border, reflection), one dispatch: each output element computes the taps
//! of its grid point along each dim and sums the weighted input elements in the order the CPU
//! EP does.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers GridSample.
pub(crate) fn register(r: &mut Registry) {
    r.add("GridSample", supports_grid_sample, build_grid_sample);
}

/// The interpolation: 0 nearest, 1 linear, 2 cubic; `None` for an unknown mode.
fn mode(ctx: &NodeContext<'_>) -> Option<u32> {
    let default = if ctx.since_version >= 20 { "linear" } else { "bilinear" };
    match ctx.node.string_or("mode", default).ok()?.as_str() {
        "nearest" => Some(0),
        "linear" | "bilinear" => Some(1),
        "cubic" | "bicubic" => Some(2),
        _ => None,
    }
}

/// The padding: 0 zeros, 1 border, 2 reflection; `None` for an unknown one.
fn padding(ctx: &NodeContext<'_>) -> Option<u32> {
    match ctx.node.string_or("padding_mode", "zeros").ok()?.as_str() {
        "zeros" => Some(0),
        "border" => Some(1),
        "reflection" => Some(2),
        _ => None,
    }
}

/// f32 data and grid, known mode and padding.
fn supports_grid_sample(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    input_dtype(ctx, 0) == Some(DataType::Float)
        && input_dtype(ctx, 1) == Some(DataType::Float)
        && mode(ctx).is_some()
        && padding(ctx).is_some()
        && ctx.node.int_or("align_corners", 0).is_ok()
}

/// The kernel's `fetch` (MODE, PAD and ALIGN are constants of the pipeline). Parameters:
/// spatial rank r, channels, output points per channel, then the r input spatial dims.
const GRID_SAMPLE: &str = "
var<private> tap_i: array<array<i32, 4>, 3>;
var<private> tap_w: array<array<f32, 4>, 3>;

fn reflect(x: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if (range <= 0.0) { return lo; }
    if (x < lo) {
        let d = lo - x;
        let n = floor(d / range);
        let r = d - n * range;
        if (n % 2.0 == 0.0) { return lo + r; }
        return hi - r;
    }
    if (x > hi) {
        let d = x - hi;
        let n = floor(d / range);
        let r = d - n * range;
        if (n % 2.0 == 0.0) { return hi - r; }
        return lo + r;
    }
    return x;
}

// The element index of whole position i along a dim of length n, -1 outside (zeros padding).
fn index(i: f32, nf: f32, lo: f32, hi: f32) -> i32 {
    if (PAD == 0u) {
        if (i >= 0.0 && i < nf) { return i32(i); }
        return -1;
    }
    if (PAD == 1u) { return i32(clamp(i, 0.0, nf - 1.0)); }
    return i32(clamp(trunc(reflect(i, lo, hi)), 0.0, nf - 1.0));
}

fn far(x: f32) -> f32 {
    let a = -0.75;
    return ((a * (x + 1.0) - 5.0 * a) * (x + 1.0) + 8.0 * a) * (x + 1.0) - 4.0 * a;
}

fn near(x: f32) -> f32 {
    let a = -0.75;
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
}

// Fills the taps of dim d for grid coordinate g over an input dim of len elements.
fn taps(d: u32, g: f32, len: u32) {
    let n = f32(len);
    var lo = -0.5;
    var hi = n - 0.5;
    var x = ((g + 1.0) * n - 1.0) / 2.0;
    if (ALIGN) {
        lo = 0.0;
        hi = n - 1.0;
        x = (g + 1.0) / 2.0 * (n - 1.0);
    }
    if (MODE == 0u) { x = round(x); }
    if (x < lo || x > hi) {
        if (PAD == 1u) {
            if (x < 0.0) { x = 0.0; } else if (x > n - 1.0) { x = n - 1.0; }
        } else if (PAD == 2u) {
            x = reflect(x, lo, hi);
        }
    }
    if (MODE == 0u) {
        tap_i[d][0] = index(x, n, lo, hi);
        tap_w[d][0] = 1.0;
        return;
    }
    let x0 = floor(x);
    let t = x - x0;
    if (MODE == 1u) {
        tap_i[d][0] = index(x0, n, lo, hi);
        tap_w[d][0] = 1.0 - t;
        tap_i[d][1] = index(x0 + 1.0, n, lo, hi);
        tap_w[d][1] = t;
        return;
    }
    let u = 1.0 - t;
    tap_w[d][0] = far(t);
    tap_w[d][1] = near(t);
    tap_w[d][2] = near(u);
    let v = 2.0 - t;
    let a = -0.75;
    tap_w[d][3] = ((a * v - 5.0 * a) * v + 8.0 * a) * v - 4.0 * a;
    for (var j = 0u; j < 4u; j++) {
        tap_i[d][j] = index(x0 + f32(j) - 1.0, n, lo, hi);
    }
}

fn fetch(e: u32) -> E {
    let r = p[3];
    let points = p[5];
    let pnt = e % points;
    let bc = e / points;
    let b = bc / p[4];
    var plane = 1u;
    for (var d = 0u; d < r; d++) {
        taps(d, bitcast<f32>(load_g((b * points + pnt) * r + (r - 1u - d))), p[6u + d]);
        plane *= p[6u + d];
    }
    let base = bc * plane;
    let nt = select(select(4u, 2u, MODE == 1u), 1u, MODE == 0u);
    var total = 1u;
    for (var d = 0u; d < r; d++) { total *= nt; }
    var acc = 0.0;
    for (var c = 0u; c < total; c++) {
        var ks = array<u32, 3>(0u, 0u, 0u);
        var rem = c;
        for (var d = r; d > 0u; d--) {
            ks[d - 1u] = rem % nt;
            rem /= nt;
        }
        var w = 1.0;
        var off = 0u;
        var stride = plane;
        var valid = true;
        for (var d = 0u; d < r; d++) {
            stride /= p[6u + d];
            let k = ks[d];
            w = w * tap_w[d][k];
            let i = tap_i[d][k];
            if (i < 0) { valid = false; } else { off += u32(i) * stride; }
        }
        if (valid) { acc = acc + w * bitcast<f32>(load_x(base + off)); }
    }
    return bitcast<u32>(acc);
}
";

/// GridSample: samples `X [N, C, spatial...]` at the points of `grid [N, out..., r]`.
struct GridSample {
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_grid_sample(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let (Some(mode), Some(pad)) = (mode(ctx), padding(ctx)) else {
        return Err(Error::attribute(&at, "mode", "a known mode and padding_mode", "another value"));
    };
    let align = ctx.node.int_or("align_corners", 0)? != 0;
    let head = format!("const MODE: u32 = {mode}u;\nconst PAD: u32 = {pad}u;\nconst ALIGN: bool = {align};\n");
    let code = format!("{head}{GRID_SAMPLE}");
    let key = format!("grid_sample/{mode}/{pad}/{align}");
    let pipeline = gpu.pipeline(&key, || element_shader("", 4, &[("x", 4), ("g", 4)], &code))?;
    Ok(Box::new(GridSample { pipeline, at }))
}

impl GpuOp for GridSample {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let g = gpu_input(run, inputs, 1, at)?;
        for (i, t) in [(0, &x), (1, &g)] {
            if t.dtype() != DataType::Float {
                return Err(Error::input(at, i, "float", t.dtype().name()));
            }
        }
        let xs = x.shape();
        if !(3..=5).contains(&xs.len()) {
            return Err(Error::input(at, 0, "a tensor [N, C, spatial...] with 1 to 3 spatial dims", format!("{xs:?}")));
        }
        let r = xs.len() - 2;
        let gs = g.shape();
        if gs.len() != xs.len() || gs[0] != xs[0] || gs[gs.len() - 1] != r {
            return Err(Error::input(
                at,
                1,
                format!("a grid of shape [{}, out spatial..., {r}]", xs[0]),
                format!("{gs:?}"),
            ));
        }
        let out_spatial = &gs[1..gs.len() - 1];
        let points: usize = out_spatial.iter().product();
        let mut shape = vec![xs[0], xs[1]];
        shape.extend_from_slice(out_spatial);
        let y = run.alloc(DataType::Float, shape)?;
        if !y.is_empty() {
            if x.len() == 0 {
                return Err(Error::input(at, 0, "a non-empty input to sample", format!("{xs:?}")));
            }
            let mut params = vec![r as u32, u32_of(xs[1], at)?, u32_of(points, at)?];
            for &d in &xs[2..] {
                params.push(u32_of(d, at)?);
            }
            u32_of(g.len(), at)?;
            dispatch_elements(
                run,
                &self.pipeline,
                Elements::new(4, y.len()),
                &params,
                &[x.buffer, g.buffer, y.gpu()?],
                at,
            )?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, rand, string, Case};

    #[test]
    fn grid_sample_matches_the_cpu() {
        let layouts: &[(&[usize], &[usize])] = &[
            (&[2, 3, 5, 7], &[2, 4, 6, 2]),
            (&[1, 2, 1, 4], &[1, 3, 5, 2]),
            (&[1, 2, 3, 4, 5], &[1, 2, 3, 4, 3]),
            (&[2, 3, 9], &[2, 5, 1]),
        ];
        for (l, (xs, gs)) in layouts.iter().enumerate() {
            let x = rand(xs, -2.0, 2.0, 10 + l as u64);
            let g = rand(gs, -1.4, 1.4, 20 + l as u64);
            for mode in ["nearest", "linear", "cubic"] {
                for pad in ["zeros", "border", "reflection"] {
                    for align in [0, 1] {
                        let attrs =
                            vec![string("mode", mode), string("padding_mode", pad), int("align_corners", align)];
                        Case::new("GridSample", vec![x.clone(), g.clone()]).attrs(attrs).opset(22).check(1e-4, 1e-5);
                    }
                }
            }
        }
    }
}
