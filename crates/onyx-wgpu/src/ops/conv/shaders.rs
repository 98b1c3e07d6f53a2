//! The convolution shaders: hooks of the tiled kernel (implicit GEMM, pointwise, transposed)
//! and the direct kernel, and the [`Variant`] that names which one a node runs.

use std::sync::Arc;

use onyx_core::{DataType, Result};

use super::window::{ConvShape, Kind};
use crate::context::{GpuContext, Pipeline};
use crate::kernel::enables;
use crate::ops::matmul::{fill, storage_type, Activation, Tiled, TiledSource, Walk};

/// Output channels per group below which the direct kernel beats the implicit GEMM (whose
/// 64-row tiles would be mostly empty).
pub(super) const DIRECT_BELOW: usize = 8;

/// WGSL shared by the convolution shaders: the kernel constants, the geometry read from the
/// params (see [`ConvShape::params`]) and the activation hook. `$D...` are the depth axis'
/// terms (see [`geometry`]).
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
    cin = p[8];
    cg = p[9];
    cout = p[10];
    mg = p[11];
    ind = vec3<u32>($DIN, p[13], p[14]);
    outd = vec3<u32>($DOUT, p[16], p[17]);
    st = vec3<u32>($DSTRIDE, p[19], p[20]);
    dil = vec3<u32>($DDILATION, p[22], p[23]);
    pad = vec3<i32>($DPAD, bitcast<i32>(p[25]), bitcast<i32>(p[26]));
    il = ind.x * ind.y * ind.z;
    ol = outd.x * outd.y * outd.z;
}
/// Output position `o` (within a plane) as depth, height, width.
fn out_pos(o: u32) -> vec3<u32> {
    return vec3<u32>($DOUT_POS, (o / outd.z) % outd.y, o % outd.z);
}
/// Kernel tap `tap` as depth, height, width.
fn tap_pos(tap: u32) -> vec3<u32> {
    return vec3<u32>($DTAP_POS, (tap / KW) % KH, tap % KW);
}
$ACT_FN
"#;

/// [`GEOMETRY`] for a shape whose depth axis is `planar` (see [`ConvShape::planar`]: every 1-D
/// and 2-D convolution) or general. Planar shaders hold the depth terms as constants, which a
/// cold NVIDIA driver compiles faster (resnet50's startup kernels: 24 ms against 28 one at a
/// time, 39-45 against 48-52 three at a time).
fn geometry(planar: bool) -> String {
    let depth: [(&str, &str); 7] = if planar {
        [
            ("$DIN", "1u"),
            ("$DOUT_POS", "0u"),
            ("$DOUT", "1u"),
            ("$DSTRIDE", "1u"),
            ("$DDILATION", "1u"),
            ("$DPAD", "0"),
            ("$DTAP_POS", "0u"),
        ]
    } else {
        [
            ("$DIN", "p[12]"),
            ("$DOUT_POS", "o / (outd.y * outd.z)"),
            ("$DOUT", "p[15]"),
            ("$DSTRIDE", "p[18]"),
            ("$DDILATION", "p[21]"),
            ("$DPAD", "bitcast<i32>(p[24])"),
            ("$DTAP_POS", "tap / (KH * KW)"),
        ]
    };
    fill(GEOMETRY, &depth)
}

/// Bindings of the convolution shaders: params, x, w, then the optional bias and residual,
/// then y.
pub(super) fn bindings(ty: &str, bias: bool, residual: bool) -> String {
    let mut s = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;\n@group(0) @binding(1) var<storage, read> x: array<{ty}>;\n\
         @group(0) @binding(2) var<storage, read> w: array<{ty}>;\n"
    );
    let mut next = 3;
    for (present, name) in [(bias, "bias"), (residual, "res")] {
        if present {
            s += &format!("@group(0) @binding({next}) var<storage, read> {name}: array<{ty}>;\n");
            next += 1;
        }
    }
    s + &format!("@group(0) @binding({next}) var<storage, read_write> y: array<{ty}>;\n")
}

/// Tiled-kernel hooks shared by the implicit GEMMs: the group from z, weights for Conv, the
/// output store.
pub(super) const GEMM_COMMON: &str = r#"
var<private> g: u32;
fn setup(z: u32) {
    load_geometry();
    g = z;
}
fn store(m: u32, n: u32, acc: f32) {
    let oc = g * mg + m;
    let at = ((n / ol) * cout + oc) * ol + n % ol;
    var v = acc;
    $BIAS
    $RES
    y[at] = $TY(act(v));
}
"#;

/// Conv's B: the input element tap k of channel k / KL reads for output column n.
pub(super) const CONV_B: &str = r#"
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
pub(super) const POINTWISE_B: &str = r#"
fn load_a(m: u32, k: u32) -> f32 { return f32(w[(g * mg + m) * p[2] + k]); }
struct Col { base: u32 }
fn col(n: u32) -> Col { return Col(((n / ol) * cin + g * cg) * il + n % ol); }
fn load_b(c: Col, k: u32) -> f32 { return f32(x[c.base + k * il]); }
"#;

/// ConvTranspose's operands: W is [C_in, mg, taps]; B(k, n) is the input element that tap k
/// carries to output position n, 0 where no input position lands there.
pub(super) const TRANSPOSE_B: &str = r#"
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
pub(super) const DIRECT: &str = r#"
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
    let at = plane * ol + o;
    var v = acc;
    $BIAS
    $RES
    y[at] = $TY(act(v));
}
"#;

/// Which kernel runs a node, and what is baked into its shaders.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Variant {
    pub(super) algo: Algo,
    pub(super) kernel: [usize; 3],
    /// Whether the depth axis is trivial (see [`geometry`]).
    pub(super) planar: bool,
    pub(super) bias: bool,
    /// FusedConv's Z, added before the activation.
    pub(super) residual: bool,
    pub(super) act: Activation,
}

/// The kernel a convolution runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Algo {
    /// Implicit GEMM gathering input windows.
    Gemm,
    /// Implicit GEMM of a 1x1, stride-1, unpadded convolution.
    Pointwise,
    /// One thread per output (few output channels per group).
    Direct,
    /// ConvTranspose's implicit GEMM.
    Transpose,
}

/// The compiled kernel of a variant.
pub(super) enum ConvKernel {
    /// On the tiled GEMM kernel (split-K when the output is small).
    Tiled(Tiled),
    /// The direct kernel.
    Direct(Arc<Pipeline>),
}

impl Variant {
    /// The variant for a resolved shape, with the node's epilogue.
    pub(super) fn of(kind: Kind, s: &ConvShape, bias: bool, residual: bool, act: Activation) -> Variant {
        let algo = match kind {
            Kind::Transpose => Algo::Transpose,
            Kind::Conv if s.cg() == 1 || s.mg() < DIRECT_BELOW => Algo::Direct,
            Kind::Conv if s.axes.iter().all(|a| a.kernel == 1 && a.stride == 1 && a.pad == 0) => Algo::Pointwise,
            Kind::Conv => Algo::Gemm,
        };
        Variant { algo, kernel: s.kernel(), planar: s.planar(), bias, residual, act }
    }

    /// The kernel of this variant for `dtype` (pipelines made once per context).
    pub(super) fn compile(&self, gpu: &GpuContext, dtype: DataType) -> Result<ConvKernel> {
        let ty = storage_type(dtype)?;
        let [kd, kh, kw] = self.kernel.map(|k| k.to_string());
        let window = if self.planar { format!("{kh}x{kw}") } else { format!("{kd}x{kh}x{kw}") };
        let key = format!(
            "conv/{:?}/{ty}/{window}/{}{}/{}",
            self.algo,
            if self.bias { "b" } else { "" },
            if self.residual { "z" } else { "" },
            self.act.key()
        );
        let bias = if self.bias { "v += f32(bias[oc]);" } else { "" };
        let res = if self.residual { "v += f32(res[at]);" } else { "" };
        let act = self.act.function();
        let subst = |src: &str| {
            fill(
                src,
                &[
                    ("$KD", &kd),
                    ("$KH", &kh),
                    ("$KW", &kw),
                    ("$BIAS", bias),
                    ("$RES", res),
                    ("$ACT_FN", &act),
                    ("$TY", ty),
                ],
            )
        };
        let head = bindings(ty, self.bias, self.residual) + &subst(&geometry(self.planar));
        let tiled = |b: &str, a: Walk| {
            let hooks = head.clone() + &subst(GEMM_COMMON) + b;
            let buffers = 3 + self.bias as usize + self.residual as usize;
            // Cooperative matrices do not pay here (resnet50 fp16 on an H100: no faster, and
            // three times the compile time, these hooks gathering input windows).
            let cooperative = false;
            let source =
                TiledSource { key: key.clone(), dtype, hooks, a, b: Walk::Outer, buffers, cooperative, packed: false };
            Tiled::new(gpu, source).map(ConvKernel::Tiled)
        };
        match self.algo {
            Algo::Gemm => tiled(CONV_B, Walk::K),
            Algo::Pointwise => tiled(POINTWISE_B, Walk::K),
            Algo::Transpose => tiled(TRANSPOSE_B, if self.kernel == [1, 1, 1] { Walk::Outer } else { Walk::K }),
            Algo::Direct => {
                let source = || format!("{}{head}{}", enables(dtype), subst(DIRECT));
                gpu.pipeline(&key, source).map(ConvKernel::Direct)
            }
        }
    }
}
