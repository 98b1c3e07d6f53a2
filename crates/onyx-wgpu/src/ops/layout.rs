//! Layout operators: the shape-only ones as zero-copy views (Reshape, Flatten, Squeeze,
//! Unsqueeze, Identity), and the ones that move elements (Transpose, Concat, Split, Slice,
//! Expand, Tile, Pad, Resize, DepthToSpace, SpaceToDepth).
//!
//! Every element-moving kernel works on element *sizes*, not types: 1-, 2-, 4- and 8-byte
//! elements, so one shader serves bool/uint8/int8, f16, f32/int32 and int64 alike. Buffers are
//! bound as `array<u32>`; an element is held as its bits in a `u32` (or a `vec2<u32>` for 8
//! bytes). Each invocation writes whole output words (four 1-byte or two 2-byte elements, one
//! 4-byte element, or the two words of an 8-byte one), so no two invocations ever write the
//! same word. See [`element_shader`]: a kernel supplies only `fetch(e)`, the bits of output
//! element `e`. The gather, cast and compare families build on the same shader template.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use super::{input_dtype, Registry};
use crate::buffer::GpuBuffer;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, grid, host_input, host_ints, strides, u32_of, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

// ---------------------------------------------------------------------------------------------
// The element shader template shared by the data-movement families.
// ---------------------------------------------------------------------------------------------

/// Bytes per element of a dtype the data-movement kernels handle (1, 2, 4 or 8); `None` for
/// strings, packed sub-byte types and 16-byte types.
pub(crate) fn elem_size(dtype: DataType) -> Option<u32> {
    match dtype.bit_width() {
        8 => Some(1),
        16 => Some(2),
        32 => Some(4),
        64 => Some(8),
        _ => None,
    }
}

/// The element size of input `i` when inference knows a dtype that the kernels can move.
pub(crate) fn input_elem_size(ctx: &NodeContext<'_>, i: usize) -> Option<u32> {
    input_dtype(ctx, i).and_then(elem_size)
}

/// The WGSL type that holds one element of `size` bytes: its bits, zero-extended, in a `u32`,
/// or the little-endian words of an 8-byte element (or of a 16-byte unit, see [`Units`]).
fn holder(size: u32) -> &'static str {
    match size {
        8 => "vec2<u32>",
        16 => "vec4<u32>",
        _ => "u32",
    }
}

/// The WGSL array type of a buffer of `size`-byte elements: whole 16-byte units are bound as
/// `vec4<u32>` so that they move with single 128-bit accesses; anything else as words.
fn buffer_type(size: u32) -> &'static str {
    if size == 16 {
        "array<vec4<u32>>"
    } else {
        "array<u32>"
    }
}

/// WGSL `load_<name>(s)`: element `s` of buffer `b_<name>`, which holds elements of `size`
/// bytes packed into `u32` words.
fn loader(name: &str, size: u32) -> String {
    match size {
        1 => format!("fn load_{name}(s: u32) -> u32 {{ return (b_{name}[s >> 2u] >> ((s & 3u) * 8u)) & 0xffu; }}\n"),
        2 => format!("fn load_{name}(s: u32) -> u32 {{ return (b_{name}[s >> 1u] >> ((s & 1u) * 16u)) & 0xffffu; }}\n"),
        4 => format!("fn load_{name}(s: u32) -> u32 {{ return b_{name}[s]; }}\n"),
        16 => format!("fn load_{name}(s: u32) -> vec4<u32> {{ return b_{name}[s]; }}\n"),
        _ => format!(
            "fn load_{name}(s: u32) -> vec2<u32> {{ return vec2<u32>(b_{name}[2u * s], b_{name}[2u * s + 1u]); }}\n"
        ),
    }
}

/// The entry point: each invocation computes one output word from `fetch`.
fn writer(size: u32) -> &'static str {
    match size {
        1 => {
            "    let e = 4u * w;
    if (e >= n) { return; }
    var r = 0u;
    for (var k = 0u; k < 4u; k++) {
        if (e + k < n) { r |= (fetch(e + k) & 0xffu) << (8u * k); }
    }
    y[w] = r;
"
        }
        2 => {
            "    let e = 2u * w;
    if (e >= n) { return; }
    var r = fetch(e) & 0xffffu;
    if (e + 1u < n) { r |= (fetch(e + 1u) & 0xffffu) << 16u; }
    y[w] = r;
"
        }
        4 | 16 => {
            "    if (w >= n) { return; }
    y[w] = fetch(w);
"
        }
        _ => {
            "    if (w >= n) { return; }
    let v = fetch(w);
    y[2u * w] = v.x;
    y[2u * w + 1u] = v.y;
"
        }
    }
}

/// A compute shader producing `p[0]` output elements of `out` bytes each into `y`.
///
/// `inputs` name the read-only buffers (bindings 1.. in order; `y` follows them) and their
/// element sizes; each gets a `load_<name>(s)`. `code` must define `fn fetch(e: u32) -> E`
/// (`E` is the holder type of the output) and use every input. `fill()` is the element in
/// `p[1]` (and `p[2]`); kernel parameters start at `p[3]`. `enable` lines go first.
pub(crate) fn element_shader(enable: &str, out: u32, inputs: &[(&str, u32)], code: &str) -> String {
    let mut s = String::from(enable);
    s += &format!("alias E = {};\n", holder(out));
    s += "@group(0) @binding(0) var<storage, read> p: array<u32>;\n";
    for (i, (name, size)) in inputs.iter().enumerate() {
        s += &format!("@group(0) @binding({}) var<storage, read> b_{name}: {};\n", i + 1, buffer_type(*size));
    }
    s += &format!("@group(0) @binding({}) var<storage, read_write> y: {};\n", inputs.len() + 1, buffer_type(out));
    s += FLAT_INDEX;
    s += "const NONE: u32 = 0xffffffffu;\n";
    s += match out {
        8 => "fn fill() -> E { return vec2<u32>(p[1], p[2]); }\n",
        16 => "fn fill() -> E { return vec4<u32>(p[1], p[2], 0u, 0u); }\n",
        _ => "fn fill() -> E { return p[1]; }\n",
    };
    for (name, size) in inputs {
        s += &loader(name, *size);
    }
    s += code;
    s += "\n@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = flat_index(gid, nwg);
    let n = p[0];
";
    s += writer(out);
    s += "}\n";
    s
}

/// Invocations that write `n` elements of `size` bytes (one per output word).
fn threads(n: usize, size: u32) -> usize {
    match size {
        1 => n.div_ceil(4),
        2 => n.div_ceil(2),
        _ => n,
    }
}

/// What one dispatch of an [`element_shader`] writes: `n` elements of `size` bytes, and the
/// words of its fill element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Elements {
    /// Bytes per output element.
    pub size: u32,
    /// Output elements.
    pub n: usize,
    /// The fill element's words (`fill()` in the shader).
    pub fill: [u32; 2],
}

impl Elements {
    /// `n` elements of `size` bytes with a zero fill element.
    pub fn new(size: u32, n: usize) -> Elements {
        Elements { size, n, fill: [0, 0] }
    }

    /// The same with fill element `fill`.
    pub fn fill(self, fill: [u32; 2]) -> Elements {
        Elements { fill, ..self }
    }
}

/// Records one dispatch of an [`element_shader`] writing `out`, with the kernel's own
/// parameters and the buffers (inputs, then the output).
pub(crate) fn dispatch_elements(
    run: &mut GpuRun,
    pipeline: &Pipeline,
    out: Elements,
    params: &[u32],
    buffers: &[&GpuBuffer],
    at: &Location,
) -> Result<()> {
    let Elements { size, n, fill } = out;
    let mut p = vec![u32_of(n, at)?, fill[0], fill[1]];
    p.extend_from_slice(params);
    // 8-byte elements are addressed as word pairs, 1-byte ones four to a word.
    u32_of(n.saturating_mul(if size == 8 { 2 } else { 1 }), at)?;
    run.dispatch(pipeline, &p, buffers, grid(threads(n, size)))
}

/// The first element of a host tensor as fill words (its little-endian bits).
pub(crate) fn fill_words(view: &TensorView<'_>) -> Result<[u32; 2]> {
    let size = elem_size(view.dtype()).ok_or_else(|| Error::Unsupported(format!("wgpu: {} elements", view.dtype())))?;
    let bytes = view.bytes()?;
    let mut b = [0u8; 8];
    let n = (size as usize).min(bytes.len());
    b[..n].copy_from_slice(&bytes[..n]);
    Ok([u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u32::from_le_bytes([b[4], b[5], b[6], b[7]])])
}

// ---------------------------------------------------------------------------------------------
// Strided gathers: every output element reads `base + sum(coord[d] * stride[d])`.
// ---------------------------------------------------------------------------------------------

/// WGSL `fetch` of a strided gather. Parameters: rank, base, dims[rank], strides[rank]
/// (strides and base as wrapping u32, so negative strides work).
const STRIDED: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    if (rank == 0u) { return load_x(p[4]); }
    var rem = e;
    var s = p[4];
    for (var k = rank - 1u; k > 0u; k--) {
        let dim = p[5u + k];
        let q = rem / dim;
        s += (rem - q * dim) * p[5u + rank + k];
        rem = q;
    }
    return load_x(s + rem * p[5u + rank]);
}
";

/// One element-shader kernel compiled for an element size and for the larger units (4, 8 and
/// 16 bytes) that whole runs of contiguous elements can move as: a row of 64 f16 values
/// moves as 8 `vec4<u32>` units, with one index computation per unit instead of per element.
pub(crate) struct Units {
    /// (unit bytes, pipeline), the element size first, then larger units ascending.
    pipes: Vec<(u32, Arc<Pipeline>)>,
}

impl Units {
    /// The kernel `make(unit)` for `size` and every larger unit.
    pub fn new(size: u32, make: impl Fn(u32) -> Result<Arc<Pipeline>>) -> Result<Units> {
        let mut pipes = vec![(size, make(size)?)];
        for unit in [4, 8, 16] {
            if unit > size {
                pipes.push((unit, make(unit)?));
            }
        }
        Ok(Units { pipes })
    }

    /// The largest unit that `fits` (the element size itself when none does), and its kernel.
    pub fn pick(&self, fits: impl Fn(u32) -> bool) -> (u32, &Pipeline) {
        let (first, rest) = self.pipes.split_first().expect("Units holds the element size");
        let (unit, pipe) = rest.iter().rev().find(|(u, _)| fits(*u)).unwrap_or(first);
        (*unit, pipe)
    }
}

/// The strided-gather kernels for `size`-byte elements.
pub(crate) fn strided_units(gpu: &GpuContext, size: u32) -> Result<Units> {
    Units::new(size, |u| gpu.pipeline(&format!("layout/strided/{u}"), || element_shader("", u, &[("x", u)], STRIDED)))
}

/// A strided view of an input: output dims, and per dim the input stride (in elements,
/// possibly negative or 0) plus the input offset of element 0.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Strided {
    /// Input index of output element 0.
    pub base: i64,
    /// Output dims.
    pub dims: Vec<usize>,
    /// Input stride of each output dim.
    pub strides: Vec<i64>,
}

impl Strided {
    /// Size-1 dims dropped, and adjacent dims merged where the input is contiguous across them.
    pub fn merged(&self) -> Strided {
        let mut dims: Vec<usize> = vec![];
        let mut st: Vec<i64> = vec![];
        for (&n, &s) in self.dims.iter().zip(&self.strides) {
            if n == 1 {
                continue;
            }
            match (dims.last_mut(), st.last_mut()) {
                (Some(d), Some(ps)) if *ps == s * n as i64 => {
                    *d *= n;
                    *ps = s;
                }
                _ => {
                    dims.push(n);
                    st.push(s);
                }
            }
        }
        Strided { base: self.base, dims, strides: st }
    }

    /// Output element count.
    pub fn count(&self) -> usize {
        self.dims.iter().product()
    }

    /// Shader parameters (see [`STRIDED`]).
    pub fn params(&self, at: &Location) -> Result<Vec<u32>> {
        let m = self.merged();
        let mut p = vec![m.dims.len() as u32, m.base as u32];
        for &d in &m.dims {
            p.push(u32_of(d, at)?);
        }
        // Wrapping: the final index is in range even when partial sums are "negative".
        p.extend(m.strides.iter().map(|&s| s as u32));
        Ok(p)
    }

    /// Whether the (merged) view moves whole `unit`-byte units of `size`-byte elements: its
    /// innermost dim is contiguous and every offset is a multiple of the unit.
    fn fits(&self, size: u32, unit: u32) -> bool {
        let (s, u) = (i64::from(size), i64::from(unit));
        let Some((&last, outer)) = self.dims.split_last() else { return false };
        self.strides.last() == Some(&1)
            && (last as i64 * s) % u == 0
            && (self.base * s).rem_euclid(u) == 0
            && self.strides[..outer.len()].iter().all(|&st| (st * s).rem_euclid(u) == 0)
    }

    /// The same (merged) view counted in `unit`-byte units of `size`-byte elements.
    fn in_units(&self, size: u32, unit: u32) -> Strided {
        let r = i64::from(unit / size);
        let mut v = self.clone();
        v.base /= r;
        let n = v.dims.len();
        if let Some(last) = v.dims.last_mut() {
            *last /= r as usize;
        }
        for st in &mut v.strides[..n.saturating_sub(1)] {
            *st /= r;
        }
        v
    }

    /// Records the gather from `x` into `y` (elements of `size` bytes) with the largest unit
    /// of `units` the view allows.
    pub fn record(
        &self,
        run: &mut GpuRun,
        units: &Units,
        size: u32,
        x: &GpuBuffer,
        y: &GpuBuffer,
        at: &Location,
    ) -> Result<()> {
        let m = self.merged();
        let (unit, pipeline) = units.pick(|u| m.fits(size, u));
        let v = if unit == size { m } else { m.in_units(size, unit) };
        let params = v.params(at)?;
        dispatch_elements(run, pipeline, Elements::new(unit, v.count()), &params, &[x, y], at)
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.
// ---------------------------------------------------------------------------------------------

/// Maps a possibly negative `axis` into `0..rank`.
pub(crate) fn normalize_axis(axis: i64, rank: usize, at: &Location) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) && !(rank == 0 && axis == 0) {
        return Err(Error::node(at, format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Whether input `i` is a tensor of a dtype the data-movement kernels handle.
fn movable(ctx: &NodeContext<'_>, i: usize) -> bool {
    input_elem_size(ctx, i).is_some()
}

/// Whether input `i` is present.
fn has_input(ctx: &NodeContext<'_>, i: usize) -> bool {
    ctx.node.input(i).is_some()
}

/// Whether input `i` is a tensor (of any dtype).
fn is_tensor(ctx: &NodeContext<'_>, i: usize) -> bool {
    matches!(ctx.input_types.get(i), Some(ValueType::Tensor(_)))
}

/// The dtype of input `i` or an `Unsupported` error.
pub(crate) fn known_dtype(ctx: &NodeContext<'_>, i: usize) -> Result<DataType> {
    input_dtype(ctx, i)
        .ok_or_else(|| Error::Unsupported(format!("wgpu: input {i} of {} has no known dtype", ctx.node.location())))
}

/// The element size of input `i` or an `Unsupported` error.
pub(crate) fn known_size(ctx: &NodeContext<'_>, i: usize) -> Result<u32> {
    let dtype = known_dtype(ctx, i)?;
    elem_size(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {} on {dtype} tensors", ctx.node.location())))
}

/// A new GPU tensor value sharing `x`'s buffer with another shape.
fn view_as(x: &onyx_core::Tensor, shape: Vec<usize>, at: &Location) -> Result<Vec<Value>> {
    Ok(vec![Value::Tensor(x.reshaped(shape).map_err(|e| e.at(at))?)])
}

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    r.add_with_host_inputs("Reshape", supports_first_movable, build_reshape, &[1]);
    r.add("Flatten", supports_first_movable, build_flatten);
    r.add_with_host_inputs("Squeeze", supports_first_movable, build_squeeze, &[1]);
    r.add_with_host_inputs("Unsqueeze", supports_first_movable, build_unsqueeze, &[1]);
    r.add("Identity", supports_identity, build_identity);
    r.add("Transpose", supports_first_movable, build_transpose);
    r.add("DepthToSpace", supports_rearrange, build_depth_to_space);
    r.add("SpaceToDepth", supports_rearrange, build_space_to_depth);
    r.add("Concat", supports_concat, build_concat);
    r.add_with_host_inputs("Split", supports_first_movable, build_split, &[1]);
    r.add_with_host_inputs("Slice", supports_first_movable, build_slice, &[1, 2, 3, 4]);
    r.add_with_host_inputs("Expand", supports_first_movable, build_expand, &[1]);
    r.add_with_host_inputs("Tile", supports_first_movable, build_tile, &[1]);
    r.add_with_host_inputs("Pad", supports_pad, build_pad, &[1, 2, 3]);
    r.add_with_host_inputs("Resize", supports_resize, build_resize, &[1, 2, 3]);
    r.add_with_host_inputs("Upsample", supports_resize, build_resize, &[1]);
}

/// Input 0 is a tensor the kernels can move.
fn supports_first_movable(ctx: &NodeContext<'_>, _gpu: &GpuContext) -> bool {
    movable(ctx, 0)
}

fn supports_identity(ctx: &NodeContext<'_>, _gpu: &GpuContext) -> bool {
    is_tensor(ctx, 0) && movable(ctx, 0)
}

// ---------------------------------------------------------------------------------------------
// Zero-copy shape ops.
// ---------------------------------------------------------------------------------------------

/// The output shape of Reshape: `0` copies the input dim (or is a real 0 with `allowzero`),
/// one `-1` takes what is left.
fn reshape_dims(input: &[usize], spec: &[i64], allowzero: bool, at: &Location) -> Result<Vec<usize>> {
    let total: usize = input.iter().product();
    let bad =
        || Error::input(at, 1, format!("a shape with as many elements as the input {input:?}"), format!("{spec:?}"));
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        let d = match s {
            -1 if infer.is_some() => return Err(Error::input(at, 1, "at most one -1", format!("{spec:?}"))),
            -1 => {
                infer = Some(i);
                1
            }
            0 if allowzero => 0,
            0 => *input.get(i).ok_or_else(|| {
                Error::input(
                    at,
                    1,
                    format!("0 only at positions below the input rank {}", input.len()),
                    format!("{spec:?}"),
                )
            })?,
            s if s < 0 => return Err(Error::input(at, 1, "dims >= -1", format!("{spec:?}"))),
            s => usize::try_from(s).map_err(|_| bad())?,
        };
        out.push(d);
    }
    if allowzero && infer.is_some() && spec.contains(&0) {
        return Err(Error::input(at, 1, "no -1 together with 0 when allowzero is set", format!("{spec:?}")));
    }
    let known = out.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(bad)?;
    if let Some(i) = infer {
        out[i] = match (known, total) {
            (0, 0) => 0,
            (0, _) => return Err(bad()),
            (k, t) if t % k == 0 => t / k,
            _ => return Err(bad()),
        };
    } else if known != total {
        return Err(bad());
    }
    Ok(out)
}

/// Reshape: a view of the input's buffer.
struct Reshape {
    allowzero: bool,
    at: Location,
}

fn build_reshape(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let allowzero = ctx.since_version >= 14 && ctx.node.int_or("allowzero", 0)? != 0;
    Ok(Box::new(Reshape { allowzero, at: ctx.node.location() }))
}

impl GpuOp for Reshape {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let spec = host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "a shape", "nothing"))?;
        let shape = reshape_dims(x.shape(), &spec, self.allowzero, &self.at)?;
        view_as(x.tensor, shape, &self.at)
    }
}

/// Flatten: `[prod(dims[..axis]), prod(dims[axis..])]`, a view.
struct Flatten {
    axis: i64,
    at: Location,
}

fn build_flatten(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Flatten { axis: ctx.node.int_or("axis", 1)?, at: ctx.node.location() }))
}

impl GpuOp for Flatten {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let r = x.shape().len() as i64;
        if self.axis < -r || self.axis > r {
            return Err(Error::attribute(&self.at, "axis", format!("a value in [{}, {r}]", -r), self.axis.to_string()));
        }
        let axis = if self.axis < 0 { self.axis + r } else { self.axis } as usize;
        let shape = vec![x.shape()[..axis].iter().product(), x.shape()[axis..].iter().product()];
        view_as(x.tensor, shape, &self.at)
    }
}

/// Squeeze/Unsqueeze axes: an attribute before opset 13, input 1 from then on.
struct AxesArg {
    attr: Option<Vec<i64>>,
    from_input: bool,
}

impl AxesArg {
    fn build(ctx: &NodeContext<'_>) -> Result<AxesArg> {
        let from_input = ctx.since_version >= 13;
        let attr = if from_input { None } else { ctx.node.get_ints("axes")?.map(<[i64]>::to_vec) };
        Ok(AxesArg { attr, from_input })
    }

    fn get(&self, inputs: &[Option<ValueRef<'_>>], at: &Location) -> Result<Option<Vec<i64>>> {
        if self.from_input {
            host_ints(inputs, 1, at)
        } else {
            Ok(self.attr.clone())
        }
    }
}

/// Normalizes `axes` against `rank`, rejecting repeats.
fn distinct_axes(axes: &[i64], rank: usize, at: &Location) -> Result<Vec<bool>> {
    let mut chosen = vec![false; rank];
    for &a in axes {
        let d = normalize_axis(a, rank, at)?;
        if std::mem::replace(&mut chosen[d], true) {
            return Err(Error::node(at, format!("axis {a} appears twice in axes {axes:?}")));
        }
    }
    Ok(chosen)
}

/// Squeeze (`unsqueeze == false`) or Unsqueeze: views.
struct Squeeze {
    axes: AxesArg,
    unsqueeze: bool,
    at: Location,
}

fn build_squeeze(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Squeeze { axes: AxesArg::build(ctx)?, unsqueeze: false, at: ctx.node.location() }))
}

fn build_unsqueeze(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let axes = AxesArg::build(ctx)?;
    if !axes.from_input && axes.attr.is_none() {
        return Err(Error::attribute(&ctx.node.location(), "axes", "a list of ints", "nothing"));
    }
    Ok(Box::new(Squeeze { axes, unsqueeze: true, at: ctx.node.location() }))
}

impl Squeeze {
    fn squeezed(&self, input: &[usize], axes: Option<Vec<i64>>) -> Result<Vec<usize>> {
        let Some(axes) = axes else { return Ok(input.iter().copied().filter(|&d| d != 1).collect()) };
        let chosen = distinct_axes(&axes, input.len(), &self.at)?;
        if let Some(d) = (0..input.len()).find(|&d| chosen[d] && input[d] != 1) {
            return Err(Error::input(&self.at, 0, format!("size 1 along squeezed axis {d}"), format!("{input:?}")));
        }
        Ok(input.iter().zip(&chosen).filter(|(_, &c)| !c).map(|(&d, _)| d).collect())
    }

    fn unsqueezed(&self, input: &[usize], axes: Option<Vec<i64>>) -> Result<Vec<usize>> {
        let axes = axes.ok_or_else(|| Error::input(&self.at, 1, "axes", "no input"))?;
        let chosen = distinct_axes(&axes, input.len() + axes.len(), &self.at)?;
        let mut dims = input.iter();
        Ok(chosen.iter().map(|&c| if c { 1 } else { dims.next().copied().unwrap_or(1) }).collect())
    }
}

impl GpuOp for Squeeze {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let axes = self.axes.get(inputs, &self.at)?;
        let shape = if self.unsqueeze { self.unsqueezed(x.shape(), axes)? } else { self.squeezed(x.shape(), axes)? };
        view_as(x.tensor, shape, &self.at)
    }
}

/// Identity: the input tensor itself.
struct Identity {
    at: Location,
}

fn build_identity(ctx: &NodeContext<'_>, _gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    Ok(Box::new(Identity { at: ctx.node.location() }))
}

impl GpuOp for Identity {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        Ok(vec![Value::Tensor(x.tensor.clone())])
    }
}

// ---------------------------------------------------------------------------------------------
// Transpose, DepthToSpace, SpaceToDepth.
// ---------------------------------------------------------------------------------------------

/// Shape and permutation with size-1 dims dropped and input dims that stay adjacent merged.
fn simplify(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut renumber = vec![usize::MAX; shape.len()];
    let mut kept_shape = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if n != 1 {
            renumber[d] = kept_shape.len();
            kept_shape.push(n);
        }
    }
    let kept_perm: Vec<usize> = perm.iter().map(|&p| renumber[p]).filter(|&p| p != usize::MAX).collect();
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &p in &kept_perm {
        match groups.last_mut() {
            Some(g) if g.1 + 1 == p => g.1 = p,
            _ => groups.push((p, p)),
        }
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&g| groups[g].0);
    let mut new_shape = vec![0; groups.len()];
    let mut new_perm = vec![0; groups.len()];
    for (new_dim, &g) in order.iter().enumerate() {
        let (first, last) = groups[g];
        new_shape[new_dim] = kept_shape[first..=last].iter().product();
        new_perm[g] = new_dim;
    }
    (new_shape, new_perm)
}

/// Tile edge of the workgroup-memory transpose.
const TILE: u32 = 32;

/// A batched 2-D transpose through workgroup memory: workgroup (x, y, z) moves the 32x32 tile
/// at column block x, row block y of matrix z. Parameters: rows, cols.
fn tiled_transpose_shader(size: u32) -> String {
    format!(
        "alias E = {ty};
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<E>;
@group(0) @binding(2) var<storage, read_write> y: array<E>;
var<workgroup> tile: array<array<E, 33>, 32>;
@compute @workgroup_size(32, 8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {{
    let rows = p[0];
    let cols = p[1];
    let base = wg.z * rows * cols;
    let c0 = wg.x * 32u;
    let r0 = wg.y * 32u;
    for (var j = 0u; j < 32u; j += 8u) {{
        let r = r0 + l.y + j;
        let c = c0 + l.x;
        if (r < rows && c < cols) {{ tile[l.y + j][l.x] = x[base + r * cols + c]; }}
    }}
    workgroupBarrier();
    for (var j = 0u; j < 32u; j += 8u) {{
        let c = c0 + l.y + j;
        let r = r0 + l.x;
        if (c < cols && r < rows) {{ y[base + c * rows + r] = tile[l.x][l.y + j]; }}
    }}
}}
",
        ty = holder(size)
    )
}

/// The pipelines a transpose of `size`-byte elements uses.
struct TransposePipes {
    size: u32,
    strided: Units,
    /// The workgroup-memory kernel for batched 2-D transposes (4- and 8-byte elements).
    tiled: Option<Arc<Pipeline>>,
}

impl TransposePipes {
    fn new(gpu: &GpuContext, size: u32) -> Result<TransposePipes> {
        let tiled = match size {
            4 | 8 => Some(gpu.pipeline(&format!("layout/transpose_tiled/{size}"), || tiled_transpose_shader(size))?),
            _ => None,
        };
        Ok(TransposePipes { size, strided: strided_units(gpu, size)?, tiled })
    }

    /// `x` (viewed as `shape`) permuted by `perm`, reshaped to `out_shape`: a view when the
    /// permutation moves nothing, else a new tensor.
    fn apply(
        &self,
        run: &mut GpuRun,
        x: &onyx_core::Tensor,
        shape: &[usize],
        perm: &[usize],
        out_shape: Vec<usize>,
        at: &Location,
    ) -> Result<Value> {
        let (s, p) = simplify(shape, perm);
        if x.is_empty() || s.len() <= 1 {
            return Ok(Value::Tensor(x.reshaped(out_shape).map_err(|e| e.at(at))?));
        }
        let y = run.alloc(x.dtype(), out_shape)?;
        let xb = run.context().own_buffer(x)?;
        if !self.record_tiled(run, &s, &p, xb, y.gpu()?)? {
            let in_strides = strides(&s);
            let view = Strided {
                base: 0,
                dims: p.iter().map(|&d| s[d]).collect(),
                strides: p.iter().map(|&d| in_strides[d] as i64).collect(),
            };
            view.record(run, &self.strided, self.size, xb, y.gpu()?, at)?;
        }
        Ok(Value::Tensor(y))
    }

    /// Records the tiled kernel when the (simplified) permutation is a batched 2-D transpose
    /// that fits the dispatch limits; false otherwise.
    fn record_tiled(&self, run: &mut GpuRun, s: &[usize], p: &[usize], x: &GpuBuffer, y: &GpuBuffer) -> Result<bool> {
        let Some(tiled) = &self.tiled else { return Ok(false) };
        let (batch, rows, cols) = match p {
            [1, 0] => (1, s[0], s[1]),
            [0, 2, 1] => (s[0], s[1], s[2]),
            _ => return Ok(false),
        };
        let max = run.context().device().limits().max_compute_workgroups_per_dimension as usize;
        let groups = [cols.div_ceil(TILE as usize), rows.div_ceil(TILE as usize), batch];
        if groups.iter().any(|&g| g > max) {
            return Ok(false);
        }
        let groups = groups.map(|g| g as u32);
        run.dispatch(tiled, &[rows as u32, cols as u32], &[x, y], groups)?;
        Ok(true)
    }
}

/// Transpose.
struct Transpose {
    perm: Option<Vec<i64>>,
    pipes: TransposePipes,
    at: Location,
}

fn build_transpose(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let perm = ctx.node.get_ints("perm")?.map(<[i64]>::to_vec);
    let pipes = TransposePipes::new(gpu, known_size(ctx, 0)?)?;
    Ok(Box::new(Transpose { perm, pipes, at: ctx.node.location() }))
}

impl Transpose {
    /// The permutation for an input of `rank` (reversal by default), checked.
    fn perm(&self, rank: usize) -> Result<Vec<usize>> {
        let perm: Vec<usize> = match &self.perm {
            None => (0..rank).rev().collect(),
            Some(p) => p.iter().map(|&x| usize::try_from(x).unwrap_or(usize::MAX)).collect(),
        };
        let mut seen = vec![false; rank];
        let ok = perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
        if !ok {
            return Err(Error::attribute(
                &self.at,
                "perm",
                format!("a permutation of 0..{rank}"),
                format!("{:?}", self.perm),
            ));
        }
        Ok(perm)
    }
}

impl GpuOp for Transpose {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let perm = self.perm(x.shape().len())?;
        let out: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        Ok(vec![self.pipes.apply(run, x.tensor, x.shape(), &perm, out, &self.at)?])
    }
}

/// DepthToSpace (`to_space`) or SpaceToDepth: a 6-D transpose.
struct Rearrange {
    blocksize: usize,
    to_space: bool,
    /// Column-row-depth order (DepthToSpace mode CRD) instead of depth-column-row.
    crd: bool,
    pipes: TransposePipes,
    at: Location,
}

fn supports_rearrange(ctx: &NodeContext<'_>, _gpu: &GpuContext) -> bool {
    let mode_ok =
        ctx.node.op_type != "DepthToSpace" || ctx.node.string_or("mode", "DCR").is_ok_and(|m| m == "DCR" || m == "CRD");
    mode_ok && movable(ctx, 0)
}

fn build_rearrange(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>, to_space: bool) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let b = node.get_int("blocksize")?.ok_or_else(|| Error::attribute(&at, "blocksize", "an int", "nothing"))?;
    let blocksize = usize::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| Error::attribute(&at, "blocksize", "a positive int", b.to_string()))?;
    let crd = to_space && ctx.since_version >= 11 && node.string_or("mode", "DCR")? == "CRD";
    let pipes = TransposePipes::new(gpu, known_size(ctx, 0)?)?;
    Ok(Box::new(Rearrange { blocksize, to_space, crd, pipes, at }))
}

fn build_depth_to_space(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_rearrange(ctx, gpu, true)
}

fn build_space_to_depth(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_rearrange(ctx, gpu, false)
}

impl Rearrange {
    /// The 6-D view of the input, the permutation and the output shape.
    fn plan(&self, shape: &[usize]) -> Result<([usize; 6], [usize; 6], Vec<usize>)> {
        let &[n, c, h, w] = shape else {
            return Err(Error::input(&self.at, 0, "a 4-D tensor [N, C, H, W]", format!("{shape:?}")));
        };
        let b = self.blocksize;
        let too_large = || Error::node(&self.at, format!("blocksize {b} makes {shape:?} too large"));
        let bb = b.checked_mul(b).ok_or_else(too_large)?;
        if self.to_space {
            if c % bb != 0 {
                return Err(Error::input(
                    &self.at,
                    0,
                    format!("channels divisible by blocksize² = {bb}"),
                    format!("{shape:?}"),
                ));
            }
            let out = vec![n, c / bb, h.checked_mul(b).ok_or_else(too_large)?, w.checked_mul(b).ok_or_else(too_large)?];
            Ok(if self.crd {
                ([n, c / bb, b, b, h, w], [0, 1, 4, 2, 5, 3], out)
            } else {
                ([n, b, b, c / bb, h, w], [0, 3, 4, 1, 5, 2], out)
            })
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(Error::input(
                    &self.at,
                    0,
                    format!("height and width divisible by blocksize {b}"),
                    format!("{shape:?}"),
                ));
            }
            let depth = c.checked_mul(bb).ok_or_else(too_large)?;
            Ok(([n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4], vec![n, depth, h / b, w / b]))
        }
    }
}

impl GpuOp for Rearrange {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let (view, perm, shape) = self.plan(x.shape())?;
        Ok(vec![self.pipes.apply(run, x.tensor, &view, &perm, shape, &self.at)?])
    }
}

// ---------------------------------------------------------------------------------------------
// Concat and Split.
// ---------------------------------------------------------------------------------------------

/// Concat's `fetch` for `n` inputs `x0..`: output element `e` is at row `o = e / p[3]`,
/// position `r` in the row; input `k` holds positions `p[4 + k]..p[5 + k]` of every row.
fn concat_code(n: usize) -> String {
    let mut s = String::from("fn fetch(e: u32) -> E {\n    let o = e / p[3];\n    let r = e - o * p[3];\n");
    for k in 0..n {
        let read = format!("load_x{k}(o * (p[{b}u] - p[{a}u]) + r - p[{a}u])", a = 4 + k, b = 5 + k);
        if k + 1 < n {
            s += &format!("    if (r < p[{}u]) {{ return {read}; }}\n", 5 + k);
        } else {
            s += &format!("    return {read};\n");
        }
    }
    s + "}\n"
}

/// Whether Concat's inputs are tensors of one movable dtype, few enough to bind at once.
fn supports_concat(ctx: &NodeContext<'_>, gpu: &GpuContext) -> bool {
    let n = ctx.node.inputs.len();
    let limit = gpu.device().limits().max_storage_buffers_per_shader_stage as usize;
    let first = input_dtype(ctx, 0);
    n >= 1 && n + 2 <= limit && movable(ctx, 0) && (0..n).all(|i| has_input(ctx, i) && input_dtype(ctx, i) == first)
}

/// Concat: one dispatch reading every input.
struct Concat {
    axis: i64,
    size: u32,
    units: Units,
    at: Location,
}

fn build_concat(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let axis = ctx.node.get_int("axis")?.ok_or_else(|| Error::attribute(&at, "axis", "an int", "nothing"))?;
    let size = known_size(ctx, 0)?;
    let n = ctx.node.inputs.len();
    let names: Vec<String> = (0..n).map(|k| format!("x{k}")).collect();
    let inputs: Vec<(&str, u32)> = names.iter().map(|s| (s.as_str(), size)).collect();
    let units = Units::new(size, |u| {
        let inputs: Vec<(&str, u32)> = inputs.iter().map(|&(name, _)| (name, u)).collect();
        gpu.pipeline(&format!("layout/concat/{u}/{n}"), || element_shader("", u, &inputs, &concat_code(n)))
    })?;
    Ok(Box::new(Concat { axis, size, units, at }))
}

impl GpuOp for Concat {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let xs = (0..inputs.len()).map(|i| gpu_input(run, inputs, i, &self.at)).collect::<Result<Vec<_>>>()?;
        let first = xs.first().ok_or_else(|| Error::input(&self.at, 0, "at least one tensor", "no inputs"))?;
        let rank = first.shape().len();
        if rank == 0 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, rank, &self.at)?;
        let mut shape = first.shape().to_vec();
        shape[axis] = 0;
        for (i, x) in xs.iter().enumerate() {
            let same = x.shape().len() == rank && (0..rank).all(|d| d == axis || x.shape()[d] == first.shape()[d]);
            if x.dtype() != first.dtype() || !same {
                return Err(Error::input(
                    &self.at,
                    i,
                    format!("{}{:?} (any size along axis {axis})", first.dtype(), first.shape()),
                    format!("{}{:?}", x.dtype(), x.shape()),
                ));
            }
            shape[axis] += x.shape()[axis];
        }
        if xs.len() == 1 {
            return Ok(vec![Value::Tensor(first.tensor.clone())]);
        }
        let inner: usize = shape[axis + 1..].iter().product();
        // Every input's block along the axis moves as whole units.
        let bytes = |d: usize| d * inner * self.size as usize;
        // (An empty input binds 4 bytes: too few for a vec4 array.)
        let fits = |u: u32| xs.iter().all(|x| bytes(x.shape()[axis]) % u as usize == 0 && (x.len() > 0 || u < 16));
        let (unit, pipeline) = self.units.pick(fits);
        let units_of = |d: usize| bytes(d) / unit as usize;
        let mut params = vec![u32_of(units_of(shape[axis]), &self.at)?, 0];
        let mut offset = 0;
        for x in &xs {
            offset += units_of(x.shape()[axis]);
            params.push(u32_of(offset, &self.at)?);
        }
        let y = run.alloc(first.dtype(), shape)?;
        let mut buffers: Vec<&GpuBuffer> = xs.iter().map(|x| x.buffer).collect();
        buffers.push(y.gpu()?);
        let n = y.len() * self.size as usize / unit as usize;
        dispatch_elements(run, pipeline, Elements::new(unit, n), &params, &buffers, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// Split: one strided copy per output.
struct Split {
    axis: i64,
    split_attr: Option<Vec<i64>>,
    num_outputs: Option<i64>,
    split_input: bool,
    uneven_ok: bool,
    outputs: usize,
    size: u32,
    pipeline: Units,
    at: Location,
}

fn build_split(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let v = ctx.since_version;
    let num_outputs = if v >= 18 { node.get_int("num_outputs")? } else { None };
    if let Some(n) = num_outputs {
        if n < 1 || n as usize != node.outputs.len() {
            return Err(Error::attribute(
                &at,
                "num_outputs",
                format!("the number of outputs ({})", node.outputs.len()),
                n.to_string(),
            ));
        }
    }
    let size = known_size(ctx, 0)?;
    Ok(Box::new(Split {
        axis: node.int_or("axis", 0)?,
        split_attr: if v < 13 { node.get_ints("split")?.map(<[i64]>::to_vec) } else { None },
        num_outputs,
        split_input: v >= 13,
        uneven_ok: v >= 18,
        outputs: node.outputs.len(),
        size,
        pipeline: strided_units(gpu, size)?,
        at,
    }))
}

impl Split {
    /// The size of every piece along an axis of `dim` elements.
    fn sizes(&self, inputs: &[Option<ValueRef<'_>>], dim: usize) -> Result<Vec<usize>> {
        let given = match (&self.split_attr, self.split_input) {
            (Some(s), _) => Some(s.clone()),
            (None, true) => host_ints(inputs, 1, &self.at)?,
            (None, false) => None,
        };
        if let Some(sizes) = given.filter(|s| !s.is_empty()) {
            let ok = sizes.len() == self.outputs
                && sizes.iter().all(|&s| s >= 0)
                && sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s)) == Some(dim as i64);
            if !ok {
                return Err(Error::node(
                    &self.at,
                    format!(
                        "split sizes {sizes:?} must be {} non-negative sizes summing to the axis' dim {dim}",
                        self.outputs
                    ),
                ));
            }
            return Ok(sizes.iter().map(|&s| s as usize).collect());
        }
        let n = self.num_outputs.map_or(self.outputs, |n| n as usize);
        if n == 0 {
            return Err(Error::node(&self.at, "Split needs at least one output"));
        }
        let chunk = dim.div_ceil(n);
        if chunk * n != dim && !self.uneven_ok {
            return Err(Error::node(&self.at, format!("cannot split a dim of {dim} evenly into {n} outputs")));
        }
        let rest = dim.checked_sub(chunk * (n - 1)).ok_or_else(|| {
            Error::node(
                &self.at,
                format!("cannot split a dim of {dim} into {n} pieces of {chunk} and a smaller last one"),
            )
        })?;
        let mut sizes = vec![chunk; n - 1];
        sizes.push(rest);
        Ok(sizes)
    }
}

impl GpuOp for Split {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        if x.shape().is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, x.shape().len(), &self.at)?;
        let dim = x.shape()[axis];
        let sizes = self.sizes(inputs, dim)?;
        let outer: usize = x.shape()[..axis].iter().product();
        let inner: usize = x.shape()[axis + 1..].iter().product();
        let mut start = 0;
        let mut outs = Vec::with_capacity(sizes.len());
        for &size in &sizes {
            let mut shape = x.shape().to_vec();
            shape[axis] = size;
            let y = run.alloc(x.dtype(), shape)?;
            let view = Strided {
                base: (start * inner) as i64,
                dims: vec![outer, size * inner],
                strides: vec![(dim * inner) as i64, 1],
            };
            view.record(run, &self.pipeline, self.size, x.buffer, y.gpu()?, &self.at)?;
            outs.push(Value::Tensor(y));
            start += size;
        }
        Ok(outs)
    }
}

// ---------------------------------------------------------------------------------------------
// Slice and Expand: strided gathers.
// ---------------------------------------------------------------------------------------------

/// One axis of a slice after clamping: `count` elements from `start`, `step` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AxisSlice {
    start: i64,
    step: i64,
    count: usize,
}

/// Clamps `start`/`end` into a dim of size `dim` the way the ONNX spec says.
fn clamp_axis(start: i64, end: i64, step: i64, dim: usize) -> AxisSlice {
    let d = dim as i64;
    let wrap = |x: i64| if x < 0 { x.saturating_add(d) } else { x };
    let (start, end) = (wrap(start), wrap(end));
    let (start, end) = if step > 0 {
        (start.max(0).min(d), end.max(0).min(d))
    } else {
        (start.max(0).min(d - 1), end.max(-1).min(d - 1))
    };
    let span = if step > 0 { end - start } else { start - end };
    let stride = step.unsigned_abs() as i128;
    let count = if span <= 0 { 0 } else { ((span as i128 + stride - 1) / stride) as usize };
    AxisSlice { start, step, count }
}

/// Slice's starts, ends and (optional) axes given as attributes (opset 1).
type SliceAttrs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// Slice: starts/ends/axes attributes before opset 10, host inputs (with steps) from 10 on.
struct Slice {
    attrs: Option<SliceAttrs>,
    size: u32,
    pipeline: Units,
    at: Location,
}

fn build_slice(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let attrs = if ctx.since_version < 10 {
        let get = |name: &str| -> Result<Vec<i64>> {
            node.get_ints(name)?
                .map(<[i64]>::to_vec)
                .ok_or_else(|| Error::attribute(&at, name, "a list of ints", "nothing"))
        };
        Some((get("starts")?, get("ends")?, node.get_ints("axes")?.map(<[i64]>::to_vec)))
    } else {
        None
    };
    let size = known_size(ctx, 0)?;
    Ok(Box::new(Slice { attrs, size, pipeline: strided_units(gpu, size)?, at }))
}

impl Slice {
    /// The clamped slice of every axis of `shape`.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<AxisSlice>> {
        let rank = shape.len();
        let (starts, ends, axes, steps) = match &self.attrs {
            Some((s, e, a)) => (s.clone(), e.clone(), a.clone(), None),
            None => {
                let starts =
                    host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "starts", "no input"))?;
                let ends =
                    host_ints(inputs, 2, &self.at)?.ok_or_else(|| Error::input(&self.at, 2, "ends", "no input"))?;
                (starts, ends, host_ints(inputs, 3, &self.at)?, host_ints(inputs, 4, &self.at)?)
            }
        };
        let n = starts.len();
        let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; n]);
        if ends.len() != n || axes.len() != n || steps.len() != n || n > rank {
            return Err(Error::node(
                &self.at,
                format!("starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} must have one length, at most the rank {rank}"),
            ));
        }
        let mut out: Vec<AxisSlice> = shape.iter().map(|&d| AxisSlice { start: 0, step: 1, count: d }).collect();
        let mut seen = vec![false; rank];
        for i in 0..n {
            let axis = normalize_axis(axes[i], rank, &self.at)?;
            if std::mem::replace(&mut seen[axis], true) {
                return Err(Error::node(&self.at, format!("axis {} appears twice in axes {axes:?}", axes[i])));
            }
            if steps[i] == 0 {
                return Err(Error::node(&self.at, format!("step of axis {} is 0", axes[i])));
            }
            out[axis] = clamp_axis(starts[i], ends[i], steps[i], shape[axis]);
        }
        Ok(out)
    }
}

impl GpuOp for Slice {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let slices = self.plan(inputs, x.shape())?;
        let shape: Vec<usize> = slices.iter().map(|s| s.count).collect();
        if shape == x.shape() && slices.iter().all(|s| s.step == 1) {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let in_strides = strides(x.shape());
        let view = Strided {
            base: slices.iter().zip(&in_strides).map(|(s, &st)| s.start * st as i64).sum(),
            dims: shape.clone(),
            strides: slices.iter().zip(&in_strides).map(|(s, &st)| s.step * st as i64).collect(),
        };
        let y = run.alloc(x.dtype(), shape)?;
        view.record(run, &self.pipeline, self.size, x.buffer, y.gpu()?, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// The broadcast of two shapes (numpy rules), or an error naming both.
fn broadcast_shapes(a: &[usize], b: &[usize], at: &Location) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Error::node(at, format!("shapes {a:?} and {b:?} cannot be broadcast together"))),
        })
        .collect()
}

/// Expand: a broadcasting strided gather (stride 0 along expanded dims).
struct Expand {
    size: u32,
    pipeline: Units,
    at: Location,
}

fn build_expand(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    Ok(Box::new(Expand { size, pipeline: strided_units(gpu, size)?, at: ctx.node.location() }))
}

impl GpuOp for Expand {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let spec = host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "a shape", "nothing"))?;
        let spec: Vec<usize> = spec
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::input(&self.at, 1, "non-negative dims", format!("{spec:?}")))?;
        let shape = broadcast_shapes(x.shape(), &spec, &self.at)?;
        if shape == x.shape() {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let pad = shape.len() - x.shape().len();
        let own = strides(x.shape());
        let view = Strided {
            base: 0,
            dims: shape.clone(),
            strides: (0..shape.len())
                .map(|d| if d < pad || x.shape()[d - pad] == 1 { 0 } else { own[d - pad] as i64 })
                .collect(),
        };
        let y = run.alloc(x.dtype(), shape)?;
        view.record(run, &self.pipeline, self.size, x.buffer, y.gpu()?, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// Tile and Pad.
// ---------------------------------------------------------------------------------------------

/// Tile's `fetch`. Parameters: rank, out dims[rank], in dims[rank], in strides[rank].
const TILE_CODE: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {
        let k = d - 1u;
        let od = p[4u + k];
        let c = rem % od;
        rem = rem / od;
        s += (c % p[4u + rank + k]) * p[4u + 2u * rank + k];
    }
    return load_x(s);
}
";

/// Tile: repeats the input `repeats[d]` times along each axis `d`.
struct Tile {
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_tile(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    let pipeline =
        gpu.pipeline(&format!("layout/tile/{size}"), || element_shader("", size, &[("x", size)], TILE_CODE))?;
    Ok(Box::new(Tile { size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for Tile {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let repeats = host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "repeats", "nothing"))?;
        let rank = x.shape().len();
        if repeats.len() != rank {
            return Err(Error::input(
                &self.at,
                1,
                format!("{rank} repeats (the input's rank)"),
                format!("{repeats:?}"),
            ));
        }
        let mut shape = Vec::with_capacity(rank);
        for (&d, &r) in x.shape().iter().zip(&repeats) {
            let r = usize::try_from(r)
                .map_err(|_| Error::input(&self.at, 1, "non-negative repeats", format!("{repeats:?}")))?;
            shape.push(
                d.checked_mul(r)
                    .ok_or_else(|| Error::node(&self.at, format!("tiling a dim of {d} {r} times overflows")))?,
            );
        }
        let y = run.alloc(x.dtype(), shape.clone())?;
        let mut params = vec![rank as u32];
        for &v in shape.iter().chain(x.shape()).chain(&strides(x.shape())) {
            params.push(u32_of(v, &self.at)?);
        }
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()),
            &params,
            &[x.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// How Pad fills positions outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl PadMode {
    fn parse(s: &str, version: i64) -> Option<PadMode> {
        match s {
            "constant" => Some(PadMode::Constant),
            "reflect" => Some(PadMode::Reflect),
            "edge" => Some(PadMode::Edge),
            "wrap" if version >= 19 => Some(PadMode::Wrap),
            _ => None,
        }
    }

    /// WGSL that handles `q` outside `lo..hi` (the surviving input part of the axis).
    fn wgsl(self) -> &'static str {
        match self {
            PadMode::Constant => "return NONE;",
            PadMode::Edge => "q = clamp(q, lo, hi - 1);",
            PadMode::Wrap => "let m = hi - lo; q = lo + (((q - lo) % m) + m) % m;",
            PadMode::Reflect => {
                "let m = hi - lo;
            if (m == 1) { q = lo; } else {
                let period = 2 * (m - 1);
                let r = (((q - lo) % period) + period) % period;
                q = lo + select(period - r, r, r < m);
            }"
            }
        }
    }
}

/// Pad's `fetch`. Parameters: rank, then per axis (arrays of rank): out dims, in strides,
/// begin pads (i32), and the surviving input range lo..hi.
fn pad_code(mode: PadMode) -> String {
    format!(
        "
fn src(e: u32) -> u32 {{
    let rank = p[3];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {{
        let k = d - 1u;
        let od = p[4u + k];
        let c = i32(rem % od);
        rem = rem / od;
        var q = c - bitcast<i32>(p[4u + 2u * rank + k]);
        let lo = i32(p[4u + 3u * rank + k]);
        let hi = i32(p[4u + 4u * rank + k]);
        if (q < lo || q >= hi) {{
            {}
        }}
        s += u32(q) * p[4u + rank + k];
    }}
    return s;
}}
fn fetch(e: u32) -> E {{
    let s = src(e);
    if (s == NONE) {{ return fill(); }}
    return load_x(s);
}}
",
        mode.wgsl()
    )
}

/// Pad: constant, reflect, edge and wrap; negative pads crop.
struct Pad {
    mode: PadMode,
    /// Pads and constant words from attributes (before opset 11).
    attr: Option<(Vec<i64>, [u32; 2])>,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn supports_pad(ctx: &NodeContext<'_>, _gpu: &GpuContext) -> bool {
    let mode_ok = ctx.node.string_or("mode", "constant").is_ok_and(|m| PadMode::parse(&m, ctx.since_version).is_some());
    let value_ok = ctx.since_version >= 11 || input_dtype(ctx, 0).is_some_and(|d| scalar_words(d, 0.0).is_some());
    mode_ok && value_ok && movable(ctx, 0)
}

fn build_pad(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let mode_name = node.string_or("mode", "constant")?;
    let mode = PadMode::parse(&mode_name, ctx.since_version)
        .ok_or_else(|| Error::attribute(&at, "mode", "constant, reflect, edge (or wrap from opset 19)", mode_name))?;
    let dtype = known_dtype(ctx, 0)?;
    let attr = if ctx.since_version < 11 {
        let pads = node.get_ints("pads")?.or(node.get_ints("paddings")?);
        let pads = pads.ok_or_else(|| Error::attribute(&at, "pads", "a list of ints", "nothing"))?;
        let value = f64::from(node.float_or("value", 0.0)?);
        let words = scalar_words(dtype, value).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} on {dtype}")))?;
        Some((pads.to_vec(), words))
    } else {
        None
    };
    let size = known_size(ctx, 0)?;
    let key = format!("layout/pad/{mode:?}/{size}");
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("x", size)], &pad_code(mode)))?;
    Ok(Box::new(Pad { mode, attr, size, pipeline, at }))
}

/// `v` as the bits of a scalar of `dtype` (converted as a cast would), for the numeric types
/// and bool.
pub(crate) fn scalar_words(dtype: DataType, v: f64) -> Option<[u32; 2]> {
    let w = |lo: u64| Some([lo as u32, (lo >> 32) as u32]);
    match dtype {
        DataType::Float => w(u64::from((v as f32).to_bits())),
        DataType::Double => w(v.to_bits()),
        DataType::Float16 => w(u64::from(half::f16::from_f64(v).to_bits())),
        DataType::BFloat16 => w(u64::from(half::bf16::from_f64(v).to_bits())),
        DataType::Int8 => w(u64::from(v as i8 as u8)),
        DataType::Uint8 => w(u64::from(v as u8)),
        DataType::Int16 => w(u64::from(v as i16 as u16)),
        DataType::Uint16 => w(u64::from(v as u16)),
        DataType::Int32 => w(u64::from(v as i32 as u32)),
        DataType::Uint32 => w(u64::from(v as u32)),
        DataType::Int64 => w(v as i64 as u64),
        DataType::Uint64 => w(v as u64),
        DataType::Bool => w(u64::from(v != 0.0)),
        _ => None,
    }
}

impl Pad {
    /// Begin and end pads of every axis.
    fn pads(&self, inputs: &[Option<ValueRef<'_>>], rank: usize) -> Result<Vec<(i64, i64)>> {
        let pads = match &self.attr {
            Some((p, _)) => p.clone(),
            None => host_ints(inputs, 1, &self.at)?.ok_or_else(|| Error::input(&self.at, 1, "pads", "no input"))?,
        };
        let axes: Vec<usize> = match host_ints(inputs, 3, &self.at)? {
            Some(a) => a.iter().map(|&a| normalize_axis(a, rank, &self.at)).collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(Error::node(
                &self.at,
                format!("pads {pads:?} must hold a begin and an end for each of the {} axes", axes.len()),
            ));
        }
        let mut out = vec![(0, 0); rank];
        for (i, &axis) in axes.iter().enumerate() {
            out[axis] = (pads[i], pads[i + axes.len()]);
        }
        Ok(out)
    }

    /// The fill element: the attribute value, constant_value input, or zero.
    fn fill(&self, inputs: &[Option<ValueRef<'_>>], dtype: DataType) -> Result<[u32; 2]> {
        if let Some((_, words)) = &self.attr {
            return Ok(*words);
        }
        if self.mode != PadMode::Constant || inputs.get(2).copied().flatten().is_none() {
            return Ok([0, 0]);
        }
        let c = host_input(inputs, 2, &self.at)?;
        if c.is_empty() {
            return Ok([0, 0]);
        }
        if c.dtype() != dtype {
            return Err(Error::input(&self.at, 2, format!("a {dtype} scalar"), c.dtype().name()));
        }
        fill_words(&c)
    }

    /// Per axis: output length, begin pad, and the surviving input range `lo..hi`.
    fn axis(&self, dim: usize, begin: i64, end: i64) -> Result<(usize, i64, i64, i64)> {
        let d = dim as i64;
        let out = d.checked_add(begin).and_then(|x| x.checked_add(end)).filter(|&n| n >= 0);
        let Some(out) = out else {
            return Err(Error::node(&self.at, format!("pads {begin} and {end} leave nothing of a dim of {d}")));
        };
        let lo = (-begin).max(0);
        let hi = d - (-end).max(0);
        if hi <= lo && self.mode != PadMode::Constant && out > 0 {
            return Err(Error::node(
                &self.at,
                format!("{:?} padding needs a non-empty dim, found a dim of {d} after cropping", self.mode),
            ));
        }
        let fits = |v: i64| i32::try_from(v).is_ok();
        if !(fits(out) && fits(begin) && fits(lo) && fits(hi)) {
            return Err(Error::node(&self.at, format!("pads {begin} and {end} are too large for the GPU kernel")));
        }
        Ok((out as usize, begin, lo, hi.max(lo)))
    }
}

impl GpuOp for Pad {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let rank = x.shape().len();
        let pads = self.pads(inputs, rank)?;
        let fill = self.fill(inputs, x.dtype())?;
        let axes = x.shape().iter().zip(&pads).map(|(&d, &(b, e))| self.axis(d, b, e)).collect::<Result<Vec<_>>>()?;
        let shape: Vec<usize> = axes.iter().map(|a| a.0).collect();
        let in_strides = strides(x.shape());
        let mut params = vec![rank as u32];
        params.extend(shape.iter().map(|&d| d as u32));
        for &s in &in_strides {
            params.push(u32_of(s, &self.at)?);
        }
        params.extend(axes.iter().map(|a| a.1 as i32 as u32));
        params.extend(axes.iter().map(|a| a.2 as u32));
        params.extend(axes.iter().map(|a| a.3 as u32));
        let y = run.alloc(x.dtype(), shape)?;
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()).fill(fill),
            &params,
            &[x.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// Resize and Upsample.
// ---------------------------------------------------------------------------------------------

/// Resize's interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

/// How an output coordinate maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// How nearest mode rounds an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rounding {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Opset 10 and Upsample: floor when upsampling, ceil when downsampling.
    Simple,
}

/// How `sizes` keeps the aspect ratio (opset 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Where Resize's arguments are: `(X, scales)` (Resize-10, Upsample-9), `(X, roi, scales,
/// sizes)` (Resize-11 on) or a `scales` attribute (Upsample-7).
#[derive(Debug, Clone, PartialEq)]
enum ResizeInputs {
    ScalesAttr(Vec<f32>),
    Scales,
    RoiScalesSizes,
}

/// One axis to resize: lengths, scale and region of interest (TfCropAndResize).
#[derive(Debug, Clone, Copy, PartialEq)]
struct ResizeAxis {
    input: usize,
    output: usize,
    scale: f64,
    roi: (f64, f64),
}

impl ResizeAxis {
    fn is_identity(&self, coord: Coord) -> bool {
        self.input == self.output && self.scale == 1.0 && (coord != Coord::TfCropAndResize || self.roi == (0.0, 1.0))
    }

    /// The input coordinate of output index `x`, or `None` where TfCropAndResize extrapolates.
    fn source(&self, x: usize, coord: Coord) -> Option<f64> {
        let (x, input, output, s) = (x as f64, self.input as f64, self.output as f64, self.scale);
        Some(match coord {
            Coord::HalfPixel => (x + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = output / (s * input);
                input / 2.0 * (1.0 - adjustment) + (x + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel if self.output > 1 => (x + 0.5) / s - 0.5,
            Coord::AlignCorners if self.output > 1 => x * (input - 1.0) / (output - 1.0),
            Coord::PytorchHalfPixel | Coord::AlignCorners => 0.0,
            Coord::Asymmetric => x / s,
            Coord::TfHalfPixelForNn => (x + 0.5) / s,
            Coord::TfCropAndResize => {
                let (a, b) = self.roi;
                let v = if self.output > 1 {
                    a * (input - 1.0) + x * (b - a) * (input - 1.0) / (output - 1.0)
                } else {
                    0.5 * (a + b) * (input - 1.0)
                };
                if v < 0.0 || v > input - 1.0 {
                    return None;
                }
                v
            }
        })
    }
}

/// The input index nearest to `x` under `rounding`, clamped into an axis of `len`.
fn round_nearest(x: f64, rounding: Rounding, scale: f64, len: usize) -> usize {
    let f = x.floor();
    let r = x - f;
    let i = match rounding {
        Rounding::RoundPreferFloor => {
            if r <= 0.5 {
                f
            } else {
                f + 1.0
            }
        }
        Rounding::RoundPreferCeil => {
            if r < 0.5 {
                f
            } else {
                f + 1.0
            }
        }
        Rounding::Floor => f,
        Rounding::Ceil => x.ceil(),
        Rounding::Simple => {
            if scale < 1.0 {
                x.ceil()
            } else {
                f
            }
        }
    };
    i.clamp(0.0, len.saturating_sub(1) as f64) as usize
}

/// Linear/cubic filter options.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Filter {
    mode: ResizeMode,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
}

impl Filter {
    /// The kernel's value at distance `x`.
    fn weight(&self, x: f64) -> f64 {
        let x = x.abs();
        match self.mode {
            ResizeMode::Cubic => {
                let a = self.cubic_a;
                if x <= 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
                } else {
                    0.0
                }
            }
            _ => (1.0 - x).max(0.0),
        }
    }
}

/// Most resized axes the linear/cubic kernel combines.
const MAX_RESIZED: usize = 8;

/// Resize's nearest `fetch`. Parameters: rank, then per axis (4 each): out dim, in stride,
/// taps (0: identity axis), table offset. Table entries are (index, weight bits) pairs; an
/// index of `NONE` marks an extrapolated coordinate.
const RESIZE_NEAREST: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {
        let q = 4u + 4u * (d - 1u);
        let c = rem % p[q];
        rem = rem / p[q];
        if (p[q + 2u] == 0u) { s += c * p[q + 1u]; continue; }
        let idx = b_t[p[q + 3u] + 2u * c];
        if (idx == NONE) { return fill(); }
        s += idx * p[q + 1u];
    }
    return load_x(s);
}
";

/// Resize's linear/cubic `fetch` in f32 (see [`RESIZE_NEAREST`] for the parameters), for a
/// float type read and written by `to_f32`/`from_f32`.
fn resize_filter_code(dtype: DataType) -> String {
    let (to, from) = match dtype {
        DataType::Float16 => ("bitcast<f32>(f16_to_f32(v))", "f32_to_f16(bitcast<u32>(v))"),
        DataType::BFloat16 => ("bitcast<f32>(v << 16u)", "f32_to_bf16(bitcast<u32>(v))"),
        _ => ("bitcast<f32>(v)", "bitcast<u32>(v)"),
    };
    format!(
        "{lib}
fn to_f32(v: u32) -> f32 {{ return {to}; }}
fn from_f32(v: f32) -> u32 {{ return {from}; }}
fn fetch(e: u32) -> E {{
    let rank = p[3];
    var pos: array<u32, {MAX_RESIZED}>;
    var wid: array<u32, {MAX_RESIZED}>;
    var str: array<u32, {MAX_RESIZED}>;
    var r = 0u;
    var total = 1u;
    var base = 0u;
    var rem = e;
    for (var d = rank; d > 0u; d--) {{
        let q = 4u + 4u * (d - 1u);
        let c = rem % p[q];
        rem = rem / p[q];
        let width = p[q + 2u];
        if (width == 0u) {{ base += c * p[q + 1u]; continue; }}
        let at = p[q + 3u] + 2u * width * c;
        if (b_t[at] == NONE) {{ return fill(); }}
        pos[r] = at;
        wid[r] = width;
        str[r] = p[q + 1u];
        total *= width;
        r += 1u;
    }}
    var acc = 0.0;
    for (var t = 0u; t < total; t++) {{
        var rest = t;
        var s = base;
        var w = 1.0;
        for (var a = 0u; a < r; a++) {{
            let k = rest % wid[a];
            rest = rest / wid[a];
            let at = pos[a] + 2u * k;
            s += b_t[at] * str[a];
            w *= bitcast<f32>(b_t[at + 1u]);
        }}
        acc += w * to_f32(load_x(s));
    }}
    return from_f32(acc);
}}
",
        lib = super::cast::CAST_LIB
    )
}

/// Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): nearest for every element size,
/// linear and cubic (antialiased or not) for f32, f16 and bf16, computed in f32.
///
/// The per-axis sampling tables (input index and weight of each tap, computed on the host
/// in f64 exactly as the CPU EP computes them) are uploaded once per input shape and
/// arguments, and cached.
struct Resize {
    mode: ResizeMode,
    coord: Coord,
    rounding: Rounding,
    filter: Filter,
    extrapolation: f64,
    axes: Option<Vec<i64>>,
    policy: Policy,
    inputs: ResizeInputs,
    size: u32,
    pipeline: Arc<Pipeline>,
    /// The last table: its key (shape and argument bits) and the GPU tensor.
    table: std::sync::Mutex<Option<(Vec<u64>, onyx_core::Tensor)>>,
    at: Location,
}

fn parse_resize_mode(s: &str, allow_cubic: bool) -> Option<ResizeMode> {
    match s {
        "nearest" => Some(ResizeMode::Nearest),
        "linear" | "bilinear" => Some(ResizeMode::Linear),
        "cubic" | "bicubic" if allow_cubic => Some(ResizeMode::Cubic),
        _ => None,
    }
}

fn parse_coord(s: &str) -> Option<Coord> {
    Some(match s {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        _ => return None,
    })
}

fn parse_rounding(s: &str) -> Option<Rounding> {
    Some(match s {
        "round_prefer_floor" => Rounding::RoundPreferFloor,
        "round_prefer_ceil" => Rounding::RoundPreferCeil,
        "floor" => Rounding::Floor,
        "ceil" => Rounding::Ceil,
        _ => return None,
    })
}

/// The decoded attributes of a Resize or Upsample node.
struct ResizeAttrs {
    mode: ResizeMode,
    coord: Coord,
    rounding: Rounding,
    filter: Filter,
    extrapolation: f64,
    axes: Option<Vec<i64>>,
    policy: Policy,
    inputs: ResizeInputs,
}

/// The decoded attributes of a Resize/Upsample node, or an error.
fn resize_attributes(ctx: &NodeContext<'_>) -> Result<ResizeAttrs> {
    let node = ctx.node;
    let at = node.location();
    let v = ctx.since_version;
    let legacy = node.op_type == "Upsample" || v < 11;
    let mode_name = node.string_or("mode", "nearest")?;
    let mode = parse_resize_mode(&mode_name, !legacy)
        .ok_or_else(|| Error::attribute(&at, "mode", "nearest, linear or cubic", mode_name.as_str()))?;
    if legacy {
        let inputs = if node.op_type == "Upsample" && v < 9 {
            let scales = node
                .get_floats("scales")?
                .ok_or_else(|| Error::attribute(&at, "scales", "a list of floats", "nothing"))?;
            ResizeInputs::ScalesAttr(scales.to_vec())
        } else {
            ResizeInputs::Scales
        };
        let filter = Filter { mode, cubic_a: -0.75, exclude_outside: false, antialias: false };
        return Ok(ResizeAttrs {
            mode,
            coord: Coord::Asymmetric,
            rounding: Rounding::Simple,
            filter,
            extrapolation: 0.0,
            axes: None,
            policy: Policy::Stretch,
            inputs,
        });
    }
    let policy_name = node.string_or("keep_aspect_ratio_policy", "stretch")?;
    let policy = match policy_name.as_str() {
        "stretch" => Policy::Stretch,
        "not_larger" if v >= 18 => Policy::NotLarger,
        "not_smaller" if v >= 18 => Policy::NotSmaller,
        other => {
            return Err(Error::attribute(&at, "keep_aspect_ratio_policy", "stretch, not_larger or not_smaller", other))
        }
    };
    let coord_name = node.string_or("coordinate_transformation_mode", "half_pixel")?;
    let coord = parse_coord(&coord_name).ok_or_else(|| {
        Error::attribute(&at, "coordinate_transformation_mode", "a mode the ONNX spec lists", coord_name.as_str())
    })?;
    let rounding_name = node.string_or("nearest_mode", "round_prefer_floor")?;
    let rounding = parse_rounding(&rounding_name).ok_or_else(|| {
        Error::attribute(
            &at,
            "nearest_mode",
            "round_prefer_floor, round_prefer_ceil, floor or ceil",
            rounding_name.as_str(),
        )
    })?;
    let filter = Filter {
        mode,
        cubic_a: f64::from(node.float_or("cubic_coeff_a", -0.75)?),
        exclude_outside: node.int_or("exclude_outside", 0)? != 0,
        antialias: v >= 18 && node.int_or("antialias", 0)? != 0,
    };
    let extrapolation = f64::from(node.float_or("extrapolation_value", 0.0)?);
    let axes = if v >= 18 { node.get_ints("axes")?.map(<[i64]>::to_vec) } else { None };
    Ok(ResizeAttrs { mode, coord, rounding, filter, extrapolation, axes, policy, inputs: ResizeInputs::RoiScalesSizes })
}

/// Nearest mode moves any element size; linear and cubic compute in f32 on float types.
fn supports_resize(ctx: &NodeContext<'_>, _gpu: &GpuContext) -> bool {
    let Ok(attrs) = resize_attributes(ctx) else { return false };
    let dtype = input_dtype(ctx, 0);
    match attrs.mode {
        ResizeMode::Nearest => movable(ctx, 0),
        _ => matches!(dtype, Some(DataType::Float | DataType::Float16 | DataType::BFloat16)),
    }
}

fn build_resize(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let ResizeAttrs { mode, coord, rounding, filter, extrapolation, axes, policy, inputs } = resize_attributes(ctx)?;
    let dtype = known_dtype(ctx, 0)?;
    let size = known_size(ctx, 0)?;
    let pipeline = if mode == ResizeMode::Nearest {
        gpu.pipeline(&format!("layout/resize_nearest/{size}"), || {
            element_shader("", size, &[("x", size), ("t", 4)], RESIZE_NEAREST)
        })?
    } else {
        let code = resize_filter_code(dtype);
        gpu.pipeline(&format!("layout/resize_filter/{}", dtype.name()), || {
            element_shader("", size, &[("x", size), ("t", 4)], &code)
        })?
    };
    let table = std::sync::Mutex::new(None);
    let at = ctx.node.location();
    Ok(Box::new(Resize {
        mode,
        coord,
        rounding,
        filter,
        extrapolation,
        axes,
        policy,
        inputs,
        size,
        pipeline,
        table,
        at,
    }))
}

impl Resize {
    /// A float host input (roi, scales) as f64 values; `None` when omitted or empty.
    fn floats(&self, inputs: &[Option<ValueRef<'_>>], i: usize) -> Result<Option<Vec<f64>>> {
        if inputs.get(i).copied().flatten().is_none() {
            return Ok(None);
        }
        let v = host_input(inputs, i, &self.at)?;
        if v.is_empty() {
            return Ok(None);
        }
        Ok(Some(match v.dtype() {
            DataType::Float => v.as_slice::<f32>()?.iter().map(|&x| f64::from(x)).collect(),
            DataType::Float16 => v.as_slice::<half::f16>()?.iter().map(|x| x.to_f64()).collect(),
            DataType::BFloat16 => v.as_slice::<half::bf16>()?.iter().map(|x| x.to_f64()).collect(),
            DataType::Double => v.as_slice::<f64>()?.iter().map(|&x| f64::from(x as f32)).collect(),
            other => return Err(Error::input(&self.at, i, "a float tensor", other.name())),
        }))
    }

    /// The axes that scales/sizes/roi refer to.
    fn axes(&self, rank: usize) -> Result<Vec<usize>> {
        let Some(axes) = &self.axes else { return Ok((0..rank).collect()) };
        let mut seen = vec![false; rank];
        axes.iter()
            .map(|&a| {
                let d = normalize_axis(a, rank, &self.at)?;
                if std::mem::replace(&mut seen[d], true) {
                    return Err(Error::attribute(&self.at, "axes", "distinct axes", format!("{axes:?}")));
                }
                Ok(d)
            })
            .collect()
    }

    /// Every axis' input and output length, scale and region of interest.
    fn plan(&self, inputs: &[Option<ValueRef<'_>>], shape: &[usize]) -> Result<Vec<ResizeAxis>> {
        let axes = self.axes(shape.len())?;
        let (roi, scales, sizes) = match &self.inputs {
            ResizeInputs::ScalesAttr(s) => (None, Some(s.iter().map(|&x| f64::from(x)).collect()), None),
            ResizeInputs::Scales => (None, self.floats(inputs, 1)?, None),
            ResizeInputs::RoiScalesSizes => {
                let sizes = host_ints(inputs, 3, &self.at)?.filter(|s| !s.is_empty());
                (self.floats(inputs, 1)?, self.floats(inputs, 2)?, sizes)
            }
        };
        let mut plan: Vec<ResizeAxis> =
            shape.iter().map(|&d| ResizeAxis { input: d, output: d, scale: 1.0, roi: (0.0, 1.0) }).collect();
        match (scales, sizes) {
            (Some(_), Some(_)) => return Err(Error::node(&self.at, "Resize takes scales or sizes, not both")),
            (None, None) => return Err(Error::node(&self.at, "Resize needs scales or sizes")),
            (Some(scales), None) => self.apply_scales(&mut plan, &axes, &scales)?,
            (None, Some(sizes)) => self.apply_sizes(&mut plan, &axes, &sizes)?,
        }
        if self.coord == Coord::TfCropAndResize {
            let roi = roi.ok_or_else(|| Error::input(&self.at, 1, "a roi for tf_crop_and_resize", "no input"))?;
            if roi.len() != 2 * axes.len() {
                return Err(Error::input(
                    &self.at,
                    1,
                    format!("{} roi values (start and end per axis)", 2 * axes.len()),
                    roi.len().to_string(),
                ));
            }
            for (i, &d) in axes.iter().enumerate() {
                plan[d].roi = (roi[i], roi[i + axes.len()]);
            }
        }
        if let Some(a) = plan.iter().find(|a| a.input == 0 && a.output > 0) {
            return Err(Error::node(&self.at, format!("cannot resize an empty axis to {} elements", a.output)));
        }
        Ok(plan)
    }

    fn apply_scales(&self, plan: &mut [ResizeAxis], axes: &[usize], scales: &[f64]) -> Result<()> {
        let index = if matches!(self.inputs, ResizeInputs::RoiScalesSizes) { 2 } else { 1 };
        if scales.len() != axes.len() || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return Err(Error::input(
                &self.at,
                index,
                format!("{} positive scales", axes.len()),
                format!("{scales:?}"),
            ));
        }
        for (&d, &s) in axes.iter().zip(scales) {
            let out = (plan[d].input as f64 * s).floor();
            if out > u32::MAX as f64 {
                return Err(Error::input(
                    &self.at,
                    index,
                    "scales giving an output the GPU can index",
                    format!("{scales:?}"),
                ));
            }
            plan[d].output = out as usize;
            plan[d].scale = s;
        }
        Ok(())
    }

    fn apply_sizes(&self, plan: &mut [ResizeAxis], axes: &[usize], sizes: &[i64]) -> Result<()> {
        if sizes.len() != axes.len() || sizes.iter().any(|&s| s < 0) {
            return Err(Error::input(&self.at, 3, format!("{} non-negative sizes", axes.len()), format!("{sizes:?}")));
        }
        let ratios: Vec<f64> = axes.iter().zip(sizes).map(|(&d, &s)| s as f64 / plan[d].input as f64).collect();
        let common = match self.policy {
            Policy::Stretch => None,
            Policy::NotLarger => ratios.iter().copied().reduce(f64::min),
            Policy::NotSmaller => ratios.iter().copied().reduce(f64::max),
        };
        for ((&d, &s), &r) in axes.iter().zip(sizes).zip(&ratios) {
            let axis = &mut plan[d];
            match common {
                None => {
                    axis.output = s as usize;
                    axis.scale = r;
                }
                Some(c) => {
                    axis.output = (c * axis.input as f64 + 0.5).floor() as usize;
                    axis.scale = c;
                }
            }
        }
        Ok(())
    }

    /// The taps of one axis: `width` (index, weight) pairs per output index, with `NONE` as
    /// the first index of an extrapolated one.
    fn taps(&self, axis: &ResizeAxis) -> Result<(u32, Vec<u32>)> {
        const NONE: u32 = u32::MAX;
        let last = axis.input.saturating_sub(1);
        if self.mode == ResizeMode::Nearest {
            let mut t = Vec::with_capacity(2 * axis.output);
            for x in 0..axis.output {
                let i = axis.source(x, self.coord).map(|v| round_nearest(v, self.rounding, axis.scale, axis.input));
                t.extend([i.map_or(NONE, |i| i as u32), 1f32.to_bits()]);
            }
            return Ok((1, t));
        }
        let f = &self.filter;
        let support = if f.mode == ResizeMode::Cubic { 2.0 } else { 1.0 };
        let s = if f.antialias { axis.scale.min(1.0) } else { 1.0 };
        let reach = (support / s).ceil();
        if reach.is_nan() || reach > 64.0 {
            return Err(Error::Unsupported(format!(
                "wgpu: {} antialiasing at scale {} needs too wide a filter",
                self.at, axis.scale
            )));
        }
        let start = (-support / s).floor() as i64 + 1;
        let width = (2 - 2 * start) as usize;
        let mut t = Vec::with_capacity(2 * width * axis.output);
        let mut w = vec![0f64; width];
        for x in 0..axis.output {
            let src = axis.source(x, self.coord);
            let v = src.unwrap_or(0.0);
            let mut fl = v.floor();
            let mut ratio = v - fl;
            if ratio == 0.0 {
                fl -= 1.0;
                ratio = 1.0;
            }
            let base = fl as i64;
            for (k, wk) in w.iter_mut().enumerate() {
                *wk = f.weight(((start + k as i64) as f64 - ratio) * s);
            }
            let inside = |k: usize| (0..=last as i64).contains(&(base + start + k as i64));
            if f.exclude_outside {
                for (k, wk) in w.iter_mut().enumerate() {
                    if !inside(k) {
                        *wk = 0.0;
                    }
                }
            }
            if f.antialias || f.exclude_outside {
                let sum: f64 = w.iter().sum();
                if sum != 0.0 {
                    w.iter_mut().for_each(|wk| *wk /= sum);
                }
            }
            for (k, &wk) in w.iter().enumerate() {
                let i = (base + start + k as i64).clamp(0, last as i64) as u32;
                t.extend([if src.is_none() && k == 0 { NONE } else { i }, (wk as f32).to_bits()]);
            }
        }
        Ok((width as u32, t))
    }

    /// Kernel parameters and the table for `plan` on an input of `shape` (the table from the
    /// cache when the arguments did not change).
    fn tables(&self, run: &GpuRun, plan: &[ResizeAxis], shape: &[usize]) -> Result<(Vec<u32>, onyx_core::Tensor)> {
        let in_strides = strides(shape);
        let mut params = vec![plan.len() as u32];
        let mut table: Vec<u32> = vec![];
        let mut key: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let mut resized = 0;
        for (a, &stride) in plan.iter().zip(&in_strides) {
            key.extend([a.output as u64, a.scale.to_bits(), a.roi.0.to_bits(), a.roi.1.to_bits()]);
            params.extend([u32_of(a.output, &self.at)?, u32_of(stride, &self.at)?]);
            if a.is_identity(self.coord) {
                params.extend([0, 0]);
                continue;
            }
            resized += 1;
            let (width, taps) = self.taps(a)?;
            params.extend([width, u32_of(table.len(), &self.at)?]);
            table.extend(taps);
        }
        if resized > MAX_RESIZED {
            return Err(Error::Unsupported(format!("wgpu: {} resizes more than {MAX_RESIZED} axes", self.at)));
        }
        let mut cache = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((k, t)) = cache.as_ref() {
            if *k == key {
                return Ok((params, t.clone()));
            }
        }
        if table.is_empty() {
            table.push(0);
        }
        let tensor = run.context().upload(TensorView::from_slice(&[table.len()], &table)?)?;
        *cache = Some((key, tensor.clone()));
        Ok((params, tensor))
    }
}

impl GpuOp for Resize {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let plan = self.plan(inputs, x.shape())?;
        if plan.iter().all(|a| a.is_identity(self.coord)) {
            return Ok(vec![Value::Tensor(x.tensor.clone())]);
        }
        let shape: Vec<usize> = plan.iter().map(|a| a.output).collect();
        let y = run.alloc(x.dtype(), shape)?;
        if y.is_empty() {
            return Ok(vec![Value::Tensor(y)]);
        }
        let fill = scalar_words(x.dtype(), self.extrapolation).unwrap_or([0, 0]);
        let (params, table) = self.tables(run, &plan, x.shape())?;
        let buffers = [x.buffer, table.gpu()?, y.gpu()?];
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()).fill(fill),
            &params,
            &buffers,
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use onyx_core::{DataType, HostBuffer, Tensor};

    use crate::testkit::{float, i64s, int, ints, provider, string, t, Case};

    /// The dtypes the data-movement tests run on: every element size, signed and unsigned.
    pub(crate) const DTYPES: [DataType; 7] = [
        DataType::Float,
        DataType::Float16,
        DataType::Int64,
        DataType::Int32,
        DataType::Bool,
        DataType::Uint8,
        DataType::Int8,
    ];

    /// A tensor of random bits (0/1 for bool; finite values for floats).
    pub(crate) fn random(dtype: DataType, shape: &[usize], seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let size = dtype.byte_len(1).unwrap();
        let mut bytes = vec![0u8; n * size];
        for e in bytes.chunks_mut(size) {
            match dtype {
                DataType::Bool => e[0] = rng.u8(0..2),
                DataType::Float => e.copy_from_slice(&(rng.f32() * 200.0 - 100.0).to_le_bytes()),
                DataType::Float16 => e.copy_from_slice(&half::f16::from_f32(rng.f32() * 200.0 - 100.0).to_le_bytes()),
                _ => rng.fill(e),
            }
        }
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
        let len = bytes.len();
        Tensor::from_bytes(dtype, shape.to_vec(), HostBuffer::new(Arc::new(words), 0, len).unwrap()).unwrap()
    }

    /// Runs `case` on both EPs and asserts bit-identical outputs (dtype, shape and bytes).
    pub(crate) fn check_exact(case: &Case) {
        let Some(gpu) = provider() else { return };
        let want = case.run_cpu();
        let got = case.try_run_gpu(&gpu).unwrap_or_else(|e| panic!("{} on wgpu: {e}", case.op));
        assert_eq!(got.len(), want.len(), "{}: output count", case.op);
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            let what = format!("{} output {o} ({} {:?})", case.op, w.dtype(), w.shape());
            assert_eq!(g.dtype(), w.dtype(), "{what}: dtype");
            assert_eq!(g.shape(), w.shape(), "{what}: shape");
            let (gb, wb) = (g.view().unwrap().bytes().unwrap(), w.view().unwrap().bytes().unwrap());
            let size = w.dtype().byte_len(1).unwrap();
            for (e, (a, b)) in gb.chunks(size).zip(wb.chunks(size)).enumerate() {
                assert!(a == b || both_nan(w.dtype(), a, b), "{what}: element {e} is {a:?}, expected {b:?}");
            }
        }
    }

    /// Whether two elements of a float type are both NaN (payloads may differ).
    fn both_nan(dtype: DataType, a: &[u8], b: &[u8]) -> bool {
        let nan = |x: &[u8]| match dtype {
            DataType::Float => f32::from_le_bytes([x[0], x[1], x[2], x[3]]).is_nan(),
            DataType::Float16 => half::f16::from_le_bytes([x[0], x[1]]).is_nan(),
            DataType::BFloat16 => half::bf16::from_le_bytes([x[0], x[1]]).is_nan(),
            _ => false,
        };
        nan(a) && nan(b)
    }

    #[test]
    fn shape_ops_are_views_with_the_cpu_shapes() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[2, 1, 3, 5], k as u64);
            check_exact(&Case::new("Reshape", vec![x.clone(), i64s(&[0, -1, 5])]).constants(&[1]));
            check_exact(&Case::new("Reshape", vec![x.clone(), i64s(&[30])]).constants(&[1]));
            check_exact(&Case::new("Flatten", vec![x.clone()]).attrs(vec![int("axis", -1)]));
            check_exact(&Case::new("Flatten", vec![x.clone()]).attrs(vec![int("axis", 0)]));
            check_exact(&Case::new("Squeeze", vec![x.clone()]));
            check_exact(&Case::new("Squeeze", vec![x.clone(), i64s(&[-3])]).constants(&[1]));
            check_exact(&Case::new("Squeeze", vec![x.clone()]).opset(11).attrs(vec![ints("axes", &[1])]));
            check_exact(&Case::new("Unsqueeze", vec![x.clone(), i64s(&[0, -1])]).constants(&[1]));
            check_exact(&Case::new("Unsqueeze", vec![x.clone()]).opset(11).attrs(vec![ints("axes", &[2])]));
            check_exact(&Case::new("Identity", vec![x.clone()]));
        }
        let e = random(DataType::Float, &[0, 3], 9);
        check_exact(&Case::new("Reshape", vec![e, i64s(&[3, -1])]).constants(&[1]));
        let Some(gpu) = provider() else { return };
        let err = Case::new("Reshape", vec![random(DataType::Float, &[2, 3], 1), i64s(&[4, -1])])
            .constants(&[1])
            .try_run_gpu(&gpu)
            .unwrap_err()
            .to_string();
        assert!(err.contains("input 1") || err.contains("[4, -1]"), "{err}");
    }

    #[test]
    fn transpose_matches_the_cpu() {
        let cases: &[(&[usize], Option<&[i64]>)] = &[
            (&[37, 45], None),
            (&[3, 33, 65], Some(&[0, 2, 1])),
            (&[67, 1, 5], Some(&[2, 1, 0])),
            (&[2, 3, 4, 5], Some(&[0, 2, 1, 3])),
            (&[2, 3, 4, 5], Some(&[3, 1, 0, 2])),
            (&[2, 3, 5, 7, 3], Some(&[4, 2, 0, 3, 1])),
            (&[1, 7, 1], Some(&[2, 0, 1])),
            (&[0, 3, 2], Some(&[2, 0, 1])),
            (&[5], None),
            (&[], None),
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            for (j, (shape, perm)) in cases.iter().enumerate() {
                let x = random(dtype, shape, (k * 100 + j) as u64);
                let attrs = perm.map(|p| vec![ints("perm", p)]).unwrap_or_default();
                check_exact(&Case::new("Transpose", vec![x]).attrs(attrs));
            }
        }
    }

    #[test]
    fn contiguous_rows_move_as_units_like_the_cpu() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let s = k as u64 * 10;
            let perm = vec![ints("perm", &[0, 2, 1, 3])];
            check_exact(&Case::new("Transpose", vec![random(dtype, &[2, 3, 4, 8], s)]).attrs(perm.clone()));
            check_exact(&Case::new("Transpose", vec![random(dtype, &[3, 5, 2, 16], s + 1)]).attrs(perm));
            let x = random(dtype, &[3, 6, 16], s + 2);
            check_exact(&Case::new("Slice", vec![x.clone(), i64s(&[1]), i64s(&[5]), i64s(&[1])]).constants(&[1, 2, 3]));
            check_exact(
                &Case::new("Slice", vec![x.clone(), i64s(&[-1]), i64s(&[-7]), i64s(&[1]), i64s(&[-2])])
                    .constants(&[1, 2, 3, 4]),
            );
            check_exact(
                &Case::new("Split", vec![x.clone(), i64s(&[2, 4])])
                    .attrs(vec![int("axis", 1)])
                    .constants(&[1])
                    .outputs(2),
            );
            let (a, b) = (random(dtype, &[2, 2, 2], s + 3), random(dtype, &[2, 6, 2], s + 4));
            check_exact(&Case::new("Concat", vec![a, b]).attrs(vec![int("axis", 1)]));
            check_exact(&Case::new("Concat", vec![x.clone(), x.clone()]).attrs(vec![int("axis", -1)]));
            check_exact(&Case::new("Expand", vec![random(dtype, &[3, 1, 8], s + 5), i64s(&[3, 5, 8])]).constants(&[1]));
            let idx = t(&[4], vec![2i64, 0, -1, 1]);
            check_exact(&Case::new("Gather", vec![random(dtype, &[5, 8], s + 6), idx.clone()]));
            check_exact(&Case::new("Gather", vec![random(dtype, &[5, 2], s + 7), idx]));
        }
    }

    #[test]
    fn depth_and_space_rearrange_like_the_cpu() {
        for dtype in [DataType::Float, DataType::Float16, DataType::Uint8, DataType::Int64] {
            let x = random(dtype, &[2, 12, 3, 5], 3);
            check_exact(&Case::new("DepthToSpace", vec![x.clone()]).attrs(vec![int("blocksize", 2)]));
            let crd = vec![int("blocksize", 2), string("mode", "CRD")];
            check_exact(&Case::new("DepthToSpace", vec![x.clone()]).attrs(crd));
            let y = random(dtype, &[2, 3, 6, 9], 4);
            check_exact(&Case::new("SpaceToDepth", vec![y]).attrs(vec![int("blocksize", 3)]));
        }
    }

    #[test]
    fn concat_and_split_match_the_cpu() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let s = k as u64 * 10;
            let (a, b, c) =
                (random(dtype, &[2, 3, 5], s), random(dtype, &[2, 4, 5], s + 1), random(dtype, &[2, 1, 5], s + 2));
            check_exact(&Case::new("Concat", vec![a.clone(), b.clone(), c.clone()]).attrs(vec![int("axis", 1)]));
            let d = random(dtype, &[2, 3, 3], s + 3);
            check_exact(&Case::new("Concat", vec![a.clone(), d]).attrs(vec![int("axis", -1)]));
            let e = random(dtype, &[0, 3, 5], s + 4);
            check_exact(&Case::new("Concat", vec![e, a.clone()]).attrs(vec![int("axis", 0)]));
            check_exact(&Case::new("Concat", vec![a.clone()]).attrs(vec![int("axis", 0)]));
            let x = random(dtype, &[3, 7, 5], s + 5);
            check_exact(
                &Case::new("Split", vec![x.clone(), i64s(&[2, 5])])
                    .attrs(vec![int("axis", 1)])
                    .constants(&[1])
                    .outputs(2),
            );
            check_exact(
                &Case::new("Split", vec![x.clone()])
                    .attrs(vec![int("axis", -1), int("num_outputs", 2)])
                    .opset(18)
                    .outputs(2),
            );
            check_exact(
                &Case::new("Split", vec![x.clone()])
                    .attrs(vec![int("axis", 1), int("num_outputs", 3)])
                    .opset(18)
                    .outputs(3),
            );
            check_exact(&Case::new("Split", vec![x.clone()]).opset(11).outputs(3));
            check_exact(
                &Case::new("Split", vec![x.clone()])
                    .opset(11)
                    .attrs(vec![int("axis", 2), ints("split", &[1, 0, 4])])
                    .outputs(3),
            );
        }
    }

    #[test]
    fn slice_matches_the_cpu() {
        type Args<'a> = (&'a [i64], &'a [i64], Option<&'a [i64]>, Option<&'a [i64]>);
        let slices: &[Args<'_>] = &[
            (&[1, -1, 4], &[3, i64::MIN, 0], Some(&[0, 1, 2]), Some(&[1, -2, -3])),
            (&[0], &[-1], Some(&[-1]), None),
            (&[2], &[100], None, None),
            (&[-100, 1], &[100, 6], Some(&[2, 1]), Some(&[3, 2])),
            (&[5], &[0], Some(&[1]), Some(&[1])),
            (&[i64::MAX], &[i64::MIN], Some(&[1]), Some(&[-1])),
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[3, 6, 7], k as u64);
            for (starts, ends, axes, steps) in slices {
                let mut inputs = vec![x.clone(), i64s(starts), i64s(ends)];
                inputs.extend(axes.map(i64s));
                inputs.extend(steps.map(i64s));
                if steps.is_some() && axes.is_none() {
                    continue;
                }
                let n = inputs.len();
                check_exact(&Case::new("Slice", inputs).constants(&(1..n).collect::<Vec<_>>()));
            }
            let c = Case::new("Slice", vec![x.clone(), t(&[1], vec![1i32]), t(&[1], vec![3i32])]).constants(&[1, 2]);
            check_exact(&c);
            check_exact(&Case::new("Slice", vec![x.clone()]).opset(1).attrs(vec![
                ints("starts", &[1]),
                ints("ends", &[3]),
                ints("axes", &[2]),
            ]));
        }
    }

    #[test]
    fn expand_and_tile_match_the_cpu() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[3, 1, 5], k as u64);
            check_exact(&Case::new("Expand", vec![x.clone(), i64s(&[2, 1, 4, 1])]).constants(&[1]));
            check_exact(&Case::new("Expand", vec![x.clone(), i64s(&[3, 7, 5])]).constants(&[1]));
            check_exact(&Case::new("Expand", vec![x.clone(), i64s(&[1])]).constants(&[1]));
            let s = random(dtype, &[], k as u64 + 50);
            check_exact(&Case::new("Expand", vec![s, i64s(&[3, 3])]).constants(&[1]));
            check_exact(&Case::new("Tile", vec![x.clone(), i64s(&[2, 3, 1])]).constants(&[1]));
            check_exact(&Case::new("Tile", vec![x.clone(), i64s(&[1, 0, 2])]).constants(&[1]));
            let y = random(dtype, &[7, 3], k as u64 + 100);
            check_exact(&Case::new("Tile", vec![y, i64s(&[3, 5])]));
        }
    }

    #[test]
    fn pad_matches_the_cpu_in_every_mode() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[3, 5, 4], k as u64);
            let value = random(dtype, &[], k as u64 + 7);
            for mode in ["constant", "reflect", "edge", "wrap"] {
                let attrs = vec![string("mode", mode)];
                let pads = i64s(&[1, 2, 3, 2, 0, 5]);
                check_exact(
                    &Case::new("Pad", vec![x.clone(), pads.clone(), value.clone()])
                        .attrs(attrs.clone())
                        .constants(&[1, 2]),
                );
                let crop = i64s(&[-1, 3, 0, 1, -2, 2]);
                check_exact(
                    &Case::new("Pad", vec![x.clone(), crop, value.clone()]).attrs(attrs.clone()).constants(&[1, 2]),
                );
                let mut axes =
                    Case::new("Pad", vec![x.clone(), i64s(&[4, 9]), value.clone(), i64s(&[-1])]).attrs(attrs.clone());
                axes = axes.constants(&[1, 2, 3]);
                check_exact(&axes);
            }
            check_exact(&Case::new("Pad", vec![x.clone(), i64s(&[0, 1, 1, 0, 0, 0])]).constants(&[1]));
        }
        let x = random(DataType::Float, &[2, 3], 1);
        check_exact(
            &Case::new("Pad", vec![x.clone()]).opset(2).attrs(vec![ints("pads", &[1, 2, 0, 1]), float("value", 1.5)]),
        );
        check_exact(
            &Case::new("Pad", vec![x]).opset(2).attrs(vec![ints("pads", &[1, 2, 0, 1]), string("mode", "reflect")]),
        );
    }

    /// A Resize case: `(X, roi, scales, sizes)` with the arguments as constants.
    fn resize(
        x: &Tensor,
        roi: Option<&[f32]>,
        scales: Option<&[f32]>,
        sizes: Option<&[i64]>,
        attrs: Vec<onyx_core::ir::Attribute>,
    ) -> Case {
        let f = |v: &[f32]| t(&[v.len()], v.to_vec());
        let mut case = Case::new("Resize", vec![x.clone()]).attrs(attrs);
        case.inputs.extend([roi.map(f), scales.map(f), sizes.map(i64s)]);
        case.constant = vec![1, 2, 3];
        case
    }

    #[test]
    fn resize_nearest_moves_every_dtype_like_the_cpu() {
        let modes = [
            ("half_pixel", "round_prefer_floor"),
            ("asymmetric", "round_prefer_ceil"),
            ("align_corners", "floor"),
            ("pytorch_half_pixel", "ceil"),
            ("tf_half_pixel_for_nn", "round_prefer_floor"),
            ("half_pixel_symmetric", "round_prefer_ceil"),
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[2, 3, 5, 7], k as u64);
            for (coord, nearest) in modes {
                let attrs = vec![string("coordinate_transformation_mode", coord), string("nearest_mode", nearest)];
                check_exact(&resize(&x, None, Some(&[1.0, 1.0, 2.0, 1.5]), None, attrs.clone()));
                check_exact(&resize(&x, None, Some(&[1.0, 1.0, 0.6, 0.43]), None, attrs.clone()));
                check_exact(&resize(&x, None, None, Some(&[2, 3, 9, 4]), attrs));
            }
            let crop =
                vec![string("coordinate_transformation_mode", "tf_crop_and_resize"), float("extrapolation_value", 3.0)];
            let roi = [0.0, 0.0, -0.2, 0.1, 1.0, 1.0, 1.3, 0.9];
            check_exact(&resize(&x, Some(&roi), None, Some(&[2, 3, 8, 6]), crop));
        }
    }

    #[test]
    fn resize_linear_and_cubic_match_the_cpu() {
        let x = crate::testkit::rand(&[2, 3, 9, 11], -2.0, 2.0, 7);
        let coords = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"];
        for mode in ["linear", "cubic"] {
            for coord in coords {
                let attrs = vec![string("mode", mode), string("coordinate_transformation_mode", coord)];
                resize(&x, None, Some(&[1.0, 1.0, 2.0, 1.7]), None, attrs.clone()).check(1e-5, 1e-5);
                resize(&x, None, None, Some(&[2, 3, 4, 5]), attrs.clone()).check(1e-5, 1e-5);
                resize(&x, None, None, Some(&[2, 3, 1, 16]), attrs).check(1e-5, 1e-5);
            }
            let excl = vec![string("mode", mode), int("exclude_outside", 1), float("cubic_coeff_a", -0.5)];
            resize(&x, None, Some(&[1.0, 1.0, 1.5, 0.8]), None, excl).check(1e-5, 1e-5);
            let aa = vec![string("mode", mode), int("antialias", 1)];
            resize(&x, None, Some(&[1.0, 1.0, 0.4, 0.7]), None, aa).check(1e-5, 1e-5);
            let crop = vec![
                string("mode", mode),
                string("coordinate_transformation_mode", "tf_crop_and_resize"),
                float("extrapolation_value", -9.0),
            ];
            let mut c = resize(&x, Some(&[0.1, -0.3, 0.8, 1.2]), None, Some(&[6, 7]), crop);
            c.attributes.push(ints("axes", &[2, 3]));
            c.check(1e-5, 1e-5);
            let keep =
                vec![string("mode", mode), string("keep_aspect_ratio_policy", "not_larger"), ints("axes", &[-1, -2])];
            resize(&x, None, None, Some(&[20, 13]), keep).check(1e-5, 1e-5);
        }
        let h = Case::new("Cast", vec![x.clone()]).attrs(vec![int("to", 10)]).run_cpu().remove(0);
        let attrs = vec![string("mode", "linear")];
        resize(&h, None, Some(&[1.0, 1.0, 1.6, 0.5]), None, attrs).check(1e-3, 2e-3);
    }

    #[test]
    fn legacy_resize_and_upsample_match_the_cpu() {
        let x = random(DataType::Float, &[1, 2, 3, 4], 3);
        let scales = t(&[4], vec![1.0f32, 1.0, 2.0, 1.5]);
        for mode in ["nearest", "linear"] {
            let attrs = vec![string("mode", mode)];
            Case::new("Resize", vec![x.clone(), scales.clone()])
                .opset(10)
                .attrs(attrs.clone())
                .constants(&[1])
                .check(1e-5, 1e-5);
            Case::new("Upsample", vec![x.clone(), scales.clone()])
                .opset(9)
                .attrs(attrs.clone())
                .constants(&[1])
                .check(1e-5, 1e-5);
            let mut a7 = attrs.clone();
            a7.push(crate::testkit::attr("scales", onyx_core::ir::AttrValue::Floats(vec![1.0, 1.0, 0.5, 3.0])));
            Case::new("Upsample", vec![x.clone()]).opset(7).attrs(a7).check(1e-5, 1e-5);
        }
        check_exact(&resize(&x, None, Some(&[1.0, 1.0, 1.0, 1.0]), None, vec![]));
    }

    /// One benchmark: a chain of nodes of `op`, each reading the previous output as input
    /// `slot` (the others are the constants given), and the bytes one node moves.
    struct Bench {
        name: &'static str,
        op: &'static str,
        attrs: Vec<onyx_core::ir::Attribute>,
        x: Tensor,
        slot: usize,
        others: Vec<Tensor>,
        bytes: f64,
    }

    /// A model chaining `n` nodes of `b`.
    fn chain(b: &Bench, n: usize) -> onyx_core::ir::Model {
        use onyx_core::ir::{Graph, Model, Node};
        use onyx_core::types::{Dim, TensorType, ValueInfo, ValueType};
        let mut graph = Graph::default();
        let shape = b.x.shape().iter().map(|&d| Dim::Fixed(d)).collect();
        graph
            .inputs
            .push(ValueInfo::new("x", ValueType::Tensor(TensorType { dtype: b.x.dtype(), shape: Some(shape) })));
        for (i, c) in b.others.iter().enumerate() {
            graph.initializers.insert(format!("c{i}"), c.clone());
        }
        let mut prev = "x".to_string();
        for k in 0..n {
            let mut inputs: Vec<String> = (0..b.others.len()).map(|i| format!("c{i}")).collect();
            inputs.insert(b.slot, prev.clone());
            let out = format!("y{k}");
            let node = Node {
                name: format!("n{k}"),
                op_type: b.op.into(),
                attributes: b.attrs.clone(),
                inputs,
                outputs: vec![out.clone()],
                ..Default::default()
            };
            graph.nodes.push(node);
            prev = out;
        }
        graph.outputs.push(ValueInfo::new(prev, ValueType::Unknown));
        let mut model = Model { ir_version: 10, graph, ..Default::default() };
        model.opsets.insert(String::new(), 21);
        model
    }

    /// Seconds per run of a chain of `n` nodes of `b` (best of several runs after a warm-up).
    fn time_chain(gpu: &Arc<crate::WgpuProvider>, b: &Bench, n: usize) -> f64 {
        let options = onyx_core::SessionOptions { providers: vec![gpu.clone()], ..Default::default() };
        let session = onyx_core::Session::new(chain(b, n), options).unwrap();
        let feed = || vec![("x".to_string(), onyx_core::InputValue::Value(onyx_core::Value::Tensor(b.x.clone())))];
        for _ in 0..2 {
            session.run(feed()).unwrap();
        }
        (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                session.run(feed()).unwrap();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    }

    /// Per-node time and bandwidth of the data-movement kernels on large tensors (ignored:
    /// `cargo test -p onyx-wgpu bench_data_movement -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn bench_data_movement() {
        let Some(gpu) = provider() else { return };
        let f32s = |shape: &[usize]| random(DataType::Float, shape, 1);
        let n16 = 1usize << 24;
        let mut perm: Vec<i64> = (0..32768).collect();
        fastrand::Rng::with_seed(2).shuffle(&mut perm);
        let benches = vec![
            Bench {
                name: "Relu f32 16M (baseline)",
                op: "Relu",
                attrs: vec![],
                x: f32s(&[n16]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 2-D f32 4096x4096",
                op: "Transpose",
                attrs: vec![],
                x: f32s(&[4096, 4096]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 0213 f32 16x512x16x128",
                op: "Transpose",
                attrs: vec![ints("perm", &[0, 2, 1, 3])],
                x: f32s(&[16, 512, 16, 128]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 0213 f16 16x512x16x128",
                op: "Transpose",
                attrs: vec![ints("perm", &[0, 2, 1, 3])],
                x: random(DataType::Float16, &[16, 512, 16, 128], 1),
                slot: 0,
                others: vec![],
                bytes: 4.0 * n16 as f64,
            },
            Bench {
                name: "Transpose 3-D f32 256x256x256 (2,0,1)",
                op: "Transpose",
                attrs: vec![ints("perm", &[1, 2, 0])],
                x: f32s(&[256, 256, 256]),
                slot: 0,
                others: vec![],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Gather f32 rows 32768x512 int64",
                op: "Gather",
                attrs: vec![],
                x: f32s(&[32768, 512]),
                slot: 0,
                others: vec![t(&[32768], perm)],
                bytes: 8.0 * n16 as f64,
            },
            Bench {
                name: "Where f32 16M",
                op: "Where",
                attrs: vec![],
                x: f32s(&[n16]),
                slot: 1,
                others: vec![random(DataType::Bool, &[n16], 3), f32s(&[n16])],
                bytes: 9.0 * n16 as f64,
            },
            Bench {
                name: "Pad edge f32 4096x4095 (+1 / -1)",
                op: "Pad",
                attrs: vec![string("mode", "edge")],
                x: f32s(&[4096, 4095]),
                slot: 0,
                others: vec![i64s(&[0, 1, 0, -1])],
                bytes: 8.0 * (4096.0 * 4095.0),
            },
            Bench {
                name: "Tile f32 4096x4096 (repeats 1)",
                op: "Tile",
                attrs: vec![],
                x: f32s(&[4096, 4096]),
                slot: 0,
                others: vec![i64s(&[1, 1])],
                bytes: 8.0 * n16 as f64,
            },
        ];
        let benches: Vec<Bench> = benches
            .into_iter()
            .chain([
                Bench {
                    name: "Slice 1-D f32 [1:]",
                    op: "Slice",
                    attrs: vec![],
                    x: f32s(&[n16 + 50]),
                    slot: 0,
                    others: vec![i64s(&[1]), i64s(&[i64::MAX])],
                    bytes: 8.0 * n16 as f64,
                },
                Bench {
                    name: "Add f32 16M + scalar (other family)",
                    op: "Add",
                    attrs: vec![],
                    x: f32s(&[n16]),
                    slot: 0,
                    others: vec![f32s(&[1])],
                    bytes: 8.0 * n16 as f64,
                },
            ])
            .collect();
        eprintln!("adapter: {:?}", gpu.context().adapter_info());
        let extra = 40;
        for b in &benches {
            let (t1, tn) = (time_chain(&gpu, b, 1), time_chain(&gpu, b, 1 + extra));
            let per = (tn - t1) / extra as f64;
            eprintln!(
                "{:<48} {:>9.1} us/node {:>8.1} GB/s  (chain of 1: {:.2} ms)",
                b.name,
                per * 1e6,
                b.bytes / per / 1e9,
                t1 * 1e3
            );
        }
    }
}
