//! Kernels shared by the plans of a session. A session with free input dimensions makes a
//! plan per input shape (an LLM: one per decode step, the past growing by one); most of its
//! nodes see the same input types in every plan (a MatMulNBits of the decode steps always
//! reads `[1, 1, hidden]`), so their kernels, and what they prepared from the weights, are
//! built once and shared. Entries are weak: a kernel lives as long as a plan holds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::ep::{ExecutionProvider, Kernel, NodeContext};
use crate::ir::AttrValue;
use crate::types::ValueType;
use crate::{DataType, Result, TensorData};

/// Constants up to this many bytes are keyed by value (folded shapes differ between plans);
/// larger ones by address, the entry holding them so that no other tensor can take it.
const BY_VALUE_BYTES: usize = 256;

/// Weak handles to built kernels, by node, provider and what the kernel was built from.
#[derive(Default)]
pub(crate) struct KernelCache {
    entries: Mutex<HashMap<Key, Entry>>,
}

/// A kernel and the large constants its key names by address.
struct Entry {
    kernel: Weak<dyn Kernel>,
    _pinned: Vec<crate::Tensor>,
}

#[derive(PartialEq, Eq, Hash)]
struct Key {
    node: usize,
    provider: usize,
    signature: Signature,
}

/// What a kernel is built from besides its node: the opset version, the input types and the
/// constant inputs.
#[derive(PartialEq, Eq, Hash)]
struct Signature {
    since_version: i64,
    input_types: Vec<ValueType>,
    constants: Vec<Constant>,
}

/// A constant input as a kernel key sees it.
#[derive(PartialEq, Eq, Hash)]
enum Constant {
    /// The input is not a constant.
    None,
    /// A small host constant, by value.
    Value(DataType, Vec<usize>, Vec<u8>),
    /// A large constant, by the address of its data.
    At(DataType, Vec<usize>, usize),
}

impl KernelCache {
    /// The kernel of `ctx.node` on provider `index`, shared when a live plan already built one
    /// from the same input types and constants.
    pub fn get_or_build(
        &self,
        index: usize,
        provider: &dyn ExecutionProvider,
        ctx: &NodeContext<'_>,
    ) -> Result<Arc<dyn Kernel>> {
        let Some(signature) = signature(ctx) else {
            return Ok(Arc::from(provider.build_kernel(ctx)?));
        };
        let key = Key { node: ctx.node as *const _ as usize, provider: index, signature };
        if let Some(kernel) = self.lock().get(&key).and_then(|e| e.kernel.upgrade()) {
            return Ok(kernel);
        }
        let kernel: Arc<dyn Kernel> = Arc::from(provider.build_kernel(ctx)?);
        let pinned = ctx.constant_inputs.iter().flatten().filter(|t| !by_value(t)).map(|t| (*t).clone()).collect();
        let mut entries = self.lock();
        entries.retain(|_, e| e.kernel.strong_count() > 0);
        entries.insert(key, Entry { kernel: Arc::downgrade(&kernel), _pinned: pinned });
        Ok(kernel)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        // A panic while holding the lock leaves the map consistent (inserts are atomic).
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The key of what `ctx`'s kernel is built from; `None` for nodes with subgraphs, whose kernels
/// also depend on the enclosing scope's types.
fn signature(ctx: &NodeContext<'_>) -> Option<Signature> {
    if ctx.node.attributes.iter().any(|a| matches!(a.value, AttrValue::Graph(_) | AttrValue::Graphs(_))) {
        return None;
    }
    let constants = (ctx.constant_inputs.iter())
        .map(|constant| match constant.map(|t| (t, t.data())) {
            None => Constant::None,
            Some((t, TensorData::Host(h))) if by_value(t) => {
                Constant::Value(t.dtype(), t.shape().to_vec(), h.bytes().to_vec())
            }
            Some((t, TensorData::Host(h))) => Constant::At(t.dtype(), t.shape().to_vec(), h.bytes().as_ptr() as usize),
            Some((t, other)) => Constant::At(t.dtype(), t.shape().to_vec(), other as *const _ as usize),
        })
        .collect();
    Some(Signature { since_version: ctx.since_version, input_types: ctx.input_types.clone(), constants })
}

fn by_value(t: &crate::Tensor) -> bool {
    matches!(t.data(), TensorData::Host(h) if h.bytes().len() <= BY_VALUE_BYTES)
}
