//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on f32 (and f16 with SHADER_F16),
//! computed in f32.
//!
//! Both read an input `[N, C, d1..dk]` (log-probabilities for NLL, scores for SCE) and int32 or
//! int64 targets `[N, d1..dk]`, with optional per-class weights. A target equal to
//! `ignore_index` adds neither loss nor weight. Reductions: `none` (one dispatch, a thread per
//! target), `sum` and `mean` (Σ loss / Σ weight; one workgroup walks every target and combines
//! in workgroup memory). SCE first log-softmaxes the input along axis 1 (the softmax family's
//! kernel), which is also its optional second output. Unlike the CPU EP, a target outside
//! `0..C` cannot be reported from the GPU: its loss is NaN, which spreads to a reduced loss.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::reduce::float_type;
use super::softmax::RowLogSoftmax;
use super::{input_dtype, is_float_input, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{enables, gpu_input, grid, opt_gpu_input, u32_of, GpuOp, OnGpu, FLAT_INDEX};
use crate::run::GpuRun;

/// Registers NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
pub(crate) fn register(r: &mut Registry) {
    r.add("NegativeLogLikelihoodLoss", supports, build);
    r.add("SoftmaxCrossEntropyLoss", supports, build);
}

/// How the per-target losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

impl Reduction {
    fn parse(s: &str) -> Option<Reduction> {
        Some(match s {
            "none" => Reduction::None,
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            _ => return None,
        })
    }
}

/// Whether the EP takes the node: float input (and weights of the same type), int32 or int64
/// targets, a known reduction.
fn supports(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let weight_ok = match ctx.node.inputs.get(2).filter(|n| !n.is_empty()) {
        Some(_) => input_dtype(ctx, 2) == input_dtype(ctx, 0),
        None => true,
    };
    is_float_input(ctx, gpu, 0)
        && matches!(input_dtype(ctx, 1), Some(DataType::Int32 | DataType::Int64))
        && weight_ok
        && ctx.node.string_or("reduction", "mean").ok().and_then(|r| Reduction::parse(&r)).is_some()
        && ctx.node.get_int("ignore_index").is_ok()
}

/// A loss node with its attributes decoded and pipelines built.
struct LossOp {
    reduction: Reduction,
    ignore_index: Option<i64>,
    /// SCE: the log-softmax step.
    softmax: Option<RowLogSoftmax>,
    pipeline: Arc<Pipeline>,
    /// Whether the node has the weight input.
    weighted: bool,
    at: Location,
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let r = node.string_or("reduction", "mean")?;
    let reduction =
        Reduction::parse(&r).ok_or_else(|| Error::attribute(&at, "reduction", "none, sum or mean", r.clone()))?;
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::input(&at, 0, "a float tensor", "an unknown type"))?;
    let ty = float_type(dtype)?;
    let wide = match input_dtype(ctx, 1) {
        Some(DataType::Int64) => true,
        Some(DataType::Int32) => false,
        other => return Err(Error::input(&at, 1, "int32 or int64 targets", format!("{other:?}"))),
    };
    let weighted = node.inputs.get(2).is_some_and(|n| !n.is_empty());
    let key = format!("loss/{ty}/{reduction:?}/{wide}/{weighted}");
    let pipeline = gpu.pipeline(&key, || shader(ty, enables(dtype), reduction, wide, weighted))?;
    let softmax = if node.op_type == "SoftmaxCrossEntropyLoss" { Some(RowLogSoftmax::new(gpu, dtype)?) } else { None };
    Ok(Box::new(LossOp { reduction, ignore_index: node.get_int("ignore_index")?, softmax, pipeline, weighted, at }))
}

/// The WGSL of one loss shader: `term(e)` is the (loss, weight) of target `e`; parameters are
/// targets, C, inner, the ignore index's low and high words and whether there is one.
fn shader(ty: &str, enable: &str, reduction: Reduction, wide: bool, weighted: bool) -> String {
    let target = if wide {
        "let lo = t[2u * e]; let hi = t[2u * e + 1u];"
    } else {
        "let lo = t[e]; let hi = select(0u, 0xffffffffu, (lo >> 31u) == 1u);"
    };
    let (wbind, wread) = if weighted {
        (format!("@group(0) @binding(3) var<storage, read> w: array<{ty}>;\n"), "f32(w[lo])")
    } else {
        (String::new(), "1.0")
    };
    let out = if weighted { 4 } else { 3 };
    let body = match reduction {
        Reduction::None => "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat_index(gid, nwg);
    if (e >= p[0]) { return; }
    y[e] = Y(term(e).x);
}
"
        .to_string(),
        _ => format!(
            "
var<workgroup> acc: array<vec2<f32>, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) l: u32) {{
    var a = vec2<f32>(0.0, 0.0);
    for (var e = l; e < p[0]; e += 256u) {{ a += term(e); }}
    acc[l] = a;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {{
        if (l < s) {{ acc[l] += acc[l + s]; }}
        workgroupBarrier();
    }}
    if (l == 0u) {{ y[0] = Y({}); }}
}}
",
            if reduction == Reduction::Mean { "acc[0].x / acc[0].y" } else { "acc[0].x" }
        ),
    };
    format!(
        "{enable}alias Y = {ty};
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read> t: array<u32>;
{wbind}@group(0) @binding({out}) var<storage, read_write> y: array<{ty}>;
{FLAT_INDEX}
fn term(e: u32) -> vec2<f32> {{
    {target}
    if (p[5] == 1u && lo == p[3] && hi == p[4]) {{ return vec2<f32>(0.0, 0.0); }}
    let c = p[1];
    if (hi != 0u || lo >= c) {{ let nan = bitcast<f32>(0x7fc00000u); return vec2<f32>(nan, nan); }}
    let inner = p[2];
    let i = e / inner;
    let k = e - i * inner;
    let wt = {wread};
    return vec2<f32>(-f32(x[(i * c + lo) * inner + k]) * wt, wt);
}}
{body}"
    )
}

impl LossOp {
    /// The input seen as `[n, c, inner]`, checked against the targets' shape.
    fn dims(&self, x: &[usize], target: &[usize]) -> Result<(usize, usize, usize)> {
        if x.len() < 2 {
            return Err(Error::input(&self.at, 0, "a tensor of rank 2 or more ([N, C, ...])", format!("{x:?}")));
        }
        let want: Vec<usize> = [x[0]].into_iter().chain(x[2..].iter().copied()).collect();
        if target != want {
            return Err(Error::input(&self.at, 1, format!("targets of shape {want:?}"), format!("{target:?}")));
        }
        Ok((x[0], x[1], x[2..].iter().product()))
    }
}

impl GpuOp for LossOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let target = gpu_input(run, inputs, 1, &self.at)?;
        let weight = opt_gpu_input(run, inputs, 2, &self.at)?;
        let (n, c, inner) = self.dims(x.shape(), target.shape())?;
        if let Some(w) = &weight {
            if w.dtype() != x.dtype() || w.shape() != [c] {
                let want = format!("{} weights of shape [{c}]", x.dtype());
                return Err(Error::input(&self.at, 2, want, format!("{} {:?}", w.dtype(), w.shape())));
            }
        }
        if self.weighted != weight.is_some() {
            return Err(Error::input(&self.at, 2, "the weights the node was built with", "a different input"));
        }
        u32_of(x.len(), &self.at)?;
        let mut outputs = vec![];
        let logp = match &self.softmax {
            Some(sm) => {
                let lp = run.alloc(x.dtype(), x.shape().to_vec())?;
                sm.record(run, x.buffer, lp.gpu()?, (n, c, inner), &self.at)?;
                Some(lp)
            }
            None => None,
        };
        let source = match &logp {
            Some(lp) => lp.gpu()?,
            None => x.buffer,
        };
        let count = n * inner;
        let (shape, groups) = match self.reduction {
            Reduction::None => (target.shape().to_vec(), grid(count)),
            _ => (vec![], [1, 1, 1]),
        };
        let y = run.alloc(x.dtype(), shape)?;
        let ignore = self.ignore_index.unwrap_or(0) as u64;
        let params = [
            u32_of(count, &self.at)?,
            u32_of(c, &self.at)?,
            u32_of(inner.max(1), &self.at)?,
            ignore as u32,
            (ignore >> 32) as u32,
            u32::from(self.ignore_index.is_some()),
        ];
        let mut buffers = vec![source, target.buffer];
        if let Some(w) = &weight {
            buffers.push(w.buffer);
        }
        buffers.push(y.gpu()?);
        if count > 0 || self.reduction != Reduction::None {
            run.dispatch(&self.pipeline, &params, &buffers, groups)?;
        }
        outputs.push(Value::Tensor(y));
        if let Some(lp) = logp {
            outputs.push(Value::Tensor(lp));
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::Tensor;

    use crate::testkit::{int, rand, string, t, Case};

    /// Random class targets in `0..c` for `shape`, some replaced by `ignore`.
    fn targets(shape: &[usize], c: i64, ignore: Option<i64>, seed: u64) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let v: Vec<i64> = (0..n)
            .map(|_| match ignore {
                Some(i) if rng.u32(0..4) == 0 => i,
                _ => rng.i64(0..c),
            })
            .collect();
        t(shape, v)
    }

    /// (x shape, target shape): plain, spatial, and more than a workgroup of targets.
    const SHAPES: &[(&[usize], &[usize])] = &[
        (&[5, 7], &[5]),
        (&[3, 4, 5], &[3, 5]),
        (&[2, 3, 4, 3, 2], &[2, 4, 3, 2]),
        (&[37, 11, 9], &[37, 9]),
        (&[1, 300], &[1]),
    ];

    #[test]
    fn losses_match_the_cpu() {
        for (i, &(xs, ts)) in SHAPES.iter().enumerate() {
            let c = xs[1];
            let x = rand(xs, -3.0, 1.0, 10 + i as u64);
            let w = rand(&[c], 0.2, 2.0, 20 + i as u64);
            for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"] {
                for reduction in ["none", "sum", "mean"] {
                    for ignore in [None, Some(1), Some(-5)] {
                        let tg = targets(ts, c as i64, ignore, 30 + i as u64);
                        let mut attrs = vec![string("reduction", reduction)];
                        if let Some(ig) = ignore {
                            attrs.push(int("ignore_index", ig));
                        }
                        let outs = if op == "SoftmaxCrossEntropyLoss" { 2 } else { 1 };
                        Case::new(op, vec![x.clone(), tg.clone()]).attrs(attrs.clone()).outputs(outs).check(1e-4, 1e-5);
                        Case::new(op, vec![x.clone(), tg.clone(), w.clone()])
                            .attrs(attrs)
                            .outputs(outs)
                            .check(1e-4, 1e-5);
                    }
                }
            }
        }
    }

    #[test]
    fn int32_targets_and_one_output() {
        let x = rand(&[4, 6, 3], -2.0, 2.0, 3);
        let tg = t(&[4, 3], vec![0i32, 5, 2, 1, 1, 4, 3, 0, 5, 2, 2, 2]);
        for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"] {
            Case::new(op, vec![x.clone(), tg.clone()]).check(1e-4, 1e-5);
        }
    }

    #[test]
    fn mismatched_targets_are_a_named_error() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let x = rand(&[4, 6], -2.0, 2.0, 3);
        let tg = t(&[5], vec![0i64, 1, 2, 3, 4]);
        let e = Case::new("NegativeLogLikelihoodLoss", vec![x, tg]).try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("NegativeLogLikelihoodLoss") && e.contains("targets"), "{e}");
    }
}
