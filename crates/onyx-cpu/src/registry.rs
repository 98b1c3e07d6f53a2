//! Which kernel builder handles which operator.

use std::collections::HashMap;

use onyx_core::ep::{Kernel, NodeContext};
use onyx_core::Result;

/// Builds the kernel of one node: decodes attributes once, checks what can be checked early.
pub type BuildFn = fn(&NodeContext<'_>) -> Result<Box<dyn Kernel>>;

/// Kernel builders by (domain, op type).
#[derive(Default)]
pub struct Registry {
    builders: HashMap<(&'static str, &'static str), BuildFn>,
}

impl Registry {
    /// The registry with every kernel of the CPU EP.
    pub fn with_all_ops() -> Self {
        let mut r = Registry::default();
        crate::ops::register_all(&mut r);
        r
    }

    /// Registers `build` for `op` of the default ONNX domain.
    pub fn add(&mut self, op: &'static str, build: BuildFn) {
        self.builders.insert(("", op), build);
    }

    /// Registers `build` for `op` of `domain`.
    pub fn add_in(&mut self, domain: &'static str, op: &'static str, build: BuildFn) {
        self.builders.insert((domain, op), build);
    }

    /// The builder for an op, if any.
    pub fn get(&self, domain: &str, op: &str) -> Option<BuildFn> {
        self.builders.get(&(domain, op)).copied()
    }

    /// Registered (domain, op) pairs, sorted.
    pub fn ops(&self) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = self.builders.keys().copied().collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists the default-domain ONNX operators without a CPU kernel (run with `--nocapture`).
    #[test]
    fn list_missing_default_domain_ops() {
        let r = Registry::with_all_ops();
        let have = r.ops();
        // The op table is private to onyx-core: read its generated source.
        let table = include_str!("../../onyx-core/src/ops/onnx_ops.rs");
        let missing: Vec<&str> = table
            .lines()
            .filter_map(|l| l.trim().strip_prefix("(\"\", \""))
            .filter_map(|l| l.split('"').next())
            .filter(|op| !have.contains(&("", *op)))
            .collect();
        println!("{} of the default-domain ops have no CPU kernel: {}", missing.len(), missing.join(" "));
    }
}
