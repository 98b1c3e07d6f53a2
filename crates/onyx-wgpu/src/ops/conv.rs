//! Conv and ConvTranspose over 1, 2 or 3 spatial dimensions (1-D and 2-D windows become 3-D
//! with unit axes in front, as in the CPU EP).
//!
//! - Conv is an implicit GEMM on the tiled kernel of `matmul.rs`: per group, M = output
//!   channels, N = batch x output positions, K = input channels x kernel taps; the B tile is
//!   gathered from the input windows on the fly (no im2col buffer). 1x1 stride-1 unpadded
//!   convolutions read the input as a plain matrix. Convolutions with few output channels per
//!   group (depthwise: one input channel per group) use a direct kernel, one thread per output.
//! - ConvTranspose is the same implicit GEMM in gather form: B(k, n) is the input element that
//!   tap k carries to output position n, or 0 where the strides skip it.
//!
//! The kernel shape is baked into the shaders (divisions by constants); pipelines are made
//! when the node is built if the weights' shape is known then. Every shader ends in
//! `act(v)`: an activation fused later is a WGSL expression there (and a word in the key).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::ir::Node;
use onyx_core::types::{Dim, ValueType};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::matmul::{dispatch_z, fill, storage_type, tiled_shader, Walk, TILE};
use super::{float_inputs, input_dtype, Registry};
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, opt_gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

pub(crate) fn register(r: &mut Registry) {
    r.add("Conv", supports_conv, build_conv);
    r.add("ConvTranspose", supports_conv, build_conv_transpose);
}

/// Most spatial dimensions the kernels handle.
const MAX_SPATIAL: usize = 3;

/// Largest value a window attribute may hold (as the CPU EP).
const MAX_ATTR: i64 = i32::MAX as i64;

/// Output channels per group below which the direct kernel beats the implicit GEMM (whose
/// 64-row tiles would be mostly empty).
const DIRECT_BELOW: usize = 8;

/// Which of the two ops a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Conv,
    Transpose,
}

/// How padding is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// One spatial axis resolved against an input: output position `o` and tap `k` read input
/// index `o * stride - pad + k * dilation` (for ConvTranspose: input `i` and tap `k` write
/// output `i * stride - pad + k * dilation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Axis {
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    /// Padding before the first element (negative for ConvTranspose with a large output_shape).
    pad: isize,
    output: usize,
}

impl Axis {
    /// A size-1 axis that changes nothing.
    const UNIT: Axis = Axis { input: 1, kernel: 1, stride: 1, dilation: 1, pad: 0, output: 1 };

    /// Kernel extent with dilation.
    fn dilated_kernel(&self) -> usize {
        (self.kernel - 1) * self.dilation + 1
    }
}

/// The window attributes of a node, decoded once.
#[derive(Clone, Debug)]
struct Window {
    kernel_shape: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    auto_pad: AutoPad,
    /// ConvTranspose only.
    output_padding: Option<Vec<usize>>,
    /// ConvTranspose only.
    output_shape: Option<Vec<usize>>,
}

/// An INTS attribute whose values lie in `min..=MAX_ATTR`.
fn ints_attr(node: &Node, name: &str, min: i64, at: &Location) -> Result<Option<Vec<usize>>> {
    match node.get_ints(name)? {
        None => Ok(None),
        Some(v) if v.iter().all(|&x| (min..=MAX_ATTR).contains(&x)) => {
            Ok(Some(v.iter().map(|&x| x as usize).collect()))
        }
        Some(v) => Err(Error::attribute(at, name, format!("integers from {min} to {MAX_ATTR}"), format!("{v:?}"))),
    }
}

/// A per-axis attribute, `default` on every axis when absent.
fn per_axis(v: &Option<Vec<usize>>, name: &str, rank: usize, default: usize, at: &Location) -> Result<Vec<usize>> {
    match v {
        None => Ok(vec![default; rank]),
        Some(v) if v.len() == rank => Ok(v.clone()),
        Some(v) => Err(Error::attribute(at, name, format!("{rank} values (one per spatial axis)"), format!("{v:?}"))),
    }
}

impl Window {
    fn from_node(node: &Node, kind: Kind) -> Result<Window> {
        let at = node.location();
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
        let transpose = |name: &str| if kind == Kind::Transpose { ints_attr(node, name, 0, &at) } else { Ok(None) };
        Ok(Window {
            kernel_shape: ints_attr(node, "kernel_shape", 1, &at)?,
            strides: ints_attr(node, "strides", 1, &at)?,
            dilations: ints_attr(node, "dilations", 1, &at)?,
            pads: ints_attr(node, "pads", 0, &at)?,
            auto_pad,
            output_padding: transpose("output_padding")?,
            output_shape: transpose("output_shape")?,
        })
    }

    /// Explicit pads as (begin, end) per axis.
    fn explicit_pads(&self, rank: usize, at: &Location) -> Result<Vec<(usize, usize)>> {
        match &self.pads {
            None => Ok(vec![(0, 0); rank]),
            Some(p) if p.len() == 2 * rank => Ok((0..rank).map(|i| (p[i], p[i + rank])).collect()),
            Some(p) => Err(Error::attribute(
                at,
                "pads",
                format!("{} values (begin and end per spatial axis)", 2 * rank),
                format!("{p:?}"),
            )),
        }
    }

    /// Unresolved axes (strides, dilations, kernel) over the spatial dims of `x`.
    fn axes(&self, x: &[usize], kernel: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let rank = kernel.len();
        let strides = per_axis(&self.strides, "strides", rank, 1, at)?;
        let dilations = per_axis(&self.dilations, "dilations", rank, 1, at)?;
        Ok((0..rank)
            .map(|i| Axis {
                input: x[i + 2],
                kernel: kernel[i],
                stride: strides[i],
                dilation: dilations[i],
                pad: 0,
                output: 0,
            })
            .collect())
    }

    /// Resolves a Conv window over `x` (`[N, C, spatial...]`) with the given kernel.
    fn resolve(&self, x: &[usize], kernel: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let pads = self.explicit_pads(kernel.len(), at)?;
        let mut axes = self.axes(x, kernel, at)?;
        for (i, a) in axes.iter_mut().enumerate() {
            let eff = a.dilated_kernel();
            let too_small = || {
                Error::input(
                    at,
                    0,
                    format!(
                        "spatial axis {} of at least {eff} (kernel {} with dilation {}) after pads {}+{}",
                        i + 2,
                        a.kernel,
                        a.dilation,
                        pads[i].0,
                        pads[i].1
                    ),
                    format!("shape {x:?}"),
                )
            };
            match self.auto_pad {
                AutoPad::NotSet => {
                    let span = (a.input + pads[i].0 + pads[i].1).checked_sub(eff).ok_or_else(too_small)?;
                    a.pad = pads[i].0 as isize;
                    a.output = span / a.stride + 1;
                }
                AutoPad::Valid => a.output = a.input.checked_sub(eff).ok_or_else(too_small)? / a.stride + 1,
                AutoPad::SameUpper | AutoPad::SameLower => {
                    a.output = a.input.div_ceil(a.stride);
                    let total = ((a.output.max(1) - 1) * a.stride + eff).saturating_sub(a.input);
                    a.pad = if self.auto_pad == AutoPad::SameUpper { total / 2 } else { total - total / 2 } as isize;
                }
            }
        }
        Ok(axes)
    }

    /// Resolves a ConvTranspose window: `x` is X's shape, `kernel` W's spatial dims.
    fn resolve_transpose(&self, x: &[usize], kernel: &[usize], at: &Location) -> Result<Vec<Axis>> {
        let rank = kernel.len();
        let pads = self.explicit_pads(rank, at)?;
        let out_pad = per_axis(&self.output_padding, "output_padding", rank, 0, at)?;
        let out_shape = match &self.output_shape {
            Some(s) if s.len() == rank + 2 => Some(s[2..].to_vec()),
            Some(s) if s.len() == rank => Some(s.clone()),
            Some(s) => {
                return Err(Error::attribute(
                    at,
                    "output_shape",
                    format!("{rank} values (one per spatial axis)"),
                    format!("{s:?}"),
                ))
            }
            None => None,
        };
        let mut axes = self.axes(x, kernel, at)?;
        for (i, a) in axes.iter_mut().enumerate() {
            let full = a
                .stride
                .checked_mul(a.input.saturating_sub(1))
                .and_then(|v| v.checked_add(out_pad[i] + a.dilated_kernel()))
                .and_then(|v| isize::try_from(v).ok())
                .ok_or_else(|| {
                    Error::input(at, 0, "a transposed output size that fits in memory", format!("shape {x:?}"))
                })?;
            let same = matches!(self.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
            let target = match &out_shape {
                Some(s) => Some(s[i]),
                None if same => Some(a.input * a.stride),
                None => None,
            };
            if let Some(out) = target {
                let total = full - out as isize;
                if total < 0 {
                    return Err(Error::attribute(
                        at,
                        "output_shape",
                        format!(
                            "at most {full} on spatial axis {} (the full transposed output for input {x:?})",
                            i + 2
                        ),
                        format!("{out}"),
                    ));
                }
                a.pad = if self.auto_pad == AutoPad::SameUpper { total / 2 } else { total - total / 2 };
                a.output = out;
            } else {
                let (b, e) = if self.auto_pad == AutoPad::Valid { (0, 0) } else { pads[i] };
                let out = full - (b + e) as isize;
                if out <= 0 {
                    return Err(Error::input(
                        at,
                        0,
                        format!("a spatial axis {} that gives a positive output size after pads {b}+{e}", i + 2),
                        format!("shape {x:?} (output size {out})"),
                    ));
                }
                a.pad = b as isize;
                a.output = out as usize;
            }
        }
        Ok(axes)
    }
}

/// Sizes of a convolution on 3-D windows.
#[derive(Clone, Debug)]
struct ConvShape {
    batch: usize,
    c_in: usize,
    c_out: usize,
    group: usize,
    /// Depth, height and width.
    axes: [Axis; 3],
}

impl ConvShape {
    fn out_len(&self) -> usize {
        self.axes.iter().map(|a| a.output).product()
    }

    fn k_len(&self) -> usize {
        self.axes.iter().map(|a| a.kernel).product()
    }

    /// Input channels per group.
    fn cg(&self) -> usize {
        self.c_in / self.group
    }

    /// Output channels per group.
    fn mg(&self) -> usize {
        self.c_out / self.group
    }

    /// The kernel's taps along depth, height and width.
    fn kernel(&self) -> [usize; 3] {
        self.axes.map(|a| a.kernel)
    }

    /// Shader params: M, N, K, first z, channels, then per axis input and output sizes,
    /// strides, dilations, pads.
    fn params(&self, first: usize, at: &Location) -> Result<Vec<u32>> {
        let mut p = vec![];
        let sizes = [
            first,
            self.batch * self.out_len(),
            self.cg() * self.k_len(),
            0,
            self.c_in,
            self.cg(),
            self.c_out,
            self.mg(),
        ];
        for v in sizes.into_iter().chain(self.axes.map(|a| a.input)).chain(self.axes.map(|a| a.output)) {
            p.push(u32_of(v, at)?);
        }
        for v in self.axes.map(|a| a.stride).into_iter().chain(self.axes.map(|a| a.dilation)) {
            p.push(u32_of(v, at)?);
        }
        for a in self.axes {
            let pad = i32::try_from(a.pad)
                .map_err(|_| Error::node(at, format!("padding {} exceeds what the GPU kernels index", a.pad)))?;
            p.push(pad as u32);
        }
        Ok(p)
    }
}

/// Prepends unit axes so that there are exactly three.
fn to_3d(axes: &[Axis]) -> [Axis; 3] {
    let mut out = [Axis::UNIT; 3];
    for (o, a) in out.iter_mut().skip(MAX_SPATIAL - axes.len()).zip(axes) {
        *o = *a;
    }
    out
}

/// WGSL shared by the convolution shaders: the kernel constants, the geometry read from the
/// params (see [`ConvShape::params`]) and the activation hook.
const GEOMETRY: &str = r#"
const KD: u32 = $KDu;
const KH: u32 = $KHu;
const KW: u32 = $KWu;
const KL: u32 = KD * KH * KW;
var<private> cin: u32;
var<private> cg: u32;
var<private> cout: u32;
var<private> mg: u32;
var<private> ind: vec3<u32>;
var<private> outd: vec3<u32>;
var<private> st: vec3<u32>;
var<private> dil: vec3<u32>;
var<private> pad: vec3<i32>;
var<private> il: u32;
var<private> ol: u32;
fn load_geometry() {
    cin = p[4];
    cg = p[5];
    cout = p[6];
    mg = p[7];
    ind = vec3<u32>(p[8], p[9], p[10]);
    outd = vec3<u32>(p[11], p[12], p[13]);
    st = vec3<u32>(p[14], p[15], p[16]);
    dil = vec3<u32>(p[17], p[18], p[19]);
    pad = vec3<i32>(bitcast<i32>(p[20]), bitcast<i32>(p[21]), bitcast<i32>(p[22]));
    il = ind.x * ind.y * ind.z;
    ol = outd.x * outd.y * outd.z;
}
/// Output position `o` (within a plane) as depth, height, width.
fn out_pos(o: u32) -> vec3<u32> {
    return vec3<u32>(o / (outd.y * outd.z), (o / outd.z) % outd.y, o % outd.z);
}
/// Kernel tap `tap` as depth, height, width.
fn tap_pos(tap: u32) -> vec3<u32> {
    return vec3<u32>(tap / (KH * KW), (tap / KW) % KH, tap % KW);
}
fn act(v: f32) -> f32 { return $ACT; }
"#;

/// Bindings of the convolution shaders: params, x, w, optional bias, y.
fn bindings(ty: &str, bias: bool) -> String {
    let mut s = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;\n@group(0) @binding(1) var<storage, read> x: array<{ty}>;\n\
         @group(0) @binding(2) var<storage, read> w: array<{ty}>;\n"
    );
    let y = if bias {
        s += &format!("@group(0) @binding(3) var<storage, read> bias: array<{ty}>;\n");
        4
    } else {
        3
    };
    s + &format!("@group(0) @binding({y}) var<storage, read_write> y: array<{ty}>;\n")
}

/// Tiled-kernel hooks shared by the implicit GEMMs: the group from z, weights for Conv, the
/// output store.
const GEMM_COMMON: &str = r#"
var<private> g: u32;
fn setup(z: u32) {
    load_geometry();
    g = z;
}
fn store(m: u32, n: u32, acc: f32) {
    let oc = g * mg + m;
    var v = acc;
    $BIAS
    y[((n / ol) * cout + oc) * ol + n % ol] = $TY(act(v));
}
"#;

/// Conv's B: the input element tap k of channel k / KL reads for output column n.
const CONV_B: &str = r#"
fn load_a(m: u32, k: u32) -> f32 { return f32(w[(g * mg + m) * p[2] + k]); }
struct Col { base: u32, pos: vec3<i32> }
fn col(n: u32) -> Col {
    let o = out_pos(n % ol);
    return Col(((n / ol) * cin + g * cg) * il, vec3<i32>(o * st) - pad);
}
fn load_b(c: Col, k: u32) -> f32 {
    let i = c.pos + vec3<i32>(tap_pos(k % KL) * dil);
    let u = vec3<u32>(i);
    if (any(u >= ind)) { return 0.0; }
    return f32(x[c.base + (k / KL) * il + (u.x * ind.y + u.y) * ind.z + u.z]);
}
"#;

/// Conv's B for 1x1, stride-1, unpadded convolutions: the input is a [cg, positions] matrix.
const POINTWISE_B: &str = r#"
fn load_a(m: u32, k: u32) -> f32 { return f32(w[(g * mg + m) * p[2] + k]); }
struct Col { base: u32 }
fn col(n: u32) -> Col { return Col(((n / ol) * cin + g * cg) * il + n % ol); }
fn load_b(c: Col, k: u32) -> f32 { return f32(x[c.base + k * il]); }
"#;

/// ConvTranspose's operands: W is [C_in, mg, taps]; B(k, n) is the input element that tap k
/// carries to output position n, 0 where no input position lands there.
const TRANSPOSE_B: &str = r#"
fn load_a(m: u32, k: u32) -> f32 { return f32(w[((g * cg + k / KL) * mg + m) * KL + k % KL]); }
struct Col { base: u32, pos: vec3<i32> }
fn col(n: u32) -> Col {
    let o = out_pos(n % ol);
    return Col(((n / ol) * cin + g * cg) * il, vec3<i32>(o) + pad);
}
fn load_b(c: Col, k: u32) -> f32 {
    let t = c.pos - vec3<i32>(tap_pos(k % KL) * dil);
    if (any(t < vec3<i32>(0))) { return 0.0; }
    let u = vec3<u32>(t);
    if (any(u % st != vec3<u32>(0u))) { return 0.0; }
    let i = u / st;
    if (any(i >= ind)) { return 0.0; }
    return f32(x[c.base + (k / KL) * il + (i.x * ind.y + i.y) * ind.z + i.z]);
}
"#;

/// The direct kernel: one thread per output element, looping over the group's input channels
/// and the taps. Workgroup z is the (image, output channel) plane, x and y the position in it.
const DIRECT: &str = r#"
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    load_geometry();
    let o = gid.x + gid.y * nwg.x * 256u;
    if (o >= ol) { return; }
    let plane = wid.z + p[3];
    let oc = plane % cout;
    let g = oc / mg;
    let row = o / outd.z;
    let pos = vec3<u32>(row / outd.y, row % outd.y, o - row * outd.z);
    let base = vec3<i32>(pos * st) - pad;
    var acc = 0.0;
    for (var c = 0u; c < cg; c++) {
        let xb = ((plane / cout) * cin + g * cg + c) * il;
        let wb = (oc * cg + c) * KL;
        for (var kz = 0u; kz < KD; kz++) {
            let iz = u32(base.x + i32(kz * dil.x));
            if (iz >= ind.x) { continue; }
            for (var ky = 0u; ky < KH; ky++) {
                let iy = u32(base.y + i32(ky * dil.y));
                if (iy >= ind.y) { continue; }
                let xrow = xb + (iz * ind.y + iy) * ind.z;
                let wrow = wb + (kz * KH + ky) * KW;
                for (var kx = 0u; kx < KW; kx++) {
                    let ix = u32(base.z + i32(kx * dil.z));
                    if (ix < ind.z) { acc += f32(x[xrow + ix]) * f32(w[wrow + kx]); }
                }
            }
        }
    }
    var v = acc;
    $BIAS
    y[plane * ol + o] = $TY(act(v));
}
"#;

/// Which kernel runs a node, and what is baked into its shader.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Variant {
    algo: Algo,
    kernel: [usize; 3],
    bias: bool,
}

/// The kernel a convolution runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algo {
    /// Implicit GEMM gathering input windows.
    Gemm,
    /// Implicit GEMM of a 1x1, stride-1, unpadded convolution.
    Pointwise,
    /// One thread per output (few output channels per group).
    Direct,
    /// ConvTranspose's implicit GEMM.
    Transpose,
}

impl Variant {
    /// The variant for a resolved shape.
    fn of(kind: Kind, s: &ConvShape, bias: bool) -> Variant {
        let algo = match kind {
            Kind::Transpose => Algo::Transpose,
            Kind::Conv if s.cg() == 1 || s.mg() < DIRECT_BELOW => Algo::Direct,
            Kind::Conv if s.axes.iter().all(|a| a.kernel == 1 && a.stride == 1 && a.pad == 0) => Algo::Pointwise,
            Kind::Conv => Algo::Gemm,
        };
        Variant { algo, kernel: s.kernel(), bias }
    }

    /// The pipeline of this variant for `dtype` (made once per context).
    fn pipeline(&self, gpu: &GpuContext, dtype: DataType) -> Result<Arc<Pipeline>> {
        let ty = storage_type(dtype)?;
        let [kd, kh, kw] = self.kernel.map(|k| k.to_string());
        let key = format!("conv/{:?}/{ty}/{kd}x{kh}x{kw}/{}", self.algo, if self.bias { "bias" } else { "nobias" });
        let bias = if self.bias { "v += f32(bias[oc]);" } else { "" };
        let subst = |src: &str| {
            fill(src, &[("$KD", &kd), ("$KH", &kh), ("$KW", &kw), ("$BIAS", bias), ("$ACT", "v"), ("$TY", ty)])
        };
        gpu.pipeline(&key, || {
            let head = bindings(ty, self.bias) + &subst(GEOMETRY);
            let gemm = |b: &str, a_walk: Walk| {
                tiled_shader(dtype, &(head.clone() + &subst(GEMM_COMMON) + b), a_walk, Walk::Outer)
            };
            match self.algo {
                Algo::Gemm => gemm(CONV_B, Walk::K),
                Algo::Pointwise => gemm(POINTWISE_B, Walk::K),
                Algo::Transpose => gemm(TRANSPOSE_B, if self.kernel == [1, 1, 1] { Walk::Outer } else { Walk::K }),
                Algo::Direct => format!("{}{head}{}", enables(dtype), subst(DIRECT)),
            }
        })
    }
}

/// A decoded Conv or ConvTranspose node.
struct ConvOp {
    kind: Kind,
    window: Window,
    group: usize,
    dtype: DataType,
    /// The pipeline made at build time, for the variant the weights' shape predicted.
    prepared: Option<(Variant, Arc<Pipeline>)>,
    at: Location,
}

/// Whether the node's attributes decode, its dtypes are ones the kernels take and its rank
/// (when known) is 3 to 5.
fn supports_conv(ctx: &NodeContext<'_>, gpu: &GpuContext) -> bool {
    let kind = if ctx.node.op_type == "Conv" { Kind::Conv } else { Kind::Transpose };
    let first = input_dtype(ctx, 0);
    let same = (1..3).filter(|&i| ctx.node.input(i).is_some()).all(|i| input_dtype(ctx, i) == first);
    let rank_ok = match ctx.input_types.first() {
        Some(ValueType::Tensor(t)) => t.shape.as_ref().is_none_or(|s| (3..=MAX_SPATIAL + 2).contains(&s.len())),
        _ => true,
    };
    (2..=3).contains(&ctx.node.inputs.len())
        && ctx.node.int_or("group", 1).is_ok_and(|g| g >= 1)
        && Window::from_node(ctx.node, kind).is_ok()
        && float_inputs(ctx, gpu, 0..3)
        && same
        && rank_ok
}

fn build_conv(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build(ctx, gpu, Kind::Conv)
}

fn build_conv_transpose(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build(ctx, gpu, Kind::Transpose)
}

/// The static shape of input `i`, when inference or a constant gives it.
fn static_shape(ctx: &NodeContext<'_>, i: usize) -> Option<Vec<usize>> {
    if let Some(t) = ctx.constant(i) {
        return Some(t.shape().to_vec());
    }
    match ctx.input_types.get(i)? {
        ValueType::Tensor(t) => {
            t.shape.as_ref()?.iter().map(|d| if let Dim::Fixed(n) = d { Some(*n) } else { None }).collect()
        }
        _ => None,
    }
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>, kind: Kind) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let group = node.int_or("group", 1)?;
    if group < 1 {
        return Err(Error::attribute(&at, "group", "a positive integer", group.to_string()));
    }
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} has an untyped input")))?;
    storage_type(dtype)?;
    let mut op =
        ConvOp { kind, window: Window::from_node(node, kind)?, group: group as usize, dtype, prepared: None, at };
    if let Some(w) = static_shape(ctx, 1) {
        // A stand-in input of the weights' channels predicts the variant (it does not depend
        // on the spatial sizes).
        let c_in =
            if kind == Kind::Conv { w.get(1).map_or(0, |c| c * op.group) } else { w.first().copied().unwrap_or(0) };
        let mut x = vec![1, c_in];
        x.extend(w.iter().skip(2).map(|k| k * 4 + 16));
        if let Ok(s) = op.shape(&x, &w, None) {
            let variant = Variant::of(kind, &s, node.input(2).is_some());
            op.prepared = Some((variant.clone(), variant.pipeline(gpu, dtype)?));
        }
    }
    Ok(Box::new(op))
}

impl ConvOp {
    /// Checks X, W and B against each other and resolves the geometry.
    fn shape(&self, x: &[usize], w: &[usize], b: Option<&[usize]>) -> Result<ConvShape> {
        let at = &self.at;
        let rank = x.len();
        if !(3..=MAX_SPATIAL + 2).contains(&rank) {
            return Err(Error::input(at, 0, "a tensor of rank 3 to 5 ([N, C, spatial...])", format!("shape {x:?}")));
        }
        if w.len() != rank {
            return Err(Error::input(
                at,
                1,
                format!("a weight tensor of rank {rank} like X {x:?}"),
                format!("shape {w:?}"),
            ));
        }
        let kernel = &w[2..];
        if let Some(k) = &self.window.kernel_shape {
            if k.as_slice() != kernel {
                return Err(Error::attribute(
                    at,
                    "kernel_shape",
                    format!("{kernel:?} (the spatial dims of W {w:?})"),
                    format!("{k:?}"),
                ));
            }
        }
        let (batch, c_in, group) = (x[0], x[1], self.group);
        let c_out = match self.kind {
            Kind::Conv => {
                if w[1].checked_mul(group) != Some(c_in) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("W whose dim 1 times group {group} is the {c_in} channels of X {x:?}"),
                        format!("shape {w:?}"),
                    ));
                }
                if !w[0].is_multiple_of(group) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("a number of output channels divisible by group {group}"),
                        format!("shape {w:?}"),
                    ));
                }
                w[0]
            }
            Kind::Transpose => {
                if w[0] != c_in || !c_in.is_multiple_of(group) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("W with {c_in} input channels (X {x:?}) divisible by group {group}"),
                        format!("shape {w:?}"),
                    ));
                }
                w[1].checked_mul(group)
                    .ok_or_else(|| Error::attribute(at, "group", "a group count that fits", group.to_string()))?
            }
        };
        if let Some(b) = b {
            if b != [c_out] {
                return Err(Error::input(at, 2, format!("a bias of shape [{c_out}]"), format!("shape {b:?}")));
            }
        }
        let axes = match self.kind {
            Kind::Conv => self.window.resolve(x, kernel, at)?,
            Kind::Transpose => self.window.resolve_transpose(x, kernel, at)?,
        };
        Ok(ConvShape { batch, c_in, c_out, group, axes: to_3d(&axes) })
    }

    /// The pipeline of `variant`: the prepared one when it matches.
    fn pipeline(&self, gpu: &GpuContext, variant: &Variant) -> Result<Arc<Pipeline>> {
        match &self.prepared {
            Some((v, p)) if v == variant => Ok(p.clone()),
            _ => variant.pipeline(gpu, self.dtype),
        }
    }
}

impl GpuOp for ConvOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let w = gpu_input(run, inputs, 1, at)?;
        let b = opt_gpu_input(run, inputs, 2, at)?;
        storage_type(x.dtype()).map_err(|_| Error::input(at, 0, "a float or float16 tensor", x.dtype().name()))?;
        for (i, t) in [(1, Some(w)), (2, b)] {
            if let Some(t) = t.filter(|t| t.dtype() != x.dtype()) {
                return Err(Error::input(at, i, format!("{} like X", x.dtype().name()), t.dtype().name()));
            }
        }
        let s = self.shape(x.shape(), w.shape(), b.map(|b| b.shape()))?;
        let mut out_shape = vec![s.batch, s.c_out];
        out_shape.extend(s.axes[MAX_SPATIAL + 2 - x.shape().len()..].iter().map(|a| a.output));
        let y = run.alloc(x.dtype(), out_shape)?;
        let count = y.len();
        if count == 0 {
            return Ok(vec![Value::Tensor(y)]);
        }
        let variant = Variant::of(self.kind, &s, b.is_some());
        let pipeline = self.pipeline(run.context(), &variant)?;
        let mut buffers = vec![x.buffer, w.buffer];
        buffers.extend(b.map(|b| b.buffer));
        buffers.push(y.gpu()?);
        if variant.algo == Algo::Direct {
            let mut p = s.params(count, at)?;
            let [gx, gy, _] = grid(s.out_len());
            dispatch_z(run, &pipeline, &mut p, 3, &buffers, [gx, gy, u32_of(s.batch * s.c_out, at)?], at)?;
        } else {
            let mut p = s.params(s.mg(), at)?;
            let groups = [
                u32_of((s.batch * s.out_len()).div_ceil(TILE), at)?,
                u32_of(s.mg().div_ceil(TILE), at)?,
                u32_of(s.group, at)?,
            ];
            dispatch_z(run, &pipeline, &mut p, 3, &buffers, groups, at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::ir::Attribute;

    use crate::testkit::{int, ints, rand, string, Case};

    /// A Conv (or ConvTranspose) case with X of `x`, W of `w` (a constant) and, with `bias`, a
    /// constant bias of `c_out`.
    fn conv(
        op: &'static str,
        x: &[usize],
        w: &[usize],
        c_out: Option<usize>,
        attrs: Vec<Attribute>,
        seed: u64,
    ) -> Case {
        let mut inputs = vec![rand(x, -1.0, 1.0, seed), rand(w, -1.0, 1.0, seed + 1)];
        inputs.extend(c_out.map(|c| rand(&[c], -1.0, 1.0, seed + 2)));
        Case::new(op, inputs).attrs(attrs).constants(&[1, 2])
    }

    fn check(case: Case) {
        case.check(1e-4, 1e-4);
    }

    #[test]
    fn conv_3x3_stride_2_pad_1() {
        let attrs = || vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])];
        for (c_out, seed) in [(8, 1), (16, 3), (70, 5)] {
            check(conv("Conv", &[2, 5, 13, 17], &[c_out, 5, 3, 3], Some(c_out), attrs(), seed));
            check(conv("Conv", &[2, 5, 13, 17], &[c_out, 5, 3, 3], None, attrs(), seed + 1));
        }
        // Weights as a graph input rather than a constant.
        let x = rand(&[1, 5, 13, 17], -1.0, 1.0, 7);
        let w = rand(&[9, 5, 3, 3], -1.0, 1.0, 8);
        check(Case::new("Conv", vec![x, w]).attrs(attrs()));
    }

    #[test]
    fn conv_depthwise_and_groups() {
        let same = || vec![ints("pads", &[1, 1, 1, 1]), int("group", 7)];
        check(conv("Conv", &[2, 7, 13, 17], &[7, 1, 3, 3], Some(7), same(), 10));
        check(conv("Conv", &[1, 7, 13, 17], &[14, 1, 3, 3], None, same(), 11));
        let strided = vec![ints("strides", &[2, 2]), ints("pads", &[1, 0, 1, 2]), int("group", 7)];
        check(conv("Conv", &[1, 7, 13, 17], &[7, 1, 3, 3], Some(7), strided, 12));
        check(conv("Conv", &[2, 6, 13, 17], &[20, 3, 3, 3], Some(20), vec![int("group", 2)], 13));
        check(conv("Conv", &[2, 6, 13, 17], &[6, 2, 3, 3], Some(6), vec![int("group", 3)], 14));
    }

    #[test]
    fn conv_dilations_and_pointwise() {
        let dilated = || vec![ints("dilations", &[2, 2]), ints("pads", &[2, 1, 2, 3])];
        check(conv("Conv", &[2, 5, 13, 17], &[16, 5, 3, 3], Some(16), dilated(), 20));
        check(conv("Conv", &[1, 5, 13, 17], &[4, 5, 3, 3], None, dilated(), 21));
        check(conv("Conv", &[2, 16, 13, 17], &[24, 16, 1, 1], Some(24), vec![], 22));
        check(conv("Conv", &[2, 16, 13, 17], &[24, 16, 1, 1], None, vec![ints("strides", &[2, 2])], 23));
        check(conv("Conv", &[1, 37, 5, 7], &[40, 37, 1, 1], Some(40), vec![ints("pads", &[1, 1, 0, 0])], 24));
        check(conv("Conv", &[1, 64, 9, 11], &[32, 64, 3, 3], Some(32), vec![ints("pads", &[1, 1, 1, 1])], 25));
    }

    #[test]
    fn conv_auto_pad() {
        for (mode, seed) in [("SAME_UPPER", 30), ("SAME_LOWER", 32), ("VALID", 34), ("NOTSET", 36)] {
            let attrs = vec![string("auto_pad", mode), ints("strides", &[2, 3])];
            check(conv("Conv", &[1, 5, 13, 17], &[12, 5, 4, 3], Some(12), attrs.clone(), seed));
            let mut dw = attrs;
            dw.push(int("group", 5));
            check(conv("Conv", &[1, 5, 13, 17], &[5, 1, 4, 3], Some(5), dw, seed + 1));
        }
    }

    #[test]
    fn conv_1d_and_3d() {
        check(conv("Conv", &[2, 5, 29], &[9, 5, 3], Some(9), vec![ints("strides", &[2]), ints("pads", &[1, 1])], 40));
        check(conv("Conv", &[2, 5, 29], &[3, 5, 5], None, vec![ints("dilations", &[3])], 41));
        let pads3 = || vec![ints("pads", &[1, 0, 1, 1, 2, 0])];
        check(conv("Conv", &[1, 3, 5, 7, 9], &[10, 3, 3, 3, 3], Some(10), pads3(), 42));
        check(conv(
            "Conv",
            &[2, 3, 5, 7, 9],
            &[3, 1, 3, 2, 3],
            None,
            vec![int("group", 3), ints("strides", &[1, 2, 2])],
            43,
        ));
    }

    #[test]
    fn conv_empty_batch_and_errors() {
        check(conv("Conv", &[0, 5, 13, 17], &[8, 5, 3, 3], Some(8), vec![], 50));
        let Some(gpu) = crate::testkit::provider() else { return };
        let e =
            conv("Conv", &[1, 4, 13, 17], &[8, 5, 3, 3], None, vec![], 51).try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("Conv"), "{e}");
    }

    /// The kernel each shape of the tests above runs on.
    #[test]
    fn shapes_pick_the_expected_kernel() {
        use super::{Algo, ConvOp, Kind, Variant, Window};
        let op = |kind: Kind, group: usize, attrs: Vec<Attribute>| {
            let node = onyx_core::ir::Node { op_type: "Conv".into(), attributes: attrs, ..Default::default() };
            let window = Window::from_node(&node, kind).unwrap();
            ConvOp { kind, window, group, dtype: onyx_core::DataType::Float, prepared: None, at: node.location() }
        };
        let algo =
            |op: &ConvOp, x: &[usize], w: &[usize]| Variant::of(op.kind, &op.shape(x, w, None).unwrap(), false).algo;
        let plain = op(Kind::Conv, 1, vec![ints("pads", &[1, 1, 1, 1])]);
        assert_eq!(algo(&plain, &[1, 5, 13, 17], &[16, 5, 3, 3]), Algo::Gemm);
        assert_eq!(algo(&plain, &[1, 5, 13, 17], &[4, 5, 3, 3]), Algo::Direct);
        assert_eq!(algo(&op(Kind::Conv, 1, vec![]), &[1, 16, 13, 17], &[24, 16, 1, 1]), Algo::Pointwise);
        assert_eq!(
            algo(&op(Kind::Conv, 1, vec![ints("strides", &[2, 2])]), &[1, 16, 13, 17], &[24, 16, 1, 1]),
            Algo::Gemm
        );
        assert_eq!(algo(&op(Kind::Conv, 7, vec![]), &[1, 7, 13, 17], &[7, 1, 3, 3]), Algo::Direct);
        assert_eq!(algo(&op(Kind::Transpose, 1, vec![]), &[1, 6, 7, 9], &[6, 4, 3, 3]), Algo::Transpose);
    }

    #[test]
    fn float16_convolutions() {
        use crate::ops::matmul::tests::{half, has_f16};
        if !has_f16() {
            return;
        }
        let case = |op: &'static str, x: &[usize], w: &[usize], attrs: Vec<Attribute>, seed: u64| {
            let c_out = if op == "Conv" { w[0] } else { w[1] };
            let inputs = vec![
                half(&rand(x, -1.0, 1.0, seed)),
                half(&rand(w, -1.0, 1.0, seed + 1)),
                half(&rand(&[c_out], -1.0, 1.0, seed + 2)),
            ];
            Case::new(op, inputs).attrs(attrs).constants(&[1, 2]).check(2e-3, 5e-3);
        };
        case("Conv", &[1, 5, 13, 17], &[16, 5, 3, 3], vec![ints("pads", &[1, 1, 1, 1])], 70);
        case("Conv", &[1, 7, 13, 17], &[7, 1, 3, 3], vec![int("group", 7)], 71);
        case("Conv", &[1, 16, 13, 17], &[24, 16, 1, 1], vec![], 72);
        case("ConvTranspose", &[1, 6, 7, 9], &[6, 4, 3, 3], vec![ints("strides", &[2, 2])], 73);
    }

    #[test]
    fn conv_transpose_gathers_like_the_cpu() {
        let attrs = || vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1]), ints("output_padding", &[1, 0])];
        check(conv("ConvTranspose", &[2, 6, 7, 9], &[6, 4, 3, 3], Some(4), attrs(), 60));
        check(conv(
            "ConvTranspose",
            &[2, 6, 7, 9],
            &[6, 3, 3, 3],
            None,
            vec![int("group", 2), ints("strides", &[2, 1])],
            61,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 70, 4, 4],
            Some(70),
            vec![ints("strides", &[2, 2]), ints("dilations", &[2, 1])],
            62,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 3, 3, 3],
            None,
            vec![ints("strides", &[3, 2]), ints("output_shape", &[20, 18])],
            63,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 3, 3, 3],
            Some(3),
            vec![string("auto_pad", "SAME_UPPER"), ints("strides", &[2, 2])],
            64,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 3, 3, 3],
            Some(3),
            vec![string("auto_pad", "SAME_LOWER"), ints("strides", &[2, 2])],
            65,
        ));
        check(conv(
            "ConvTranspose",
            &[2, 5, 29],
            &[5, 4, 3],
            Some(4),
            vec![ints("strides", &[3]), ints("pads", &[0, 2])],
            66,
        ));
        check(conv("ConvTranspose", &[1, 4, 3, 4, 5], &[4, 2, 2, 3, 2], None, vec![ints("strides", &[2, 1, 2])], 67));
        check(conv("ConvTranspose", &[1, 8, 5, 6], &[8, 12, 1, 1], Some(12), vec![], 68));
    }

    /// Throughput of the convolution kernels (run with `--ignored --nocapture` on a real GPU).
    #[test]
    #[ignore]
    fn bench_convolutions() {
        use super::{ConvOp, Kind, Window};
        if crate::testkit::provider().is_none() {
            return;
        }
        /// Name, X shape, W shape, group, attributes.
        type BenchCase<'a> = (&'a str, &'a [usize], &'a [usize], usize, Vec<Attribute>);
        let cases: &[BenchCase<'_>] = &[
            (
                "stem 7x7/2",
                &[1, 3, 224, 224],
                &[64, 3, 7, 7],
                1,
                vec![ints("strides", &[2, 2]), ints("pads", &[3, 3, 3, 3])],
            ),
            ("3x3 64", &[1, 64, 56, 56], &[64, 64, 3, 3], 1, vec![ints("pads", &[1, 1, 1, 1])]),
            ("3x3 64 batch 8", &[8, 64, 56, 56], &[64, 64, 3, 3], 1, vec![ints("pads", &[1, 1, 1, 1])]),
            ("3x3 256 at 14", &[1, 256, 14, 14], &[256, 256, 3, 3], 1, vec![ints("pads", &[1, 1, 1, 1])]),
            ("1x1 256->64", &[1, 256, 56, 56], &[64, 256, 1, 1], 1, vec![]),
            ("1x1 1024->256 at 14", &[1, 1024, 14, 14], &[256, 1024, 1, 1], 1, vec![]),
            ("depthwise 3x3 144", &[1, 144, 56, 56], &[144, 1, 3, 3], 144, vec![ints("pads", &[1, 1, 1, 1])]),
            ("depthwise 3x3 144 batch 16", &[16, 144, 56, 56], &[144, 1, 3, 3], 144, vec![ints("pads", &[1, 1, 1, 1])]),
            ("tiny 1x1", &[1, 8, 4, 4], &[8, 8, 1, 1], 1, vec![]),
        ];
        for (name, x, w, group, attrs) in cases {
            let node = onyx_core::ir::Node { op_type: "Conv".into(), attributes: attrs.clone(), ..Default::default() };
            let window = Window::from_node(&node, Kind::Conv).unwrap();
            let op = ConvOp {
                kind: Kind::Conv,
                window,
                group: *group,
                dtype: onyx_core::DataType::Float,
                prepared: None,
                at: node.location(),
            };
            let s = op.shape(x, w, None).unwrap();
            let inputs = [rand(x, -1.0, 1.0, 1), rand(w, -1.0, 1.0, 2)];
            let t = crate::ops::matmul::tests::time_op(&op, &inputs, 20);
            let flops = 2.0 * (s.batch * s.c_out * s.out_len() * s.cg() * s.k_len()) as f64;
            eprintln!("Conv {name}: {:.1} us, {:.0} GFLOP/s", t * 1e6, flops / t / 1e9);
        }
    }
}
