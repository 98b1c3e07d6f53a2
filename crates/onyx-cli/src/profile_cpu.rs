//! `onyx bench --profile` for sessions without a GPU provider: host wall time of every node
//! over a few more runs, summed per op type and per node.

use std::collections::HashMap;

use onyx::{NodeTime, Result, Session, Tensor};

use crate::SessionArgs;

/// Runs timed per node with `--profile` on the CPU.
const PROFILED_RUNS: usize = 10;

/// Nodes listed with `--profile`.
const TOP_NODES: usize = 25;

/// True when the session has no GPU provider, so `--profile` times nodes on the host.
pub fn is_cpu(args: &SessionArgs) -> bool {
    args.providers.iter().all(|p| p.eq_ignore_ascii_case("cpu"))
}

/// With `profile` on a CPU session: profiles a few more runs, prints the tables, and adds them
/// to `report` under "profile". Nothing otherwise.
pub fn maybe_profile(
    profile: bool,
    args: &SessionArgs,
    session: &Session,
    inputs: &[(String, Tensor)],
    p50_ms: f64,
    report: &mut serde_json::Value,
) -> Result<()> {
    if !profile || !is_cpu(args) {
        return Ok(());
    }
    let mut times = Vec::new();
    for _ in 0..PROFILED_RUNS {
        let (_, t) = session.run_profiled(inputs.to_vec())?;
        times.extend(t);
    }
    let summary = CpuProfile::new(&times, PROFILED_RUNS);
    summary.print(p50_ms * 1e3);
    report["profile"] = summary.json();
    Ok(())
}

/// One node's total over the profiled runs.
struct NodeTotal {
    op: String,
    node: String,
    shapes: String,
    calls: usize,
    us: f64,
}

/// Per-node wall times summed per node and per op type.
struct CpuProfile {
    runs: usize,
    nodes: Vec<NodeTotal>,
    by_op: Vec<(String, usize, f64)>,
}

impl CpuProfile {
    fn new(times: &[NodeTime], runs: usize) -> CpuProfile {
        let mut nodes: HashMap<(String, String, String), NodeTotal> = HashMap::new();
        let mut by_op: HashMap<String, (usize, f64)> = HashMap::new();
        for t in times {
            let key = (t.op.clone(), t.node.clone(), t.shapes.clone());
            let n = nodes.entry(key).or_insert_with(|| NodeTotal {
                op: t.op.clone(),
                node: t.node.clone(),
                shapes: t.shapes.clone(),
                calls: 0,
                us: 0.0,
            });
            n.calls += 1;
            n.us += t.us;
            let o = by_op.entry(format!("{} ({})", t.op, t.provider)).or_default();
            o.0 += 1;
            o.1 += t.us;
        }
        let mut nodes: Vec<NodeTotal> = nodes.into_values().collect();
        nodes.sort_by(|a, b| b.us.total_cmp(&a.us));
        let mut by_op: Vec<(String, usize, f64)> = by_op.into_iter().map(|(op, (n, us))| (op, n, us)).collect();
        by_op.sort_by(|a, b| b.2.total_cmp(&a.2));
        CpuProfile { runs: runs.max(1), nodes, by_op }
    }

    /// Kernel microseconds per run, all nodes.
    fn total_us(&self) -> f64 {
        self.nodes.iter().map(|n| n.us).sum::<f64>() / self.runs as f64
    }

    fn print(&self, p50_us: f64) {
        let runs = self.runs as f64;
        let total = self.total_us();
        println!();
        println!(
            "profile ({} runs): kernels {total:.0} us per run, {:.0} us outside them (p50 of the timed runs {p50_us:.0} us)",
            self.runs,
            p50_us - total
        );
        println!("{:<26} {:>9} {:>7} {:>7}", "op (provider)", "us/run", "share", "calls");
        for (op, n, us) in &self.by_op {
            let us = us / runs;
            println!("{op:<26} {us:>9.1} {:>6.1}% {:>7.0}", 100.0 * us / total.max(1e-9), *n as f64 / runs);
        }
        println!();
        println!("{:>8} {:>6}  {:<16} {:<28} shapes", "us/run", "share", "op", "node");
        for n in self.nodes.iter().take(TOP_NODES) {
            let us = n.us / runs;
            println!(
                "{us:>8.1} {:>5.1}%  {:<16} {:<28} {}",
                100.0 * us / total.max(1e-9),
                n.op,
                clip(&n.node, 28),
                n.shapes
            );
        }
    }

    fn json(&self) -> serde_json::Value {
        let runs = self.runs as f64;
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "op": n.op, "node": n.node, "shapes": n.shapes,
                    "calls_per_run": n.calls as f64 / runs, "us_per_run": n.us / runs,
                })
            })
            .collect();
        let ops: Vec<serde_json::Value> = self
            .by_op
            .iter()
            .map(|(op, n, us)| serde_json::json!({"op": op, "calls_per_run": *n as f64 / runs, "us_per_run": us / runs}))
            .collect();
        serde_json::json!({ "runs": self.runs, "kernel_us_per_run": self.total_us(), "ops": ops, "nodes": nodes })
    }
}

/// `s` cut to at most `n` characters (the end kept, where node names differ).
fn clip(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        s.to_string()
    } else {
        format!("..{}", s.chars().skip(count + 2 - n).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(op: &str, node: &str, us: f64) -> NodeTime {
        NodeTime { node: node.into(), op: op.into(), provider: "cpu".into(), shapes: "[1]".into(), us }
    }

    #[test]
    fn sums_per_node_and_op_sorted_by_time() {
        let times = [time("Conv", "a", 10.0), time("Relu", "b", 1.0), time("Conv", "c", 30.0), time("Conv", "a", 14.0)];
        let p = CpuProfile::new(&times, 2);
        assert_eq!(p.total_us(), 27.5);
        assert_eq!(p.by_op[0], ("Conv (cpu)".to_string(), 3, 54.0));
        assert_eq!(p.nodes[0].node, "c");
        assert_eq!((p.nodes[1].node.as_str(), p.nodes[1].calls, p.nodes[1].us), ("a", 2, 24.0));
        let json = p.json();
        assert_eq!(json["nodes"][2]["us_per_run"], 0.5);
    }

    #[test]
    fn clip_keeps_the_end() {
        assert_eq!(clip("abcdef", 6), "abcdef");
        assert_eq!(clip("abcdefgh", 6), "..efgh");
    }
}
