//! DepthToSpace and SpaceToDepth: 6-D transposes.

use super::transpose::TransposePipes;
use super::*;

/// DepthToSpace (`to_space`) or SpaceToDepth: a 6-D transpose.
struct Rearrange {
    blocksize: usize,
    to_space: bool,
    /// Column-row-depth order (DepthToSpace mode CRD) instead of depth-column-row.
    crd: bool,
    pipes: TransposePipes,
    at: Location,
}

pub(super) fn supports_rearrange(ctx: &NodeContext<'_>, _gpu: &Capabilities) -> bool {
    let mode_ok =
        ctx.node.op_type != "DepthToSpace" || ctx.node.string_or("mode", "DCR").is_ok_and(|m| m == "DCR" || m == "CRD");
    mode_ok && movable(ctx, 0)
}

pub(super) fn build_rearrange(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>, to_space: bool) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let b = node.get_int("blocksize")?.ok_or_else(|| Error::attribute(&at, "blocksize", "an int", "nothing"))?;
    let blocksize = usize::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| Error::attribute(&at, "blocksize", "a positive int", b.to_string()))?;
    let crd = to_space && ctx.since_version >= 11 && node.string_or("mode", "DCR")? == "CRD";
    let pipes = TransposePipes::new(gpu, known_size(ctx, 0)?)?;
    Ok(Box::new(Rearrange { blocksize, to_space, crd, pipes, at }))
}

pub(super) fn build_depth_to_space(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_rearrange(ctx, gpu, true)
}

pub(super) fn build_space_to_depth(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build_rearrange(ctx, gpu, false)
}

impl Rearrange {
    /// The 6-D view of the input, the permutation and the output shape.
    fn plan(&self, shape: &[usize]) -> Result<([usize; 6], [usize; 6], Vec<usize>)> {
        let &[n, c, h, w] = shape else {
            return Err(Error::input(&self.at, 0, "a 4-D tensor [N, C, H, W]", format!("{shape:?}")));
        };
        let b = self.blocksize;
        let too_large = || Error::node(&self.at, format!("blocksize {b} makes {shape:?} too large"));
        let bb = b.checked_mul(b).ok_or_else(too_large)?;
        if self.to_space {
            if c % bb != 0 {
                return Err(Error::input(
                    &self.at,
                    0,
                    format!("channels divisible by blocksize² = {bb}"),
                    format!("{shape:?}"),
                ));
            }
            let out = vec![n, c / bb, h.checked_mul(b).ok_or_else(too_large)?, w.checked_mul(b).ok_or_else(too_large)?];
            Ok(if self.crd {
                ([n, c / bb, b, b, h, w], [0, 1, 4, 2, 5, 3], out)
            } else {
                ([n, b, b, c / bb, h, w], [0, 3, 4, 1, 5, 2], out)
            })
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(Error::input(
                    &self.at,
                    0,
                    format!("height and width divisible by blocksize {b}"),
                    format!("{shape:?}"),
                ));
            }
            let depth = c.checked_mul(bb).ok_or_else(too_large)?;
            Ok(([n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4], vec![n, depth, h / b, w / b]))
        }
    }
}

impl GpuOp for Rearrange {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let x = gpu_input(run, inputs, 0, &self.at)?;
        let (view, perm, shape) = self.plan(x.shape())?;
        Ok(vec![self.pipes.apply(run, x.tensor, &view, &perm, shape, &self.at)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::testkit::*;
    use onyx_core::DataType;

    #[test]
    fn depth_and_space_rearrange_like_the_cpu() {
        for dtype in [DataType::Float, DataType::Float16, DataType::Uint8, DataType::Int64] {
            let x = random(dtype, &[2, 12, 3, 5], 3);
            check_exact(&Case::new("DepthToSpace", vec![x.clone()]).attrs(vec![int("blocksize", 2)]));
            let crd = vec![int("blocksize", 2), string("mode", "CRD")];
            check_exact(&Case::new("DepthToSpace", vec![x.clone()]).attrs(crd));
            let y = random(dtype, &[2, 3, 6, 9], 4);
            check_exact(&Case::new("SpaceToDepth", vec![y]).attrs(vec![int("blocksize", 3)]));
        }
    }
}
