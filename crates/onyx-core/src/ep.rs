//! The execution-provider seam: an EP says which nodes it takes, builds a kernel per node,
//! and moves tensors between the host and its device.

use std::collections::HashMap;
use std::sync::Arc;

use crate::device::Device;
use crate::ir::{Graph, Node, OpsetImports};
use crate::types::ValueType;
use crate::{Error, Result, Tensor, TensorView, Value};

/// A value as a kernel receives it: a borrowed host view (a caller's memory) or a value.
#[derive(Clone, Copy, Debug)]
pub enum ValueRef<'r> {
    /// A borrowed host tensor.
    View(TensorView<'r>),
    /// Any value, host or device.
    Value(&'r Value),
}

impl<'r> ValueRef<'r> {
    /// The value as a host tensor view; an error for non-tensors and device tensors.
    pub fn tensor(&self) -> Result<TensorView<'r>> {
        match *self {
            ValueRef::View(v) => Ok(v),
            ValueRef::Value(v) => v.as_tensor()?.view(),
        }
    }

    /// The value itself, when it is not a borrowed view.
    pub fn value(&self) -> Option<&'r Value> {
        match *self {
            ValueRef::View(_) => None,
            ValueRef::Value(v) => Some(v),
        }
    }

    /// An owned value (copies a borrowed view, shares an owned value).
    pub fn to_value(&self) -> Value {
        match *self {
            ValueRef::View(v) => Value::Tensor(v.to_tensor()),
            ValueRef::Value(v) => v.clone(),
        }
    }

    /// Where the value's elements are.
    pub fn device(&self) -> Device {
        match *self {
            ValueRef::Value(Value::Tensor(t)) => t.device(),
            _ => Device::Cpu,
        }
    }
}

/// A compiled subgraph (an If branch, a Loop body) that a kernel can run.
pub trait SubgraphRunner: Send + Sync {
    /// Runs the subgraph with its formal inputs bound to `inputs` (in order) and outer-scope
    /// names resolved through `outer`. Returns the subgraph's outputs in order.
    fn run(&self, inputs: &[ValueRef<'_>], outer: &HashMap<&str, ValueRef<'_>>) -> Result<Vec<Value>>;
}

/// Everything an EP may look at when deciding on a node and building its kernel.
pub struct NodeContext<'a> {
    /// The node.
    pub node: &'a Node,
    /// Opset version of the op definition that applies (e.g. 13 for Split-13).
    pub since_version: i64,
    /// The model's opset imports.
    pub opsets: &'a OpsetImports,
    /// Inferred type of each input (`Unknown` where inference could not tell).
    pub input_types: Vec<ValueType>,
    /// Inputs whose value is a constant (an initializer or a folded constant).
    pub constant_inputs: Vec<Option<&'a Tensor>>,
    /// Compiles a subgraph of this node for the kernel to run.
    pub subgraphs: &'a dyn Fn(&Graph) -> Result<Arc<dyn SubgraphRunner>>,
}

impl NodeContext<'_> {
    /// The constant value of input `i`, when it is one.
    pub fn constant(&self, i: usize) -> Option<&Tensor> {
        self.constant_inputs.get(i).copied().flatten()
    }
}

/// The compiled form of one node on one EP.
pub trait Kernel: Send + Sync {
    /// Computes the node's outputs. `inputs` holds the node's inputs (`None` for omitted
    /// optional ones) followed by its implicit (outer-scope) inputs. Returns one value per node
    /// output, in order; trailing optional outputs may be left out when `wanted` says no one
    /// reads them.
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>>;
}

/// A device an EP can run on, as `onyx devices` lists it.
#[derive(Debug, Clone)]
pub struct DeviceDescription {
    /// The device.
    pub device: Device,
    /// Human-readable name and details.
    pub name: String,
    /// Extra key/value facts (driver, features, limits).
    pub details: Vec<(String, String)>,
}

/// An execution provider: a backend that runs some nodes on one device.
pub trait ExecutionProvider: Send + Sync {
    /// Short name used in options and reports (`cpu`, `wgpu`).
    fn name(&self) -> &str;

    /// The device this EP's kernels read and write.
    fn device(&self) -> Device;

    /// The devices this EP sees (for `onyx devices`).
    fn describe_devices(&self) -> Vec<DeviceDescription>;

    /// Whether this EP takes `ctx.node`. Asked in provider priority order; the first yes wins.
    fn supports(&self, ctx: &NodeContext<'_>) -> bool;

    /// Builds the kernel for a node this EP said it supports.
    fn build_kernel(&self, ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>>;

    /// Copies a host tensor to this EP's device.
    fn upload(&self, tensor: TensorView<'_>) -> Result<Tensor>;

    /// Copies a tensor on this EP's device to the host.
    fn download(&self, tensor: &Tensor) -> Result<Tensor>;
}

/// Error for a kernel asked to run on a value kind it does not handle.
pub fn unsupported(node: &Node, what: impl std::fmt::Display) -> Error {
    Error::Unsupported(format!("{} ({what})", node.location()))
}
