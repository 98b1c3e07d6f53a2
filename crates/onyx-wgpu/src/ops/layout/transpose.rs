//! Transpose: batched 2-D transposes through workgroup memory, anything else as a strided
//! gather, with permutations simplified first.

use onyx_core::ops::layout::simplify_transpose as simplify;

use super::*;

/// Tile edge of the workgroup-memory transpose.
const TILE: u32 = 32;

/// A batched 2-D transpose through workgroup memory: workgroup (x, y, z) moves the 32x32 tile
/// at column block x, row block y of matrix z. Parameters: rows, cols.
fn tiled_transpose_shader(size: u32) -> String {
    format!(
        "alias E = {ty};
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<E>;
@group(0) @binding(2) var<storage, read_write> y: array<E>;
var<workgroup> tile: array<array<E, 33>, 32>;
@compute @workgroup_size(32, 8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {{
    let rows = p[0];
    let cols = p[1];
    let base = wg.z * rows * cols;
    let c0 = wg.x * 32u;
    let r0 = wg.y * 32u;
    for (var j = 0u; j < 32u; j += 8u) {{
        let r = r0 + l.y + j;
        let c = c0 + l.x;
        if (r < rows && c < cols) {{ tile[l.y + j][l.x] = x[base + r * cols + c]; }}
    }}
    workgroupBarrier();
    for (var j = 0u; j < 32u; j += 8u) {{
        let c = c0 + l.y + j;
        let r = r0 + l.x;
        if (c < cols && r < rows) {{ y[base + c * rows + r] = tile[l.x][l.y + j]; }}
    }}
}}
",
        ty = holder(size)
    )
}

/// The pipelines a transpose of `size`-byte elements uses.
pub(super) struct TransposePipes {
    size: u32,
    strided: Units,
    /// The workgroup-memory kernel for batched 2-D transposes (4- and 8-byte elements).
    tiled: Option<Arc<Pipeline>>,
}

impl TransposePipes {
    pub(super) fn new(gpu: &GpuContext, size: u32) -> Result<TransposePipes> {
        let tiled = match size {
            4 | 8 => Some(gpu.pipeline(&format!("layout/transpose_tiled/{size}"), || tiled_transpose_shader(size))?),
            _ => None,
        };
        Ok(TransposePipes { size, strided: strided_units(gpu, size)?, tiled })
    }

    /// `x` (viewed as `shape`) permuted by `perm`, reshaped to `out_shape`: a view when the
    /// permutation moves nothing, else a new tensor.
    pub(super) fn apply(
        &self,
        run: &mut GpuRun,
        x: &onyx_core::Tensor,
        shape: &[usize],
        perm: &[usize],
        out_shape: Vec<usize>,
        at: &Location,
    ) -> Result<Value> {
        let (s, p) = simplify(shape, perm);
        if x.is_empty() || s.len() <= 1 {
            return Ok(Value::Tensor(x.reshaped(out_shape).map_err(|e| e.at(at))?));
        }
        let y = run.alloc(x.dtype(), out_shape)?;
        let xb = run.context().own_buffer(x)?;
        if !self.record_tiled(run, &s, &p, xb, y.gpu()?)? {
            let in_strides = strides(&s);
            let view = Strided {
                base: 0,
                dims: p.iter().map(|&d| s[d]).collect(),
                strides: p.iter().map(|&d| in_strides[d] as i64).collect(),
            };
            view.record(run, &self.strided, self.size, xb, y.gpu()?, at)?;
        }
        Ok(Value::Tensor(y))
    }

    /// Records the tiled kernel when the (simplified) permutation is a batched 2-D transpose
    /// that fits the dispatch limits; false otherwise.
    fn record_tiled(&self, run: &mut GpuRun, s: &[usize], p: &[usize], x: &GpuBuffer, y: &GpuBuffer) -> Result<bool> {
        let Some(tiled) = &self.tiled else { return Ok(false) };
        let (batch, rows, cols) = match p {
            [1, 0] => (1, s[0], s[1]),
            [0, 2, 1] => (s[0], s[1], s[2]),
            _ => return Ok(false),
        };
        let max = run.context().device().limits().max_compute_workgroups_per_dimension as usize;
        let groups = [cols.div_ceil(TILE as usize), rows.div_ceil(TILE as usize), batch];
        if groups.iter().any(|&g| g > max) {
            return Ok(false);
        }
        let groups = groups.map(|g| g as u32);
        run.dispatch(tiled, &[rows as u32, cols as u32], &[x, y], groups)?;
        Ok(true)
    }
}

/// Transpose.
struct Transpose {
    perm: Option<Vec<i64>>,
    pipes: TransposePipes,
    at: Location,
}

pub(super) fn build_transpose(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    let perm = ctx.node.get_ints("perm")?.map(<[i64]>::to_vec);
    let pipes = TransposePipes::new(gpu, known_size(ctx, 0)?)?;
    Ok(Box::new(Transpose { perm, pipes, at: ctx.node.location() }))
}

impl Transpose {
    /// The permutation for an input of `rank` (reversal by default), checked.
    fn perm(&self, rank: usize) -> Result<Vec<usize>> {
        let perm: Vec<usize> = match &self.perm {
            None => (0..rank).rev().collect(),
            Some(p) => p.iter().map(|&x| usize::try_from(x).unwrap_or(usize::MAX)).collect(),
        };
        let mut seen = vec![false; rank];
        let ok = perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
        if !ok {
            return Err(Error::attribute(
                &self.at,
                "perm",
                format!("a permutation of 0..{rank}"),
                format!("{:?}", self.perm),
            ));
        }
        Ok(perm)
    }
}

impl GpuOp for Transpose {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let perm = self.perm(x.shape().len())?;
        let out: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        Ok(vec![self.pipes.apply(run, x.tensor, x.shape(), &perm, out, &self.at)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;

    #[test]
    fn transpose_matches_the_cpu() {
        let cases: &[(&[usize], Option<&[i64]>)] = &[
            (&[37, 45], None),
            (&[3, 33, 65], Some(&[0, 2, 1])),
            (&[67, 1, 5], Some(&[2, 1, 0])),
            (&[2, 3, 4, 5], Some(&[0, 2, 1, 3])),
            (&[2, 3, 4, 5], Some(&[3, 1, 0, 2])),
            (&[2, 3, 5, 7, 3], Some(&[4, 2, 0, 3, 1])),
            (&[1, 7, 1], Some(&[2, 0, 1])),
            (&[0, 3, 2], Some(&[2, 0, 1])),
            (&[5], None),
            (&[], None),
        ];
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            for (j, (shape, perm)) in cases.iter().enumerate() {
                let x = random(dtype, shape, (k * 100 + j) as u64);
                let attrs = perm.map(|p| vec![ints("perm", p)]).unwrap_or_default();
                check_exact(&Case::new("Transpose", vec![x]).attrs(attrs));
            }
        }
    }
}
