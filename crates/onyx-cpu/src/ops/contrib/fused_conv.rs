//! FusedConv(X, W, B?, Z?) = activation(Conv(X, W) + B + Z): the CPU Conv kernel with the bias,
//! the residual Z and the activation applied to each block of the output by the thread that
//! computed it, while in cache (in f32 for half types, rounding once).

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::ir::Node;
use onyx_core::{Result, Value};

use super::Activation;
use crate::ops::conv::{conv_for, ConvOp};

/// A decoded FusedConv node: the convolution and the activation.
struct FusedConv {
    conv: ConvOp,
    activation: Activation,
}

/// The attributes of FusedConv that Conv does not have.
const OWN_ATTRIBUTES: [&str; 2] = ["activation", "activation_params"];

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
    let activation = Activation::from_node(ctx.node)?;
    let conv = conv_for(&conv_node(ctx.node))?;
    Ok(Box::new(FusedConv { conv, activation }))
}

impl Kernel for FusedConv {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let conv_inputs = &inputs[..inputs.len().min(3)];
        let z = inputs.get(3).copied().flatten().map(|z| (3, z));
        Ok(vec![self.conv.run_with(conv_inputs, z, self.activation)?])
    }
}
