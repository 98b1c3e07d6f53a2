//! ONNX's backend node tests (`onnx/backend/test/data/node` of the onnx 1.22.0 wheel, fetched by
//! `scripts/fetch_node_tests.sh`) run through Onyx's own loader and sessions, on every provider
//! named in `ONYX_CONFORMANCE_PROVIDERS` (comma-separated, default `cpu`).
//!
//! Each case ends `pass`, `fail` (wrong values, a panic or a time-out), `error` (load, plan or run
//! error), `unsupported` (no kernel for an op) or `skipped` (random and training ops, see
//! `conformance/cases.rs`). The test fails when a case that `conformance/expected_<provider>.txt`
//! lists as `pass` no longer passes; cases that newly pass are printed.
//!
//! Environment:
//! - `ONYX_NODE_TESTS`: the `node` folder (default: `.cache/onnx-node-tests/onnx-1.22.0/onnx/backend/test/data/node`
//!   in the workspace). When it is missing the test passes with a message, or fails when `CI=true`.
//! - `ONYX_CONFORMANCE_PROVIDERS`: providers to run, e.g. `cpu,wgpu`.
//! - `ONYX_CONFORMANCE_FILTER`: run only the cases whose name contains this text.
//! - `ONYX_CONFORMANCE_BLESS=1`: rewrite the expected-status files from this run.
//! - `ONYX_CONFORMANCE_REPORT=path`: write a markdown report there (relative to the workspace).

#[path = "conformance/cases.rs"]
mod cases;
#[path = "conformance/compare.rs"]
mod compare;
#[path = "conformance/expected.rs"]
mod expected;
#[path = "conformance/report.rs"]
mod report;
#[path = "conformance/runner.rs"]
mod runner;

use std::path::{Path, PathBuf};
use std::time::Instant;

use cases::Status;
use runner::CaseResult;

/// The onnx release whose node tests are expected.
const ONNX_VERSION: &str = "1.22.0";

/// The workspace root (two levels above this crate).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().and_then(Path::parent).expect("crates/onyx lies two levels below the workspace").to_path_buf()
}

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The node-test folder, or `None` (after a message) when it is missing outside CI.
fn node_tests_dir() -> Option<PathBuf> {
    let default = format!(".cache/onnx-node-tests/onnx-{ONNX_VERSION}/onnx/backend/test/data/node");
    let dir = env("ONYX_NODE_TESTS").map(PathBuf::from).unwrap_or_else(|| workspace_root().join(default));
    if dir.is_dir() {
        return Some(dir);
    }
    let message = format!(
        "ONNX node tests not found in {}: run `scripts/fetch_node_tests.sh` (or set ONYX_NODE_TESTS)",
        dir.display()
    );
    assert!(env("CI").as_deref() != Some("true"), "{message}");
    eprintln!("skipping the conformance test: {message}");
    None
}

/// Provider names from `ONYX_CONFORMANCE_PROVIDERS` (default `cpu`), checked to exist.
fn providers() -> Vec<String> {
    let list = env("ONYX_CONFORMANCE_PROVIDERS").unwrap_or_else(|| "cpu".into());
    let names: Vec<String> = list.split(',').map(|p| p.trim().to_ascii_lowercase()).filter(|p| !p.is_empty()).collect();
    for name in &names {
        if let Err(e) = runner::base_provider(name).parse::<onyx::Provider>() {
            panic!("ONYX_CONFORMANCE_PROVIDERS: {e}");
        }
    }
    names
}

/// A path from the environment, relative paths taken from the workspace root.
fn workspace_path(value: &str) -> PathBuf {
    let p = PathBuf::from(value);
    if p.is_absolute() {
        p
    } else {
        workspace_root().join(p)
    }
}

/// One line of counts per status.
fn summary(results: &[CaseResult]) -> String {
    let count = |s| results.iter().filter(|r| r.outcome.status == s).count();
    let parts: Vec<String> = Status::ALL.iter().map(|&s| format!("{} {}", count(s), s.name())).collect();
    format!("{} cases: {}", results.len(), parts.join(", "))
}

/// Prints a titled list when it is not empty.
fn print_list(title: &str, items: &[String]) {
    if !items.is_empty() {
        println!("{title} ({}):\n  {}", items.len(), items.join("\n  "));
    }
}

/// Runs one provider, prints what changed against its expected file, blesses it if asked, and
/// returns its results with its regressions.
fn run_provider(provider: &str, cases: &[cases::Case], filter: Option<&str>) -> (Vec<CaseResult>, Vec<String>) {
    let start = Instant::now();
    let results = runner::run_cases(cases, provider);
    println!("{provider}: {} in {:.1}s", summary(&results), start.elapsed().as_secs_f64());
    let path = expected::path(provider);
    let previous = expected::read(&path);
    let diff = expected::diff(&previous, &results);
    print_list(&format!("{provider}: newly passing (bless to record)"), &diff.newly_passing);
    print_list(&format!("{provider}: other status changes"), &diff.other_changes);
    if !previous.is_empty() {
        print_list(&format!("{provider}: not in {}", path.display()), &diff.not_listed);
    }
    if env("ONYX_CONFORMANCE_BLESS").as_deref() == Some("1") {
        expected::write(&path, provider, &results, &previous, filter.is_some());
        println!("{provider}: wrote {}", path.display());
        return (results, vec![]);
    }
    let regressions = diff.regressions.iter().map(|r| format!("{provider}: {r}")).collect();
    (results, regressions)
}

/// Every node test on every requested provider; fails on regressions against the expected files.
#[test]
fn onnx_node_tests() {
    let Some(root) = node_tests_dir() else { return };
    let filter = env("ONYX_CONFORMANCE_FILTER");
    let cases = cases::discover(&root, filter.as_deref());
    assert!(!cases.is_empty(), "no cases in {} (filter {filter:?})", root.display());
    let mut runs = vec![];
    let mut regressions = vec![];
    for provider in providers() {
        let (results, r) = run_provider(&provider, &cases, filter.as_deref());
        regressions.extend(r);
        if provider != "cpu" && runner::base_provider(&provider) != provider {
            // With the CPU fallback on, a provider must pass every case the CPU EP passes.
            let cpu = expected::diff(&expected::read(&expected::path("cpu")), &results);
            regressions.extend(cpu.regressions.iter().map(|r| format!("{provider} (vs the CPU EP): {r}")));
        }
        runs.push((provider, results));
    }
    if let Some(path) = env("ONYX_CONFORMANCE_REPORT") {
        let path = workspace_path(&path);
        report::write(&path, &runs, ONNX_VERSION, filter.as_deref());
        println!("wrote {}", path.display());
    }
    assert!(
        regressions.is_empty(),
        "{} case(s) expected to pass do not pass:\n  {}",
        regressions.len(),
        regressions.join("\n  ")
    );
}
