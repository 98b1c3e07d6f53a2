//! Resource limits of a session: the bytes of one tensor, the bytes of all the values a run
//! holds at once, and how deeply subgraphs may nest. Exceeding one is an error raised before
//! the allocation: when a plan is made (every size a plan for concrete input shapes knows), and
//! where a kernel computes an output size from data ([`check_alloc`], which reads the limits of
//! the run on the current thread).
//!
//! ONNX Runtime has no such limits; the defaults are far above what real models need (the
//! largest single tensors of today's LLMs are a few GiB) and only stop files or inputs that ask
//! for absurd sizes.

use std::cell::Cell;
use std::collections::HashMap;

use crate::device::Device;
use crate::ir::{Graph, MAX_SUBGRAPH_DEPTH};
use crate::ops::infer::Inferred;
use crate::types::ValueType;
use crate::{DataType, Error, Result};

use super::plan::Step;

/// Default [`Limits::max_tensor_bytes`]: 16 GiB.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 16 << 30;
/// Default [`Limits::max_run_bytes`]: 64 GiB.
pub const DEFAULT_MAX_RUN_BYTES: u64 = 64 << 30;

/// Resource limits of a session (see the module docs). `Limits::default()` is safe for any
/// real model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes one tensor may take (default 16 GiB).
    pub max_tensor_bytes: u64,
    /// Most bytes the values a run computes may take at any one time (default 64 GiB). Inputs
    /// the caller passes and the model's initializers are not counted.
    pub max_run_bytes: u64,
    /// Deepest nesting of subgraphs (If, Loop, Scan bodies); at most, and by default,
    /// [`MAX_SUBGRAPH_DEPTH`], which the loader enforces for every model.
    pub max_subgraph_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES,
            max_run_bytes: DEFAULT_MAX_RUN_BYTES,
            max_subgraph_depth: MAX_SUBGRAPH_DEPTH,
        }
    }
}

/// The error for `what` taking `size` bytes over the limit `option` = `limit`.
fn exceeded(what: impl std::fmt::Display, size: u64, option: &str, limit: u64) -> Error {
    let unit = if option == "max_subgraph_depth" { "levels" } else { "bytes" };
    Error::Limit { what: what.to_string(), size, unit: unit.into(), option: option.to_string(), limit }
}

/// Bytes of `count` elements of `dtype` (strings counted at the size of a `String` each),
/// saturating instead of overflowing.
pub fn bytes_of(dtype: DataType, count: u128) -> u64 {
    let bits = match dtype.bit_width() {
        0 => 8 * std::mem::size_of::<String>() as u128,
        b => b as u128,
    };
    u64::try_from(count.saturating_mul(bits).div_ceil(8)).unwrap_or(u64::MAX)
}

/// Bytes of a value of type `ty` when its shape is fully known.
fn known_bytes(ty: &ValueType) -> Option<u64> {
    let t = ty.as_tensor()?;
    let dims = t.concrete()?;
    let count = dims.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128));
    Some(bytes_of(t.dtype, count))
}

impl Limits {
    /// Checks one tensor of `bytes` bytes, described by `what` (called only on failure).
    pub fn check_tensor(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<()> {
        if bytes > self.max_tensor_bytes {
            return Err(exceeded(what(), bytes, "max_tensor_bytes", self.max_tensor_bytes));
        }
        Ok(())
    }

    /// Checks the size of every value `graph`'s nodes compute whose shape inference knows
    /// (before any of them is allocated): an error names the value, its node and type.
    pub(crate) fn check_values(&self, graph: &Graph, known: &HashMap<String, Inferred>) -> Result<()> {
        for node in &graph.nodes {
            for name in node.outputs.iter().filter(|o| !o.is_empty()) {
                let Some(ty) = known.get(name).map(|k| &k.ty) else { continue };
                if let Some(bytes) = known_bytes(ty) {
                    self.check_tensor(bytes, || format!("{}: output '{name}' ({ty})", node.location()))?;
                }
            }
        }
        Ok(())
    }

    /// Checks the most bytes a run of `steps` holds at once (values of known size that the
    /// steps compute, from when they are made until they are freed or returned), and returns it.
    pub(crate) fn check_peak(&self, steps: &[Step], slot_bytes: &[u64], graph_name: &str) -> Result<u64> {
        let mut made = vec![false; slot_bytes.len()];
        steps.iter().flat_map(|st| st.outputs.iter().flatten()).for_each(|&s| made[s] = true);
        let mut live = 0u64;
        let mut peak = 0u64;
        for step in steps {
            live = step.outputs.iter().flatten().fold(live, |n, &s| n.saturating_add(slot_bytes[s]));
            peak = peak.max(live);
            // Inputs and constants were never counted: only values a step made are given back.
            for &s in step.free_after.iter().filter(|&&s| made[s]) {
                live = live.saturating_sub(slot_bytes[s]);
            }
        }
        if peak > self.max_run_bytes {
            let what = format!("a run of graph '{graph_name}' (the values it holds at once)");
            return Err(exceeded(what, peak, "max_run_bytes", self.max_run_bytes));
        }
        Ok(peak)
    }

    /// Checks that `graph`'s subgraphs nest at most [`Limits::max_subgraph_depth`] deep.
    pub(crate) fn check_nesting(&self, graph: &Graph) -> Result<()> {
        let depth = nesting(graph, self.max_subgraph_depth.min(MAX_SUBGRAPH_DEPTH) + 1);
        if depth > self.max_subgraph_depth {
            let what = format!("graph '{}': subgraph nesting", graph.name);
            return Err(exceeded(what, depth as u64, "max_subgraph_depth", self.max_subgraph_depth as u64));
        }
        Ok(())
    }
}

/// How deeply subgraphs nest under `graph` (0: none), counting no further than `cap`.
fn nesting(graph: &Graph, cap: usize) -> usize {
    if cap == 0 {
        return 0;
    }
    let inner = graph.nodes.iter().flat_map(|n| n.subgraphs()).map(|g| 1 + nesting(g, cap - 1));
    inner.max().unwrap_or(0)
}

/// The bytes of each slot of a plan: what inference knows of the value a name holds, and for a
/// device copy the size of its source. Unknown sizes count as 0 (they are checked when made).
pub(crate) fn slot_bytes(
    slot_count: usize,
    slots: &HashMap<String, usize>,
    copies: &HashMap<(usize, Device), usize>,
    known: &HashMap<String, Inferred>,
) -> Vec<u64> {
    let mut bytes = vec![0u64; slot_count];
    for (name, &s) in slots {
        bytes[s] = known.get(name).and_then(|k| known_bytes(&k.ty)).unwrap_or(0);
    }
    for (&(src, _), &dst) in copies {
        bytes[dst] = bytes[src];
    }
    bytes
}

thread_local! {
    /// The limits of the run on this thread, and the bytes its plan already holds at its peak.
    static RUN: Cell<Option<(Limits, u64)>> = const { Cell::new(None) };
}

/// Sets the limits that [`check_alloc`] applies on this thread until the guard is dropped
/// (which restores the previous ones, so subgraph runs nest).
pub(crate) fn enter_run(limits: Limits, planned_peak: u64) -> RunGuard {
    RunGuard { previous: RUN.with(|r| r.replace(Some((limits, planned_peak)))) }
}

/// Restores the previous run limits of the thread when dropped.
pub(crate) struct RunGuard {
    previous: Option<(Limits, u64)>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        RUN.with(|r| r.set(self.previous));
    }
}

/// Checks an allocation of `bytes` whose size a kernel computed from data (NonZero,
/// ConstantOfShape, Expand, Tile, Range, ...) against the limits of the run on this thread (the
/// defaults outside a run): the tensor limit, and the run limit counting what the plan already
/// holds at its peak. `what` describes the value (called only on failure). Call it before
/// allocating.
pub fn check_alloc(bytes: u64, what: impl Fn() -> String) -> Result<()> {
    let (limits, planned) = RUN.with(Cell::get).unwrap_or((Limits::default(), 0));
    limits.check_tensor(bytes, &what)?;
    let total = planned.saturating_add(bytes);
    if total > limits.max_run_bytes {
        let what = format!("{} with the {planned} bytes the run's plan holds", what());
        return Err(exceeded(what, total, "max_run_bytes", limits.max_run_bytes));
    }
    Ok(())
}

/// [`check_alloc`] for `count` elements of `dtype`.
pub fn check_elements(dtype: DataType, count: usize, what: impl Fn() -> String) -> Result<()> {
    check_alloc(bytes_of(dtype, count as u128), what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Attribute, Node};

    #[test]
    fn bytes_saturate_and_count_packed_and_string_types() {
        assert_eq!(bytes_of(DataType::Float, 10), 40);
        assert_eq!(bytes_of(DataType::Int4, 3), 2);
        assert_eq!(bytes_of(DataType::String, 2), 2 * std::mem::size_of::<String>() as u64);
        assert_eq!(bytes_of(DataType::Double, u128::MAX), u64::MAX);
    }

    #[test]
    fn alloc_checks_use_the_run_limits_of_the_thread() {
        let small = Limits { max_tensor_bytes: 100, max_run_bytes: 150, ..Limits::default() };
        assert!(check_alloc(1 << 20, || "x".into()).is_ok(), "defaults outside a run");
        {
            let _run = enter_run(small, 60);
            let err = check_alloc(101, || "output 'y' of NonZero node 'nz'".into()).unwrap_err().to_string();
            assert!(
                err.contains("'y'") && err.contains("101") && err.contains("max_tensor_bytes") && err.contains("100"),
                "{err}"
            );
            let err = check_elements(DataType::Float, 25, || "z".into()).unwrap_err().to_string();
            assert!(err.contains("max_run_bytes") && err.contains("160"), "{err}");
            assert!(check_alloc(90, || "w".into()).is_ok());
            {
                let _inner = enter_run(Limits { max_tensor_bytes: 10, ..small }, 0);
                assert!(check_alloc(11, || "v".into()).is_err());
            }
            assert!(check_alloc(11, || "v".into()).is_ok(), "the outer limits are back");
        }
        assert!(check_alloc(1 << 20, || "x".into()).is_ok(), "defaults again after the run");
    }

    fn if_nested(depth: usize) -> Graph {
        let mut g = Graph { name: format!("g{depth}"), ..Default::default() };
        if depth > 0 {
            let body = if_nested(depth - 1);
            g.nodes.push(Node {
                name: format!("if{depth}"),
                op_type: "If".into(),
                attributes: vec![
                    Attribute { name: "then_branch".into(), value: AttrValue::Graph(Box::new(body.clone())) },
                    Attribute { name: "else_branch".into(), value: AttrValue::Graph(Box::new(body)) },
                ],
                ..Default::default()
            });
        }
        g
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_an_error() {
        let limits = Limits { max_subgraph_depth: 3, ..Limits::default() };
        assert!(limits.check_nesting(&if_nested(3)).is_ok());
        let err = limits.check_nesting(&if_nested(4)).unwrap_err().to_string();
        assert!(err.contains("4 levels") && err.contains("max_subgraph_depth = 3"), "{err}");
    }
}
