//! Graph optimization before partitioning, with ONNX Runtime's levels:
//!
//! - basic ([`cleanup`], [`fold`]): dead nodes and unread initializers removed, Identity and
//!   inference-mode Dropout removed, constant folding (evaluated by the CPU provider), and
//!   values inference already knows replaced by initializers;
//! - extended ([`half`], [`conv`], [`matmul`], [`gelu`], [`norm`], [`attention`]): f16 and
//!   bf16 groups of nodes the CPU runs computed in f32 (first, so the fusions see f32),
//!   Conv+BatchNormalization folding, FusedConv, MatMul+Add → Gemm, Transpose+MatMul →
//!   FusedMatMul, Gelu / BiasGelu / FastGelu, Gemm+activation → FusedGemm (Onyx's domain),
//!   products of one input by several constant weights → one product and a Split (GPU
//!   providers), LayerNormalization and SkipLayerNormalization (with its bias) from their
//!   decomposed forms, multi-head attention blocks → Attention;
//! - all ([`nchwc`]): extended, then convolution chains moved into the blocked NCHWc layout of
//!   the provider that runs them, when it has one (the CPU EP with AVX2 or AVX-512).
//!
//! No rewrite changes what a caller can see, nor results beyond rounding (half-precision
//! groups round less, folded weights once where the graph rounded twice): an intermediate
//! value that is a graph output or has other readers stops a fusion, and so do non-constant
//! parameters, other axes or broadcasts. A fusion never moves work to a provider of lower
//! priority: it fires only when the provider that takes the pattern's anchor node also takes
//! the fused node (see [`Fusion::allowed`]). Subgraphs (If, Loop, Scan bodies) are left as
//! they are.

mod attention;
mod cleanup;
mod conv;
mod fold;
mod gelu;
mod half;
mod matmul;
mod nchwc;
mod norm;
#[cfg(test)]
mod tests;
mod view;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::ep::ExecutionProvider;
use crate::ir::{Graph, Model, Node, MS_DOMAIN, ONYX_DOMAIN};
use crate::session::OptimizationLevel;
use crate::types::TensorType;
use crate::{Result, Tensor};

use view::View;

/// What [`optimize`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptimizeReport {
    /// The level it ran at.
    pub level: OptimizationLevel,
    /// Nodes per op before (`domain:op` outside the default domain).
    pub before: BTreeMap<String, usize>,
    /// Nodes per op after.
    pub after: BTreeMap<String, usize>,
    /// How many times each pass rewrote the graph, for the passes that did.
    pub passes: BTreeMap<String, usize>,
}

impl OptimizeReport {
    /// Number of nodes before.
    pub fn nodes_before(&self) -> usize {
        self.before.values().sum()
    }

    /// Number of nodes after.
    pub fn nodes_after(&self) -> usize {
        self.after.values().sum()
    }

    /// How many times pass `name` fired.
    pub fn fired(&self, name: &str) -> usize {
        self.passes.get(name).copied().unwrap_or(0)
    }
}

impl fmt::Display for OptimizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "optimization level {}: {} nodes -> {}", self.level, self.nodes_before(), self.nodes_after())?;
        let ops: std::collections::BTreeSet<&String> = self.before.keys().chain(self.after.keys()).collect();
        for op in ops {
            let (b, a) = (self.before.get(op).copied().unwrap_or(0), self.after.get(op).copied().unwrap_or(0));
            if a != b {
                writeln!(f, "  {op}: {b} -> {a}")?;
            }
        }
        for (pass, n) in &self.passes {
            writeln!(f, "  pass {pass}: {n}")?;
        }
        Ok(())
    }
}

/// Nodes per op of a graph.
fn op_counts(graph: &Graph) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for n in &graph.nodes {
        let key = if n.domain.is_empty() { n.op_type.clone() } else { format!("{}:{}", n.domain, n.op_type) };
        *m.entry(key).or_insert(0) += 1;
    }
    m
}

/// Most rounds of all passes (each round runs until nothing changes or this many ran).
const MAX_ROUNDS: usize = 8;

/// One pass: looks at a view of the graph and proposes rewrites.
struct Pass {
    name: &'static str,
    level: OptimizationLevel,
    run: fn(&View<'_>, &Fusion<'_>) -> Result<Changes>,
}

/// The passes, in the order they run in each round.
const PASSES: &[Pass] = &[
    Pass { name: "dead_nodes", level: OptimizationLevel::Basic, run: cleanup::dead_nodes },
    Pass { name: "constant_folding", level: OptimizationLevel::Basic, run: fold::fold_constants },
    Pass { name: "identity", level: OptimizationLevel::Basic, run: cleanup::identities },
    Pass { name: "conv_batchnorm", level: OptimizationLevel::Extended, run: conv::conv_batch_norm },
    Pass { name: "fused_conv", level: OptimizationLevel::Extended, run: conv::fused_conv },
    Pass { name: "matmul_add_gemm", level: OptimizationLevel::Extended, run: matmul::matmul_add_gemm },
    Pass { name: "sibling_products", level: OptimizationLevel::Extended, run: matmul::sibling_products },
    Pass { name: "fused_matmul", level: OptimizationLevel::Extended, run: matmul::transpose_matmul },
    Pass { name: "gelu", level: OptimizationLevel::Extended, run: gelu::gelu },
    Pass { name: "fast_gelu", level: OptimizationLevel::Extended, run: gelu::fast_gelu },
    Pass { name: "bias_gelu", level: OptimizationLevel::Extended, run: gelu::bias_gelu },
    Pass { name: "gemm_activation", level: OptimizationLevel::Extended, run: matmul::gemm_activation },
    Pass { name: "layer_norm", level: OptimizationLevel::Extended, run: norm::layer_norm },
    Pass { name: "skip_layer_norm", level: OptimizationLevel::Extended, run: norm::skip_layer_norm },
    Pass { name: "skip_layer_norm_bias", level: OptimizationLevel::Extended, run: norm::skip_layer_norm_bias },
    Pass { name: "gemm_skip_layer_norm", level: OptimizationLevel::Extended, run: norm::gemm_skip_layer_norm },
    Pass { name: "attention", level: OptimizationLevel::Extended, run: attention::attention },
];

/// Runs `passes` in order on one view of `model`'s graph until one proposes changes: its index
/// and changes. The view is made once for all the passes that change nothing (most of them, on
/// most models: a view of resnet50 takes ~0.25 ms to make).
fn next_changes(model: &Model, passes: &[&Pass], fusion: &Fusion<'_>) -> Result<Option<(usize, Changes)>> {
    if passes.is_empty() {
        return Ok(None);
    }
    let view = View::new(&model.graph, &model.opsets)?;
    for (i, pass) in passes.iter().enumerate() {
        let changes = (pass.run)(&view, fusion)?;
        if changes.count > 0 {
            return Ok(Some((i, changes)));
        }
    }
    Ok(None)
}

/// Rewrites `model`'s main graph at `level` for `providers` (in priority order, the CPU
/// fallback included). The model must be checked ([`crate::ir::check_model`]): nodes sorted,
/// implicit inputs filled. Constant folding needs a provider on [`crate::Device::Cpu`]; without
/// one it only replaces values inference already knows.
pub fn optimize(
    model: &mut Model,
    level: OptimizationLevel,
    providers: &[Arc<dyn ExecutionProvider>],
) -> Result<OptimizeReport> {
    let mut report = OptimizeReport { level, before: op_counts(&model.graph), ..Default::default() };
    if level >= OptimizationLevel::Extended {
        let converted = half::half_in_float(model, providers)?;
        if converted > 0 {
            report.passes.insert("half_in_float".to_string(), converted);
        }
    }
    if level > OptimizationLevel::Disable {
        let fusion = Fusion { providers };
        let passes: Vec<&Pass> = PASSES.iter().filter(|p| p.level <= level).collect();
        for _ in 0..MAX_ROUNDS {
            let mut changed = false;
            let mut from = 0;
            while let Some((i, changes)) = next_changes(model, &passes[from..], &fusion)? {
                changed = true;
                let pass = passes[from + i];
                *report.passes.entry(pass.name.to_string()).or_insert(0) += changes.count;
                changes.apply(&mut model.graph);
                for domain in [MS_DOMAIN, ONYX_DOMAIN] {
                    if model.graph.nodes.iter().any(|n| n.domain == domain) {
                        model.opsets.entry(domain.to_string()).or_insert(1);
                    }
                }
                from += i + 1;
            }
            if !changed {
                break;
            }
        }
    }
    if level >= OptimizationLevel::All {
        let converted = nchwc::nchwc(model, providers)?;
        if converted > 0 {
            report.passes.insert("nchwc".to_string(), converted);
        }
    }
    report.after = op_counts(&model.graph);
    Ok(report)
}

/// Checks fusions against the providers.
pub(crate) struct Fusion<'p> {
    providers: &'p [Arc<dyn ExecutionProvider>],
}

impl Fusion<'_> {
    /// True when `fused` (replacing the nodes `pattern` of `view`, whose main node is `anchor`)
    /// goes to the provider that takes `anchor`, and no node of the pattern would have gone to
    /// a provider of higher priority. `extra` holds the constants the rewrite adds.
    pub fn allowed(
        &self,
        view: &View<'_>,
        anchor: usize,
        pattern: &[usize],
        fused: &Node,
        extra: &HashMap<String, Tensor>,
    ) -> bool {
        self.allowed_typed(view, anchor, pattern, fused, extra, &HashMap::new())
    }

    /// [`Fusion::allowed`] for a fused node reading `new` values (of these types) that other
    /// nodes of the rewrite make.
    pub fn allowed_typed(
        &self,
        view: &View<'_>,
        anchor: usize,
        pattern: &[usize],
        fused: &Node,
        extra: &HashMap<String, Tensor>,
        new: &HashMap<String, TensorType>,
    ) -> bool {
        let none = HashMap::new();
        let Some(p) = view.placement_typed(fused, extra, new, self.providers) else {
            return false;
        };
        if view.placement(view.node(anchor), &none, self.providers) != Some(p) {
            return false;
        }
        pattern.iter().all(|&n| view.placement(view.node(n), &none, self.providers).is_none_or(|q| q >= p))
    }

    /// The providers, in priority order.
    pub fn providers(&self) -> &[Arc<dyn ExecutionProvider>] {
        self.providers
    }
}

/// One rewrite: remove the nodes `remove`, put `nodes` (in order) where the last of them was.
pub(crate) struct Rewrite {
    pub remove: Vec<usize>,
    pub nodes: Vec<Node>,
    pub initializers: Vec<(String, Tensor)>,
}

/// Rewrites proposed by one pass over one view, on disjoint sets of nodes.
#[derive(Default)]
pub(crate) struct Changes {
    rewrites: Vec<Rewrite>,
    claimed: HashSet<usize>,
    /// Values to read under another name (`from` → `to`), in every node and graph output.
    renames: Vec<(String, String)>,
    /// Initializers to drop.
    drop_initializers: Vec<String>,
    count: usize,
}

impl Changes {
    /// Adds a rewrite unless it touches a node another rewrite of this pass already took.
    pub fn add(&mut self, r: Rewrite) -> bool {
        if r.remove.is_empty() || r.remove.iter().any(|n| self.claimed.contains(n)) {
            return false;
        }
        self.claimed.extend(r.remove.iter().copied());
        self.rewrites.push(r);
        self.count += 1;
        true
    }

    /// True when node `n` is already part of a rewrite.
    pub fn claimed(&self, n: usize) -> bool {
        self.claimed.contains(&n)
    }

    /// Removes an unread initializer.
    pub fn drop_initializer(&mut self, name: &str) {
        self.drop_initializers.push(name.to_string());
        self.count += 1;
    }

    /// Makes every reader of `from` read `to` instead (applied after the rewrites).
    pub fn rename(&mut self, from: &str, to: &str) {
        self.renames.push((from.to_string(), to.to_string()));
    }

    fn apply(self, graph: &mut Graph) {
        let mut placed: HashMap<usize, Vec<Node>> = HashMap::new();
        let mut removed = HashSet::new();
        for r in self.rewrites {
            if let Some(&last) = r.remove.iter().max() {
                placed.insert(last, r.nodes);
            }
            removed.extend(r.remove);
            graph.initializers.extend(r.initializers);
        }
        let old = std::mem::take(&mut graph.nodes);
        for (i, node) in old.into_iter().enumerate() {
            if let Some(new) = placed.remove(&i) {
                graph.nodes.extend(new);
            } else if !removed.contains(&i) {
                graph.nodes.push(node);
            }
        }
        for name in self.drop_initializers {
            graph.initializers.remove(&name);
        }
        if !self.renames.is_empty() {
            let map: HashMap<String, String> = self.renames.into_iter().collect();
            let resolve = |name: &mut String| {
                let mut hops = 0;
                while let Some(to) = map.get(name.as_str()) {
                    *name = to.clone();
                    hops += 1;
                    if hops > map.len() {
                        break;
                    }
                }
            };
            for node in &mut graph.nodes {
                node.inputs.iter_mut().filter(|n| !n.is_empty()).for_each(resolve);
                node.outputs.iter_mut().filter(|n| !n.is_empty()).for_each(resolve);
            }
        }
    }
}

/// A name for a new value, based on `base`, that no value of `graph` has.
pub(crate) fn fresh_name(graph: &Graph, base: &str, taken: &HashSet<String>) -> String {
    let used = |n: &str| {
        taken.contains(n)
            || graph.initializers.contains_key(n)
            || graph.inputs.iter().any(|i| i.name == n)
            || graph.nodes.iter().any(|x| x.outputs.iter().any(|o| o == n))
    };
    let mut name = base.to_string();
    let mut i = 1;
    while used(&name) {
        name = format!("{base}_{i}");
        i += 1;
    }
    name
}
