//! Concat and Split.

use super::*;
use crate::kernel::GpuTensor;
use onyx_core::ops::layout::split_sizes;

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

/// Split in one dispatch: each invocation moves one unit (`u32`, or `vec4<u32>` for `unit` 16)
/// of X into the piece that holds it. p: units of X, units of one X row along the axis (`p[1]`),
/// then the first unit of each piece in a row and the row's end (`p[2 + k]`, `p[3 + k]`).
fn split_shader(unit: u32, n: usize) -> String {
    let e = if unit == 16 { "vec4<u32>" } else { "u32" };
    let mut s = format!("{FLAT_INDEX}@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    s += &format!("@group(0) @binding(1) var<storage, read> x: array<{e}>;\n");
    for k in 0..n {
        s += &format!("@group(0) @binding({}) var<storage, read_write> y{k}: array<{e}>;\n", k + 2);
    }
    s += "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = flat_index(gid, nwg);
    if (w >= p[0]) { return; }
    let o = w / p[1];
    let r = w - o * p[1];
";
    for k in 0..n {
        let write = format!("y{k}[o * (p[{b}u] - p[{a}u]) + r - p[{a}u]] = x[w];", a = 2 + k, b = 3 + k);
        if k + 1 < n {
            s += &format!("    if (r < p[{}u]) {{ {write} return; }}\n", 3 + k);
        } else {
            s += &format!("    {write}\n");
        }
    }
    s + "}\n"
}

/// Whether Concat's inputs are tensors of one movable dtype, few enough to bind at once.
pub(super) fn supports_concat(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let n = ctx.node.inputs.len();
    let limit = gpu.limits().max_storage_buffers_per_shader_stage as usize;
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

pub(super) fn build_concat(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
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

/// Split: one dispatch where every piece's block of a row is whole words and the pieces can be
/// bound at once ([`split_shader`]), else one strided copy per output.
struct Split {
    axis: i64,
    split_attr: Option<Vec<i64>>,
    num_outputs: Option<i64>,
    split_input: bool,
    uneven_ok: bool,
    outputs: usize,
    size: u32,
    pipeline: Units,
    /// The one-dispatch kernels, by unit (4 and 16 bytes), when the outputs can be bound at once.
    whole: Option<[Arc<Pipeline>; 2]>,
    at: Location,
}

pub(super) fn build_split(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
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
    let n = node.outputs.len();
    let whole = if n + 2 <= gpu.device().limits().max_storage_buffers_per_shader_stage as usize {
        let make = |unit: u32| gpu.pipeline(&format!("layout/split/{unit}/{n}"), || split_shader(unit, n));
        Some([make(4)?, make(16)?])
    } else {
        None
    };
    Ok(Box::new(Split {
        axis: node.int_or("axis", 0)?,
        split_attr: if v < 13 { node.get_ints("split")?.map(<[i64]>::to_vec) } else { None },
        num_outputs,
        split_input: v >= 13,
        uneven_ok: v >= 18,
        outputs: node.outputs.len(),
        size,
        pipeline: strided_units(gpu, size)?,
        whole,
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
        split_sizes(given, self.outputs, self.num_outputs, self.uneven_ok, dim, &self.at)
    }
}

impl Split {
    /// The split in one dispatch, when every piece is non-empty and its block of a row is whole
    /// 4-byte words (`None` otherwise: the caller copies piece by piece).
    fn record_whole(
        &self,
        run: &mut GpuRun,
        x: &GpuTensor<'_>,
        axis: usize,
        sizes: &[usize],
        inner: usize,
    ) -> Result<Option<Vec<Value>>> {
        let Some([words, quads]) = &self.whole else { return Ok(None) };
        let bytes: Vec<usize> = sizes.iter().map(|&s| s * inner * self.size as usize).collect();
        if bytes.iter().any(|&b| b == 0 || b % 4 != 0) {
            return Ok(None);
        }
        let (unit, pipeline) = if bytes.iter().all(|b| b % 16 == 0) { (16, quads) } else { (4, words) };
        let row: usize = bytes.iter().sum::<usize>() / unit;
        let total = x.len() * self.size as usize / unit;
        let mut params = vec![u32_of(total, &self.at)?, u32_of(row, &self.at)?, 0];
        let mut end = 0;
        for b in &bytes {
            end += b / unit;
            params.push(u32_of(end, &self.at)?);
        }
        let outs = sizes
            .iter()
            .map(|&size| {
                let mut shape = x.shape().to_vec();
                shape[axis] = size;
                run.alloc(x.dtype(), shape)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut buffers = vec![x.buffer];
        for y in &outs {
            buffers.push(y.gpu()?);
        }
        if total > 0 {
            run.dispatch(pipeline, &params, &buffers, grid(total)).map_err(|e| e.at(&self.at))?;
        }
        Ok(Some(outs.into_iter().map(Value::Tensor).collect()))
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
        if let Some(outs) = self.record_whole(run, &x, axis, &sizes, inner)? {
            return Ok(outs);
        }
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

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;

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
            // Packed rows taken apart (one dispatch: whole words or whole 16-byte units per piece).
            let packed = random(dtype, &[2, 5, 24], s + 6);
            for split in [&[8, 8, 8][..], &[4, 12, 8], &[16, 4, 4]] {
                check_exact(
                    &Case::new("Split", vec![packed.clone(), i64s(split)])
                        .attrs(vec![int("axis", -1)])
                        .constants(&[1])
                        .outputs(3),
                );
            }
            check_exact(
                &Case::new("Split", vec![x.clone()])
                    .opset(11)
                    .attrs(vec![int("axis", 2), ints("split", &[1, 0, 4])])
                    .outputs(3),
            );
        }
    }
}
