//! The checked-in expected status of every case (`expected_<provider>.txt`: one `name status`
//! line per case), what changed against it, and rewriting it (`ONYX_CONFORMANCE_BLESS=1`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cases::Status;
use crate::runner::CaseResult;

/// Expected status by case name.
pub type Expected = BTreeMap<String, Status>;

/// What differs between the expected statuses and a run.
#[derive(Debug, Default)]
pub struct Diff {
    /// Cases expected to pass that do not pass now: `name: expected -> now (reason)`.
    pub regressions: Vec<String>,
    /// Cases that pass now but were not expected to.
    pub newly_passing: Vec<String>,
    /// Other status changes (e.g. unsupported -> fail), for information.
    pub other_changes: Vec<String>,
    /// Cases that ran but are not in the file.
    pub not_listed: Vec<String>,
}

/// `crates/onyx/tests/conformance/expected_<provider>.txt`.
pub fn path(provider: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/conformance/expected_{provider}.txt"))
}

/// Reads an expected-status file; a missing file is an empty map.
pub fn read(path: &Path) -> Expected {
    let Ok(text) = std::fs::read_to_string(path) else { return Expected::new() };
    let mut expected = Expected::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parsed = line.split_once(' ').and_then(|(name, word)| Some((name, Status::parse(word.trim())?)));
        let (name, status) =
            parsed.unwrap_or_else(|| panic!("{}:{}: expected `name status`, found `{line}`", path.display(), n + 1));
        expected.insert(name.to_string(), status);
    }
    expected
}

/// Compares a run with the expected statuses (cases absent from `results` are not looked at).
pub fn diff(expected: &Expected, results: &[CaseResult]) -> Diff {
    let mut d = Diff::default();
    for r in results {
        let now = r.outcome.status;
        match expected.get(&r.name) {
            None => d.not_listed.push(format!("{}: {}", r.name, now.name())),
            Some(&was) if was == now => {}
            Some(&Status::Pass) => {
                d.regressions.push(format!("{}: pass -> {} ({})", r.name, now.name(), r.outcome.reason))
            }
            Some(_) if now == Status::Pass => d.newly_passing.push(r.name.clone()),
            Some(&was) => d.other_changes.push(format!("{}: {} -> {}", r.name, was.name(), now.name())),
        }
    }
    d
}

/// Rewrites the file from `results`. With `partial` (a filtered run), the statuses of cases that
/// did not run are kept from `previous`.
pub fn write(path: &Path, provider: &str, results: &[CaseResult], previous: &Expected, partial: bool) {
    let mut statuses = if partial { previous.clone() } else { Expected::new() };
    statuses.extend(results.iter().map(|r| (r.name.clone(), r.outcome.status)));
    let mut text = format!(
        "# Expected status of each ONNX node test on the {provider} provider (see conformance.rs).\n\
         # A case listed `pass` that does not pass fails the test. Rewrite with ONYX_CONFORMANCE_BLESS=1.\n"
    );
    for (name, status) in &statuses {
        text.push_str(&format!("{name} {}\n", status.name()));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
