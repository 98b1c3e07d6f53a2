//! The wgpu EP's operators, one module per family, and the table that says which node each
//! one takes.

use std::collections::HashMap;
use std::sync::Arc;

use onyx_core::ep::NodeContext;
use onyx_core::types::ValueType;
use onyx_core::{DataType, Result};

use crate::capabilities::Capabilities;
use crate::context::GpuContext;
use crate::kernel::GpuOp;

pub(crate) mod activation;
pub(crate) mod affine_grid;
pub(crate) mod attention;
pub(crate) mod bitcast;
pub(crate) mod cast;
pub(crate) mod causal_conv;
pub(crate) mod center_crop_pad;
pub(crate) mod clip_int;
pub(crate) mod col2im;
pub(crate) mod compare;
pub(crate) mod compress;
pub(crate) mod contrib;
pub(crate) mod conv;
pub(crate) mod cumulative;
pub(crate) mod det;
pub(crate) mod dynamic_quantize;
pub(crate) mod elementwise;
pub(crate) mod gather;
pub(crate) mod gather_block;
pub(crate) mod gather_nd;
pub(crate) mod generate;
pub(crate) mod grid_sample;
pub(crate) mod integer;
pub(crate) mod layout;
pub(crate) mod linear_attention;
pub(crate) mod loss;
pub(crate) mod lp_norm;
pub(crate) mod lrn;
pub(crate) mod mask;
pub(crate) mod matmul;
pub(crate) mod nbits;
pub(crate) mod norm;
pub(crate) mod onehot;
pub(crate) mod pool;
pub(crate) mod quantize;
pub(crate) mod reduce;
pub(crate) mod reverse_sequence;
pub(crate) mod rotary;
pub(crate) mod scatter;
pub(crate) mod scatter_nd;
pub(crate) mod softmax;
pub(crate) mod topk;
pub(crate) mod window;

/// Whether the EP takes a node: dtypes and attributes the kernel handles on a device that can
/// do what the adapter says (known before the device is open).
pub(crate) type SupportsFn = fn(&NodeContext<'_>, &Capabilities) -> bool;

/// Builds a node's GPU op: decodes attributes once, compiles (or reuses) its pipelines.
pub(crate) type BuildFn = fn(&NodeContext<'_>, &Arc<GpuContext>) -> Result<Box<dyn GpuOp>>;

/// One operator of the EP.
#[derive(Clone, Copy)]
pub(crate) struct OpDef {
    pub supports: SupportsFn,
    pub build: BuildFn,
    /// Inputs the kernel reads on the host (shape-like inputs).
    pub host_inputs: &'static [usize],
}

/// The EP's operators by op type (default ONNX domain).
#[derive(Default)]
pub(crate) struct Registry {
    ops: HashMap<&'static str, OpDef>,
    /// Ops of other domains, by (domain, op type).
    domains: HashMap<(&'static str, &'static str), OpDef>,
}

impl Registry {
    /// Every operator the EP has.
    pub fn with_all_ops() -> Registry {
        let mut r = Registry::default();
        activation::register(&mut r);
        attention::register(&mut r);
        bitcast::register(&mut r);
        cast::register(&mut r);
        compare::register(&mut r);
        compress::register(&mut r);
        contrib::register(&mut r);
        dynamic_quantize::register(&mut r);
        conv::register(&mut r);
        cumulative::register(&mut r);
        elementwise::register(&mut r);
        gather::register(&mut r);
        gather_block::register(&mut r);
        generate::register(&mut r);
        gather_nd::register(&mut r);
        grid_sample::register(&mut r);
        integer::register(&mut r);
        layout::register(&mut r);
        loss::register(&mut r);
        lp_norm::register(&mut r);
        lrn::register(&mut r);
        mask::register(&mut r);
        matmul::register(&mut r);
        nbits::register(&mut r);
        norm::register(&mut r);
        onehot::register(&mut r);
        pool::register(&mut r);
        quantize::register(&mut r);
        reduce::register(&mut r);
        scatter::register(&mut r);
        softmax::register(&mut r);
        topk::register(&mut r);
        window::register(&mut r);
        causal_conv::register(&mut r);
        linear_attention::register(&mut r);
        rotary::register(&mut r);
        det::register(&mut r);
        affine_grid::register(&mut r);
        reverse_sequence::register(&mut r);
        center_crop_pad::register(&mut r);
        col2im::register(&mut r);
        r
    }

    /// Registers an op whose inputs are all read on the GPU.
    pub fn add(&mut self, op: &'static str, supports: SupportsFn, build: BuildFn) {
        self.ops.insert(op, OpDef { supports, build, host_inputs: &[] });
    }

    /// Registers an op with some inputs read on the host.
    pub fn add_with_host_inputs(
        &mut self,
        op: &'static str,
        supports: SupportsFn,
        build: BuildFn,
        host: &'static [usize],
    ) {
        self.ops.insert(op, OpDef { supports, build, host_inputs: host });
    }

    /// Registers an op of another domain (e.g. `com.microsoft`), all inputs read on the GPU.
    pub fn add_in(&mut self, domain: &'static str, op: &'static str, supports: SupportsFn, build: BuildFn) {
        self.domains.insert((domain, op), OpDef { supports, build, host_inputs: &[] });
    }

    /// Registers an op of another domain with some inputs read on the host.
    pub fn add_in_with_host_inputs(
        &mut self,
        domain: &'static str,
        op: &'static str,
        supports: SupportsFn,
        build: BuildFn,
        host: &'static [usize],
    ) {
        self.domains.insert((domain, op), OpDef { supports, build, host_inputs: host });
    }

    /// The definition for a node's op.
    pub fn get(&self, domain: &str, op: &str) -> Option<&OpDef> {
        if domain.is_empty() || domain == "ai.onnx" {
            self.ops.get(op)
        } else {
            self.domains.iter().find(|((d, o), _)| *d == domain && *o == op).map(|(_, def)| def)
        }
    }

    /// Op types the EP has, sorted.
    pub fn ops(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.ops.keys().copied().collect();
        v.sort();
        v
    }
}

/// The dtype of input `i` when inference knows it.
pub(crate) fn input_dtype(ctx: &NodeContext<'_>, i: usize) -> Option<DataType> {
    match ctx.input_types.get(i)? {
        ValueType::Tensor(t) => Some(t.dtype),
        _ => None,
    }
}

/// Whether input `i` is a tensor whose dtype the kernels compute in on this device: f32, or f16
/// where the adapter has SHADER_F16.
pub(crate) fn is_float_input(ctx: &NodeContext<'_>, gpu: &Capabilities, i: usize) -> bool {
    match input_dtype(ctx, i) {
        Some(DataType::Float) => true,
        Some(DataType::Float16) => gpu.has_f16(),
        _ => false,
    }
}

/// Whether every present input among `indices` is a float input (see [`is_float_input`]).
pub(crate) fn float_inputs(ctx: &NodeContext<'_>, gpu: &Capabilities, indices: std::ops::Range<usize>) -> bool {
    indices.filter(|&i| ctx.node.inputs.get(i).is_some_and(|n| !n.is_empty())).all(|i| is_float_input(ctx, gpu, i))
}
