//! Conv and ConvTranspose for 1-D, 2-D and 3-D inputs (every opset from 1 to 22: the
//! attributes never changed, only the types). The math is in [`kernels`] and [`transpose`];
//! the window geometry, shared with pooling, in [`geometry`].

pub(crate) mod depthwise;
pub(crate) mod geometry;
pub(crate) mod kernels;
pub(crate) mod microkernel;
pub(crate) mod packed;
pub(crate) mod transpose;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::Node;
use onyx_core::{DataType, Error, Location, Result, TensorView, Value};

use self::geometry::{to_3d, WindowAttrs, MAX_ATTR, MAX_SPATIAL};
use self::kernels::{ConvShape, Epilogue};
use crate::ops::contrib::Activation;
use crate::ops::matmul::real::{compute_type, float_output, float_slice, Real};
use crate::ops::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Conv", build_conv);
    r.add("ConvTranspose", build_conv_transpose);
}

/// Which of the two ops a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Conv,
    Transpose,
}

/// A decoded Conv or ConvTranspose node.
pub(crate) struct ConvOp {
    at: Location,
    kind: Kind,
    window: WindowAttrs,
    group: usize,
    /// ConvTranspose only.
    output_padding: Option<Vec<usize>>,
    /// ConvTranspose only.
    output_shape: Option<Vec<usize>>,
}

fn build_conv(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build(ctx, Kind::Conv)
}

fn build_conv_transpose(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    build(ctx, Kind::Transpose)
}

fn build(ctx: &NodeContext<'_>, kind: Kind) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(conv_op(ctx.node, kind)?))
}

fn conv_op(node: &Node, kind: Kind) -> Result<ConvOp> {
    let at = node.location();
    let group = node.int_or("group", 1)?;
    if group < 1 {
        return Err(Error::attribute(&at, "group", "a positive integer", group.to_string()));
    }
    let non_negative = |name: &str| -> Result<Option<Vec<usize>>> {
        match node.get_ints(name)? {
            Some(v) if v.iter().any(|&x| !(0..=MAX_ATTR).contains(&x)) => {
                Err(Error::attribute(&at, name, format!("non-negative integers up to {MAX_ATTR}"), format!("{v:?}")))
            }
            v => Ok(v.map(|v| v.iter().map(|&x| x as usize).collect())),
        }
    };
    let (output_padding, output_shape) = match kind {
        Kind::Conv => (None, None),
        Kind::Transpose => (non_negative("output_padding")?, non_negative("output_shape")?),
    };
    Ok(ConvOp { window: WindowAttrs::from_node(node)?, at, kind, group: group as usize, output_padding, output_shape })
}

/// A Conv on values widened to f64: exact for the integer convolutions (ConvInteger,
/// QLinearConv), whose sums of products stay far below 2^53.
pub(crate) struct WideConv(ConvOp);

impl WideConv {
    /// Decodes the Conv attributes of `node`.
    pub(crate) fn from_node(node: &Node) -> Result<Self> {
        conv_op(node, Kind::Conv).map(WideConv)
    }

    /// The output shape and elements of the convolution of `x` by `w` (with a bias).
    pub(crate) fn run(
        &self,
        x: &[f64],
        xs: &[usize],
        w: &[f64],
        ws: &[usize],
        b: Option<&[f64]>,
    ) -> Result<(Vec<usize>, Vec<f64>)> {
        let b_shape = b.map(|b| [b.len()]);
        let s = self.0.shape(xs, ws, b_shape.as_ref().map(|s| &s[..]))?;
        let y = kernels::conv(x, w, b, &s).map_err(|e| e.at(&self.0.at))?;
        Ok((self.0.out_shape(&s, xs.len()), y))
    }
}

impl ConvOp {
    /// Checks X, W and B against each other and resolves the geometry.
    fn shape(&self, x: &[usize], w: &[usize], b: Option<&[usize]>) -> Result<ConvShape> {
        let at = &self.at;
        let rank = x.len();
        if !(3..=MAX_SPATIAL + 2).contains(&rank) {
            return Err(if rank < 3 {
                Error::input(at, 0, "a tensor of rank 3 to 5 ([N, C, spatial...])", format!("shape {x:?}"))
            } else {
                Error::Unsupported(format!(
                    "{at} (convolution over {} spatial dimensions; at most {MAX_SPATIAL})",
                    rank - 2
                ))
            });
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
        let (n, c_in) = (x[0], x[1]);
        let group = self.group;
        let c_out = match self.kind {
            Kind::Conv => {
                if w[1].checked_mul(group) != Some(c_in) {
                    return Err(Error::input(
                        at,
                        1,
                        format!("W whose dim 1 times group {group} is the {c_in} channels of X {x:?}"),
                        format!("shape {w:?} ({} * {group} = {})", w[1], w[1].saturating_mul(group)),
                    ));
                }
                if w[0] % group != 0 {
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
                if w[0] != c_in || c_in % group != 0 {
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
            Kind::Conv => self.window.resolve(x, kernel, false, at)?,
            Kind::Transpose => {
                self.window.resolve_transpose(x, kernel, &self.output_padding, &self.output_shape, at)?
            }
        };
        let shape = ConvShape { batch: n, c_in, c_out, group, axes: to_3d(&axes) };
        shape.out_elems().map_err(|e| e.at(at))?;
        Ok(shape)
    }

    fn out_shape(&self, s: &ConvShape, rank: usize) -> Vec<usize> {
        let mut shape = vec![s.batch, s.c_out];
        shape.extend(s.axes[MAX_SPATIAL + 2 - rank..].iter().map(|a| a.output));
        shape
    }

    #[allow(clippy::too_many_arguments)]
    fn run_typed<T: Real>(
        &self,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        b: Option<&TensorView<'_>>,
        z: Option<&TensorView<'_>>,
        activation: Activation,
        s: &ConvShape,
    ) -> Result<Value> {
        let (xs, ws) = (float_slice::<T>(x)?, float_slice::<T>(w)?);
        let bs = b.map(float_slice::<T>).transpose()?;
        let zs = z.map(float_slice::<T>).transpose()?;
        let y = match self.kind {
            Kind::Conv => {
                let epi = Epilogue { bias: bs.as_deref(), residual: zs.as_deref(), activation };
                kernels::conv_fused(&xs, &ws, s, &epi)
            }
            Kind::Transpose => transpose::conv_transpose(&xs, &ws, bs.as_deref(), s).map(|mut y| {
                let epi = Epilogue { bias: None, residual: zs.as_deref(), activation };
                let len = s.out_len().max(1);
                for (i, plane) in y.chunks_mut(len).enumerate() {
                    epi.apply(i % s.c_out.max(1), i * len, plane);
                }
                y
            }),
        }
        .map_err(|e| e.at(&self.at))?;
        float_output(x.dtype(), self.out_shape(s, x.rank()), y)
    }

    /// The convolution of inputs (X, W, B?), plus the residual `z` (input `z_index` of the
    /// node, of the output's type and shape), then `activation`: all in one pass over the output.
    pub(crate) fn run_with(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        z: Option<(usize, ValueRef<'_>)>,
        activation: Activation,
    ) -> Result<Value> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        let w = util::input(inputs, 1, at)?;
        let b = util::opt_input(inputs, 2, at)?;
        util::expect_dtype(&x, &[DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16], 0, at)?;
        same_dtype(&x, &w, 1, at)?;
        if let Some(b) = &b {
            same_dtype(&x, b, 2, at)?;
        }
        let s = self.shape(x.shape(), w.shape(), b.as_ref().map(|b| b.shape()))?;
        let z = match z {
            Some((index, z)) => {
                let z = z.tensor().map_err(|e| Error::input(at, index, "a host tensor", e.to_string()))?;
                let out = self.out_shape(&s, x.rank());
                if z.dtype() != x.dtype() || z.shape() != out.as_slice() {
                    return Err(Error::input(
                        at,
                        index,
                        format!("a residual of the output's type and shape, {}{out:?}", x.dtype()),
                        format!("{}{:?}", z.dtype(), z.shape()),
                    ));
                }
                Some(z)
            }
            None => None,
        };
        match compute_type(x.dtype()) {
            Some(DataType::Double) => self.run_typed::<f64>(&x, &w, b.as_ref(), z.as_ref(), activation, &s),
            _ => self.run_typed::<f32>(&x, &w, b.as_ref(), z.as_ref(), activation, &s),
        }
    }
}

/// Decodes the attributes of a node as a Conv (FusedConv's convolution part).
pub(crate) fn conv_for(node: &Node) -> Result<ConvOp> {
    conv_op(node, Kind::Conv)
}

fn same_dtype(x: &TensorView<'_>, v: &TensorView<'_>, index: usize, at: &Location) -> Result<()> {
    if v.dtype() != x.dtype() {
        return Err(Error::input(at, index, format!("{} like X", x.dtype()), v.dtype().name()));
    }
    Ok(())
}

impl Kernel for ConvOp {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        Ok(vec![self.run_with(inputs, None, Activation::None)?])
    }
}

#[cfg(test)]
mod tests;
