//! Running cases: each in its own thread (so a panic or a hang stays in that case), several at
//! once, on one named execution provider.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, Once};
use std::time::Duration;

use onyx::ir::Model;
use onyx::types::ValueType;
use onyx::{Error, Provider, Session, SessionBuilder, Value};

use crate::cases::{self, Case, Outcome, Status};
use crate::compare::compare_values;

/// A case still running after this long counts as a failure (its thread is abandoned).
const CASE_TIMEOUT: Duration = Duration::from_secs(20);

/// Name of the threads that run one case (the panic hook stays quiet in them).
const CASE_THREAD: &str = "conformance-case";

/// Stack of a case thread: deep graphs and recursive kernels get room.
const CASE_STACK: usize = 16 << 20;

/// The result of one case on one provider.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Op types of the model's nodes other than Constant, in node order, without repeats
    /// (empty when the model could not be read).
    pub ops: Vec<String>,
    /// How it ended.
    pub outcome: Outcome,
}

thread_local! {
    /// The message of the last panic on this thread, set by the quiet panic hook.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `cases` on `provider` with one worker per core; results sorted by case name.
pub fn run_cases(cases: &[Case], provider: &str) -> Vec<CaseResult> {
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(cases.len()));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = run_guarded(case, provider);
                    results.lock().expect("a worker panicked holding the results").push(result);
                }
            });
        }
    });
    let mut results = results.into_inner().expect("a worker panicked holding the results");
    results.sort_by(|a, b| a.name.cmp(&b.name));
    results
}

/// Panics in case threads are recorded for the report instead of printed; others print as usual.
fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(CASE_THREAD) {
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()));
            } else {
                default(info);
            }
        }));
    });
}

/// Runs one case in its own thread, catching panics and giving up after [`CASE_TIMEOUT`].
fn run_guarded(case: &Case, provider: &str) -> CaseResult {
    let result = |ops, outcome| CaseResult { name: case.name.clone(), ops, outcome };
    if let Some(reason) = cases::skip_reason(&case.name) {
        return result(skipped_case_ops(case), Outcome::new(Status::Skipped, reason));
    }
    install_quiet_panic_hook();
    let (tx, rx) = mpsc::channel();
    let (thread_case, thread_provider) = (case.clone(), provider.to_string());
    let spawned = std::thread::Builder::new().name(CASE_THREAD.into()).stack_size(CASE_STACK).spawn(move || {
        let mut ops = vec![];
        let outcome = catch_unwind(AssertUnwindSafe(|| run_case(&thread_case, &thread_provider, &mut ops)))
            .unwrap_or_else(|_| Outcome::new(Status::Fail, panic_message()));
        let _ = tx.send((ops, outcome));
    });
    if let Err(e) = spawned {
        return result(vec![], Outcome::new(Status::Error, format!("cannot start a case thread: {e}")));
    }
    match rx.recv_timeout(CASE_TIMEOUT) {
        Ok((ops, outcome)) => result(ops, outcome),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            result(vec![], Outcome::new(Status::Fail, format!("timed out after {}s", CASE_TIMEOUT.as_secs())))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            result(vec![], Outcome::new(Status::Fail, "the case thread ended without a result"))
        }
    }
}

/// The message the quiet panic hook recorded on this thread.
fn panic_message() -> String {
    let message = LAST_PANIC.with(|p| p.borrow_mut().take());
    format!("panic: {}", message.unwrap_or_else(|| "(no message)".into()))
}

/// Loads, plans and runs one case on `provider` for every data set, filling `ops` on the way.
fn run_case(case: &Case, provider: &str, ops: &mut Vec<String>) -> Outcome {
    let builder = session_builder(provider);
    let model = match onyx::load_model(&case.dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return error_outcome("load", &e),
    };
    *ops = op_types(&model);
    let session = match builder.commit_from_model(model) {
        Ok(s) => s,
        Err(e) => return error_outcome("session", &e),
    };
    for set in data_sets(&case.dir) {
        let outcome = run_data_set(&session, &set, &case.name);
        if outcome.status != Status::Pass {
            return outcome;
        }
    }
    Outcome::pass()
}

/// The provider a run names: `wgpu` for both `wgpu` and `wgpu+cpu`.
pub fn base_provider(provider: &str) -> &str {
    provider.strip_suffix("+cpu").unwrap_or(provider)
}

/// A session on `provider` only. The CPU fallback is off for other providers so that a node a
/// GPU provider cannot run shows up as unsupported instead of passing on the CPU, unless the
/// name ends in `+cpu` (e.g. `wgpu+cpu`: the GPU provider with the CPU fallback, as users run it).
fn session_builder(provider: &str) -> SessionBuilder {
    let base = base_provider(provider);
    let parsed: Provider = base.parse().unwrap_or_else(|e| panic!("provider '{provider}': {e}"));
    let fallback = base == "cpu" || base != provider;
    SessionBuilder::new().with_providers([parsed]).with_cpu_fallback(fallback).with_intra_threads(1)
}

/// The op types of a case that is not run (for the report), empty when its model cannot be read.
fn skipped_case_ops(case: &Case) -> Vec<String> {
    let model = catch_unwind(|| onyx::load_model(&case.dir.join("model.onnx")));
    model.ok().and_then(|m| m.ok()).map(|m| op_types(&m)).unwrap_or_default()
}

/// Distinct op types of the main graph's nodes, Constant left out unless it is the only one, in
/// node order.
fn op_types(model: &Model) -> Vec<String> {
    let mut ops: Vec<String> = vec![];
    for node in &model.graph.nodes {
        if node.op_type != "Constant" && !ops.contains(&node.op_type) {
            ops.push(node.op_type.clone());
        }
    }
    if ops.is_empty() && !model.graph.nodes.is_empty() {
        ops.push("Constant".into());
    }
    ops
}

/// The `test_data_set_*` folders of a case, sorted.
fn data_sets(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut sets: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_")))
        .collect();
    sets.sort();
    sets
}

/// `prefix_0.pb`, `prefix_1.pb`, ... in `dir`, as many as exist.
fn numbered_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    (0..).map(|i| dir.join(format!("{prefix}_{i}.pb"))).take_while(|p| p.is_file()).collect()
}

/// Runs one data set and compares every output.
fn run_data_set(session: &Session, set: &Path, case: &str) -> Outcome {
    let set_name = set.file_name().unwrap().to_string_lossy().into_owned();
    let inputs = match read_inputs(session, set) {
        Ok(i) => i,
        Err(e) => return Outcome::new(Status::Error, format!("{set_name}: {e}")),
    };
    let outputs = match session.run(inputs) {
        Ok(o) => o,
        Err(e) => return error_outcome(&format!("run ({set_name})"), &e),
    };
    let files = numbered_files(set, "output");
    if outputs.len() < files.len() {
        return Outcome::new(Status::Fail, format!("{set_name}: {} outputs, want {}", outputs.len(), files.len()));
    }
    for (i, file) in files.iter().enumerate() {
        let info = &session.outputs()[i];
        let want = match read_value(file, &info.ty) {
            Ok(v) => v,
            Err(e) => return Outcome::new(Status::Error, format!("{set_name}: {e}")),
        };
        if let Err(e) = compare_values(&outputs[i], &want, cases::tolerance(case)) {
            return Outcome::new(Status::Fail, format!("{set_name}: output '{}': {e}", info.name));
        }
    }
    Outcome::pass()
}

/// The data set's `input_<i>.pb` files, decoded as the session's i-th input.
fn read_inputs(session: &Session, set: &Path) -> Result<Vec<(String, Value)>, String> {
    let files = numbered_files(set, "input");
    if files.len() > session.inputs().len() {
        return Err(format!("{} input files but the model has {} inputs", files.len(), session.inputs().len()));
    }
    files.iter().zip(session.inputs()).map(|(f, info)| Ok((info.name.clone(), read_value(f, &info.ty)?))).collect()
}

/// Decodes one `.pb` file as a value of type `ty`.
fn read_value(file: &Path, ty: &ValueType) -> Result<Value, String> {
    let name = file.file_name().unwrap().to_string_lossy();
    let bytes = std::fs::read(file).map_err(|e| format!("{name}: {e}"))?;
    onyx_onnx::value_from_pb_bytes(&bytes, ty).map_err(|e| format!("{name}: {e}"))
}

/// `Unsupported` for errors that mean a missing kernel or op; `Error` for any other.
fn error_outcome(stage: &str, e: &Error) -> Outcome {
    let status = match e {
        Error::Unsupported(_) | Error::UnknownOp { .. } => Status::Unsupported,
        _ => Status::Error,
    };
    Outcome::new(status, format!("{stage}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_case_is_a_failure_with_its_message() {
        let case = Case { name: "test_panics".into(), dir: PathBuf::from("/nonexistent") };
        let r = run_guarded(&case, "no-such-provider");
        assert_eq!(r.outcome.status, Status::Fail);
        assert!(r.outcome.reason.starts_with("panic: "), "{}", r.outcome.reason);
        assert!(r.outcome.reason.contains("no-such-provider"), "{}", r.outcome.reason);
    }
}
