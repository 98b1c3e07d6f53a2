//! The element shader template shared by the data-movement families (and the gather, cast
//! and compare ones), and strided gathers: every output element reads
//! `base + sum(coord[d] * stride[d])`.

use super::*;

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
pub(super) fn holder(size: u32) -> &'static str {
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

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;

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
}
