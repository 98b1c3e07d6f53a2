//! ScatterElements (and the deprecated Scatter) on the GPU in one dispatch: every output
//! element starts from the data and applies, in order, the updates of its line along the axis
//! whose index points at it, so that repeated indices resolve as the CPU EP's sequential loop
//! does (the last update wins, or each is combined by the reduction). The cost is one pass over
//! the line's indices per output element: fine for the small scatters models do.
//!
//! Negative indices count from the end. **Out-of-range indices differ from the CPU EP**, as in
//! [`super::gather`]: the CPU kernel fails the run, here such an update is dropped.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{dispatch_elements, element_shader, input_elem_size, known_size, normalize_axis, Elements};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, strides, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers ScatterElements and Scatter.
pub(crate) fn register(r: &mut Registry) {
    r.add("ScatterElements", supports_scatter, build_scatter);
    r.add("Scatter", supports_scatter, build_scatter);
}

/// The reduction of repeated updates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// The node's reduction (add/mul from opset 16, max/min from 18), or `None` when not valid.
pub(crate) fn reduction(ctx: &NodeContext<'_>) -> Option<Reduction> {
    if ctx.node.op_type == "Scatter" || ctx.since_version < 16 {
        return Some(Reduction::None);
    }
    match ctx.node.string_or("reduction", "none").ok()?.as_str() {
        "none" => Some(Reduction::None),
        "add" => Some(Reduction::Add),
        "mul" => Some(Reduction::Mul),
        "max" if ctx.since_version >= 18 => Some(Reduction::Max),
        "min" if ctx.since_version >= 18 => Some(Reduction::Min),
        _ => None,
    }
}

/// The WGSL scalar type a reduction computes in for a data dtype (f32 and i32 only).
pub(crate) fn reduce_type(dtype: DataType) -> Option<&'static str> {
    match dtype {
        DataType::Float => Some("f32"),
        DataType::Int32 => Some("i32"),
        _ => None,
    }
}

/// Bytes per index (int32 or int64 indices).
fn index_size(dtype: Option<DataType>) -> Option<u32> {
    match dtype {
        Some(DataType::Int64) => Some(8),
        Some(DataType::Int32) => Some(4),
        _ => None,
    }
}

/// Movable data with int32/int64 indices; reductions on f32 and i32 data only.
fn supports_scatter(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let data_ok = match (reduction(ctx), input_dtype(ctx, 0)) {
        (Some(Reduction::None), _) => input_elem_size(ctx, 0).is_some(),
        (Some(_), Some(d)) => reduce_type(d).is_some(),
        _ => false,
    };
    data_ok && index_size(input_dtype(ctx, 1)).is_some() && input_dtype(ctx, 2) == input_dtype(ctx, 0)
}

/// WGSL `index_at(j, dim)`: index `j` wrapped into `0..dim`, or `NONE` when out of range.
fn index_fn(size: u32) -> &'static str {
    if size == 8 {
        "
fn index_at(j: u32, dim: u32) -> u32 {
    let v = load_i(j);
    if (v.y == 0u && v.x < dim) { return v.x; }
    if (v.y == 0xffffffffu && dim != 0u && v.x >= 0u - dim) { return v.x + dim; }
    return NONE;
}
"
    } else {
        "
fn index_at(j: u32, dim: u32) -> u32 {
    let v = load_i(j);
    if (v < dim) { return v; }
    if (v >= 0x80000000u && 0u - v <= dim) { return v + dim; }
    return NONE;
}
"
    }
}

/// WGSL `combine(d, s) -> E` of a reduction computing in `t`.
pub(crate) fn combine_fn(r: Reduction, t: &str) -> String {
    let expr = match r {
        Reduction::None => return "fn combine(d: E, s: E) -> E { return s; }\n".to_string(),
        Reduction::Add => "a + b",
        Reduction::Mul => "a * b",
        Reduction::Max => "select(a, b, b > a)",
        Reduction::Min => "select(a, b, b < a)",
    };
    format!("fn combine(d: E, s: E) -> E {{ let a = bitcast<{t}>(d); let b = bitcast<{t}>(s); return bitcast<u32>({expr}); }}\n")
}

/// The scatter's `fetch`. Parameters: rank, axis, then data dims, updates dims and updates
/// strides (rank each).
const SCATTER: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    let axis = p[4];
    var rem = e;
    var base = 0u;
    var c_axis = 0u;
    for (var k = rank; k > 0u; k--) {
        let d = k - 1u;
        let dim = p[5u + d];
        let c = rem % dim;
        rem = rem / dim;
        if (d == axis) {
            c_axis = c;
        } else {
            if (c >= p[5u + rank + d]) { return load_x(e); }
            base += c * p[5u + 2u * rank + d];
        }
    }
    var v = load_x(e);
    let n = p[5u + rank + axis];
    let step = p[5u + 2u * rank + axis];
    let dim = p[5u + axis];
    for (var j = 0u; j < n; j++) {
        let u = base + j * step;
        if (index_at(u, dim) == c_axis) { v = combine(v, load_u(u)); }
    }
    return v;
}
";

/// ScatterElements: a copy of the data with `updates` written (or combined) at the positions
/// that `indices` name along `axis`.
struct Scatter {
    axis: i64,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_scatter(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let at = ctx.node.location();
    let size = known_size(ctx, 0)?;
    let isize = index_size(input_dtype(ctx, 1)).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} indices")))?;
    let red = reduction(ctx).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} reduction")))?;
    let t = match red {
        Reduction::None => "",
        _ => input_dtype(ctx, 0)
            .and_then(reduce_type)
            .ok_or_else(|| Error::Unsupported(format!("wgpu: {at} reduction on this type")))?,
    };
    let code = format!("{}{}{SCATTER}", index_fn(isize), combine_fn(red, t));
    let key = format!("scatter/elements/{size}/{isize}/{red:?}/{t}");
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("x", size), ("i", isize), ("u", size)], &code))?;
    Ok(Box::new(Scatter { axis: ctx.node.int_or("axis", 0)?, size, pipeline, at }))
}

impl GpuOp for Scatter {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let i = gpu_input(run, inputs, 1, at)?;
        let u = gpu_input(run, inputs, 2, at)?;
        if index_size(Some(i.dtype())).is_none() {
            return Err(Error::input(at, 1, "int32 or int64 indices", i.dtype().name()));
        }
        if u.dtype() != x.dtype() {
            return Err(Error::input(at, 2, format!("{} updates", x.dtype()), u.dtype().name()));
        }
        if x.shape().is_empty() {
            return Err(Error::input(at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        if u.shape() != i.shape() {
            let want = format!("updates of the indices' shape {:?}", i.shape());
            return Err(Error::input(at, 2, want, format!("{:?}", u.shape())));
        }
        let axis = normalize_axis(self.axis, x.shape().len(), at)?;
        let fits = i.shape().len() == x.shape().len()
            && i.shape().iter().zip(x.shape()).enumerate().all(|(d, (&n, &m))| d == axis || n <= m);
        if !fits {
            let want = format!("indices of rank {} within the data's shape {:?}", x.shape().len(), x.shape());
            return Err(Error::input(at, 1, want, format!("{:?}", i.shape())));
        }
        let y = run.alloc(x.dtype(), x.shape().to_vec())?;
        if !y.is_empty() {
            let mut params = vec![x.shape().len() as u32, axis as u32];
            for &v in x.shape().iter().chain(i.shape()).chain(&strides(i.shape())) {
                params.push(u32_of(v, at)?);
            }
            let out = Elements::new(self.size, y.len());
            dispatch_elements(run, &self.pipeline, out, &params, &[x.buffer, i.buffer, u.buffer, y.gpu()?], at)?;
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::DataType;

    use super::super::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{int, string, t, Case};

    /// Indices of `shape` in `-dim..dim` with many repeats.
    fn indices(shape: &[usize], dim: usize, seed: u64) -> Vec<i64> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        (0..n).map(|_| rng.i64(-(dim as i64)..dim as i64)).collect()
    }

    /// (data shape, indices shape, axis).
    const LAYOUTS: &[(&[usize], &[usize], i64)] = &[
        (&[7], &[5], 0),
        (&[5, 9], &[3, 9], 0),
        (&[5, 9], &[4, 6], 1),
        (&[5, 9], &[4, 6], -1),
        (&[3, 7, 5], &[2, 11, 3], 1),
        (&[3, 7, 5], &[3, 7, 5], 2),
        (&[4, 3], &[0, 3], 0),
    ];

    #[test]
    fn scatter_elements_matches_the_cpu() {
        for (l, (xs, is, axis)) in LAYOUTS.iter().enumerate() {
            let d = normalize(*axis, xs.len());
            for (k, dtype) in DTYPES.iter().enumerate() {
                let seed = (l * 10 + k) as u64;
                let x = random(*dtype, xs, seed);
                let u = random(*dtype, is, seed + 1);
                let idx = indices(is, xs[d], seed + 2);
                let i64s = t(is, idx.clone());
                let i32s = t(is, idx.iter().map(|&v| v as i32).collect::<Vec<_>>());
                for i in [i64s, i32s] {
                    let case = Case::new("ScatterElements", vec![x.clone(), i.clone(), u.clone()]);
                    check_exact(&case.attrs(vec![int("axis", *axis)]).opset(18));
                    check_exact(
                        &Case::new("Scatter", vec![x.clone(), i, u.clone()]).attrs(vec![int("axis", *axis)]).opset(10),
                    );
                }
            }
            for dtype in [DataType::Float, DataType::Int32] {
                let seed = 100 + l as u64;
                let x = random(dtype, xs, seed);
                let u = random(dtype, is, seed + 1);
                let i = t(is, indices(is, xs[d], seed + 2));
                for r in ["add", "mul", "max", "min", "none"] {
                    let attrs = vec![int("axis", *axis), string("reduction", r)];
                    let case = Case::new("ScatterElements", vec![x.clone(), i.clone(), u.clone()]).attrs(attrs);
                    if dtype == DataType::Float {
                        case.opset(18).check(1e-5, 1e-5);
                    } else {
                        check_exact(&case.opset(18));
                    }
                }
            }
        }
    }

    /// Maps a possibly negative axis into `0..rank`.
    fn normalize(axis: i64, rank: usize) -> usize {
        if axis < 0 {
            (axis + rank as i64) as usize
        } else {
            axis as usize
        }
    }
}
