//! Normalization: BatchNormalization (inference), LayerNormalization (with its optional Mean and
//! InvStdDev outputs), InstanceNormalization and GroupNormalization on f32 and f16 (computed in
//! f32).
//!
//! BatchNormalization is one elementwise dispatch. The others normalize rows (the trailing
//! dims from `axis`, a channel plane, a group of planes) with one dispatch of the row kernel
//! ([`rows`]). Scale and bias are indexed as `(flat index / div) % modulo`, which covers a
//! parameter per row element (LayerNorm, also broadcast along leading or trailing dims), per
//! channel (Instance/GroupNorm) or per group.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::reduce::{float_type, normalize_axis};
use super::{float_inputs, input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{
    enables, gpu_input, grid, known_dims, opt_gpu_input, static_shape, u32_of, GpuOp, GpuTensor, OnGpu, FLAT_INDEX,
};
use crate::run::GpuRun;

mod gemm_skip;
mod rows;
mod skip;

use rows::{param_map, Form, ParamMap, RowNorm};

/// Registers the normalization ops.
pub(crate) fn register(r: &mut Registry) {
    r.add("BatchNormalization", supports_batch_norm, build_batch_norm);
    r.add("LayerNormalization", supports_layer_norm, build_layer_norm);
    r.add("RMSNormalization", supports_layer_norm, build_layer_norm);
    // ONNX Runtime's, in the default domain: RMSNormalization whose output 1 is the inverse
    // standard deviation (left to the CPU when read).
    r.add("SimplifiedLayerNormalization", supports_simplified, build_layer_norm);
    r.add("InstanceNormalization", supports_instance_norm, build_instance_norm);
    r.add("GroupNormalization", supports_group_norm, build_group_norm);
    r.add_in("com.microsoft", "SkipLayerNormalization", skip::supports, skip::build);
    r.add_in("com.microsoft", "SkipSimplifiedLayerNormalization", skip::supports, skip::build);
    r.add_in(onyx_core::ir::ONYX_DOMAIN, "GemmSkipLayerNormalization", gemm_skip::supports, gemm_skip::build);
}

/// The `enable` lines for shaders reading any of `dtypes`.
fn enables_any(dtypes: &[DataType]) -> &'static str {
    if dtypes.contains(&DataType::Float16) {
        enables(DataType::Float16)
    } else {
        ""
    }
}

/// The WGSL type of input `i`, which must be f32 or f16.
fn param_type(ctx: &NodeContext<'_>, i: usize) -> Result<(DataType, &'static str)> {
    let dtype = input_dtype(ctx, i)
        .ok_or_else(|| Error::Unsupported(format!("wgpu: {} has an untyped input {i}", ctx.node.location())))?;
    Ok((dtype, float_type(dtype)?))
}

/// Whether output `i` of the node is named (someone may read it).
fn has_output(ctx: &NodeContext<'_>, i: usize) -> bool {
    ctx.node.outputs.get(i).is_some_and(|o| !o.is_empty())
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization

/// Inference mode only: training mode and the running statistics outputs are declined.
fn supports_batch_norm(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let inference = n.int_or("training_mode", 0).is_ok_and(|t| t == 0) && n.float_or("epsilon", 1e-5).is_ok();
    let one_output = (1..n.outputs.len()).all(|i| !has_output(ctx, i));
    inference && one_output && n.inputs.len() == 5 && float_inputs(ctx, gpu, 0..5)
}

/// BatchNormalization in inference mode.
struct BatchNorm {
    pipeline: Arc<Pipeline>,
    epsilon: f32,
    at: Location,
}

fn build_batch_norm(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let types = (0..5).map(|i| param_type(ctx, i)).collect::<Result<Vec<_>>>()?;
    let dtypes: Vec<DataType> = types.iter().map(|t| t.0).collect();
    let names: Vec<&str> = types.iter().map(|t| t.1).collect();
    let key = format!("batchnorm/{}", names.join("/"));
    let pipeline = gpu.pipeline(&key, || batch_norm_shader(&names, enables_any(&dtypes)))?;
    Ok(Box::new(BatchNorm { pipeline, epsilon: node.float_or("epsilon", 1e-5)?, at: node.location() }))
}

/// `y = x * a + (b - mean * a)` with `a = scale / sqrt(var + eps)`, per feature
/// `(i / inner) % features`; `types` are the WGSL types of X, scale, B, mean, var.
fn batch_norm_shader(types: &[&str], enable: &str) -> String {
    let [tx, ts, tb, tm, tv] = [types[0], types[1], types[2], types[3], types[4]];
    format!(
        "{enable}{FLAT_INDEX}
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{tx}>;
@group(0) @binding(2) var<storage, read> scale: array<{ts}>;
@group(0) @binding(3) var<storage, read> bias: array<{tb}>;
@group(0) @binding(4) var<storage, read> mean: array<{tm}>;
@group(0) @binding(5) var<storage, read> variance: array<{tv}>;
@group(0) @binding(6) var<storage, read_write> y: array<{tx}>;
// p: n, inner, features, epsilon
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {{ return; }}
    let f = (i / p[1]) % p[2];
    let a = f32(scale[f]) / sqrt(f32(variance[f]) + bitcast<f32>(p[3]));
    y[i] = {tx}(f32(x[i]) * a + (f32(bias[f]) - f32(mean[f]) * a));
}}
"
    )
}

impl GpuOp for BatchNorm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = channel_input(run, inputs, at)?;
        let c = x.shape()[1];
        let spatial: usize = x.shape()[2..].iter().product();
        let scale = param_input(run, inputs, 1, &[c, c * spatial], "one per channel", at)?;
        let features = scale.len();
        let mut params = vec![scale];
        for i in 2..5 {
            params.push(param_input(run, inputs, i, &[features], "like scale", at)?);
        }
        let inner = if features == c { spatial } else { 1 };
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        let p = [u32_of(x.len(), at)?, u32_of(inner.max(1), at)?, u32_of(features.max(1), at)?, self.epsilon.to_bits()];
        let buffers = [x.buffer, params[0].buffer, params[1].buffer, params[2].buffer, params[3].buffer, y.gpu()?];
        run.dispatch(&self.pipeline, &p, &buffers, grid(x.len()))?;
        Ok(vec![Value::Tensor(y)])
    }
}

/// X of a channel-first op: a tensor of rank 2 or more.
fn channel_input<'r>(run: &GpuRun, inputs: &[Option<ValueRef<'r>>], at: &Location) -> Result<GpuTensor<'r>> {
    let x = gpu_input(run, inputs, 0, at)?;
    if x.shape().len() < 2 {
        return Err(Error::input(at, 0, "a tensor of rank 2 or more ([N, C, ...])", format!("shape {:?}", x.shape())));
    }
    Ok(x)
}

/// Input `i` with its element count checked against `lens`.
fn param_input<'r>(
    run: &GpuRun,
    inputs: &[Option<ValueRef<'r>>],
    i: usize,
    lens: &[usize],
    what: &str,
    at: &Location,
) -> Result<GpuTensor<'r>> {
    let v = gpu_input(run, inputs, i, at)?;
    if !lens.contains(&v.len()) {
        let lens: Vec<String> = lens.iter().map(usize::to_string).collect();
        return Err(Error::input(
            at,
            i,
            format!("{} elements ({what})", lens.join(" or ")),
            format!("shape {:?}", v.shape()),
        ));
    }
    Ok(v)
}

/// Float data; stash type float (any float type when Mean and InvStdDev are not read); scale
/// and bias broadcasting along one block of dims (checked when shapes are known).
fn supports_layer_norm(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let stats = has_output(ctx, 1) || has_output(ctx, 2);
    let stash_ok = n.int_or("stash_type", 1).is_ok_and(|s| s == 1 || (!stats && matches!(s, 10 | 11 | 16)));
    let attrs_ok = n.int_or("axis", -1).is_ok() && n.float_or("epsilon", 1e-5).is_ok();
    let shapes_ok = match (static_shape(ctx, 0), n.int_or("axis", -1)) {
        (Some(x), Ok(axis)) => {
            let r = x.len() as i64;
            let norm =
                if (-r..r).contains(&axis) { &x[(if axis < 0 { axis + r } else { axis }) as usize..] } else { &x[..0] };
            [1, 2].iter().all(|&i| static_shape(ctx, i).is_none_or(|s| param_map(&s, norm).is_some()))
        }
        _ => true,
    };
    stash_ok && attrs_ok && shapes_ok && n.input(1).is_some() && float_inputs(ctx, gpu, 0..3)
}

/// SimplifiedLayerNormalization: X and scale of one type, `inv_std_var` unread.
fn supports_simplified(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    !has_output(ctx, 1) && input_dtype(ctx, 0) == input_dtype(ctx, 1) && supports_layer_norm(ctx, gpu)
}

/// LayerNormalization (opset 17).
struct LayerNorm {
    kernel: RowNorm,
    axis: i64,
    epsilon: f32,
    at: Location,
}

fn build_layer_norm(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let bias = node.input(2).is_some();
    let mut types = vec![param_type(ctx, 0)?, param_type(ctx, 1)?];
    if bias {
        types.push(param_type(ctx, 2)?);
    }
    let stats = has_output(ctx, 1) || has_output(ctx, 2);
    let form = if node.op_type == "LayerNormalization" { Form::Centered } else { Form::Rms };
    let axis = node.int_or("axis", -1)?;
    let row_len = known_dims(ctx, 0).and_then(|dims| {
        let from = normalize_axis(axis, dims.len(), &node.location()).ok()?;
        dims[from..].iter().copied().product::<Option<usize>>()
    });
    Ok(Box::new(LayerNorm {
        kernel: RowNorm::new(gpu, &types, form, bias, stats, row_len)?,
        axis: node.int_or("axis", -1)?,
        epsilon: node.float_or("epsilon", 1e-5)?,
        at: node.location(),
    }))
}

impl LayerNorm {
    /// Input `i` (scale or bias) with how it is indexed over the normalized dims `norm`.
    fn param<'r>(
        &self,
        run: &GpuRun,
        inputs: &[Option<ValueRef<'r>>],
        i: usize,
        norm: &[usize],
        axis: usize,
    ) -> Result<(GpuTensor<'r>, ParamMap)> {
        let v = gpu_input(run, inputs, i, &self.at)?;
        let map = param_map(v.shape(), norm).ok_or_else(|| {
            Error::input(
                &self.at,
                i,
                format!("a shape broadcastable to {norm:?} (X's dims from axis {axis}) along one block of dims"),
                format!("shape {:?}", v.shape()),
            )
        })?;
        Ok((v, map))
    }
}

impl GpuOp for LayerNorm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let axis = normalize_axis(self.axis, x.shape().len(), &self.at)?;
        let norm = &x.shape()[axis..];
        let scale = self.param(run, inputs, 1, norm, axis)?;
        let bias = match opt_gpu_input(run, inputs, 2, &self.at)? {
            Some(_) => Some(self.param(run, inputs, 2, norm, axis)?),
            None => None,
        };
        let mut stat_shape = x.shape()[..axis].to_vec();
        stat_shape.resize(x.shape().len(), 1);
        self.kernel.record(run, x, None, norm.iter().product(), scale, bias, self.epsilon, &stat_shape, &self.at)
    }
}

/// Float data.
fn supports_instance_norm(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    ctx.node.float_or("epsilon", 1e-5).is_ok() && ctx.node.inputs.len() == 3 && float_inputs(ctx, gpu, 0..3)
}

/// Float data, a positive `num_groups`.
fn supports_group_norm(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node;
    let groups_ok = n.get_int("num_groups").is_ok_and(|g| g.is_some_and(|g| g > 0 && g <= u32::MAX as i64));
    let attrs_ok = n.float_or("epsilon", 1e-5).is_ok() && n.int_or("stash_type", 1).is_ok();
    groups_ok && attrs_ok && n.inputs.len() == 3 && float_inputs(ctx, gpu, 0..3)
}

/// InstanceNormalization (`groups: None`) or GroupNormalization.
struct GroupNorm {
    kernel: RowNorm,
    epsilon: f32,
    /// `None`: one group per channel (InstanceNormalization).
    groups: Option<usize>,
    /// GroupNormalization-18: scale and bias may hold one value per group.
    per_group_params: bool,
    at: Location,
}

fn build_group_like(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>, groups: Option<usize>) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let types = (0..3).map(|i| param_type(ctx, i)).collect::<Result<Vec<_>>>()?;
    Ok(Box::new(GroupNorm {
        kernel: RowNorm::new(gpu, &types, Form::Centered, true, false, group_row_len(ctx, groups))?,
        epsilon: node.float_or("epsilon", 1e-5)?,
        groups,
        per_group_params: groups.is_some() && ctx.since_version < 21,
        at: node.location(),
    }))
}

/// The rows' length of Instance/GroupNormalization (a group of channel planes) when the
/// session knows the channels and spatial dims.
fn group_row_len(ctx: &NodeContext<'_>, groups: Option<usize>) -> Option<usize> {
    let dims = known_dims(ctx, 0)?;
    let c = (*dims.get(1)?)?;
    let plane = dims.get(2..)?.iter().copied().product::<Option<usize>>()?;
    let per_group = match groups {
        Some(g) if g > 0 && c % g == 0 => c / g,
        Some(_) => return None,
        None => 1,
    };
    Some(per_group * plane)
}

fn build_instance_norm(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_group_like(ctx, gpu, None)
}

fn build_group_norm(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let groups = match ctx.node.get_int("num_groups")? {
        Some(g) if g > 0 => g as usize,
        Some(g) => return Err(Error::attribute(&at, "num_groups", "a positive integer", g.to_string())),
        None => return Err(Error::attribute(&at, "num_groups", "an int", "no attribute")),
    };
    build_group_like(ctx, gpu, Some(groups))
}

impl GpuOp for GroupNorm {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = channel_input(run, inputs, at)?;
        let c = x.shape()[1];
        let inner: usize = x.shape()[2..].iter().product();
        let groups = self.groups.unwrap_or(c);
        if c % groups != 0 {
            return Err(Error::input(
                at,
                0,
                format!("a channel count divisible by num_groups {groups}"),
                format!("shape {:?}", x.shape()),
            ));
        }
        let (lens, what) =
            if self.per_group_params { (vec![groups, c], "one per group") } else { (vec![c], "one per channel") };
        let scale = param_input(run, inputs, 1, &lens, what, at)?;
        let bias = param_input(run, inputs, 2, &[scale.len()], "like scale", at)?;
        let n = c / groups * inner;
        let map =
            if scale.len() == c { ParamMap { div: inner, modulo: c } } else { ParamMap { div: n, modulo: groups } };
        let stat_shape = [x.shape()[0], groups];
        self.kernel.record(run, x, None, n, (scale, map), Some((bias, map)), self.epsilon, &stat_shape, at)
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{float, int, rand, Case};

    #[test]
    fn batch_norm_matches_the_cpu() {
        for (i, shape) in [&[2, 3, 5, 7][..], &[1, 4], &[3, 5, 257], &[2, 16, 9, 9], &[2, 3, 0, 4]].iter().enumerate() {
            let c = shape[1];
            let x = rand(shape, -3.0, 3.0, 10 + i as u64);
            let scale = rand(&[c], 0.5, 2.0, 20 + i as u64);
            let b = rand(&[c], -1.0, 1.0, 30 + i as u64);
            let mean = rand(&[c], -1.0, 1.0, 40 + i as u64);
            let var = rand(&[c], 0.1, 2.0, 50 + i as u64);
            let inputs = vec![x, scale, b, mean, var];
            Case::new("BatchNormalization", inputs.clone()).constants(&[1, 2, 3, 4]).check(1e-5, 1e-5);
            let attrs = vec![float("epsilon", 1e-3)];
            Case::new("BatchNormalization", inputs).attrs(attrs).opset(9).check(1e-5, 1e-5);
        }
    }

    #[test]
    fn layer_norm_matches_the_cpu() {
        // (shape, axis, scale shape): rows of 1, 7, 255, 257, 1000 elements; several axes;
        // parameters broadcast along leading or trailing dims.
        let cases: &[(&[usize], i64, &[usize])] = &[
            (&[4, 1], -1, &[1]),
            (&[3, 7], -1, &[7]),
            (&[5, 255], 1, &[255]),
            (&[2, 3, 257], -1, &[257]),
            (&[2, 1000], -1, &[1000]),
            (&[2, 3, 4, 5], 1, &[3, 4, 5]),
            (&[2, 3, 4, 5], -2, &[4, 5]),
            (&[2, 3, 4, 5], 0, &[2, 3, 4, 5]),
            (&[2, 3, 4, 5], 1, &[4, 5]),
            (&[2, 3, 4, 5], 1, &[3, 1, 1]),
            (&[2, 3, 4, 5], 1, &[1]),
            (&[300, 40], -1, &[40]),
            (&[0, 5], -1, &[5]),
        ];
        for (i, &(shape, axis, pshape)) in cases.iter().enumerate() {
            let x = rand(shape, -2.0, 4.0, 70 + i as u64);
            let scale = rand(pshape, 0.5, 2.0, 80 + i as u64);
            let bias = rand(pshape, -1.0, 1.0, 90 + i as u64);
            let attrs = vec![int("axis", axis), float("epsilon", 1e-4)];
            let case =
                Case::new("LayerNormalization", vec![x.clone(), scale.clone(), bias]).attrs(attrs.clone()).opset(17);
            case.constants(&[1, 2]).check(1e-4, 1e-5);
            Case::new("LayerNormalization", vec![x.clone(), scale.clone()])
                .attrs(attrs.clone())
                .opset(17)
                .check(1e-4, 1e-5);
            Case::new("RMSNormalization", vec![x.clone(), scale.clone()])
                .attrs(attrs.clone())
                .opset(23)
                .check(1e-4, 1e-5);
            Case::new("SimplifiedLayerNormalization", vec![x.clone(), scale.clone()])
                .attrs(attrs.clone())
                .opset(17)
                .check(1e-4, 1e-5);
            let stats = Case::new("LayerNormalization", vec![x, scale]).attrs(attrs).opset(17).outputs(3);
            stats.check(1e-4, 1e-5);
        }
    }

    #[test]
    fn layer_norm_keeps_precision_with_a_large_mean() {
        let x = rand(&[4, 513], 1000.0, 1001.0, 3);
        let scale = rand(&[513], 0.5, 2.0, 4);
        Case::new("LayerNormalization", vec![x, scale]).opset(17).check(1e-3, 1e-4);
    }

    #[test]
    fn instance_and_group_norm_match_the_cpu() {
        for (i, shape) in [&[2, 3, 5, 7][..], &[1, 4], &[2, 6, 257], &[1, 4, 33, 31], &[3, 2, 1000]].iter().enumerate()
        {
            let c = shape[1];
            let x = rand(shape, -3.0, 3.0, 110 + i as u64);
            let scale = rand(&[c], 0.5, 2.0, 120 + i as u64);
            let b = rand(&[c], -1.0, 1.0, 130 + i as u64);
            Case::new("InstanceNormalization", vec![x.clone(), scale.clone(), b.clone()]).check(1e-4, 1e-5);
            let groups = if c % 2 == 0 { 2 } else { 1 };
            let attrs = vec![int("num_groups", groups), float("epsilon", 1e-3)];
            Case::new("GroupNormalization", vec![x.clone(), scale, b]).attrs(attrs.clone()).check(1e-4, 1e-5);
            let gs = rand(&[groups as usize], 0.5, 2.0, 140 + i as u64);
            let gb = rand(&[groups as usize], -1.0, 1.0, 150 + i as u64);
            Case::new("GroupNormalization", vec![x, gs, gb]).attrs(attrs).opset(18).check(1e-4, 1e-5);
        }
    }

    #[test]
    fn training_mode_and_bad_shapes_are_declined_or_named() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let x = rand(&[2, 3, 4], 0.0, 1.0, 1);
        let p = rand(&[3], 0.5, 1.0, 2);
        let inputs = vec![x.clone(), p.clone(), p.clone(), p.clone(), p.clone()];
        let training = Case::new("BatchNormalization", inputs).attrs(vec![int("training_mode", 1)]);
        let e = training.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("BatchNormalization"), "{e}");
        let wrong = Case::new("InstanceNormalization", vec![x, rand(&[4], 0.0, 1.0, 3), p]);
        let e = wrong.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("InstanceNormalization") && e.contains("input 1"), "{e}");
    }
}
