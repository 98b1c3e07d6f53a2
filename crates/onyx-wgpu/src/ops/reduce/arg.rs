//! ArgMax and ArgMin: the index of the largest or smallest element along one axis, on the
//! reduction machinery of [`super`].

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::lanes::{known_layout, LanePipelines, Lanes, Split};
use super::{arg_wgsl, float_type, normalize_axis, reduced_shape, x_dtype, FLOAT_HELPERS};
use crate::capabilities::Capabilities;
use crate::context::GpuContext;
use crate::kernel::{enables, gpu_input, known_dims, GpuOp, OnGpu};
use crate::ops::float_inputs;
use crate::run::GpuRun;

/// Whether the EP takes an ArgMax/ArgMin node: float data and readable attributes.
pub(super) fn supports_arg(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let attrs_ok =
        n.int_or("axis", 0).is_ok() && n.int_or("keepdims", 1).is_ok() && n.int_or("select_last_index", 0).is_ok();
    attrs_ok && float_inputs(ctx, gpu, 0..1)
}

/// ArgMax or ArgMin along one axis.
struct ArgOp {
    pipelines: LanePipelines,
    axis: i64,
    keepdims: bool,
    at: Location,
}

pub(super) fn build_arg(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let dtype = x_dtype(ctx)?;
    let ty = float_type(dtype)?;
    let max = node.op_type == "ArgMax";
    let last = node.int_or("select_last_index", 0)? != 0;
    let axis = node.int_or("axis", 0)?;
    let known = known_dims(ctx, 0).and_then(|dims| {
        let axis = normalize_axis(axis, dims.len(), &node.location()).ok()?;
        let mask: Vec<bool> = (0..dims.len()).map(|d| d == axis).collect();
        known_layout(&dims, &mask)
    });
    let shader = move |l| arg_shader(max, last, ty, enables(dtype), l);
    let pipelines = LanePipelines::new(gpu, format!("arg/{max}/{last}/{ty}"), shader, known)?;
    Ok(Box::new(ArgOp { pipelines, axis, keepdims: node.int_or("keepdims", 1)? != 0, at: node.location() }))
}

/// The ArgMax/ArgMin shader: int64 indices written as two u32 words (low, high = 0).
fn arg_shader(max: bool, last: bool, ty: &str, enable: &str, lanes: Lanes) -> String {
    format!(
        "{enable}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ty}>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
{FLOAT_HELPERS}{arg}
alias Acc = Arg;
fn comb(a: Acc, b: Acc) -> Acc {{ return arg_comb(a, b); }}
{lanes}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let q = workgroup_index(wid, nwg) * LW + lane_row(t);
    let live = q < p[0];
    let r = p[1];
    var a = Arg(0.0, NONE);
    let base = kept_offset(q);
    if (live) {{
        for (var k = lane_slice(t); k < r; k += LS) {{
            a = arg_comb(a, arg_lift(f32(x[base + reduced_offset(k)]), k));
        }}
    }}
    a = combine_slices(t, a);
    if (live && lane_slice(t) == 0u) {{
        // As the CPU: a NaN first element is never beaten.
        var i = a.i;
        if (i == NONE || is_nan(f32(x[base]))) {{ i = 0u; }}
        y[2u * q] = i;
        y[2u * q + 1u] = 0u;
    }}
}}
",
        arg = arg_wgsl(max, last),
        lanes = lanes.wgsl(),
    )
}

impl GpuOp for ArgOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let shape = x.shape();
        if shape.is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, shape.len(), &self.at)?;
        if shape[axis] == 0 {
            return Err(Error::input(&self.at, 0, format!("a non-empty axis {axis}"), format!("shape {shape:?}")));
        }
        let mask: Vec<bool> = (0..shape.len()).map(|d| d == axis).collect();
        let split = Split::new(shape, &mask);
        let y = run.alloc(DataType::Int64, reduced_shape(shape, &mask, self.keepdims))?;
        let layout = split.layout();
        let params = split.params(0, &self.at)?;
        let pipeline = self.pipelines.get(run.context(), layout)?;
        run.dispatch(pipeline, &params, &[x.buffer, y.gpu()?], layout.lanes.groups(split.outputs()))?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{int, rand, t, Case};

    #[test]
    fn arg_max_and_min_match_the_cpu() {
        let shapes: &[(&[usize], i64)] = &[
            (&[3, 4, 5], 0),
            (&[3, 4, 5], 1),
            (&[3, 4, 5], -1),
            (&[7], 0),
            (&[2, 1000], 1),
            (&[257, 3], 0),
            (&[1, 1], 1),
        ];
        for (i, &(shape, axis)) in shapes.iter().enumerate() {
            // Few distinct values, so that ties happen.
            let x = rand(shape, 0.0, 4.0, 40 + i as u64);
            let x = t(shape, x.as_slice::<f32>().unwrap().iter().map(|v| v.floor()).collect());
            for op in ["ArgMax", "ArgMin"] {
                for (keepdims, last) in [(1, 0), (0, 0), (1, 1), (0, 1)] {
                    let attrs = vec![int("axis", axis), int("keepdims", keepdims), int("select_last_index", last)];
                    Case::new(op, vec![x.clone()]).attrs(attrs).check(0.0, 0.0);
                }
            }
        }
        let nan = f32::NAN;
        let x = t(&[3, 3], vec![nan, 5.0, 1.0, 2.0, nan, 7.0, 1.0, 1.0, nan]);
        for op in ["ArgMax", "ArgMin"] {
            Case::new(op, vec![x.clone()]).attrs(vec![int("axis", 1)]).check(0.0, 0.0);
        }
    }
}
