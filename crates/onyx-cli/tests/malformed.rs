//! `onyx run` on every file of the malformed corpus (scripts/make_malformed_models.py): exit
//! code 1 and an error on stderr that says what is wrong, never a panic or a hang.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

const TIMEOUT: Duration = Duration::from_secs(30);

fn corpus() -> PathBuf {
    let base = std::env::var_os("ONYX_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels"));
    let dir = base.join("malformed");
    assert!(
        dir.join("malformed.json").exists(),
        "no malformed corpus in {}: run `bash scripts/test.sh`",
        dir.display()
    );
    dir
}

/// Runs `onyx run FILE` (random inputs; `info` reports a model whose session fails and exits 0,
/// by design); `None` when it does not exit within [`TIMEOUT`] (it is then killed).
fn run(file: &Path) -> Option<(Option<i32>, String)> {
    let out_dir = std::env::temp_dir().join(format!("onyx-malformed-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_onyx"))
        .arg("run")
        .arg(file)
        .arg("--output-dir")
        .arg(&out_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the onyx binary runs");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            return Some((status.code(), stderr));
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_cli_rejects_every_malformed_model_with_exit_code_1() {
    let dir = corpus();
    let cases: Json = serde_json::from_str(&std::fs::read_to_string(dir.join("malformed.json")).unwrap()).unwrap();
    let mut failures = vec![];
    for case in cases.as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let expect = case["expect"].as_str().unwrap().to_lowercase();
        match run(&dir.join(file)) {
            None => failures.push(format!("{file}: no exit within {TIMEOUT:?}")),
            Some((code, stderr)) => {
                let lower = stderr.to_lowercase();
                if code != Some(1) {
                    failures.push(format!("{file}: exit code {code:?}, expected 1; stderr: {stderr}"));
                } else if lower.contains("internal error") || lower.contains("panicked") {
                    failures.push(format!("{file}: panicked: {stderr}"));
                } else if !lower.starts_with("error: ") || !lower.contains(&expect) {
                    failures.push(format!("{file}: stderr '{}' lacks 'error: ... {expect}'", stderr.trim()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
