//! Softmax, LogSoftmax and Hardmax on f32 and f16 (computed in f32).
//!
//! Before opset 13 the input is coerced to 2-D at `axis` (default 1) and each row normalized;
//! from opset 13 the op works along `axis` (default -1) alone. Both become `[outer, n, inner]`
//! rows of `n` elements `inner` apart. One dispatch: the threads of a row (see [`Lanes`]) find
//! its maximum and sum of exponentials in one online pass (rescaling the sum when the maximum
//! grows), combine them in workgroup memory, and write the row in a second pass.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{Error, Location, Result, Value};

use super::reduce::{arg_wgsl, float_type, normalize_axis, x_dtype, Lanes, ALL_LANES, FLOAT_HELPERS};
use super::{float_inputs, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers Softmax, LogSoftmax and Hardmax.
pub(crate) fn register(r: &mut Registry) {
    r.add("Softmax", supports, build);
    r.add("LogSoftmax", supports, build);
    r.add("Hardmax", supports, build);
}

/// Whether the EP takes the node: float data and a readable axis.
fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    ctx.node.int_or("axis", -1).is_ok() && float_inputs(ctx, gpu, 0..1)
}

/// Which normalization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// A Softmax, LogSoftmax or Hardmax node with its axis semantics decoded.
struct SoftmaxOp {
    /// One pipeline per lane layout.
    pipelines: Vec<Arc<Pipeline>>,
    axis: i64,
    /// Before opset 13: everything from `axis` on is one row.
    coerce_2d: bool,
    at: Location,
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let kind = match node.op_type.as_str() {
        "Softmax" => Kind::Softmax,
        "LogSoftmax" => Kind::LogSoftmax,
        _ => Kind::Hardmax,
    };
    let dtype = x_dtype(ctx)?;
    let ty = float_type(dtype)?;
    let pipelines = ALL_LANES
        .iter()
        .map(|&l| gpu.pipeline(&format!("softmax/{kind:?}/{ty}/{}", l.key()), || shader(kind, ty, enables(dtype), l)))
        .collect::<Result<_>>()?;
    let coerce_2d = ctx.since_version < 13;
    let axis = node.int_or("axis", if coerce_2d { 1 } else { -1 })?;
    Ok(Box::new(SoftmaxOp { pipelines, axis, coerce_2d, at: node.location() }))
}

/// The WGSL of a kind: the accumulator, its combination and update by element `v` (number
/// `k`), the row statistics it leaves, and the output of element `v` (number `k`).
fn kind_wgsl(kind: Kind) -> String {
    match kind {
        Kind::Softmax | Kind::LogSoftmax => {
            let out = if kind == Kind::Softmax { "exp(v - a.x) * scale" } else { "(v - a.x) - scale" };
            let scale = if kind == Kind::Softmax { "1.0 / a.y" } else { "log(a.y)" };
            format!(
                "alias Acc = vec2<f32>;
fn init() -> Acc {{ return vec2<f32>(-inf(), 0.0); }}
fn comb(a: Acc, b: Acc) -> Acc {{ return lse_comb(a, b); }}
fn add(a: Acc, v: f32, k: u32) -> Acc {{ return lse_add(a, v); }}
fn row_scale(a: Acc) -> f32 {{ return {scale}; }}
fn out(a: Acc, scale: f32, v: f32, k: u32) -> f32 {{ return {out}; }}
"
            )
        }
        Kind::Hardmax => format!(
            "{}
alias Acc = Arg;
fn init() -> Acc {{ return Arg(0.0, NONE); }}
fn comb(a: Acc, b: Acc) -> Acc {{ return arg_comb(a, b); }}
fn add(a: Acc, v: f32, k: u32) -> Acc {{ return arg_comb(a, arg_lift(v, k)); }}
fn row_scale(a: Acc) -> f32 {{ return 0.0; }}
fn out(a: Acc, scale: f32, v: f32, k: u32) -> f32 {{ return select(0.0, 1.0, k == a.i); }}
",
            arg_wgsl(true, false)
        ),
    }
}

/// The shader: `p` holds rows (`outer * inner`), `n` and `inner`.
fn shader(kind: Kind, ty: &str, enable: &str, lanes: Lanes) -> String {
    let first_nan = if kind == Kind::Hardmax {
        // As the CPU: a NaN first element is never beaten.
        "if (live && n > 0u && (a.i == NONE || is_nan(f32(x[base])))) { a.i = 0u; }"
    } else {
        ""
    };
    format!(
        "{enable}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read_write> y: array<{ty}>;
{FLOAT_HELPERS}{kind}{lanes}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let q = workgroup_index(wid, nwg) * LW + lane_row(t);
    let live = q < p[0];
    let n = p[1];
    let inner = p[2];
    let base = (q / inner) * n * inner + q % inner;
    var a = init();
    if (live) {{
        for (var k = lane_slice(t); k < n; k += LS) {{
            a = add(a, f32(x[base + k * inner]), k);
        }}
    }}
    a = combine_slices(t, a);
    {first_nan}
    let scale = row_scale(a);
    if (live) {{
        for (var k = lane_slice(t); k < n; k += LS) {{
            let at = base + k * inner;
            y[at] = {ty}(out(a, scale, f32(x[at]), k));
        }}
    }}
}}
",
        kind = kind_wgsl(kind),
        lanes = lanes.wgsl(),
    )
}

impl SoftmaxOp {
    /// The input seen as `[outer, n, inner]`.
    fn dims(&self, shape: &[usize]) -> Result<(usize, usize, usize)> {
        if shape.is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, shape.len(), &self.at)?;
        let outer = shape[..axis].iter().product();
        Ok(if self.coerce_2d {
            (outer, shape[axis..].iter().product(), 1)
        } else {
            (outer, shape[axis], shape[axis + 1..].iter().product())
        })
    }
}

impl GpuOp for SoftmaxOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let (outer, n, inner) = self.dims(x.shape())?;
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        let rows = outer * inner;
        if rows > 0 && n > 0 {
            let lanes = Lanes::choose(rows, n, inner == 1);
            let params = [u32_of(rows, &self.at)?, u32_of(n, &self.at)?, u32_of(inner, &self.at)?];
            u32_of(x.len(), &self.at)?;
            run.dispatch(&self.pipelines[lanes.index()], &params, &[x.buffer, y.gpu()?], lanes.groups(rows))?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

/// Log-softmax over the middle axis of `[outer, n, inner]` rows, for ops that need it as a
/// step (SoftmaxCrossEntropyLoss): the LogSoftmax pipelines of one dtype.
pub(crate) struct RowLogSoftmax {
    pipelines: Vec<Arc<Pipeline>>,
}

impl RowLogSoftmax {
    /// The pipelines for `dtype` (f32, or f16 with SHADER_F16).
    pub fn new(gpu: &GpuContext, dtype: onyx_core::DataType) -> Result<RowLogSoftmax> {
        let ty = float_type(dtype)?;
        let kind = Kind::LogSoftmax;
        let pipelines = ALL_LANES
            .iter()
            .map(|&l| {
                gpu.pipeline(&format!("softmax/{kind:?}/{ty}/{}", l.key()), || shader(kind, ty, enables(dtype), l))
            })
            .collect::<Result<_>>()?;
        Ok(RowLogSoftmax { pipelines })
    }

    /// Records `y = log_softmax(x)` along the middle axis of `[outer, n, inner]`.
    pub fn record(
        &self,
        run: &mut GpuRun,
        x: &crate::buffer::GpuBuffer,
        y: &crate::buffer::GpuBuffer,
        (outer, n, inner): (usize, usize, usize),
        at: &Location,
    ) -> Result<()> {
        let rows = outer * inner;
        if rows == 0 || n == 0 {
            return Ok(());
        }
        let lanes = Lanes::choose(rows, n, inner == 1);
        let params = [u32_of(rows, at)?, u32_of(n, at)?, u32_of(inner, at)?];
        u32_of(rows * n, at)?;
        run.dispatch(&self.pipelines[lanes.index()], &params, &[x, y], lanes.groups(rows))
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, rand, t, Case};

    /// (shape, axis, opset): last, middle and first axes, 2-D coercion, rows of 1, 7, 255, 257
    /// and 1000 elements, long strided rows, many short rows.
    const CASES: &[(&[usize], i64, i64)] = &[
        (&[3, 7], -1, 13),
        (&[2, 5, 3], 1, 13),
        (&[2, 5, 3], 0, 13),
        (&[2, 5, 3], 1, 11),
        (&[2, 5, 3], 0, 1),
        (&[4, 3, 5], -2, 11),
        (&[9], 0, 13),
        (&[5, 1], -1, 13),
        (&[4, 255], -1, 13),
        (&[3, 257], 1, 13),
        (&[2, 1000], -1, 13),
        (&[2, 1000, 3], 1, 13),
        (&[1, 37, 2003], 1, 13),
        (&[3000, 7], 0, 13),
        (&[70_001, 2], 1, 13),
        (&[2, 3, 4, 5], 1, 13),
    ];

    #[test]
    fn softmax_family_matches_the_cpu() {
        for (i, &(shape, axis, opset)) in CASES.iter().enumerate() {
            let x = rand(shape, -20.0, 20.0, 60 + i as u64);
            for op in ["Softmax", "LogSoftmax", "Hardmax"] {
                Case::new(op, vec![x.clone()]).attrs(vec![int("axis", axis)]).opset(opset).check(1e-4, 1e-5);
            }
        }
    }

    #[test]
    fn defaults_edges_and_special_values() {
        let x = rand(&[2, 3, 4], -3.0, 3.0, 5);
        for opset in [11, 13] {
            for op in ["Softmax", "LogSoftmax", "Hardmax"] {
                Case::new(op, vec![x.clone()]).opset(opset).check(1e-4, 1e-5);
            }
        }
        let big = t(&[2, 3], vec![1000f32, 1000.0, -1000.0, f32::NAN, 1.0, 2.0]);
        for op in ["Softmax", "LogSoftmax", "Hardmax"] {
            Case::new(op, vec![big.clone()]).check(1e-5, 1e-6);
            Case::new(op, vec![t(&[0, 4], Vec::<f32>::new())]).check(0.0, 0.0);
            Case::new(op, vec![t(&[3, 0], Vec::<f32>::new())]).check(0.0, 0.0);
        }
        let ties = t(&[2, 3], vec![1f32, 3.0, 3.0, -1.0, -1.0, -1.0]);
        Case::new("Hardmax", vec![ties]).check(0.0, 0.0);
    }

    /// Masked scores: rows whose leading (or any) elements are -inf, as attention masks make.
    #[test]
    fn negative_infinity_entries_add_nothing() {
        let ninf = f32::NEG_INFINITY;
        let mut v = vec![];
        for r in 0..37 {
            for k in 0..300 {
                v.push(if k < r * 7 { ninf } else { (k as f32 * 0.37).sin() * 3.0 });
            }
        }
        let x = t(&[37, 300], v);
        for op in ["Softmax", "LogSoftmax"] {
            Case::new(op, vec![x.clone()]).check(1e-4, 1e-5);
            let short = t(&[2, 5], vec![ninf, ninf, 1.0, 2.0, ninf, ninf, 0.5, ninf, ninf, 3.0]);
            Case::new(op, vec![short]).check(1e-5, 1e-6);
        }
    }

    #[test]
    fn a_bad_axis_is_a_named_error() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let x = rand(&[2, 3], 0.0, 1.0, 1);
        let e = Case::new("Softmax", vec![x]).attrs(vec![int("axis", 2)]).try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("Softmax") && e.contains("axis") && e.contains('2'), "{e}");
    }
}
