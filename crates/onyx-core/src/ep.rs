//! The execution-provider seam: an EP says which nodes it takes, builds a kernel per node,
//! and moves tensors between the host and its device.

use std::any::Any;
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
    ///
    /// For an EP that records work (see [`RunState`]), this runs the node on its own: it records
    /// and hands over the work of this node alone.
    fn run(&self, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>>;

    /// Like [`Kernel::run`], inside a run that keeps per-run state for this kernel's EP (the state
    /// its [`ExecutionProvider::begin_run`] made). EPs that record device work override this to
    /// add the node's work to the run's recording; the default ignores the state.
    fn run_in(&self, run: &mut dyn RunState, inputs: &[Option<ValueRef<'_>>], wanted: &[bool]) -> Result<Vec<Value>> {
        let _ = run;
        self.run(inputs, wanted)
    }

    /// Positions of the inputs whose buffers this kernel can write its outputs into, when the
    /// run no longer needs them (see [`Kernel::run_donated`]); none by default.
    fn in_place_inputs(&self) -> &[usize] {
        &[]
    }

    /// Like [`Kernel::run`], with the inputs of `donated` handed over (position, value; their
    /// entries in `inputs` are `None`): the run reads them no more, so the kernel may reuse
    /// their buffers for its outputs (see `host_pool::reclaim`). Never empty. The default reads
    /// them like any input.
    fn run_donated(
        &self,
        inputs: &[Option<ValueRef<'_>>],
        donated: Vec<(usize, Value)>,
        wanted: &[bool],
    ) -> Result<Vec<Value>> {
        self.run(&with_inputs(inputs, &donated), wanted)
    }
}

/// What an EP keeps for the length of one run: on a GPU, the command encoder the run's kernels
/// record into, so that a whole run becomes one submission. Created by
/// [`ExecutionProvider::begin_run`] at the EP's first step of a run.
pub trait RunState: Send {
    /// Hands the work recorded so far to the device (a queue submission) without waiting for it.
    /// The executor calls it before a value of this EP is copied off the device and at the end
    /// of the run.
    fn flush(&mut self) -> Result<()>;

    /// Takes a value of this EP's device that the run no longer reads, so that the EP may reuse
    /// its memory later in the run (or, once the run is submitted, in later runs). The default
    /// drops it.
    fn release(&mut self, value: Value) {
        drop(value);
    }

    /// Tells the run which of the caller's tensors its bound outputs will be written into
    /// (`IoBinding::bind_output`), given once when the state is made. A kernel whose output
    /// updates one of its inputs (a KV cache bound as both past and present) may then write
    /// that input's buffer in place, when it is one of these. The default ignores them.
    fn bind_outputs(&mut self, targets: &[Tensor]) {
        let _ = targets;
    }

    /// For downcasting to the EP's own state type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
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

    /// Per-run state for an EP that records device work; `None` (the default) for EPs whose
    /// kernels do their work inside [`Kernel::run`].
    fn begin_run(&self) -> Option<Box<dyn RunState>> {
        None
    }

    /// Indices of `ctx.node`'s inputs that this EP's kernel reads in host memory (shape-like
    /// inputs such as Reshape's `shape` or Slice's `starts`): the planner keeps those on the CPU,
    /// and may move the small integer nodes that compute them to the CPU too.
    fn host_inputs(&self, ctx: &NodeContext<'_>) -> Vec<usize> {
        let _ = ctx;
        vec![]
    }

    /// Copies `src` into `dst`, both tensors of this EP's device with equal dtype and shape, as
    /// part of `run` (the run's state, when this EP keeps one). For outputs bound to a
    /// preallocated device tensor.
    fn copy_into(&self, run: Option<&mut dyn RunState>, src: &Tensor, dst: &Tensor) -> Result<()> {
        let _ = (run, src, dst);
        Err(Error::Unsupported(format!("execution provider '{}' cannot copy into a preallocated tensor", self.name())))
    }

    /// The channel block size of the blocked NCHWc layout (`[N, ceil(C/b), H, W, b]`) this EP
    /// runs convolution chains in faster than plain NCHW, or `None` (the default) when it has
    /// none. The optimizer's `all` level rewrites Conv chains placed on this EP into the
    /// `ai.onyx` NCHWc ops (see `optimizer::nchwc`) only when this answers `Some`.
    fn nchwc_block(&self) -> Option<usize> {
        None
    }

    /// Copies a host tensor to this EP's device.
    fn upload(&self, tensor: TensorView<'_>) -> Result<Tensor>;

    /// Copies a tensor on this EP's device to the host.
    fn download(&self, tensor: &Tensor) -> Result<Tensor>;
}

/// `inputs` with input `i` set to `value`: how a kernel reads an input it was handed over
/// (see [`Kernel::run_donated`]) when it does not reuse its buffer.
pub fn with_input<'r>(inputs: &[Option<ValueRef<'r>>], i: usize, value: &'r Value) -> Vec<Option<ValueRef<'r>>> {
    let mut all = inputs.to_vec();
    if all.len() <= i {
        all.resize(i + 1, None);
    }
    all[i] = Some(ValueRef::Value(value));
    all
}

/// `inputs` with each handed-over input (see [`Kernel::run_donated`]) back in its place.
pub fn with_inputs<'r>(inputs: &[Option<ValueRef<'r>>], donated: &'r [(usize, Value)]) -> Vec<Option<ValueRef<'r>>> {
    let mut all = inputs.to_vec();
    for (i, value) in donated {
        if all.len() <= *i {
            all.resize(i + 1, None);
        }
        all[*i] = Some(ValueRef::Value(value));
    }
    all
}

/// Takes out of `donated` the host tensor with the most bytes: the one an output the size of
/// its largest input can be written over.
pub fn take_largest(donated: &mut Vec<(usize, Value)>) -> Option<(usize, Value)> {
    let bytes = |v: &Value| match v {
        Value::Tensor(t) => match t.data() {
            crate::TensorData::Host(h) => h.bytes().len(),
            _ => 0,
        },
        _ => 0,
    };
    let k = (0..donated.len()).max_by_key(|&k| bytes(&donated[k].1))?;
    Some(donated.swap_remove(k))
}

/// Error for a kernel asked to run on a value kind it does not handle.
pub fn unsupported(node: &Node, what: impl std::fmt::Display) -> Error {
    Error::Unsupported(format!("{} ({what})", node.location()))
}
