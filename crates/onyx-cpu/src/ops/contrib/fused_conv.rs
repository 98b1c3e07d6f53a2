//! FusedConv(X, W, B?, Z?) = activation(Conv(X, W) + B + Z): the CPU Conv kernel, then one pass
//! that adds the residual Z and applies the activation (in f32 for half types, rounding once).

use rayon::prelude::*;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::Node;
use onyx_core::{DataType, Error, Location, Result, Value};

use super::Activation;
use crate::ops::matmul::real::{float_output, float_slice};
use crate::{BuildFn, Registry};

/// A decoded FusedConv node: the Conv kernel it wraps and the epilogue.
struct FusedConv {
    at: Location,
    conv: Box<dyn Kernel>,
    activation: Activation,
}

/// The attributes of FusedConv that Conv does not have.
const OWN_ATTRIBUTES: [&str; 2] = ["activation", "activation_params"];

/// The CPU EP's Conv builder.
fn conv_builder(at: &Location) -> Result<BuildFn> {
    let mut r = Registry::default();
    crate::ops::conv::register(&mut r);
    r.get("", "Conv").ok_or_else(|| Error::node(at, "the CPU EP has no Conv kernel to fuse"))
}

/// The plain Conv node a FusedConv node wraps (first three inputs, Conv's attributes). It keeps
/// the FusedConv op type, so that the Conv kernel's errors name the node as the model does.
fn conv_node(node: &Node) -> Node {
    let mut conv = node.clone();
    conv.inputs.truncate(3);
    conv.outputs.truncate(1);
    conv.attributes.retain(|a| !OWN_ATTRIBUTES.contains(&a.name.as_str()));
    conv
}

/// Builds a FusedConv kernel.
pub(super) fn build(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let activation = Activation::from_node(ctx.node)?;
    let node = conv_node(ctx.node);
    let inner = NodeContext {
        node: &node,
        since_version: 11,
        opsets: ctx.opsets,
        input_types: ctx.input_types.iter().take(3).cloned().collect(),
        constant_inputs: ctx.constant_inputs.iter().take(3).copied().collect(),
        subgraphs: ctx.subgraphs,
    };
    let conv = conv_builder(&at)?(&inner).map_err(|e| e.at(&at))?;
    Ok(Box::new(FusedConv { at, conv, activation }))
}

impl FusedConv {
    /// `activation(y + z)` elementwise, in f64 for double and f32 otherwise.
    fn epilogue(&self, y: &Value, z: Option<ValueRef<'_>>) -> Result<Value> {
        let y = y.as_tensor()?.view()?;
        let z = match z {
            Some(z) => {
                let z = z.tensor().map_err(|e| Error::input(&self.at, 3, "a host tensor", e.to_string()))?;
                if z.dtype() != y.dtype() || z.shape() != y.shape() {
                    return Err(Error::input(
                        &self.at,
                        3,
                        format!("a residual of the output's type and shape, {}{:?}", y.dtype(), y.shape()),
                        format!("{}{:?}", z.dtype(), z.shape()),
                    ));
                }
                Some(z)
            }
            None => None,
        };
        let act = self.activation;
        let shape = y.shape().to_vec();
        if y.dtype() == DataType::Double {
            let mut out = float_slice::<f64>(&y)?.into_owned();
            let zs = z.as_ref().map(float_slice::<f64>).transpose()?;
            add_and_activate(&mut out, zs.as_deref(), |x| act.f64(x));
            return float_output(y.dtype(), shape, out);
        }
        let mut out = float_slice::<f32>(&y)?.into_owned();
        let zs = z.as_ref().map(float_slice::<f32>).transpose()?;
        add_and_activate(&mut out, zs.as_deref(), |x| act.f32(x));
        float_output(y.dtype(), shape, out)
    }
}

/// Elements per parallel chunk of the epilogue.
const CHUNK: usize = 1 << 14;

/// `out[i] = f(out[i] + z[i])` (or `f(out[i])` without `z`), in parallel chunks.
fn add_and_activate<T>(out: &mut [T], z: Option<&[T]>, f: impl Fn(T) -> T + Sync)
where
    T: Copy + Send + Sync + std::ops::Add<Output = T>,
{
    match z {
        Some(z) => out.par_chunks_mut(CHUNK).zip(z.par_chunks(CHUNK)).for_each(|(o, z)| {
            o.iter_mut().zip(z).for_each(|(o, &z)| *o = f(*o + z));
        }),
        None => out.par_chunks_mut(CHUNK).for_each(|o| o.iter_mut().for_each(|o| *o = f(*o))),
    }
}

impl Kernel for FusedConv {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let conv_inputs = &inputs[..inputs.len().min(3)];
        let y = self.conv.run(conv_inputs, &[true])?.into_iter().next();
        let y = y.ok_or_else(|| Error::node(&self.at, "the convolution gave no output"))?;
        let z = inputs.get(3).copied().flatten();
        if z.is_none() && self.activation == Activation::None {
            return Ok(vec![y]);
        }
        Ok(vec![self.epilogue(&y, z)?])
    }
}
