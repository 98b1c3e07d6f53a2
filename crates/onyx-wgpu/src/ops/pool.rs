//! Pooling on f32 and f16 (computed in f32): MaxPool (without its Indices output), AveragePool
//! and LpPool over 1, 2 or 3 spatial dims with every window attribute (kernel_shape, strides,
//! pads, auto_pad, dilations, ceil_mode, count_include_pad), and GlobalAveragePool,
//! GlobalMaxPool and GlobalLpPool.
//!
//! The windowed ops run one thread per output: 1-D and 2-D windows are 3-D ones with unit
//! leading axes, and each axis's range of taps inside the input is found in O(1), so the loops
//! touch no padding. The global ops are reductions over the spatial dims (see
//! [`ReduceKernel`]), one workgroup (or a few threads) per channel plane.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ir::{AttrValue, Node};
use onyx_core::{Error, Location, Result, Value};

use super::reduce::{float_type, known_layout, x_dtype, ReduceKernel, ReduceOp};
use super::{float_inputs, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, known_dims, u32_of, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers the pooling ops.
pub(crate) fn register(r: &mut Registry) {
    r.add("MaxPool", supports_window, build_window);
    r.add("AveragePool", supports_window, build_window);
    r.add("LpPool", supports_window, build_window);
    r.add("GlobalMaxPool", supports_global, build_global);
    r.add("GlobalAveragePool", supports_global, build_global);
    r.add("GlobalLpPool", supports_global, build_global);
}

/// How a window is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Max,
    Average,
    Lp,
}

impl Mode {
    fn of(op: &str) -> Mode {
        match op {
            "MaxPool" | "GlobalMaxPool" => Mode::Max,
            "AveragePool" | "GlobalAveragePool" => Mode::Average,
            _ => Mode::Lp,
        }
    }
}

/// Most spatial dims the windowed kernel handles.
const MAX_SPATIAL: usize = 3;

/// Largest value a window attribute may hold: keeps every index computation within i32.
const MAX_ATTR: i64 = i32::MAX as i64;

/// How padding is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// One spatial axis of a window resolved against an input: output `o` and tap `k` read input
/// index `o * stride - pad_begin + k * dilation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Axis {
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    output: usize,
}

impl Axis {
    /// A size-1 axis: how 1-D and 2-D windows become 3-D.
    const UNIT: Axis = Axis { input: 1, kernel: 1, stride: 1, dilation: 1, pad_begin: 0, pad_end: 0, output: 1 };
}

/// The window attributes of a pooling node, decoded once.
#[derive(Clone, Debug)]
struct Window {
    kernel: Vec<usize>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    auto_pad: AutoPad,
    ceil_mode: bool,
}

/// An INTS attribute whose values lie in `min..=MAX_ATTR`.
fn list(node: &Node, name: &str, min: i64, at: &Location) -> Result<Option<Vec<usize>>> {
    match node.get_ints(name)? {
        None => Ok(None),
        Some(v) if v.iter().all(|&x| (min..=MAX_ATTR).contains(&x)) => {
            Ok(Some(v.iter().map(|&x| x as usize).collect()))
        }
        Some(v) => Err(Error::attribute(at, name, format!("integers from {min} up to {MAX_ATTR}"), format!("{v:?}"))),
    }
}

/// A 0/1 INT attribute.
fn flag(node: &Node, name: &str, at: &Location) -> Result<bool> {
    match node.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::attribute(at, name, "0 or 1", v.to_string())),
    }
}

impl Window {
    /// Decodes and checks the attributes (their lengths are checked against the input).
    fn from_node(node: &Node) -> Result<Window> {
        let at = node.location();
        let kernel = list(node, "kernel_shape", 1, &at)?
            .ok_or_else(|| Error::attribute(&at, "kernel_shape", "a list of kernel sizes", "no attribute"))?;
        let auto_pad = match node.string_or("auto_pad", "NOTSET")?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(Error::attribute(
                    &at,
                    "auto_pad",
                    "NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                    format!("'{other}'"),
                ))
            }
        };
        Ok(Window {
            kernel,
            strides: list(node, "strides", 1, &at)?,
            dilations: list(node, "dilations", 1, &at)?,
            pads: list(node, "pads", 0, &at)?,
            auto_pad,
            ceil_mode: flag(node, "ceil_mode", &at)?,
        })
    }

    /// A per-axis attribute, `default` when absent.
    fn per_axis(v: &Option<Vec<usize>>, name: &str, rank: usize, default: usize, at: &Location) -> Result<Vec<usize>> {
        match v {
            None => Ok(vec![default; rank]),
            Some(v) if v.len() == rank => Ok(v.clone()),
            Some(v) => {
                Err(Error::attribute(at, name, format!("{rank} values (one per spatial axis)"), format!("{v:?}")))
            }
        }
    }

    /// The window over the spatial dims of `x` (`[N, C, spatial...]`).
    fn resolve(&self, x: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let rank = self.kernel.len();
        if x.len() != rank + 2 {
            return Err(Error::input(
                at,
                0,
                format!("{rank} spatial dimensions like kernel {:?} ([N, C, spatial...])", self.kernel),
                format!("shape {x:?}"),
            ));
        }
        let strides = Self::per_axis(&self.strides, "strides", rank, 1, at)?;
        let dilations = Self::per_axis(&self.dilations, "dilations", rank, 1, at)?;
        let pads = match &self.pads {
            None => vec![0; 2 * rank],
            Some(p) if p.len() == 2 * rank => p.clone(),
            Some(p) => {
                return Err(Error::attribute(
                    at,
                    "pads",
                    format!("{} values (begin and end per axis)", 2 * rank),
                    format!("{p:?}"),
                ))
            }
        };
        (0..rank)
            .map(|i| {
                let a = Axis {
                    input: x[i + 2],
                    kernel: self.kernel[i],
                    stride: strides[i],
                    dilation: dilations[i],
                    ..Axis::UNIT
                };
                self.resolve_axis(a, (pads[i], pads[i + rank])).ok_or_else(|| {
                    Error::input(
                        at,
                        0,
                        format!(
                            "spatial axis {} of at least {} (kernel {} with dilation {}) after pads {}+{}",
                            i + 2,
                            (a.kernel - 1) * a.dilation + 1,
                            a.kernel,
                            a.dilation,
                            pads[i],
                            pads[i + rank]
                        ),
                        format!("shape {x:?}"),
                    )
                })
            })
            .collect()
    }

    /// Fills in the pads and output size of one axis; `None` when the kernel does not fit.
    fn resolve_axis(&self, mut a: Axis, pads: (usize, usize)) -> Option<Axis> {
        let eff = (a.kernel - 1) * a.dilation + 1;
        match self.auto_pad {
            AutoPad::NotSet => {
                let span = (a.input + pads.0 + pads.1).checked_sub(eff)?;
                let mut out = if self.ceil_mode { span.div_ceil(a.stride) } else { span / a.stride } + 1;
                // A last window that would start inside the end padding is dropped.
                if self.ceil_mode && (out - 1) * a.stride >= a.input + pads.0 {
                    out -= 1;
                }
                (a.pad_begin, a.pad_end, a.output) = (pads.0, pads.1, out);
            }
            AutoPad::Valid => a.output = a.input.checked_sub(eff)? / a.stride + 1,
            AutoPad::SameUpper | AutoPad::SameLower => {
                a.output = a.input.div_ceil(a.stride);
                let total = ((a.output.max(1) - 1) * a.stride + eff).saturating_sub(a.input);
                let small = total / 2;
                (a.pad_begin, a.pad_end) =
                    if self.auto_pad == AutoPad::SameUpper { (small, total - small) } else { (total - small, small) };
            }
        }
        Some(a)
    }
}

/// LpPool's `p`: an int since opset 2, a float in opset 1.
fn lp_exponent(node: &Node, at: &Location) -> Result<f32> {
    let p = match node.attr("p").map(|a| &a.value) {
        None => 2.0,
        Some(AttrValue::Int(p)) => *p as f32,
        Some(AttrValue::Float(p)) => *p,
        Some(other) => {
            return Err(Error::attribute(at, "p", "an int", format!("an attribute of type {}", other.type_name())))
        }
    };
    if p <= 0.0 || !p.is_finite() {
        return Err(Error::attribute(at, "p", "a positive number", p.to_string()));
    }
    Ok(p)
}

/// Float data, valid attributes of 1 to 3 spatial dims, and (MaxPool) no Indices output.
fn supports_window(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let node = ctx.node;
    let at = node.location();
    let window_ok = Window::from_node(node).is_ok_and(|w| (1..=MAX_SPATIAL).contains(&w.kernel.len()));
    let no_indices = node.outputs.get(1).is_none_or(|o| o.is_empty());
    let attrs_ok =
        flag(node, "count_include_pad", &at).is_ok() && (node.op_type != "LpPool" || lp_exponent(node, &at).is_ok());
    window_ok && no_indices && attrs_ok && float_inputs(ctx, gpu, 0..1)
}

/// MaxPool, AveragePool or LpPool.
struct WindowPool {
    pipeline: Arc<Pipeline>,
    window: Window,
    count_include_pad: bool,
    p: f32,
    at: Location,
}

fn build_window(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let mode = Mode::of(&node.op_type);
    let dtype = x_dtype(ctx)?;
    let ty = float_type(dtype)?;
    let window = Window::from_node(node)?;
    let planar = window.kernel.len() <= 2;
    let key = format!("pool/{mode:?}/{ty}{}", if planar { "/2d" } else { "" });
    let pipeline = gpu.pipeline(&key, || window_shader(mode, ty, enables(dtype), planar))?;
    Ok(Box::new(WindowPool {
        pipeline,
        window,
        count_include_pad: flag(node, "count_include_pad", &at)?,
        p: if mode == Mode::Lp { lp_exponent(node, &at)? } else { 2.0 },
        at,
    }))
}

/// The windowed pooling shader, one thread per output. `p`: outputs, then per axis (z, y, x)
/// input, kernel, stride, dilation, pad begin, pad end, output; then count_include_pad and
/// Lp's exponent. A `planar` shader ignores z (windows of 1 or 2 dims): on a cold NVIDIA
/// driver it compiles in 19 ms against 25, and a model's first run waits for it.
fn window_shader(mode: Mode, ty: &str, enable: &str, planar: bool) -> String {
    let (init, add, finish) = match mode {
        Mode::Max => ("-bitcast<f32>(0x7f800000u)", "select(acc, v, v > acc)", "acc"),
        Mode::Average => ("0.0", "acc + v", "acc / f32(select(valid, padded, p[22] != 0u))"),
        Mode::Lp => (
            "0.0",
            "acc + select(pow(abs(v), pe), v * v, pe == 2.0)",
            "select(pow(acc, 1.0 / pe), sqrt(acc), pe == 2.0)",
        ),
    };
    let (depth, depth_counts) = if planar {
        ("    {\n        let z = r * iy;", "")
    } else {
        (
            "    let tz = taps(0u, r % oz);
    let plane = (r / oz) * iz;
    for (var kz = tz.k0; kz < tz.k1; kz++) {
        let z = (plane + index(tz, kz)) * iy;",
            "    valid *= tz.k1 - tz.k0;\n    padded *= tz.padded;",
        )
    };
    format!(
        "{enable}{FLAT_INDEX}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read_write> y: array<{ty}>;
struct Taps {{ k0: u32, k1: u32, padded: u32, base: i32, dilation: i32 }}
fn ceil_div_clamped(a: i32, b: i32, m: u32) -> u32 {{
    if (a <= 0) {{ return 0u; }}
    return min(u32((a + b - 1) / b), m);
}}
fn taps(axis: u32, o: u32) -> Taps {{
    let at = 1u + 7u * axis;
    let input = i32(p[at]);
    let kernel = p[at + 1u];
    let dilation = i32(p[at + 3u]);
    let base = i32(o) * i32(p[at + 2u]) - i32(p[at + 4u]);
    let k0 = ceil_div_clamped(-base, dilation, kernel);
    let k1 = max(ceil_div_clamped(input - base, dilation, kernel), k0);
    let padded = ceil_div_clamped(input + i32(p[at + 5u]) - base, dilation, kernel);
    return Taps(k0, k1, padded, base, dilation);
}}
fn index(t: Taps, k: u32) -> u32 {{ return u32(t.base + i32(k) * t.dilation); }}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {{ return; }}
    let iz = p[1];
    let iy = p[8];
    let ix = p[15];
    let oz = p[7];
    let oy = p[14];
    let ox = p[21];
    let pe = bitcast<f32>(p[23]);
    var r = i;
    let tx = taps(2u, r % ox);
    r = r / ox;
    let ty = taps(1u, r % oy);
    r = r / oy;
    var acc = {init};
{depth}
        for (var ky = ty.k0; ky < ty.k1; ky++) {{
            let row = (z + index(ty, ky)) * ix;
            for (var kx = tx.k0; kx < tx.k1; kx++) {{
                let v = f32(x[row + index(tx, kx)]);
                acc = {add};
            }}
        }}
    }}
    var valid = (ty.k1 - ty.k0) * (tx.k1 - tx.k0);
    var padded = ty.padded * tx.padded;
{depth_counts}
    y[i] = {ty}({finish});
}}
"
    )
}

impl GpuOp for WindowPool {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let axes = self.window.resolve(x.shape(), at)?;
        let mut shape = x.shape()[..2].to_vec();
        shape.extend(axes.iter().map(|a| a.output));
        let mut three = [Axis::UNIT; MAX_SPATIAL];
        three[MAX_SPATIAL - axes.len()..].copy_from_slice(&axes);
        let y = run.alloc(x.dtype(), shape)?;
        u32_of(x.len(), at)?;
        let mut p = vec![u32_of(y.len(), at)?];
        for a in three {
            for v in [a.input, a.kernel, a.stride, a.dilation, a.pad_begin, a.pad_end, a.output] {
                p.push(u32_of(v, at)?);
            }
        }
        p.push(self.count_include_pad as u32);
        p.push(self.p.to_bits());
        run.dispatch(&self.pipeline, &p, &[x.buffer, y.gpu()?], grid(y.len()))?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// Float data (and a valid `p` for GlobalLpPool).
fn supports_global(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let node = ctx.node;
    let p_ok = node.op_type != "GlobalLpPool" || lp_exponent(node, &node.location()).is_ok();
    p_ok && float_inputs(ctx, gpu, 0..1)
}

/// GlobalMaxPool, GlobalAveragePool or GlobalLpPool: a reduction over the spatial dims.
struct GlobalPool {
    kernel: ReduceKernel,
    p: f32,
    at: Location,
}

fn build_global(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let (op, p) = match Mode::of(&node.op_type) {
        // As the CPU's max pooling, NaN never wins.
        Mode::Max => (ReduceOp::MaxSkipNan, 2.0),
        Mode::Average => (ReduceOp::Average, 2.0),
        Mode::Lp => match lp_exponent(node, &at)? {
            2.0 => (ReduceOp::L2, 2.0),
            p => (ReduceOp::Lp, p),
        },
    };
    let known = known_dims(ctx, 0).filter(|d| d.len() >= 2).and_then(|dims| {
        let spatial: Vec<bool> = (0..dims.len()).map(|d| d >= 2).collect();
        known_layout(&dims, &spatial)
    });
    Ok(Box::new(GlobalPool { kernel: ReduceKernel::new(gpu, op, x_dtype(ctx)?, known)?, p, at }))
}

impl GpuOp for GlobalPool {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let rank = x.shape().len();
        if rank < 2 {
            return Err(Error::input(
                &self.at,
                0,
                "a tensor of rank 2 or more ([N, C, spatial...])",
                format!("shape {:?}", x.shape()),
            ));
        }
        let mask: Vec<bool> = (0..rank).map(|d| d >= 2).collect();
        let mut shape = x.shape()[..2].to_vec();
        shape.resize(rank, 1);
        let y = self.kernel.record(run, x, &mask, shape, self.p, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, ints, rand, string, t, Case};
    use onyx_core::ir::Attribute;

    /// Runs MaxPool, AveragePool (both count_include_pad values) and LpPool on `x` with
    /// `attrs`.
    fn all_modes(x: &onyx_core::Tensor, attrs: Vec<Attribute>) {
        Case::new("MaxPool", vec![x.clone()]).attrs(attrs.clone()).check(0.0, 0.0);
        for cip in [0, 1] {
            let mut a = attrs.clone();
            a.push(int("count_include_pad", cip));
            Case::new("AveragePool", vec![x.clone()]).attrs(a).check(1e-5, 1e-6);
        }
        Case::new("LpPool", vec![x.clone()]).attrs(attrs.clone()).check(1e-5, 1e-6);
        let mut a = attrs;
        a.push(int("p", 3));
        Case::new("LpPool", vec![x.clone()]).attrs(a).check(1e-4, 1e-5);
    }

    #[test]
    fn windowed_pools_match_the_cpu() {
        let x2 = rand(&[2, 3, 13, 11], -3.0, 3.0, 1);
        all_modes(&x2, vec![ints("kernel_shape", &[3, 3])]);
        all_modes(&x2, vec![ints("kernel_shape", &[3, 2]), ints("strides", &[2, 3]), ints("pads", &[1, 0, 2, 1])]);
        all_modes(
            &x2,
            vec![
                ints("kernel_shape", &[3, 3]),
                ints("strides", &[2, 2]),
                ints("pads", &[1, 1, 1, 1]),
                int("ceil_mode", 1),
            ],
        );
        all_modes(&x2, vec![ints("kernel_shape", &[2, 3]), ints("dilations", &[2, 2]), ints("pads", &[2, 1, 0, 2])]);
        for pad in ["SAME_UPPER", "SAME_LOWER", "VALID"] {
            all_modes(&x2, vec![ints("kernel_shape", &[4, 3]), ints("strides", &[2, 2]), string("auto_pad", pad)]);
        }
        let x1 = rand(&[2, 5, 257], -3.0, 3.0, 2);
        all_modes(&x1, vec![ints("kernel_shape", &[5]), ints("strides", &[3]), ints("pads", &[2, 2])]);
        let x3 = rand(&[1, 2, 7, 6, 5], -3.0, 3.0, 3);
        all_modes(
            &x3,
            vec![ints("kernel_shape", &[3, 2, 3]), ints("strides", &[2, 1, 2]), ints("pads", &[1, 0, 1, 1, 1, 0])],
        );
        // ResNet's stem pool, a window larger than the input, a 1x1 plane.
        let stem = rand(&[1, 8, 112, 112], -3.0, 3.0, 4);
        all_modes(&stem, vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])]);
        let small = rand(&[1, 1, 2, 2], -3.0, 3.0, 5);
        all_modes(&small, vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])]);
        all_modes(&rand(&[3, 2, 1, 1], -3.0, 3.0, 6), vec![ints("kernel_shape", &[1, 1])]);
    }

    #[test]
    fn global_pools_match_the_cpu() {
        for (i, shape) in [&[2, 3, 7, 7][..], &[1, 5, 1], &[2, 4, 16, 16], &[1, 3, 33, 35], &[2, 2, 3, 4, 5], &[3, 4]]
            .iter()
            .enumerate()
        {
            let x = rand(shape, -3.0, 3.0, 20 + i as u64);
            Case::new("GlobalAveragePool", vec![x.clone()]).check(1e-5, 1e-6);
            Case::new("GlobalMaxPool", vec![x.clone()]).check(0.0, 0.0);
            Case::new("GlobalLpPool", vec![x.clone()]).check(1e-5, 1e-6);
            Case::new("GlobalLpPool", vec![x.clone()]).attrs(vec![int("p", 3)]).check(1e-4, 1e-5);
        }
        let nan = t(&[1, 2, 2, 2], vec![f32::NAN, 1.0, 2.0, -1.0, 3.0, f32::NAN, f32::NAN, f32::NAN]);
        Case::new("GlobalMaxPool", vec![nan.clone()]).check(0.0, 0.0);
        Case::new("MaxPool", vec![nan]).attrs(vec![ints("kernel_shape", &[2, 1])]).check(0.0, 0.0);
    }

    #[test]
    fn indices_and_bad_windows_are_declined_or_named() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let x = rand(&[1, 2, 5, 5], 0.0, 1.0, 1);
        let with_indices = Case::new("MaxPool", vec![x.clone()]).attrs(vec![ints("kernel_shape", &[2, 2])]).outputs(2);
        assert!(with_indices.try_run_gpu(&gpu).is_err());
        let too_big = Case::new("AveragePool", vec![x]).attrs(vec![ints("kernel_shape", &[7, 7])]);
        let e = too_big.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("AveragePool") && e.contains("input 0"), "{e}");
    }
}
