//! The row kernel of LayerNormalization, RMSNormalization, InstanceNormalization,
//! GroupNormalization and SkipLayerNormalization: one dispatch where the threads of a row (see
//! [`Lanes`]) sum `x - x0` and its square in one pass (shifted by the row's first element `x0`
//! so that the variance keeps its precision), combine the sums in workgroup memory, and write
//! the row in a second pass.

use onyx_core::{DataType, Error, Location, Result, Value};

use super::enables_any;
use crate::context::GpuContext;
use crate::kernel::{u32_of, GpuTensor, OnGpu};
use crate::ops::reduce::{LanePipelines, Lanes, Layout};
use crate::run::GpuRun;

/// The pipelines of one row-normalization variant, one per lane layout (made when needed).
pub(super) struct RowNorm {
    pipelines: LanePipelines,
    /// Whether the shader reads a bias.
    bias: bool,
    /// Whether the shader writes the rows' means and inverse standard deviations.
    stats: bool,
    /// Whether X is a sum the shader makes (SkipLayerNormalization).
    skip: Option<SkipSum>,
}

/// X as SkipLayerNormalization makes it: `input + skip + skip_bias`, each element rounded to
/// X's type (as the CPU kernel stores the sum), the skip broadcast over leading dims and the
/// bias along the last. The shader also writes the sum (the node's output 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SkipSum {
    /// Whether a bias is added.
    pub bias: bool,
    /// Whether the input comes as the f32 K slices of a split-K product, which the shader sums
    /// (rounded to X's type) in place of the product's own sum pass.
    pub partials: bool,
}

/// The skip, and bias, buffers of a [`SkipSum`] row normalization.
pub(super) struct SkipInputs<'a> {
    pub skip: GpuTensor<'a>,
    pub bias: Option<GpuTensor<'a>>,
    /// For a `partials` variant, how many K slices X's buffer holds (each of X's length).
    pub slices: usize,
}

/// How a row-normalization shader writes Y, each the form the CPU kernel uses (so that both
/// round alike where `x - mean` cancels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// `(x - mean) * inv * scale + bias` (Layer/Instance/GroupNormalization).
    Centered,
    /// `x * inv * scale` with `inv = 1 / sqrt(mean(x²) + epsilon)` (RMSNormalization).
    Rms,
}

/// Where a parameter's element for flat index `i` is: `(i / div) % modulo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ParamMap {
    pub div: usize,
    pub modulo: usize,
}

impl RowNorm {
    /// Compiles the variant for input types `types` (X, scale, bias when `bias`): the
    /// pipeline for rows of `row_len` elements when the session knows it (the lane layout of
    /// contiguous rows depends on their length only), else every layout.
    pub fn new(
        gpu: &GpuContext,
        types: &[(DataType, &'static str)],
        form: Form,
        bias: bool,
        stats: bool,
        row_len: Option<usize>,
    ) -> Result<RowNorm> {
        Self::with_skip(gpu, types, form, bias, stats, None, row_len)
    }

    /// [`RowNorm::new`] for X made as `skip` says (see [`SkipSum`]).
    pub fn with_skip(
        gpu: &GpuContext,
        types: &[(DataType, &'static str)],
        form: Form,
        bias: bool,
        stats: bool,
        skip: Option<SkipSum>,
        row_len: Option<usize>,
    ) -> Result<RowNorm> {
        let names: Vec<&'static str> = types.iter().map(|t| t.1).collect();
        let dtypes: Vec<DataType> = types.iter().map(|t| t.0).collect();
        let key = format!("rownorm/{}/{form:?}/{bias}/{stats}/{skip:?}", names.join("/"));
        let shader = move |l| row_norm_shader(&names, enables_any(&dtypes), form, bias, stats, skip, l);
        let known = row_len.map(|n| Lanes::choose(1, n, true));
        Ok(RowNorm { pipelines: LanePipelines::rows(gpu, key, shader, known)?, bias, stats, skip })
    }

    /// Normalizes `x` (or, for a [`SkipSum`] variant, the sum `skip` says) as rows of `n`
    /// elements; returns Y, with `stats` the means and inverse standard deviations (f32, of
    /// `stat_shape`), then for a [`SkipSum`] variant the sum (X's shape).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        run: &mut GpuRun,
        x: GpuTensor<'_>,
        skip: Option<SkipInputs<'_>>,
        n: usize,
        scale: (GpuTensor<'_>, ParamMap),
        bias: Option<(GpuTensor<'_>, ParamMap)>,
        epsilon: f32,
        stat_shape: &[usize],
        at: &Location,
    ) -> Result<Vec<Value>> {
        let given = skip.as_ref().map(|s| SkipSum { bias: s.bias.is_some(), partials: s.slices > 0 });
        if self.skip != given {
            return Err(Error::node(at, "skip inputs differ from those the node was built for"));
        }
        let rows = x.len().checked_div(n).unwrap_or_else(|| stat_shape.iter().product());
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        let stats = if self.stats {
            let ctx = run.context();
            Some((ctx.alloc(DataType::Float, stat_shape.to_vec())?, ctx.alloc(DataType::Float, stat_shape.to_vec())?))
        } else {
            None
        };
        u32_of(x.len(), at)?;
        let (sm, bm) = (scale.1, bias.as_ref().map_or(ParamMap { div: 1, modulo: 1 }, |b| b.1));
        let mut p = vec![u32_of(rows, at)?, u32_of(n, at)?, epsilon.to_bits()];
        for v in [sm.div, sm.modulo, bm.div, bm.modulo] {
            p.push(u32_of(v.max(1), at)?);
        }
        let mut buffers = vec![x.buffer, scale.0.buffer];
        if self.bias {
            let b = bias.as_ref().ok_or_else(|| Error::input(at, 2, "a bias", "nothing"))?;
            buffers.push(b.0.buffer);
        }
        buffers.push(y.gpu()?);
        if let Some((m, s)) = &stats {
            buffers.push(m.gpu()?);
            buffers.push(s.gpu()?);
        }
        let sum = if skip.is_some() { Some(run.alloc(x.dtype(), x.shape().to_vec())?) } else { None };
        if let (Some(SkipInputs { skip, bias, slices }), Some(sum)) = (&skip, &sum) {
            // The slices' last element must be addressable too.
            u32_of(slices * x.len(), at)?;
            p.extend([u32_of(skip.len().max(1), at)?, u32_of(*slices, at)?]);
            buffers.push(skip.buffer);
            if let Some(b) = bias {
                buffers.push(b.buffer);
            }
            buffers.push(sum.gpu()?);
        }
        if rows > 0 {
            let lanes = Lanes::choose(rows, n, true);
            let pipeline = self.pipelines.get(run.context(), Layout { lanes, flat: false })?;
            run.dispatch(pipeline, &p, &buffers, lanes.groups(rows))?;
        }
        let mut out = vec![Value::Tensor(y)];
        if let Some((m, s)) = stats {
            out.push(Value::Tensor(m));
            out.push(Value::Tensor(s));
        }
        out.extend(sum.map(Value::Tensor));
        Ok(out)
    }
}

/// The sum of X's K slices (`p[8]` of them, `rows * n` apart) at `at`, in slice order as
/// split-K's sum pass adds them. (Four loads in flight instead measured the same on an H200.)
const SUM_SLICES: &str = "fn sum_slices(at: u32) -> f32 {
    let stride = p[0] * p[1];
    var v = 0.0;
    for (var s = 0u; s < p[8]; s++) { v += x[s * stride + at]; }
    return v;
}";

/// The row-normalization shader. `types`: WGSL types of X, scale and (with `bias`) bias.
/// `p`: rows, n, epsilon, scale div and modulo, bias div and modulo, then (with `skip`) the
/// skip's element count and the K slices X's buffer holds (a `partials` variant).
fn row_norm_shader(
    types: &[&str],
    enable: &str,
    form: Form,
    bias: bool,
    stats: bool,
    skip: Option<SkipSum>,
    lanes: Lanes,
) -> String {
    let (tx, ts) = (types[0], types[1]);
    let partials = skip.is_some_and(|s| s.partials);
    let x_type = if partials { "f32" } else { tx };
    let mut bindings = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{x_type}>;
@group(0) @binding(2) var<storage, read> scale: array<{ts}>;
"
    );
    let mut next = 3;
    let mut shift = "0.0".to_string();
    if bias {
        bindings += &format!("@group(0) @binding(3) var<storage, read> bias: array<{}>;\n", types[2]);
        next = 4;
        shift = "f32(bias[(at / p[5]) % p[6]])".into();
    }
    bindings += &format!("@group(0) @binding({next}) var<storage, read_write> y: array<{tx}>;\n");
    let value = match form {
        Form::Centered => format!("(xa - mean) * inv * s + {shift}"),
        Form::Rms => "xa * inv * s".to_string(),
    };
    // RMS rows are not shifted: their statistic is the mean square itself.
    let (load_x0, variance) = if form == Form::Rms {
        ("", "a.y / count")
    } else {
        ("if (live && n > 0u) { x0 = xv(base); }", "max(a.y / count - md * md, 0.0)")
    };
    let mut write_stats = String::new();
    if stats {
        bindings += &format!(
            "@group(0) @binding({}) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding({}) var<storage, read_write> inv_out: array<f32>;
",
            next + 1,
            next + 2
        );
        write_stats = "if (live && lane_slice(t) == 0u) { mean_out[q] = mean; inv_out[q] = inv; }".into();
        next += 2;
    }
    let (x_value, write_sum) = match skip {
        None => ("return f32(x[at]);".to_string(), ""),
        Some(SkipSum { bias, partials }) => {
            bindings += &format!("@group(0) @binding({}) var<storage, read> skip: array<{tx}>;\n", next + 1);
            next += 1;
            // The product's K slices, `n * rows` apart, summed and rounded as its store would.
            let input = if partials { format!("{tx}(sum_slices(at))") } else { "x[at]".to_string() };
            let mut sum = format!("var v = f32({input}) + f32(skip[at % p[7]]);");
            if bias {
                bindings += &format!("@group(0) @binding({}) var<storage, read> skip_bias: array<{tx}>;\n", next + 1);
                next += 1;
                sum += " v += f32(skip_bias[at % p[1]]);";
            }
            bindings += &format!("@group(0) @binding({}) var<storage, read_write> sum: array<{tx}>;\n", next + 1);
            (format!("{sum} return f32({tx}(v));"), "sum[at] = {tx}(xa);")
        }
    };
    let write_sum = write_sum.replace("{tx}", tx);
    // Summing the slices is the costly read: the first pass keeps X in Y, the second reads it
    // back (each thread its own elements).
    let (keep_x, read_x, slices_fn) = if partials {
        (format!("y[base + k] = {tx}(xk);"), "f32(y[at])", SUM_SLICES)
    } else {
        (String::new(), "xv(at)", "")
    };
    format!(
        "{enable}{bindings}
alias Acc = vec2<f32>;
fn comb(a: Acc, b: Acc) -> Acc {{ return a + b; }}
{slices_fn}
fn xv(at: u32) -> f32 {{ {x_value} }}
{lanes}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let q = workgroup_index(wid, nwg) * LW + lane_row(t);
    let live = q < p[0];
    let n = p[1];
    let base = q * n;
    var x0 = 0.0;
    {load_x0}
    var a = vec2<f32>(0.0, 0.0);
    if (live) {{
        for (var k = lane_slice(t); k < n; k += LS) {{
            let xk = xv(base + k);
            {keep_x}
            let d = xk - x0;
            a += vec2<f32>(d, d * d);
        }}
    }}
    a = combine_slices(t, a);
    let count = f32(max(n, 1u));
    let md = a.x / count;
    let variance = {variance};
    let mean = x0 + md;
    let inv = 1.0 / sqrt(variance + bitcast<f32>(p[2]));
    if (live) {{
        for (var k = lane_slice(t); k < n; k += LS) {{
            let at = base + k;
            let s = f32(scale[(at / p[3]) % p[4]]);
            let xa = {read_x};
            {write_sum}
            y[at] = {tx}({value});
        }}
    }}
    {write_stats}
}}
",
        lanes = lanes.wgsl(),
    )
}

/// How a LayerNorm parameter of shape `param` (unidirectionally broadcast to `norm`, the
/// normalized dims) is indexed, when the dims it varies along are one block; `None` when it
/// does not broadcast or varies along separated dims.
pub(super) fn param_map(param: &[usize], norm: &[usize]) -> Option<ParamMap> {
    if param.len() > norm.len() {
        return None;
    }
    let lead = norm.len() - param.len();
    let mut varying = vec![];
    for (d, &nd) in norm.iter().enumerate() {
        let pd = if d < lead { 1 } else { param[d - lead] };
        if pd != nd && pd != 1 {
            return None;
        }
        if pd == nd && nd != 1 {
            varying.push(d);
        }
    }
    let (Some(&first), Some(&last)) = (varying.first(), varying.last()) else {
        return Some(ParamMap { div: 1, modulo: 1 });
    };
    if (first..=last).any(|d| !varying.contains(&d) && norm[d] != 1) {
        return None;
    }
    Some(ParamMap { div: norm[last + 1..].iter().product(), modulo: norm[first..=last].iter().product() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_row_length_makes_one_layout_and_others_come_when_needed() {
        let Some(gpu) = crate::testkit::private_context() else { return };
        let types = [(DataType::Float, "f32"); 3];
        let known = RowNorm::new(&gpu, &types, Form::Centered, true, false, Some(600)).unwrap();
        assert_eq!(known.pipelines.made(), 1);
        let unknown = RowNorm::new(&gpu, &types, Form::Centered, true, false, None).unwrap();
        assert_eq!(unknown.pipelines.made(), 4);
        // A run of another row length makes its layout then.
        let lanes = Lanes::choose(3, 20, true);
        assert_ne!(lanes, Lanes::choose(1, 600, true));
        known.pipelines.get(&gpu, Layout { lanes, flat: false }).unwrap();
        assert_eq!(known.pipelines.made(), 2);
    }

    #[test]
    fn param_maps_cover_one_block_of_dims() {
        assert_eq!(param_map(&[4, 5], &[3, 4, 5]), Some(ParamMap { div: 1, modulo: 20 }));
        assert_eq!(param_map(&[3, 1, 1], &[3, 4, 5]), Some(ParamMap { div: 20, modulo: 3 }));
        assert_eq!(param_map(&[4, 1], &[3, 4, 5]), Some(ParamMap { div: 5, modulo: 4 }));
        assert_eq!(param_map(&[1], &[3, 4, 5]), Some(ParamMap { div: 1, modulo: 1 }));
        assert_eq!(param_map(&[3, 1, 5], &[3, 4, 5]), None);
        assert_eq!(param_map(&[2], &[3, 4, 5]), None);
    }
}
