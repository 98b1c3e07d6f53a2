//! `onyx bench --profile` for sessions without a GPU provider: host wall time of every node
//! over as many more runs as were timed, summed per op type and per node, with each node's
//! best run beside its mean (on a noisy machine the best is what a kernel change moves).

use std::collections::HashMap;

use onyx::{NodeTime, Result, Session, Tensor};

use crate::SessionArgs;

/// Nodes listed with `--profile`.
const TOP_NODES: usize = 25;

/// True when the session has no GPU provider, so `--profile` times nodes on the host.
pub fn is_cpu(args: &SessionArgs) -> bool {
    args.providers.iter().all(|p| p.eq_ignore_ascii_case("cpu"))
}

/// With `profile` on a CPU session: profiles `runs` more runs, prints the tables, and adds
/// them to `report` under "profile". Nothing otherwise.
pub fn maybe_profile(
    profile: bool,
    runs: usize,
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
    for _ in 0..runs.max(1) {
        times.push(session.run_profiled(inputs.to_vec())?.1);
    }
    let summary = CpuProfile::new(&times);
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
    /// The node's time in its fastest run.
    best_us: f64,
    /// Its line in the table per op type.
    op_provider: String,
}

/// One op type's total over the profiled runs.
#[derive(Default, Debug, PartialEq)]
struct OpTotal {
    calls: usize,
    us: f64,
    /// Its nodes' best runs, summed.
    best_us: f64,
}

/// Per-node wall times summed per node and per op type.
struct CpuProfile {
    runs: usize,
    nodes: Vec<NodeTotal>,
    by_op: Vec<(String, OpTotal)>,
}

impl CpuProfile {
    /// The profile of `runs`, each run's node times.
    fn new(runs: &[Vec<NodeTime>]) -> CpuProfile {
        let mut nodes: HashMap<(String, String, String), NodeTotal> = HashMap::new();
        let mut by_op: HashMap<String, OpTotal> = HashMap::new();
        for run in runs {
            let mut in_run: HashMap<(String, String, String), f64> = HashMap::new();
            for t in run {
                let key = (t.op.clone(), t.node.clone(), t.shapes.clone());
                *in_run.entry(key.clone()).or_default() += t.us;
                let n = nodes.entry(key).or_insert_with(|| NodeTotal {
                    op: t.op.clone(),
                    node: t.node.clone(),
                    shapes: t.shapes.clone(),
                    calls: 0,
                    us: 0.0,
                    best_us: f64::INFINITY,
                    op_provider: format!("{} ({})", t.op, t.provider),
                });
                n.calls += 1;
                n.us += t.us;
                let o = by_op.entry(n.op_provider.clone()).or_default();
                o.calls += 1;
                o.us += t.us;
            }
            for (key, us) in in_run {
                if let Some(n) = nodes.get_mut(&key) {
                    n.best_us = n.best_us.min(us);
                }
            }
        }
        let mut nodes: Vec<NodeTotal> = nodes.into_values().collect();
        nodes.sort_by(|a, b| b.us.total_cmp(&a.us));
        for n in &nodes {
            by_op.entry(n.op_provider.clone()).or_default().best_us += n.best_us;
        }
        let mut by_op: Vec<(String, OpTotal)> = by_op.into_iter().collect();
        by_op.sort_by(|a, b| b.1.us.total_cmp(&a.1.us));
        CpuProfile { runs: runs.len().max(1), nodes, by_op }
    }

    /// Kernel microseconds per run, all nodes.
    fn total_us(&self) -> f64 {
        self.nodes.iter().map(|n| n.us).sum::<f64>() / self.runs as f64
    }

    /// Every node's best run, summed.
    fn best_us(&self) -> f64 {
        self.nodes.iter().map(|n| n.best_us).sum()
    }

    fn print(&self, p50_us: f64) {
        let runs = self.runs as f64;
        let total = self.total_us();
        println!();
        println!(
            "profile ({} runs): kernels {total:.0} us per run, {:.0} us outside them (p50 of the timed runs {p50_us:.0} us); \
             each node's best run, summed: {:.0} us",
            self.runs,
            p50_us - total,
            self.best_us()
        );
        println!("{:<26} {:>9} {:>9} {:>7} {:>7}", "op (provider)", "us/run", "best us", "share", "calls");
        for (op, o) in &self.by_op {
            let us = o.us / runs;
            println!(
                "{op:<26} {us:>9.1} {:>9.1} {:>6.1}% {:>7.0}",
                o.best_us,
                100.0 * us / total.max(1e-9),
                o.calls as f64 / runs
            );
        }
        println!();
        println!("{:>8} {:>8} {:>6}  {:<16} {:<28} shapes", "us/run", "best us", "share", "op", "node");
        for n in self.nodes.iter().take(TOP_NODES) {
            let us = n.us / runs;
            println!(
                "{us:>8.1} {:>8.1} {:>5.1}%  {:<16} {:<28} {}",
                n.best_us,
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
                    "calls_per_run": n.calls as f64 / runs, "us_per_run": n.us / runs, "best_us": n.best_us,
                })
            })
            .collect();
        let ops: Vec<serde_json::Value> = self
            .by_op
            .iter()
            .map(|(op, o)| {
                serde_json::json!({"op": op, "calls_per_run": o.calls as f64 / runs, "us_per_run": o.us / runs, "best_us": o.best_us})
            })
            .collect();
        serde_json::json!({
            "runs": self.runs, "kernel_us_per_run": self.total_us(), "best_kernel_us": self.best_us(), "ops": ops, "nodes": nodes,
        })
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
        NodeTime {
            node: node.into(),
            op: op.into(),
            provider: "cpu".into(),
            shapes: "[1]".into(),
            io_types: Default::default(),
            us,
        }
    }

    #[test]
    fn sums_per_node_and_op_sorted_by_time() {
        let runs = [
            vec![time("Conv", "a", 10.0), time("Relu", "b", 1.0), time("Conv", "c", 30.0)],
            vec![time("Conv", "a", 14.0), time("Conv", "c", 20.0), time("Conv", "a", 1.0)],
        ];
        let p = CpuProfile::new(&runs);
        assert_eq!(p.total_us(), 38.0);
        assert_eq!(p.by_op[0], ("Conv (cpu)".to_string(), OpTotal { calls: 5, us: 75.0, best_us: 30.0 }));
        assert_eq!(p.nodes[0].node, "c");
        // Node a's best run is the first (10 us): the second called it twice, 15 us in all.
        assert_eq!(
            (p.nodes[1].node.as_str(), p.nodes[1].calls, p.nodes[1].us, p.nodes[1].best_us),
            ("a", 3, 25.0, 10.0)
        );
        assert_eq!(p.best_us(), 31.0);
        let json = p.json();
        assert_eq!(json["nodes"][2]["us_per_run"], 0.5);
        assert_eq!(json["nodes"][0]["best_us"], 20.0);
    }

    #[test]
    fn clip_keeps_the_end() {
        assert_eq!(clip("abcdef", 6), "abcdef");
        assert_eq!(clip("abcdefgh", 6), "..efgh");
    }
}
