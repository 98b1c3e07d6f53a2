//! Gather, GatherElements and ScatterND on the GPU, for every element size (see
//! [`super::layout::element_shader`]), with int64 or int32 indices read on the GPU.
//!
//! Negative indices count from the end, as ONNX says. **Out-of-range indices differ from the
//! CPU EP**: the CPU kernel checks every index first and fails the run; the GPU cannot report
//! an error without a read-back, so a Gather/GatherElements output element whose index is out
//! of range is written as zero (all bits 0), and a ScatterND update whose index tuple is out of
//! range is dropped. No kernel ever reads or writes outside its buffers.

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::layout::{
    dispatch_elements, element_shader, known_dtype, known_size, normalize_axis, Elements, Strided, Units,
};
use super::{input_dtype, Registry};
use crate::capabilities::Capabilities;
use crate::context::{GpuContext, Pipeline};
use crate::kernel::{gpu_input, strides, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

/// Registers this family's kernels.
pub(crate) fn register(r: &mut Registry) {
    r.add("Gather", supports_gather, build_gather);
    r.add("GatherElements", supports_gather_elements, build_gather_elements);
    r.add("ScatterND", super::scatter_nd::supports, super::scatter_nd::build);
}

/// Bytes per index of an indices dtype the kernels read (int32 or int64).
fn index_size(dtype: Option<DataType>) -> Option<u32> {
    match dtype {
        Some(DataType::Int64) => Some(8),
        Some(DataType::Int32) => Some(4),
        _ => None,
    }
}

/// WGSL `index_at(j, dim)`: index `j` of buffer `i` wrapped into `0..dim` (negative values
/// count from the end), or `NONE` when out of range.
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

/// The element size of the data (input 0) and the index size (input 1), or `Unsupported`.
fn sizes(ctx: &NodeContext<'_>) -> Result<(u32, u32)> {
    let index = index_size(input_dtype(ctx, 1))
        .ok_or_else(|| Error::Unsupported(format!("wgpu: {} needs int32 or int64 indices", ctx.node.location())))?;
    Ok((known_size(ctx, 0)?, index))
}

/// Whether the data is movable and the indices are int32/int64.
fn data_and_indices(ctx: &NodeContext<'_>) -> bool {
    super::layout::input_elem_size(ctx, 0).is_some() && index_size(input_dtype(ctx, 1)).is_some()
}

// ---------------------------------------------------------------------------------------------
// Gather.
// ---------------------------------------------------------------------------------------------

/// Gather's `fetch`. Parameters: inner (elements after the axis), index count, axis dim.
const GATHER: &str = "
fn fetch(e: u32) -> E {
    let inner = p[3];
    let nidx = p[4];
    let dim = p[5];
    let t = e / inner;
    let i = e - t * inner;
    let o = t / nidx;
    let j = t - o * nidx;
    let k = index_at(j, dim);
    if (k == NONE) { return fill(); }
    return load_x((o * dim + k) * inner + i);
}
";

/// Gather takes movable data with int32/int64 indices. (Shape arithmetic such as
/// Shape → Gather → Concat → Reshape is moved to the host by the planner.)
fn supports_gather(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    data_and_indices(ctx)
}

/// Gather: `out[..., i..., ...] = data[..., indices[i...], ...]` along `axis`.
/// Rows of `inner` contiguous elements move as 16-, 8- or 4-byte units where they divide.
struct Gather {
    axis: i64,
    size: u32,
    units: Units,
    at: Location,
}

fn build_gather(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let (size, isize) = sizes(ctx)?;
    let code = format!("{}{GATHER}", index_fn(isize));
    let units = Units::new(size, |u| {
        gpu.pipeline(&format!("gather/gather/{u}/{isize}"), || element_shader("", u, &[("x", u), ("i", isize)], &code))
    })?;
    Ok(Box::new(Gather { axis: ctx.node.int_or("axis", 0)?, size, units, at: ctx.node.location() }))
}

impl GpuOp for Gather {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let idx = gpu_input(run, inputs, 1, &self.at)?;
        if index_size(Some(idx.dtype())).is_none() {
            return Err(Error::input(&self.at, 1, "int32 or int64 indices", idx.dtype().name()));
        }
        if x.shape().is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, x.shape().len(), &self.at)?;
        let shape: Vec<usize> =
            x.shape()[..axis].iter().chain(idx.shape()).chain(&x.shape()[axis + 1..]).copied().collect();
        let inner: usize = x.shape()[axis + 1..].iter().product();
        // (Empty data binds 4 bytes: too few for a vec4 array.)
        let fits = |u: u32| (inner * self.size as usize).is_multiple_of(u as usize) && (x.len() > 0 || u < 16);
        let (unit, pipeline) = self.units.pick(fits);
        let r = (unit / self.size) as usize;
        let params = [u32_of(inner / r, &self.at)?, u32_of(idx.len(), &self.at)?, u32_of(x.shape()[axis], &self.at)?];
        let y = run.alloc(x.dtype(), shape)?;
        dispatch_elements(
            run,
            pipeline,
            Elements::new(unit, y.len() / r),
            &params,
            &[x.buffer, idx.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// GatherElements.
// ---------------------------------------------------------------------------------------------

/// GatherElements' `fetch`. Parameters: rank, axis, axis dim, out (= indices) dims[rank],
/// data strides[rank].
const GATHER_ELEMENTS: &str = "
fn fetch(e: u32) -> E {
    let rank = p[3];
    let axis = p[4];
    let dim = p[5];
    var rem = e;
    var s = 0u;
    for (var d = rank; d > 0u; d--) {
        let k = d - 1u;
        let od = p[6u + k];
        let c = rem % od;
        rem = rem / od;
        if (k != axis) { s += c * p[6u + rank + k]; }
    }
    let q = index_at(e, dim);
    if (q == NONE) { return fill(); }
    return load_x(s + q * p[6u + rank + axis]);
}
";

fn supports_gather_elements(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    data_and_indices(ctx)
}

/// GatherElements: `out[p] = data[p with p[axis] = indices[p]]`.
struct GatherElements {
    axis: i64,
    size: u32,
    pipeline: Arc<Pipeline>,
    at: Location,
}

fn build_gather_elements(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let (size, isize) = sizes(ctx)?;
    let code = format!("{}{GATHER_ELEMENTS}", index_fn(isize));
    let key = format!("gather/elements/{size}/{isize}");
    let pipeline = gpu.pipeline(&key, || element_shader("", size, &[("x", size), ("i", isize)], &code))?;
    Ok(Box::new(GatherElements { axis: ctx.node.int_or("axis", 0)?, size, pipeline, at: ctx.node.location() }))
}

impl GpuOp for GatherElements {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let idx = gpu_input(run, inputs, 1, &self.at)?;
        if index_size(Some(idx.dtype())).is_none() {
            return Err(Error::input(&self.at, 1, "int32 or int64 indices", idx.dtype().name()));
        }
        let (ds, is) = (x.shape(), idx.shape());
        if ds.is_empty() {
            return Err(Error::input(&self.at, 0, "a tensor of rank 1 or more", "a scalar"));
        }
        let axis = normalize_axis(self.axis, ds.len(), &self.at)?;
        if is.len() != ds.len() || (0..ds.len()).any(|d| d != axis && is[d] > ds[d]) {
            return Err(Error::input(
                &self.at,
                1,
                format!("indices of rank {} no larger than the data {ds:?} off the axis", ds.len()),
                format!("{is:?}"),
            ));
        }
        let mut params = vec![ds.len() as u32, axis as u32, u32_of(ds[axis], &self.at)?];
        for &v in is.iter().chain(&strides(ds)) {
            params.push(u32_of(v, &self.at)?);
        }
        let y = run.alloc(x.dtype(), is.to_vec())?;
        dispatch_elements(
            run,
            &self.pipeline,
            Elements::new(self.size, y.len()),
            &params,
            &[x.buffer, idx.buffer, y.gpu()?],
            &self.at,
        )?;
        Ok(vec![Value::Tensor(y)])
    }
}

// ---------------------------------------------------------------------------------------------
// ScatterND.
// ---------------------------------------------------------------------------------------------

/// ScatterND's scatter pass: one invocation per update element writes it to its target.
/// Parameters: update count, slice length, tuple length k, data dims[k], data strides[k].
fn scatter_nd_shader(size: u32) -> String {
    let words = size / 4;
    let store =
        (0..words).map(|w| format!("    y[{words}u * t + {w}u] = u[{words}u * e + {w}u];\n")).collect::<String>();
    format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> b_i: array<u32>;
@group(0) @binding(2) var<storage, read> u: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>;
{flat}const NONE: u32 = 0xffffffffu;
fn load_i(s: u32) -> vec2<u32> {{ return vec2<u32>(b_i[2u * s], b_i[2u * s + 1u]); }}
{index}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let e = flat_index(gid, nwg);
    if (e >= p[0]) {{ return; }}
    let slice = p[1];
    let k = p[2];
    let tuple = e / slice;
    var t = e - tuple * slice;
    for (var j = 0u; j < k; j++) {{
        let q = index_at(tuple * k + j, p[3u + j]);
        if (q == NONE) {{ return; }}
        t += q * p[3u + k + j];
    }}
{store}}}
",
        flat = crate::kernel::FLAT_INDEX,
        index = index_fn(8),
    )
}

/// ScatterND takes reduction "none" with int64 indices on 4- and 8-byte data (sub-word
/// elements would need atomics: two updates may share a word).
pub(super) fn supports_scatter_nd(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let none = ctx.node.string_or("reduction", "none").is_ok_and(|r| r == "none");
    let size_ok = matches!(super::layout::input_elem_size(ctx, 0), Some(4 | 8));
    let same = input_dtype(ctx, 0) == input_dtype(ctx, 2);
    none && size_ok && same && input_dtype(ctx, 1) == Some(DataType::Int64)
}

/// ScatterND (reduction none): a copy of the data, then one write per update element.
/// Duplicate index tuples leave one of their updates (ONNX leaves the order undefined).
struct ScatterNd {
    size: u32,
    copy: super::layout::Units,
    scatter: Arc<Pipeline>,
    at: Location,
}

pub(super) fn build_scatter_nd(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let size = known_size(ctx, 0)?;
    known_dtype(ctx, 2)?;
    let scatter = gpu.pipeline(&format!("gather/scatter_nd/{size}"), || scatter_nd_shader(size))?;
    Ok(Box::new(ScatterNd { size, copy: super::layout::strided_units(gpu, size)?, scatter, at: ctx.node.location() }))
}

impl GpuOp for ScatterNd {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let idx = gpu_input(run, inputs, 1, &self.at)?;
        let u = gpu_input(run, inputs, 2, &self.at)?;
        if idx.dtype() != DataType::Int64 || u.dtype() != x.dtype() {
            return Err(Error::input(&self.at, 1, "int64 indices and updates of the data's type", idx.dtype().name()));
        }
        let (ds, is) = (x.shape(), idx.shape());
        let k = is.last().copied().unwrap_or(0);
        if ds.is_empty() || is.is_empty() || k > ds.len() {
            return Err(Error::input(
                &self.at,
                1,
                format!("index tuples of at most {} values", ds.len()),
                format!("{is:?}"),
            ));
        }
        let want: Vec<usize> = is[..is.len() - 1].iter().chain(&ds[k..]).copied().collect();
        if u.shape() != want.as_slice() {
            return Err(Error::input(&self.at, 2, format!("updates of shape {want:?}"), format!("{:?}", u.shape())));
        }
        let y = run.alloc(x.dtype(), ds.to_vec())?;
        let copy = Strided { base: 0, dims: vec![x.len()], strides: vec![1] };
        copy.record(run, &self.copy, self.size, x.buffer, y.gpu()?, &self.at)?;
        let slice: usize = ds[k..].iter().product();
        if slice == 0 || u.len() == 0 {
            return Ok(vec![Value::Tensor(y)]);
        }
        let mut params = vec![u32_of(u.len(), &self.at)?, u32_of(slice, &self.at)?, k as u32];
        for &v in ds[..k].iter().chain(&strides(ds)[..k]) {
            params.push(u32_of(v, &self.at)?);
        }
        run.dispatch(&self.scatter, &params, &[idx.buffer, u.buffer, y.gpu()?], crate::kernel::grid(u.len()))?;
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::DataType;

    use super::super::layout::tests::{check_exact, random, DTYPES};
    use crate::testkit::{i64s, int, provider, t, Case};

    /// Random indices in `-dim..dim` as int64 or int32.
    fn indices(dtype: DataType, shape: &[usize], dim: usize, seed: u64) -> onyx_core::Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: usize = shape.iter().product();
        let v: Vec<i64> = (0..n).map(|_| rng.i64(-(dim as i64)..dim as i64)).collect();
        if dtype == DataType::Int64 {
            t(shape, v)
        } else {
            t(shape, v.into_iter().map(|x| x as i32).collect::<Vec<i32>>())
        }
    }

    #[test]
    fn gather_matches_the_cpu_on_every_axis_and_dtype() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[5, 7, 3], k as u64);
            for (axis, dim) in [(0i64, 5usize), (1, 7), (-1, 3)] {
                for itype in [DataType::Int64, DataType::Int32] {
                    let idx = indices(itype, &[2, 9], dim, k as u64 + 20);
                    check_exact(&Case::new("Gather", vec![x.clone(), idx]).attrs(vec![int("axis", axis)]));
                    let scalar = indices(itype, &[], dim, k as u64 + 30);
                    check_exact(&Case::new("Gather", vec![x.clone(), scalar]).attrs(vec![int("axis", axis)]));
                }
            }
            let empty = indices(DataType::Int64, &[0], 5, 1);
            check_exact(&Case::new("Gather", vec![x.clone(), empty]));
        }
    }

    #[test]
    fn embedding_lookup_like_bert() {
        let table = crate::testkit::rand(&[1000, 67], -1.0, 1.0, 3);
        let ids = indices(DataType::Int64, &[2, 45], 1000, 4);
        check_exact(&Case::new("Gather", vec![table, ids]).constants(&[0]));
    }

    #[test]
    fn out_of_range_indices_read_zero_on_the_gpu() {
        let Some(gpu) = provider() else { return };
        let x = crate::testkit::rand(&[4, 3], 1.0, 2.0, 5);
        for idx in [i64s(&[1, 4, -5, i64::MAX, i64::MIN, -1]), t(&[3], vec![7i32, i32::MIN, -4])] {
            let y = Case::new("Gather", vec![x.clone(), idx.clone()]).try_run_gpu(&gpu).unwrap().remove(0);
            let v = y.as_slice::<f32>().unwrap();
            let xs = x.as_slice::<f32>().unwrap();
            let want: Vec<i64> = match idx.dtype() {
                DataType::Int64 => idx.as_slice::<i64>().unwrap().to_vec(),
                _ => idx.as_slice::<i32>().unwrap().iter().map(|&i| i as i64).collect(),
            };
            for (r, &i) in want.iter().enumerate() {
                let row = &v[r * 3..r * 3 + 3];
                match i {
                    0..=3 => assert_eq!(row, &xs[i as usize * 3..i as usize * 3 + 3]),
                    -4..=-1 => assert_eq!(row, &xs[(i + 4) as usize * 3..(i + 4) as usize * 3 + 3]),
                    _ => assert_eq!(row, &[0.0; 3], "index {i}"),
                }
            }
        }
    }

    #[test]
    fn gather_elements_matches_the_cpu() {
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let x = random(dtype, &[4, 5, 3], k as u64);
            let cases: [(i64, usize, &[usize]); 3] = [(0, 4, &[6, 4, 3]), (1, 5, &[3, 8, 2]), (-1, 3, &[4, 2, 5])];
            for (axis, dim, shape) in cases {
                for itype in [DataType::Int64, DataType::Int32] {
                    let idx = indices(itype, shape, dim, k as u64 + 7);
                    check_exact(&Case::new("GatherElements", vec![x.clone(), idx]).attrs(vec![int("axis", axis)]));
                }
            }
        }
    }

    #[test]
    fn scatter_nd_matches_the_cpu() {
        for dtype in [DataType::Float, DataType::Int64, DataType::Int32] {
            let x = random(dtype, &[4, 5, 3], 1);
            // Distinct tuples, so the result does not depend on the order of writes.
            let idx = t(&[2, 2], vec![3i64, -1, 0, 2]);
            let u = random(dtype, &[2, 3], 2);
            check_exact(&Case::new("ScatterND", vec![x.clone(), idx, u]));
            let rows = t(&[3, 1], vec![2i64, 0, -1]);
            let u = random(dtype, &[3, 5, 3], 3);
            check_exact(&Case::new("ScatterND", vec![x.clone(), rows, u]));
            let all = t(&[2, 3], vec![1i64, 1, 1, 3, 4, 2]);
            let u = random(dtype, &[2], 4);
            check_exact(&Case::new("ScatterND", vec![x, all, u]));
        }
    }
}
