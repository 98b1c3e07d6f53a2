//! Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin
//! on f32 and f16 (computed in f32), plus the row-reduction machinery that Softmax, the
//! normalizations and the global pools share.
//!
//! A reduction is one dispatch. The input's dims are split into kept and reduced ones (size-1
//! dims dropped, adjacent dims of one kind merged), so that any set of axes is one pass with no
//! transpose. The 256 threads of a workgroup share out the outputs according to [`Lanes`]: one
//! workgroup per output for long contiguous rows, a few threads per output for short ones,
//! and for strided rows (a kept axis innermost) neighbouring threads take neighbouring outputs
//! so that reads coalesce; the partial results of an output's threads are combined in
//! workgroup memory.

mod arg;
mod lanes;

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Tensor, Value};

use super::{float_inputs, input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::GpuContext;
use crate::kernel::{enables, gpu_input, host_ints, known_dims, wgsl_type, GpuOp, GpuTensor, OnGpu};
use crate::run::GpuRun;

use lanes::Split;
pub(crate) use lanes::{known_layout, LanePipelines, Lanes, Layout, ALL_LANES};

/// Registers the Reduce* ops (axes from input 1, read on the host, in later opsets), ArgMax and
/// ArgMin.
pub(crate) fn register(r: &mut Registry) {
    for (name, _) in REDUCE_OPS {
        r.add_with_host_inputs(name, supports_reduce, build_reduce, &[1]);
    }
    r.add("ArgMax", arg::supports_arg, arg::build_arg);
    r.add("ArgMin", arg::supports_arg, arg::build_arg);
}

/// WGSL helpers for special float values, NaN-aware max/min and the online log-sum-exp
/// combination (accumulator `vec2(max, sum of exp(x - max))`).
pub(crate) const FLOAT_HELPERS: &str = "
fn inf() -> f32 { return bitcast<f32>(0x7f800000u); }
fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
fn is_finite(v: f32) -> bool { return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u; }
fn max_nan(a: f32, b: f32) -> f32 { if (b > a || is_nan(b)) { return b; } return a; }
fn min_nan(a: f32, b: f32) -> f32 { if (b < a || is_nan(b)) { return b; } return a; }
fn lse_comb(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let m = max_nan(a.x, b.x);
    if (!is_finite(m)) { return vec2<f32>(m, a.y + b.y); }
    return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}
fn lse_add(a: vec2<f32>, v: f32) -> vec2<f32> {
    // -inf adds nothing (and must not reach exp(-inf - -inf), which is NaN).
    if (bitcast<u32>(v) == 0xff800000u) { return a; }
    if (v > a.x) { return vec2<f32>(v, a.y * exp(a.x - v) + 1.0); }
    if (is_nan(v)) { return vec2<f32>(v, a.y); }
    return vec2<f32>(a.x, a.y + exp(v - a.x));
}
";

/// WGSL of the argmax/argmin accumulator (`Arg`: best value and its index, `NONE` when no
/// element counted) and its combination: `MAX` picks the largest, ties go to the first index
/// or, with `LAST`, the last. NaN never wins.
pub(crate) fn arg_wgsl(max: bool, last: bool) -> String {
    format!(
        "
struct Arg {{ v: f32, i: u32 }}
const NONE: u32 = 0xffffffffu;
const MAX: bool = {max};
const LAST: bool = {last};
fn arg_better(b: Arg, a: Arg) -> bool {{
    let wins = select((b.v < a.v), (b.v > a.v), MAX);
    let tie = (b.v == a.v) && select((b.i < a.i), (b.i > a.i), LAST);
    return wins || tie;
}}
fn arg_comb(a: Arg, b: Arg) -> Arg {{
    if (a.i == NONE) {{ return b; }}
    if (b.i == NONE) {{ return a; }}
    if (arg_better(b, a)) {{ return b; }}
    return a;
}}
fn arg_lift(v: f32, k: u32) -> Arg {{
    if (is_nan(v)) {{ return Arg(0.0, NONE); }}
    return Arg(v, k);
}}
"
    )
}

// ---------------------------------------------------------------------------------------------
// Reduce kernels.

/// The reductions, by ONNX op name.
const REDUCE_OPS: [(&str, ReduceOp); 10] = [
    ("ReduceSum", ReduceOp::Sum),
    ("ReduceMean", ReduceOp::Mean),
    ("ReduceMax", ReduceOp::Max),
    ("ReduceMin", ReduceOp::Min),
    ("ReduceProd", ReduceOp::Prod),
    ("ReduceL1", ReduceOp::L1),
    ("ReduceL2", ReduceOp::L2),
    ("ReduceLogSum", ReduceOp::LogSum),
    ("ReduceLogSumExp", ReduceOp::LogSumExp),
    ("ReduceSumSquare", ReduceOp::SumSquare),
];

/// A reduction of float rows to one float each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
    /// Max where NaN never wins (as the CPU's max pooling): GlobalMaxPool.
    MaxSkipNan,
    /// Sum divided by the count, NaN for no elements (as the CPU's average pooling):
    /// GlobalAveragePool.
    Average,
    /// `(sum |x|^p)^(1/p)` with `p` the `extra` parameter: GlobalLpPool.
    Lp,
}

impl ReduceOp {
    /// A short name for pipeline keys.
    fn key(self) -> String {
        format!("{self:?}")
    }

    /// WGSL of `Acc`, `init()`, `lift(v, k)` (the accumulator of one element), `comb(a, b)`,
    /// and `post(a, r)` (the output of a row of `r` elements); `extra` is the f32 parameter.
    fn wgsl(self) -> String {
        let (acc, init, lift, comb, post) = match self {
            ReduceOp::Sum => ("f32", "0.0", "v", "a + b", "a"),
            ReduceOp::Mean => ("f32", "0.0", "v", "a + b", "select(a / f32(r), a, r == 0u)"),
            ReduceOp::Max => ("f32", "-inf()", "v", "max_nan(a, b)", "a"),
            ReduceOp::Min => ("f32", "inf()", "v", "min_nan(a, b)", "a"),
            ReduceOp::Average => ("f32", "0.0", "v", "a + b", "a / f32(r)"),
            ReduceOp::Prod => ("f32", "1.0", "v", "a * b", "a"),
            ReduceOp::L1 => ("f32", "0.0", "abs(v)", "a + b", "a"),
            ReduceOp::L2 => ("f32", "0.0", "v * v", "a + b", "sqrt(a)"),
            ReduceOp::LogSum => ("f32", "0.0", "v", "a + b", "log(a)"),
            ReduceOp::SumSquare => ("f32", "0.0", "v * v", "a + b", "a"),
            ReduceOp::MaxSkipNan => ("f32", "-inf()", "v", "select(a, b, b > a)", "a"),
            ReduceOp::Lp => ("f32", "0.0", "pow(abs(v), extra())", "a + b", "pow(a, 1.0 / extra())"),
            ReduceOp::LogSumExp => (
                "vec2<f32>",
                "vec2<f32>(-inf(), 0.0)",
                "vec2<f32>(v, 1.0)",
                "lse_comb(a, b)",
                "select(a.x, a.x + log(a.y), is_finite(a.x))",
            ),
        };
        format!(
            "alias Acc = {acc};
fn init() -> Acc {{ return {init}; }}
fn lift(v: f32, k: u32) -> Acc {{ return {lift}; }}
fn comb(a: Acc, b: Acc) -> Acc {{ return {comb}; }}
fn post(a: Acc, r: u32) -> f32 {{ return {post}; }}
"
        )
    }
}

/// The shader of a reduction: `op` over rows of `ty` elements, `lanes` layout.
fn reduce_shader(op: ReduceOp, ty: &str, enable: &str, lanes: Lanes) -> String {
    format!(
        "{enable}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read_write> y: array<{ty}>;
fn extra() -> f32 {{ return bitcast<f32>(p[4]); }}
{FLOAT_HELPERS}{ops}{lanes}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let q = workgroup_index(wid, nwg) * LW + lane_row(t);
    let live = q < p[0];
    let r = p[1];
    var a = init();
    if (live) {{
        let base = kept_offset(q);
        for (var k = lane_slice(t); k < r; k += LS) {{
            a = comb(a, lift(f32(x[base + reduced_offset(k)]), k));
        }}
    }}
    a = combine_slices(t, a);
    if (live && lane_slice(t) == 0u) {{
        y[q] = {ty}(post(a, r));
    }}
}}
",
        ops = op.wgsl(),
        lanes = lanes.wgsl(),
    )
}

/// The pipelines of one reduction over one dtype.
pub(crate) struct ReduceKernel {
    pipelines: LanePipelines,
    dtype: DataType,
}

impl ReduceKernel {
    /// Compiles (or reuses) the pipelines of `op` on `dtype` (f32, or f16 on devices with it):
    /// the one of the `known` layout (see [`known_layout`]), else every layout.
    pub fn new(gpu: &GpuContext, op: ReduceOp, dtype: DataType, known: Option<Layout>) -> Result<ReduceKernel> {
        let ty = float_type(dtype)?;
        let shader = move |l| reduce_shader(op, ty, enables(dtype), l);
        let pipelines = LanePipelines::new(gpu, format!("reduce/{}/{ty}", op.key()), shader, known)?;
        Ok(ReduceKernel { pipelines, dtype })
    }

    /// Records the reduction of `x` over the axes marked in `mask` into a new tensor of
    /// `out_shape` (which must hold the kept dims' elements); `extra` is the op's f32
    /// parameter (Lp's p).
    pub fn record(
        &self,
        run: &mut GpuRun,
        x: GpuTensor<'_>,
        mask: &[bool],
        out_shape: Vec<usize>,
        extra: f32,
        at: &Location,
    ) -> Result<Tensor> {
        if x.dtype() != self.dtype {
            return Err(Error::input(at, 0, format!("{:?}", self.dtype), format!("{:?}", x.dtype())));
        }
        let split = Split::new(x.shape(), mask);
        let y = run.alloc(self.dtype, out_shape)?;
        let layout = split.layout();
        let params = split.params(extra.to_bits(), at)?;
        let pipeline = self.pipelines.get(run.context(), layout)?;
        run.dispatch(pipeline, &params, &[x.buffer, y.gpu()?], layout.lanes.groups(split.outputs()))?;
        Ok(y)
    }
}

/// The WGSL type of a float dtype the kernels compute in, or an error.
pub(crate) fn float_type(dtype: DataType) -> Result<&'static str> {
    match dtype {
        DataType::Float | DataType::Float16 => {
            wgsl_type(dtype).ok_or_else(|| Error::Unsupported(format!("wgpu: {dtype:?}")))
        }
        other => Err(Error::Unsupported(format!("wgpu: no float kernel for {other:?}"))),
    }
}

/// The dtype of input 0 of a node, or an error for the build functions.
pub(crate) fn x_dtype(ctx: &NodeContext<'_>) -> Result<DataType> {
    input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {} has an untyped input", ctx.node.location())))
}

/// Whether the EP takes a Reduce* node: float data, axes (if an input) as int64 or int32.
fn supports_reduce(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let axes_ok = ctx.node.input(1).is_none() || matches!(input_dtype(ctx, 1), Some(DataType::Int64 | DataType::Int32));
    let attrs_ok = ctx.node.int_or("keepdims", 1).is_ok()
        && ctx.node.int_or("noop_with_empty_axes", 0).is_ok()
        && ctx.node.get_ints("axes").is_ok();
    axes_ok && attrs_ok && float_inputs(ctx, gpu, 0..1)
}

/// A Reduce* node.
struct Reduce {
    kernel: ReduceKernel,
    /// Axes from the attribute (`None`: all, or from input 1 when `axes_input`).
    axes: Option<Vec<i64>>,
    /// Axes come from the optional input 1 (ReduceSum from opset 13, the others from 18).
    axes_input: bool,
    keepdims: bool,
    noop_with_empty_axes: bool,
    at: Location,
}

fn build_reduce(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let op = REDUCE_OPS
        .iter()
        .find(|(n, _)| *n == node.op_type)
        .map(|(_, op)| *op)
        .ok_or_else(|| Error::node(&at, "not a Reduce op"))?;
    let axes_input = ctx.since_version >= if op == ReduceOp::Sum { 13 } else { 18 };
    let axes = if axes_input { None } else { node.get_ints("axes")?.map(<[i64]>::to_vec) };
    let noop_with_empty_axes = node.int_or("noop_with_empty_axes", 0)? != 0;
    let known = known_reduction(ctx, &axes, axes_input, noop_with_empty_axes);
    Ok(Box::new(Reduce {
        kernel: ReduceKernel::new(gpu, op, x_dtype(ctx)?, known)?,
        axes,
        axes_input,
        keepdims: node.int_or("keepdims", 1)? != 0,
        noop_with_empty_axes,
        at,
    }))
}

/// The layout of the reduction, when the session knows the reduced axes (from the attribute, a
/// constant input or none) and enough of the input's shape (see [`known_layout`]).
fn known_reduction(ctx: &NodeContext<'_>, axes: &Option<Vec<i64>>, axes_input: bool, noop: bool) -> Option<Layout> {
    let dims = known_dims(ctx, 0)?;
    let axes = match (axes_input, ctx.node.input(1)) {
        (false, _) => axes.clone().unwrap_or_default(),
        (true, None) => vec![],
        (true, Some(_)) => {
            let view = ctx.constant(1)?.view().ok()?;
            match view.dtype() {
                DataType::Int64 => view.as_slice::<i64>().ok()?.to_vec(),
                DataType::Int32 => view.as_slice::<i32>().ok()?.iter().map(|&a| a as i64).collect(),
                _ => return None,
            }
        }
    };
    let mask = reduced_axes(&axes, dims.len(), noop, &ctx.node.location()).ok()?;
    known_layout(&dims, &mask)
}

/// Marks the axes to reduce: `axes` normalized (an error for out-of-range or repeated axes);
/// all axes when `axes` is empty, unless `noop` asks to reduce none.
pub(crate) fn reduced_axes(axes: &[i64], rank: usize, noop: bool, at: &Location) -> Result<Vec<bool>> {
    if axes.is_empty() {
        return Ok(vec![!noop; rank]);
    }
    let mut mask = vec![false; rank];
    for &a in axes {
        let d = normalize_axis(a, rank, at)?;
        if std::mem::replace(&mut mask[d], true) {
            return Err(Error::node(at, format!("axis {a} is repeated or invalid for rank {rank} (axes {axes:?})")));
        }
    }
    Ok(mask)
}

/// `axis` (negative: from the end) as an index below `rank`, or an error naming it.
pub(crate) fn normalize_axis(axis: i64, rank: usize, at: &Location) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(Error::node(at, format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// The output shape: reduced axes kept as 1 or dropped.
pub(crate) fn reduced_shape(shape: &[usize], mask: &[bool], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(mask)
        .filter_map(|(&s, &red)| match (red, keepdims) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

impl GpuOp for Reduce {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let axes = if self.axes_input {
            host_ints(inputs, 1, &self.at)?.unwrap_or_default()
        } else {
            self.axes.clone().unwrap_or_default()
        };
        let mask = reduced_axes(&axes, x.shape().len(), self.noop_with_empty_axes, &self.at)?;
        let out_shape = reduced_shape(x.shape(), &mask, self.keepdims);
        let y = self.kernel.record(run, x, &mask, out_shape, 0.0, &self.at)?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{i64s, int, ints, rand, t, Case};

    const OPS: [&str; 10] = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ];

    /// Value range of an op's random inputs (positive for LogSum, near 1 for Prod).
    /// Sums of mixed signs cancel: their absolute rounding error would exceed the tolerance
    /// where the result is near zero, so those ops get positive data.
    fn range(op: &str) -> (f32, f32) {
        match op {
            "ReduceProd" => (0.9, 1.1),
            "ReduceLogSum" | "ReduceSum" | "ReduceMean" => (0.1, 3.0),
            _ => (-3.0, 3.0),
        }
    }

    /// (shape, axes): first, middle, last, several, non-adjacent, all axes; rows of 1, 7, 255,
    /// 257, 1000 elements; negative axes.
    const CASES: &[(&[usize], &[i64])] = &[
        (&[3, 4, 5], &[1]),
        (&[3, 4, 5], &[-1]),
        (&[3, 4, 5], &[0]),
        (&[3, 4, 5], &[0, 2]),
        (&[2, 3, 4, 5], &[1, 3]),
        (&[2, 3, 4, 5], &[0, -1, 1]),
        (&[3, 4, 5], &[]),
        (&[7], &[0]),
        (&[2, 1, 3], &[1]),
        (&[5, 1], &[-1]),
        (&[], &[]),
        (&[9, 255], &[1]),
        (&[4, 257], &[-1]),
        (&[3, 1000], &[1]),
        (&[1000, 3], &[0]),
        (&[257, 7, 3], &[0, 2]),
        (&[2, 300, 70], &[1]),
        (&[70_000, 2], &[1]),
        (&[3, 40_001], &[0]),
    ];

    #[test]
    fn reductions_match_the_cpu() {
        for op in OPS {
            let (lo, hi) = range(op);
            for (i, &(shape, axes)) in CASES.iter().enumerate() {
                let x = rand(shape, lo, hi, 100 + i as u64);
                let tol = if op == "ReduceProd" || shape.iter().product::<usize>() > 50_000 { 1e-4 } else { 2e-5 };
                for keepdims in [0, 1] {
                    let mut case = Case::new(op, vec![x.clone()]).attrs(vec![int("keepdims", keepdims)]).opset(18);
                    if !axes.is_empty() {
                        case.inputs.push(Some(i64s(axes)));
                        case.constant = vec![1];
                    }
                    case.check(tol, 1e-5);
                }
                // Axes as an attribute (ReduceSum before 13, the others before 18).
                let since = if op == "ReduceSum" { 11 } else { 13 };
                let attrs = if axes.is_empty() { vec![] } else { vec![ints("axes", axes)] };
                Case::new(op, vec![x.clone()]).attrs(attrs).opset(since).check(tol, 1e-5);
            }
        }
    }

    #[test]
    fn a_layout_the_session_did_not_expect_is_made_at_the_first_run_that_needs_it() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let ctx = gpu.context().unwrap().clone();
        // Built for rows of 1000 adjacent elements; run on 3 strided columns of 1000.
        let built_for = (&[3, 1000][..], &[false, true][..]);
        let layout = Split::new(built_for.0, built_for.1).layout();
        let kernel = ReduceKernel::new(&ctx, ReduceOp::Sum, DataType::Float, Some(layout)).unwrap();
        let made = |k: &ReduceKernel| k.pipelines.made();
        assert_eq!(made(&kernel), 1, "only the layout the known shape uses is made with the kernel");
        let x = rand(&[1000, 3], -1.0, 1.0, 12);
        let mask = [true, false];
        assert_ne!(Split::new(x.shape(), &mask).layout(), Split::new(built_for.0, built_for.1).layout());
        let sums = |x: &Tensor, mask: &[bool], out: usize| {
            let on_gpu = ctx.upload(x.view().unwrap()).unwrap();
            let input = GpuTensor { tensor: &on_gpu, buffer: ctx.own_buffer(&on_gpu).unwrap() };
            let mut run = crate::run::GpuRun::new(ctx.clone());
            let y = kernel.record(&mut run, input, mask, vec![out], 0.0, &Default::default()).unwrap();
            onyx_core::ep::RunState::flush(&mut run).unwrap();
            ctx.download(&y).unwrap()
        };
        let xs = x.as_slice::<f32>().unwrap();
        let want: Vec<f32> = (0..3).map(|c| (0..1000).map(|r| xs[r * 3 + c]).sum()).collect();
        crate::testkit::assert_close(&sums(&x, &mask, 3), &t(&[3], want), 1e-5, 1e-5, "column sums");
        assert_eq!(made(&kernel), 2);
        // The known shape's lane layout but rows that are not flat: the strided pipeline.
        let x = rand(&[2, 3, 1000], -1.0, 1.0, 13);
        let mask = [true, false, true];
        let (now, then) = (Split::new(x.shape(), &mask).layout(), Split::new(built_for.0, built_for.1).layout());
        assert!(now.lanes == then.lanes && then.flat && !now.flat);
        let xs = x.as_slice::<f32>().unwrap();
        let want: Vec<f32> = (0..3).map(|c| xs.chunks(1000).skip(c).step_by(3).flatten().sum()).collect();
        crate::testkit::assert_close(&sums(&x, &mask, 3), &t(&[3], want), 1e-4, 1e-5, "sums over dims 0 and 2");
        assert_eq!(made(&kernel), 3);
    }

    #[test]
    fn more_workgroups_than_one_dispatch_dimension_holds() {
        // 600000 rows of 16: 75000 workgroups of 8 rows, spread over x and y.
        let x = rand(&[600_000, 16], 0.0, 1.0, 9);
        assert!(Lanes::choose(600_000, 16, true).groups(600_000)[1] > 1);
        Case::new("ReduceMean", vec![x, i64s(&[1])]).constants(&[1]).check(2e-5, 1e-6);
    }

    #[test]
    fn axes_as_a_graph_input_and_noop() {
        let x = rand(&[4, 6, 5], -2.0, 2.0, 7);
        // Axes fed at run time (a host input).
        Case::new("ReduceSum", vec![x.clone(), i64s(&[0, 2])]).check(1e-5, 1e-5);
        for op in ["ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceLogSumExp", "ReduceMean"] {
            let case = Case::new(op, vec![x.clone(), i64s(&[])]).attrs(vec![int("noop_with_empty_axes", 1)]).opset(18);
            case.constants(&[1]).check(1e-5, 1e-6);
            let mut omitted = Case::new(op, vec![x.clone()]).attrs(vec![int("noop_with_empty_axes", 1)]).opset(18);
            omitted.inputs.push(None);
            omitted.check(1e-5, 1e-6);
        }
    }

    #[test]
    fn empty_and_special_values() {
        let empty = t(&[2, 0, 3], Vec::<f32>::new());
        for op in OPS {
            Case::new(op, vec![empty.clone(), i64s(&[1])]).constants(&[1]).opset(18).check(0.0, 0.0);
            let case = Case::new(op, vec![empty.clone(), i64s(&[2])]).constants(&[1]).opset(18);
            case.attrs(vec![int("keepdims", 0)]).check(0.0, 0.0);
        }
        let nan = f32::NAN;
        let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
        let x = t(&[4, 3], vec![inf, 2.0, 1.0, ninf, ninf, ninf, 1.0, nan, 3.0, 1000.0, 1000.0, 999.0]);
        for op in ["ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum"] {
            Case::new(op, vec![x.clone(), i64s(&[1])]).constants(&[1]).opset(18).check(1e-6, 0.0);
        }
    }

    #[test]
    fn bad_axes_are_named_errors() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let x = rand(&[2, 3], 0.0, 1.0, 1);
        let case = Case::new("ReduceSum", vec![x.clone(), i64s(&[2])]).constants(&[1]);
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("ReduceSum") && e.contains("axis") && e.contains('2'), "{e}");
        let case = Case::new("ReduceMax", vec![x, i64s(&[1, -1])]).constants(&[1]);
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("ReduceMax") && e.contains("axes"), "{e}");
    }
}
