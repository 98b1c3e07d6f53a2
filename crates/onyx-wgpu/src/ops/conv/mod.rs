//! Conv and ConvTranspose over 1, 2 or 3 spatial dimensions (1-D and 2-D windows become 3-D
//! with unit axes in front, as in the CPU EP).
//!
//! - Conv is an implicit GEMM on the tiled kernel of `matmul.rs`: per group, M = output
//!   channels, N = batch x output positions, K = input channels x kernel taps; the B tile is
//!   gathered from the input windows on the fly (no im2col buffer). 1x1 stride-1 unpadded
//!   convolutions read the input as a plain matrix. Convolutions with few output channels per
//!   group (depthwise: one input channel per group) use a direct kernel, one thread per output.
//! - ConvTranspose is the same implicit GEMM in gather form: B(k, n) is the input element that
//!   tap k carries to output position n, or 0 where the strides skip it.
//!
//! The kernel shape is baked into the shaders (divisions by constants); pipelines are made
//! when the node is built if the weights' shape is known then. Every shader ends in
//! `act(v)`: an activation fused later is a WGSL expression there (and a word in the key).

use std::sync::Arc;

use onyx_core::ep::{NodeContext, ValueRef};
use onyx_core::types::ValueType;
use onyx_core::{DataType, Error, Location, Result, Value};

mod shaders;
mod window;

use shaders::{ConvKernel, Variant};
use window::{to_3d, ConvShape, Kind, Window, MAX_SPATIAL};

use super::matmul::{dispatch_z, storage_type, Activation};
use super::{float_inputs, input_dtype, Registry};
use crate::buffer::GpuBuffer;
use crate::capabilities::Capabilities;
use crate::context::GpuContext;
use crate::kernel::{gpu_input, grid, opt_gpu_input, static_shape, u32_of, GpuOp, OnGpu};
use crate::run::GpuRun;

pub(crate) fn register(r: &mut Registry) {
    r.add("Conv", supports_conv, build_conv);
    r.add("ConvTranspose", supports_conv, build_conv_transpose);
    r.add_in("com.microsoft", "FusedConv", supports_conv, build_conv);
}

/// A decoded Conv or ConvTranspose node.
struct ConvOp {
    kind: Kind,
    window: Window,
    group: usize,
    dtype: DataType,
    /// FusedConv: the activation applied to the output.
    act: Activation,
    /// The kernel made at build time, for the variant the weights' shape predicted.
    prepared: Option<(Variant, ConvKernel)>,
    at: Location,
}

/// Whether the node's attributes decode, its dtypes are ones the kernels take and its rank
/// (when known) is 3 to 5.
fn supports_conv(ctx: &NodeContext<'_>, gpu: &Capabilities) -> bool {
    let kind = if ctx.node.op_type == "ConvTranspose" { Kind::Transpose } else { Kind::Conv };
    let first = input_dtype(ctx, 0);
    let same = (1..4).filter(|&i| ctx.node.input(i).is_some()).all(|i| input_dtype(ctx, i) == first);
    let inputs = if ctx.node.op_type == "FusedConv" { 2..=4 } else { 2..=3 };
    let rank_ok = match ctx.input_types.first() {
        Some(ValueType::Tensor(t)) => t.shape.as_ref().is_none_or(|s| (3..=MAX_SPATIAL + 2).contains(&s.len())),
        _ => true,
    };
    inputs.contains(&ctx.node.inputs.len())
        && ctx.node.int_or("group", 1).is_ok_and(|g| g >= 1)
        && Window::from_node(ctx.node, kind).is_ok()
        && Activation::from_node(ctx.node).is_ok()
        && float_inputs(ctx, gpu, 0..4)
        && same
        && rank_ok
}

fn build_conv(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build(ctx, gpu, Kind::Conv)
}

fn build_conv_transpose(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>) -> Result<Box<dyn GpuOp>> {
    build(ctx, gpu, Kind::Transpose)
}

fn build(ctx: &NodeContext<'_>, gpu: &Arc<GpuContext>, kind: Kind) -> Result<Box<dyn GpuOp>> {
    let node = ctx.node;
    let at = node.location();
    let group = node.int_or("group", 1)?;
    if group < 1 {
        return Err(Error::attribute(&at, "group", "a positive integer", group.to_string()));
    }
    let dtype = input_dtype(ctx, 0).ok_or_else(|| Error::Unsupported(format!("wgpu: {at} has an untyped input")))?;
    storage_type(dtype)?;
    let act = Activation::from_node(node)?;
    let window = Window::from_node(node, kind)?;
    let mut op = ConvOp { kind, window, group: group as usize, dtype, act, prepared: None, at };
    if let Some(w) = static_shape(ctx, 1) {
        // A stand-in input of the weights' channels predicts the variant (it does not depend
        // on the spatial sizes).
        let c_in =
            if kind == Kind::Conv { w.get(1).map_or(0, |c| c * op.group) } else { w.first().copied().unwrap_or(0) };
        let mut x = vec![1, c_in];
        x.extend(w.iter().skip(2).map(|k| k * 4 + 16));
        let variant_of = |s: &ConvShape| Variant::of(kind, s, node.input(2).is_some(), node.input(3).is_some(), act);
        if let Ok(s) = op.shape(&x, &w, None) {
            let variant = variant_of(&s);
            let kernel = variant.compile(gpu, dtype)?;
            // With the real input's shape known, split-K's pipelines compile now too.
            let real = static_shape(ctx, 0).and_then(|x| op.shape(&x, &w, None).ok());
            if let (ConvKernel::Tiled(tiled), Some(s)) = (&kernel, real) {
                if variant_of(&s) == variant {
                    tiled.prepare(gpu, s.gemm_sizes())?;
                }
            }
            op.prepared = Some((variant, kernel));
        }
    }
    Ok(Box::new(op))
}

impl ConvOp {
    /// Checks X, W and B against each other and resolves the geometry.
    fn shape(&self, x: &[usize], w: &[usize], b: Option<&[usize]>) -> Result<ConvShape> {
        let at = &self.at;
        let rank = x.len();
        if !(3..=MAX_SPATIAL + 2).contains(&rank) {
            return Err(Error::input(at, 0, "a tensor of rank 3 to 5 ([N, C, spatial...])", format!("shape {x:?}")));
        }
        if w.len() != rank {
            return Err(Error::input(
                at,
                1,
                format!("a weight tensor of rank {rank} like X {x:?}"),
                format!("shape {w:?}"),
            ));
        }
        let kernel = &w[2..];
        if let Some(k) = &self.window.kernel_shape {
            if k.as_slice() != kernel {
                return Err(Error::attribute(
                    at,
                    "kernel_shape",
                    format!("{kernel:?} (the spatial dims of W {w:?})"),
                    format!("{k:?}"),
                ));
            }
        }
        let (batch, c_in, group) = (x[0], x[1], self.group);
        let c_out = match self.kind {
            Kind::Conv => {
                if w[1].checked_mul(group) != Some(c_in) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("W whose dim 1 times group {group} is the {c_in} channels of X {x:?}"),
                        format!("shape {w:?}"),
                    ));
                }
                if !w[0].is_multiple_of(group) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("a number of output channels divisible by group {group}"),
                        format!("shape {w:?}"),
                    ));
                }
                w[0]
            }
            Kind::Transpose => {
                if w[0] != c_in || !c_in.is_multiple_of(group) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("W with {c_in} input channels (X {x:?}) divisible by group {group}"),
                        format!("shape {w:?}"),
                    ));
                }
                w[1].checked_mul(group)
                    .ok_or_else(|| Error::attribute(at, "group", "a group count that fits", group.to_string()))?
            }
        };
        if let Some(b) = b {
            if b != [c_out] {
                return Err(Error::input(at, 2, format!("a bias of shape [{c_out}]"), format!("shape {b:?}")));
            }
        }
        let axes = match self.kind {
            Kind::Conv => self.window.resolve(x, kernel, at)?,
            Kind::Transpose => self.window.resolve_transpose(x, kernel, at)?,
        };
        Ok(ConvShape { batch, c_in, c_out, group, axes: to_3d(&axes) })
    }

    /// Records the convolution with `kernel`: `buffers` are the shader's bindings after the
    /// params (x, w, bias, residual, y).
    fn dispatch(
        &self,
        run: &mut GpuRun,
        kernel: &ConvKernel,
        s: &ConvShape,
        buffers: &[&GpuBuffer],
        count: usize,
    ) -> Result<()> {
        let at = &self.at;
        match kernel {
            ConvKernel::Direct(pipeline) => {
                let mut p = s.params(count, at)?;
                let [gx, gy, _] = grid(s.out_len());
                dispatch_z(run, pipeline, &mut p, 3, buffers, [gx, gy, u32_of(s.batch * s.c_out, at)?], at)
            }
            ConvKernel::Tiled(tiled) => {
                let mut p = s.params(s.mg(), at)?;
                tiled.record(run, &mut p, buffers, s.gemm_sizes(), at)
            }
        }
    }
}

impl GpuOp for ConvOp {
    fn record(&self, run: &mut GpuRun, inputs: &[Option<ValueRef<'_>>]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = gpu_input(run, inputs, 0, at)?;
        let w = gpu_input(run, inputs, 1, at)?;
        let b = opt_gpu_input(run, inputs, 2, at)?;
        let z = opt_gpu_input(run, inputs, 3, at)?;
        storage_type(x.dtype()).map_err(|_| Error::input(at, 0, "a float or float16 tensor", x.dtype().name()))?;
        for (i, t) in [(1, Some(w)), (2, b), (3, z)] {
            if let Some(t) = t.filter(|t| t.dtype() != x.dtype()) {
                return Err(Error::input(at, i, format!("{} like X", x.dtype().name()), t.dtype().name()));
            }
        }
        let s = self.shape(x.shape(), w.shape(), b.map(|b| b.shape()))?;
        let mut out_shape = vec![s.batch, s.c_out];
        out_shape.extend(s.axes[MAX_SPATIAL + 2 - x.shape().len()..].iter().map(|a| a.output));
        if let Some(z) = z.filter(|z| z.shape() != out_shape.as_slice()) {
            return Err(Error::input(
                at,
                3,
                format!("a residual Z of Y's shape {out_shape:?}"),
                format!("shape {:?}", z.shape()),
            ));
        }
        let y = run.alloc(x.dtype(), out_shape)?;
        let count = y.len();
        if count == 0 {
            return Ok(vec![Value::Tensor(y)]);
        }
        let variant = Variant::of(self.kind, &s, b.is_some(), z.is_some(), self.act);
        let mut buffers = vec![x.buffer, w.buffer];
        buffers.extend(b.map(|b| b.buffer));
        buffers.extend(z.map(|z| z.buffer));
        buffers.push(y.gpu()?);
        match &self.prepared {
            Some((v, kernel)) if *v == variant => self.dispatch(run, kernel, &s, &buffers, count)?,
            _ => {
                let kernel = variant.compile(run.context(), self.dtype)?;
                self.dispatch(run, &kernel, &s, &buffers, count)?;
            }
        }
        Ok(vec![Value::Tensor(y)])
    }
}

#[cfg(test)]
mod tests {
    use onyx_core::ir::Attribute;

    use crate::testkit::{int, ints, rand, string, Case};

    /// A Conv (or ConvTranspose) case with X of `x`, W of `w` (a constant) and, with `bias`, a
    /// constant bias of `c_out`.
    fn conv(
        op: &'static str,
        x: &[usize],
        w: &[usize],
        c_out: Option<usize>,
        attrs: Vec<Attribute>,
        seed: u64,
    ) -> Case {
        let mut inputs = vec![rand(x, -1.0, 1.0, seed), rand(w, -1.0, 1.0, seed + 1)];
        inputs.extend(c_out.map(|c| rand(&[c], -1.0, 1.0, seed + 2)));
        Case::new(op, inputs).attrs(attrs).constants(&[1, 2])
    }

    fn check(case: Case) {
        case.check(1e-4, 1e-4);
    }

    #[test]
    fn conv_3x3_stride_2_pad_1() {
        let attrs = || vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])];
        for (c_out, seed) in [(8, 1), (16, 3), (70, 5)] {
            check(conv("Conv", &[2, 5, 13, 17], &[c_out, 5, 3, 3], Some(c_out), attrs(), seed));
            check(conv("Conv", &[2, 5, 13, 17], &[c_out, 5, 3, 3], None, attrs(), seed + 1));
        }
        // Weights as a graph input rather than a constant.
        let x = rand(&[1, 5, 13, 17], -1.0, 1.0, 7);
        let w = rand(&[9, 5, 3, 3], -1.0, 1.0, 8);
        check(Case::new("Conv", vec![x, w]).attrs(attrs()));
    }

    #[test]
    fn conv_split_k_matches_the_cpu() {
        // Few output tiles and a long K: the K loop is split and the slices summed.
        check(conv("Conv", &[1, 100, 7, 7], &[70, 100, 3, 3], Some(70), vec![ints("pads", &[1, 1, 1, 1])], 80));
        check(conv("Conv", &[2, 128, 5, 5], &[64, 64, 3, 3], None, vec![int("group", 2)], 81));
        check(conv("Conv", &[1, 517, 7, 7], &[33, 517, 1, 1], Some(33), vec![], 82));
        check(conv("ConvTranspose", &[1, 300, 3, 3], &[300, 20, 2, 2], Some(20), vec![ints("strides", &[2, 2])], 83));
    }

    /// A FusedConv case: X, W, optional B, optional residual Z of the output's shape.
    fn fused(x: &[usize], w: &[usize], bias: bool, z: Option<&[usize]>, attrs: Vec<Attribute>, seed: u64) -> Case {
        let mut inputs = vec![Some(rand(x, -1.0, 1.0, seed)), Some(rand(w, -1.0, 1.0, seed + 1))];
        inputs.push(bias.then(|| rand(&[w[0]], -1.0, 1.0, seed + 2)));
        if let Some(z) = z {
            inputs.push(Some(rand(z, -1.0, 1.0, seed + 3)));
        }
        Case { inputs, ..Case::new("FusedConv", vec![]) }.domain("com.microsoft").attrs(attrs).constants(&[1, 2])
    }

    #[test]
    fn fused_conv_epilogues_match_the_cpu() {
        use crate::testkit::floats;
        let acts: Vec<Vec<Attribute>> = vec![
            vec![],
            vec![string("activation", "Relu")],
            vec![string("activation", "Tanh")],
            vec![string("activation", "Sigmoid")],
            vec![string("activation", "LeakyRelu"), floats("activation_params", &[0.1])],
            vec![string("activation", "Clip"), floats("activation_params", &[-0.5, 0.75])],
            vec![string("activation", "HardSigmoid"), floats("activation_params", &[0.2, 0.5])],
        ];
        let pad = || vec![ints("pads", &[1, 1, 1, 1])];
        for (i, act) in acts.into_iter().enumerate() {
            let seed = 90 + 10 * i as u64;
            let with = |mut attrs: Vec<Attribute>| {
                attrs.extend(act.clone());
                attrs
            };
            // Implicit GEMM, pointwise, direct (depthwise) and split-K kernels.
            check(fused(&[1, 5, 13, 17], &[16, 5, 3, 3], true, Some(&[1, 16, 13, 17]), with(pad()), seed));
            check(fused(&[2, 37, 5, 7], &[40, 37, 1, 1], false, Some(&[2, 40, 5, 7]), with(vec![]), seed + 4));
            let dw = with(vec![ints("pads", &[1, 1, 1, 1]), int("group", 7)]);
            check(fused(&[1, 7, 13, 17], &[7, 1, 3, 3], true, Some(&[1, 7, 13, 17]), dw, seed + 5));
            check(fused(&[1, 100, 7, 7], &[70, 100, 3, 3], true, Some(&[1, 70, 7, 7]), with(pad()), seed + 6));
            check(fused(&[1, 5, 13, 17], &[16, 5, 3, 3], true, None, with(vec![ints("strides", &[2, 2])]), seed + 7));
        }
    }

    #[test]
    fn fused_conv_rejects_a_residual_of_another_shape() {
        let Some(gpu) = crate::testkit::provider() else { return };
        let case = fused(&[1, 5, 13, 17], &[16, 5, 3, 3], true, Some(&[1, 16, 13, 16]), vec![], 1);
        let e = case.try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("FusedConv") && e.contains("residual"), "{e}");
    }

    #[test]
    fn conv_depthwise_and_groups() {
        let same = || vec![ints("pads", &[1, 1, 1, 1]), int("group", 7)];
        check(conv("Conv", &[2, 7, 13, 17], &[7, 1, 3, 3], Some(7), same(), 10));
        check(conv("Conv", &[1, 7, 13, 17], &[14, 1, 3, 3], None, same(), 11));
        let strided = vec![ints("strides", &[2, 2]), ints("pads", &[1, 0, 1, 2]), int("group", 7)];
        check(conv("Conv", &[1, 7, 13, 17], &[7, 1, 3, 3], Some(7), strided, 12));
        check(conv("Conv", &[2, 6, 13, 17], &[20, 3, 3, 3], Some(20), vec![int("group", 2)], 13));
        check(conv("Conv", &[2, 6, 13, 17], &[6, 2, 3, 3], Some(6), vec![int("group", 3)], 14));
    }

    #[test]
    fn conv_dilations_and_pointwise() {
        let dilated = || vec![ints("dilations", &[2, 2]), ints("pads", &[2, 1, 2, 3])];
        check(conv("Conv", &[2, 5, 13, 17], &[16, 5, 3, 3], Some(16), dilated(), 20));
        check(conv("Conv", &[1, 5, 13, 17], &[4, 5, 3, 3], None, dilated(), 21));
        check(conv("Conv", &[2, 16, 13, 17], &[24, 16, 1, 1], Some(24), vec![], 22));
        check(conv("Conv", &[2, 16, 13, 17], &[24, 16, 1, 1], None, vec![ints("strides", &[2, 2])], 23));
        check(conv("Conv", &[1, 37, 5, 7], &[40, 37, 1, 1], Some(40), vec![ints("pads", &[1, 1, 0, 0])], 24));
        check(conv("Conv", &[1, 64, 9, 11], &[32, 64, 3, 3], Some(32), vec![ints("pads", &[1, 1, 1, 1])], 25));
    }

    #[test]
    fn conv_auto_pad() {
        for (mode, seed) in [("SAME_UPPER", 30), ("SAME_LOWER", 32), ("VALID", 34), ("NOTSET", 36)] {
            let attrs = vec![string("auto_pad", mode), ints("strides", &[2, 3])];
            check(conv("Conv", &[1, 5, 13, 17], &[12, 5, 4, 3], Some(12), attrs.clone(), seed));
            let mut dw = attrs;
            dw.push(int("group", 5));
            check(conv("Conv", &[1, 5, 13, 17], &[5, 1, 4, 3], Some(5), dw, seed + 1));
        }
    }

    #[test]
    fn conv_1d_and_3d() {
        check(conv("Conv", &[2, 5, 29], &[9, 5, 3], Some(9), vec![ints("strides", &[2]), ints("pads", &[1, 1])], 40));
        check(conv("Conv", &[2, 5, 29], &[3, 5, 5], None, vec![ints("dilations", &[3])], 41));
        let pads3 = || vec![ints("pads", &[1, 0, 1, 1, 2, 0])];
        check(conv("Conv", &[1, 3, 5, 7, 9], &[10, 3, 3, 3, 3], Some(10), pads3(), 42));
        check(conv(
            "Conv",
            &[2, 3, 5, 7, 9],
            &[3, 1, 3, 2, 3],
            None,
            vec![int("group", 3), ints("strides", &[1, 2, 2])],
            43,
        ));
        // A depth of one position: the planar shaders, whatever the depth's stride and dilation.
        let depth_one =
            || vec![ints("strides", &[2, 1, 2]), ints("dilations", &[3, 1, 1]), ints("pads", &[0, 1, 0, 0, 1, 1])];
        check(conv("Conv", &[2, 3, 1, 7, 9], &[10, 3, 1, 3, 3], Some(10), depth_one(), 44));
        check(conv(
            "ConvTranspose",
            &[2, 3, 1, 7, 9],
            &[3, 4, 1, 3, 3],
            Some(4),
            vec![ints("strides", &[3, 2, 1])],
            45,
        ));
    }

    #[test]
    fn conv_empty_batch_and_errors() {
        check(conv("Conv", &[0, 5, 13, 17], &[8, 5, 3, 3], Some(8), vec![], 50));
        let Some(gpu) = crate::testkit::provider() else { return };
        let e =
            conv("Conv", &[1, 4, 13, 17], &[8, 5, 3, 3], None, vec![], 51).try_run_gpu(&gpu).unwrap_err().to_string();
        assert!(e.contains("Conv"), "{e}");
    }

    /// The kernel each shape of the tests above runs on.
    #[test]
    fn shapes_pick_the_expected_kernel() {
        use super::shaders::Algo;
        use super::{Activation, ConvOp, Kind, Variant, Window};
        let op = |kind: Kind, group: usize, attrs: Vec<Attribute>| {
            let node = onyx_core::ir::Node { op_type: "Conv".into(), attributes: attrs, ..Default::default() };
            let window = Window::from_node(&node, kind).unwrap();
            ConvOp {
                kind,
                window,
                group,
                dtype: onyx_core::DataType::Float,
                act: Activation::Identity,
                prepared: None,
                at: node.location(),
            }
        };
        let variant = |op: &ConvOp, x: &[usize], w: &[usize]| {
            Variant::of(op.kind, &op.shape(x, w, None).unwrap(), false, false, Activation::Identity)
        };
        let algo = |op: &ConvOp, x: &[usize], w: &[usize]| variant(op, x, w).algo;
        let plain = op(Kind::Conv, 1, vec![ints("pads", &[1, 1, 1, 1])]);
        assert_eq!(algo(&plain, &[1, 5, 13, 17], &[16, 5, 3, 3]), Algo::Gemm);
        assert_eq!(algo(&plain, &[1, 5, 13, 17], &[4, 5, 3, 3]), Algo::Direct);
        assert_eq!(algo(&op(Kind::Conv, 1, vec![]), &[1, 16, 13, 17], &[24, 16, 1, 1]), Algo::Pointwise);
        assert_eq!(
            algo(&op(Kind::Conv, 1, vec![ints("strides", &[2, 2])]), &[1, 16, 13, 17], &[24, 16, 1, 1]),
            Algo::Gemm
        );
        assert_eq!(algo(&op(Kind::Conv, 7, vec![]), &[1, 7, 13, 17], &[7, 1, 3, 3]), Algo::Direct);
        assert_eq!(algo(&op(Kind::Transpose, 1, vec![]), &[1, 6, 7, 9], &[6, 4, 3, 3]), Algo::Transpose);
        // 1-D and 2-D windows, and a depth of one position, take the planar shaders.
        let planar = |op: &ConvOp, x: &[usize], w: &[usize]| variant(op, x, w).planar;
        assert!(planar(&plain, &[1, 5, 13, 17], &[16, 5, 3, 3]));
        assert!(planar(&op(Kind::Conv, 1, vec![]), &[1, 5, 13], &[16, 5, 3]));
        assert!(planar(&op(Kind::Conv, 1, vec![ints("strides", &[2, 1, 1])]), &[1, 5, 1, 7, 9], &[8, 5, 1, 3, 3]));
        assert!(!planar(&op(Kind::Conv, 1, vec![]), &[1, 5, 2, 7, 9], &[8, 5, 1, 3, 3]));
        assert!(!planar(
            &op(Kind::Conv, 1, vec![ints("pads", &[1, 0, 0, 1, 0, 0])]),
            &[1, 5, 1, 7, 9],
            &[8, 5, 3, 3, 3]
        ));
    }

    #[test]
    fn float16_convolutions() {
        use crate::ops::matmul::tests::{half, has_f16};
        if !has_f16() {
            return;
        }
        let case = |op: &'static str, x: &[usize], w: &[usize], attrs: Vec<Attribute>, seed: u64| {
            let c_out = if op == "Conv" { w[0] } else { w[1] };
            let inputs = vec![
                half(&rand(x, -1.0, 1.0, seed)),
                half(&rand(w, -1.0, 1.0, seed + 1)),
                half(&rand(&[c_out], -1.0, 1.0, seed + 2)),
            ];
            Case::new(op, inputs).attrs(attrs).constants(&[1, 2]).check(2e-3, 5e-3);
        };
        case("Conv", &[1, 5, 13, 17], &[16, 5, 3, 3], vec![ints("pads", &[1, 1, 1, 1])], 70);
        case("Conv", &[1, 7, 13, 17], &[7, 1, 3, 3], vec![int("group", 7)], 71);
        case("Conv", &[1, 16, 13, 17], &[24, 16, 1, 1], vec![], 72);
        case("ConvTranspose", &[1, 6, 7, 9], &[6, 4, 3, 3], vec![ints("strides", &[2, 2])], 73);
    }

    #[test]
    fn conv_transpose_gathers_like_the_cpu() {
        let attrs = || vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1]), ints("output_padding", &[1, 0])];
        check(conv("ConvTranspose", &[2, 6, 7, 9], &[6, 4, 3, 3], Some(4), attrs(), 60));
        check(conv(
            "ConvTranspose",
            &[2, 6, 7, 9],
            &[6, 3, 3, 3],
            None,
            vec![int("group", 2), ints("strides", &[2, 1])],
            61,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 70, 4, 4],
            Some(70),
            vec![ints("strides", &[2, 2]), ints("dilations", &[2, 1])],
            62,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 3, 3, 3],
            None,
            vec![ints("strides", &[3, 2]), ints("output_shape", &[20, 18])],
            63,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 3, 3, 3],
            Some(3),
            vec![string("auto_pad", "SAME_UPPER"), ints("strides", &[2, 2])],
            64,
        ));
        check(conv(
            "ConvTranspose",
            &[1, 5, 7, 9],
            &[5, 3, 3, 3],
            Some(3),
            vec![string("auto_pad", "SAME_LOWER"), ints("strides", &[2, 2])],
            65,
        ));
        check(conv(
            "ConvTranspose",
            &[2, 5, 29],
            &[5, 4, 3],
            Some(4),
            vec![ints("strides", &[3]), ints("pads", &[0, 2])],
            66,
        ));
        check(conv("ConvTranspose", &[1, 4, 3, 4, 5], &[4, 2, 2, 3, 2], None, vec![ints("strides", &[2, 1, 2])], 67));
        check(conv("ConvTranspose", &[1, 8, 5, 6], &[8, 12, 1, 1], Some(12), vec![], 68));
    }

    /// Throughput of the convolution kernels (run with `--ignored --nocapture` on a real GPU).
    #[test]
    #[ignore]
    fn bench_convolutions() {
        use super::{Activation, ConvOp, Kind, Window};
        if crate::testkit::provider().is_none() {
            return;
        }
        /// Name, X shape, W shape, group, attributes.
        type BenchCase<'a> = (&'a str, &'a [usize], &'a [usize], usize, Vec<Attribute>);
        let cases: &[BenchCase<'_>] = &[
            (
                "stem 7x7/2",
                &[1, 3, 224, 224],
                &[64, 3, 7, 7],
                1,
                vec![ints("strides", &[2, 2]), ints("pads", &[3, 3, 3, 3])],
            ),
            ("3x3 64", &[1, 64, 56, 56], &[64, 64, 3, 3], 1, vec![ints("pads", &[1, 1, 1, 1])]),
            ("3x3 64 batch 8", &[8, 64, 56, 56], &[64, 64, 3, 3], 1, vec![ints("pads", &[1, 1, 1, 1])]),
            ("3x3 256 at 14", &[1, 256, 14, 14], &[256, 256, 3, 3], 1, vec![ints("pads", &[1, 1, 1, 1])]),
            ("1x1 256->64", &[1, 256, 56, 56], &[64, 256, 1, 1], 1, vec![]),
            ("1x1 1024->256 at 14", &[1, 1024, 14, 14], &[256, 1024, 1, 1], 1, vec![]),
            ("depthwise 3x3 144", &[1, 144, 56, 56], &[144, 1, 3, 3], 144, vec![ints("pads", &[1, 1, 1, 1])]),
            ("depthwise 3x3 144 batch 16", &[16, 144, 56, 56], &[144, 1, 3, 3], 144, vec![ints("pads", &[1, 1, 1, 1])]),
            ("tiny 1x1", &[1, 8, 4, 4], &[8, 8, 1, 1], 1, vec![]),
        ];
        for (name, x, w, group, attrs) in cases {
            let node = onyx_core::ir::Node { op_type: "Conv".into(), attributes: attrs.clone(), ..Default::default() };
            let window = Window::from_node(&node, Kind::Conv).unwrap();
            let op = ConvOp {
                kind: Kind::Conv,
                window,
                group: *group,
                dtype: onyx_core::DataType::Float,
                act: Activation::Identity,
                prepared: None,
                at: node.location(),
            };
            let s = op.shape(x, w, None).unwrap();
            let inputs = [rand(x, -1.0, 1.0, 1), rand(w, -1.0, 1.0, 2)];
            let t = crate::ops::matmul::tests::time_op(&op, &inputs, 20);
            let flops = 2.0 * (s.batch * s.c_out * s.out_len() * s.cg() * s.k_len()) as f64;
            eprintln!("Conv {name}: {:.1} us, {:.0} GFLOP/s", t * 1e6, flops / t / 1e9);
        }
    }
}
