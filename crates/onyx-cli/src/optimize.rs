//! `onyx optimize IN OUT`: the model as a session optimizes it, saved as ONNX.
//!
//! The session is built for the given level and providers (fusions depend on what the providers
//! support), its optimized model is written to OUT, and a table compares node counts per op
//! (subgraphs included) before and after, followed by the optimizer's time and passes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::Arc;

use clap::Args;
use onyx::ir::Graph;
use onyx::{CpuProvider, Error, ExecutionProvider, OptimizationLevel, Provider, Result};

use crate::{parse_pairs, SessionArgs};

/// Arguments of `onyx optimize`.
#[derive(Args)]
pub struct OptimizeArgs {
    /// The .onnx file to optimize.
    input: PathBuf,
    /// Where to write the optimized model (large models get their weights in OUT.data beside it).
    output: PathBuf,
    /// Graph optimization level: disable, basic, extended or all.
    #[arg(long, default_value = "all")]
    level: String,
    /// Execution provider to optimize for, in priority order (repeatable): cpu, wgpu.
    #[arg(long = "provider", value_name = "P", default_value = "cpu")]
    providers: Vec<String>,
    /// Provider option KEY=VALUE for the GPU provider (as for `onyx run`); repeatable.
    #[arg(long = "provider-option", value_name = "KEY=VALUE")]
    provider_options: Vec<String>,
}

impl OptimizeArgs {
    /// Session options for this command's level and providers.
    fn session_args(&self) -> SessionArgs {
        SessionArgs {
            providers: self.providers.clone(),
            provider_options: self.provider_options.clone(),
            free_dims: vec![],
            disable_cpu_fallback: false,
            optimization: self.level.clone(),
            threads: 0,
        }
    }

    /// The provider instances a session with these options uses, in priority order (the CPU
    /// fallback last unless listed). wgpu instances are shared, so these are the session's.
    fn provider_instances(&self) -> Result<Vec<Arc<dyn ExecutionProvider>>> {
        let mut providers = self.providers.iter().map(|p| p.parse::<Provider>()).collect::<Result<Vec<_>>>()?;
        for (key, value) in parse_pairs(&self.provider_options, "--provider-option")? {
            let gpu = providers.iter_mut().find(|p| !matches!(p, Provider::Cpu));
            let gpu =
                gpu.ok_or_else(|| Error::InvalidArgument(format!("--provider-option {key}: no GPU provider given")))?;
            gpu.set_option(&key, &value)?;
        }
        let mut list = providers.iter().map(Provider::instantiate).collect::<Result<Vec<_>>>()?;
        if !list.iter().any(|p| p.name() == "cpu") {
            list.push(Arc::new(CpuProvider::new()));
        }
        Ok(list)
    }
}

/// Loads IN, optimizes it through a session, writes the session's model to OUT and prints what
/// changed. The optimizer's time is measured by running it once more, alone, on a copy of the
/// checked model for the same providers (session creation also checks, infers and plans).
pub fn optimize(args: &OptimizeArgs) -> Result<()> {
    let level: OptimizationLevel = args.level.parse()?;
    let model = onyx::load_model(&args.input)?;
    let before = op_counts(&model.graph);
    let (session, created) = timed(|| args.session_args().builder()?.commit_from_model(model.clone()))?;
    let after = op_counts(&session.model().graph);
    let mut copy = model;
    onyx::ir::check_model(&mut copy)?;
    let providers = args.provider_instances()?;
    let (report, optimized) = timed(|| onyx::optimizer::optimize(&mut copy, level, &providers))?;
    let (_, save_time) = timed(|| onyx::save_model(session.model(), &args.output))?;
    print!("{}", table(&before, &after));
    let passes: Vec<String> = report.passes.iter().map(|(pass, n)| format!("{pass} x{n}")).collect();
    let passes = if passes.is_empty() { "none".to_string() } else { passes.join(", ") };
    println!("optimization at level {}: {} (passes: {passes})", args.level, ms(optimized));
    println!("session creation: {} (check, optimization, inference, partitioning, planning)", ms(created));
    if op_counts(&copy.graph) != after {
        println!("note: the session's optimizer gave another graph than running it alone; OUT is the session's");
    }
    println!("wrote {} ({}) in {}", args.output.display(), file_sizes(&args.output)?, ms(save_time));
    Ok(())
}

/// Runs `f` and measures it.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Duration)> {
    let start = Instant::now();
    let value = f()?;
    Ok((value, start.elapsed()))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Nodes per op (`domain.Op` outside the default domain), subgraphs included.
pub fn op_counts(graph: &Graph) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    add_counts(graph, &mut counts);
    counts
}

fn add_counts(graph: &Graph, counts: &mut BTreeMap<String, usize>) {
    for node in &graph.nodes {
        let op =
            if node.domain.is_empty() { node.op_type.clone() } else { format!("{}.{}", node.domain, node.op_type) };
        *counts.entry(op).or_default() += 1;
        for sub in node.subgraphs() {
            add_counts(sub, counts);
        }
    }
}

/// The before/after table, ops sorted by their larger count (then by name), and a total row.
pub fn table(before: &BTreeMap<String, usize>, after: &BTreeMap<String, usize>) -> String {
    let get = |m: &BTreeMap<String, usize>, op: &str| m.get(op).copied().unwrap_or(0);
    let mut ops: Vec<&String> = before.keys().chain(after.keys().filter(|op| !before.contains_key(*op))).collect();
    ops.sort_by_key(|op| (std::cmp::Reverse(get(before, op).max(get(after, op))), op.to_string()));
    let width = ops.iter().map(|op| op.len()).max().unwrap_or(0).max("total".len());
    let mut out = format!("{:<width$}  {:>7}  {:>7}  {:>7}\n", "op", "before", "after", "change");
    let mut row = |name: &str, b: usize, a: usize| {
        let change = a as i64 - b as i64;
        let change = if change == 0 { String::new() } else { format!("{change:+}") };
        out += &format!("{name:<width$}  {b:>7}  {a:>7}  {change:>7}\n");
    };
    for op in &ops {
        row(op, get(before, op), get(after, op));
    }
    row("total", before.values().sum(), after.values().sum());
    out
}

/// The size of the saved model, and of its external data file when it has one.
fn file_sizes(path: &Path) -> Result<String> {
    let size = |p: &Path| {
        std::fs::metadata(p).map(|m| m.len()).map_err(|source| Error::Io { path: p.display().to_string(), source })
    };
    let mut text = format!("{} bytes", size(path)?);
    let data = PathBuf::from(format!("{}.data", path.display()));
    if data.exists() {
        text += &format!(", external data {} bytes in {}", size(&data)?, data.display());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onyx::ir::{AttrValue, Attribute, Node};

    fn node(op: &str, domain: &str) -> Node {
        Node { op_type: op.into(), domain: domain.into(), ..Default::default() }
    }

    #[test]
    fn counts_include_subgraphs_and_domains() {
        let sub = Graph { nodes: vec![node("Relu", ""), node("Add", "")], ..Default::default() };
        let mut iff = node("If", "");
        iff.attributes.push(Attribute { name: "then_branch".into(), value: AttrValue::Graph(Box::new(sub)) });
        let g = Graph { nodes: vec![iff, node("Relu", ""), node("FusedConv", "com.microsoft")], ..Default::default() };
        let counts = op_counts(&g);
        let want: BTreeMap<String, usize> = [("If", 1), ("Relu", 2), ("Add", 1), ("com.microsoft.FusedConv", 1)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        assert_eq!(counts, want);
    }

    #[test]
    fn table_sorts_by_count_and_totals() {
        let before: BTreeMap<String, usize> =
            [("Conv", 3), ("Relu", 3), ("Add", 1), ("Identity", 5)].map(|(k, v)| (k.to_string(), v)).into();
        let after: BTreeMap<String, usize> = [("Conv", 3), ("FusedConv", 4)].map(|(k, v)| (k.to_string(), v)).into();
        let t = table(&before, &after);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["op", "before", "after", "change"]);
        assert_eq!(lines[1], ["Identity", "5", "0", "-5"]);
        assert_eq!(lines[2], ["FusedConv", "0", "4", "+4"]);
        assert_eq!(lines[3], ["Conv", "3", "3"]);
        assert_eq!(lines[4], ["Relu", "3", "0", "-3"]);
        assert_eq!(lines[5], ["Add", "1", "0", "-1"]);
        assert_eq!(lines[6], ["total", "12", "7", "-5"]);
    }
}
