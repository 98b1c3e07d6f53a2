//! The `onyx` command's contract: subcommands, output files, JSON keys, exit codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn onyx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onyx")).args(args).output().expect("the onyx binary runs")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn digits() -> String {
    root().join("models/digits/digits.onnx").display().to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onyx-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn info_reports_the_model() {
    let out = onyx(&["info", &digits()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    for needle in ["onyx-scripts", "ai.onnx 17", "image: float[batch,1,8,8]", "Gemm", "cpu"] {
        assert!(s.contains(needle), "missing '{needle}' in:\n{s}");
    }
    let out = onyx(&["info", &digits(), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["inputs"][0]["shape"], serde_json::json!(["batch", 1, 8, 8]));
    assert_eq!(json["op_histogram"]["Gemm"], 2);
    assert_eq!(json["parameters"], 64 * 64 + 64 + 64 * 10 + 10 + 1);
    assert!(json["nodes"].as_array().unwrap().iter().all(|n| n["provider"] == "cpu"));
}

#[test]
fn run_classifies_the_sample_and_writes_outputs() {
    let dir = temp_dir("run");
    let sample = root().join("models/digits/sample_7.npy").display().to_string();
    let out = onyx(&["run", &digits(), "--input", &format!("image={sample}"), "--output-dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("probabilities: float[1, 10]"), "{}", text(&out.stdout));
    let probs = onyx::npy::read(&dir.join("probabilities.npy")).unwrap();
    let p = probs.as_slice::<f32>().unwrap();
    let best = p.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    assert_eq!(best, 7, "{p:?}");
    assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn run_fills_missing_inputs_with_seeded_random_data() {
    let a = onyx(&["run", &digits(), "--free-dim", "batch=3"]);
    let b = onyx(&["run", &digits(), "--free-dim", "batch=3"]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert!(text(&a.stdout).contains("float[3, 10]"), "{}", text(&a.stdout));
    assert_eq!(a.stdout, b.stdout, "random inputs are seeded");
}

#[test]
fn bench_prints_json_on_the_last_line() {
    let out = onyx(&["bench", &digits(), "--warmup", "1", "--runs", "5", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap();
    let json: serde_json::Value = serde_json::from_str(last).unwrap();
    for key in
        ["session_create_ms", "first_run_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "mean_ms", "peak_host_bytes"]
    {
        assert!(json[key].is_number(), "{key} missing in {last}");
    }
    assert!(json["min_ms"].as_f64() <= json["p50_ms"].as_f64());
}

#[test]
fn devices_lists_the_cpu() {
    let out = onyx(&["devices"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("cpu"), "{}", text(&out.stdout));
}

#[test]
fn errors_exit_1_with_a_message_and_usage_errors_exit_2() {
    let dir = temp_dir("errors");
    let bad = dir.join("truncated.onnx");
    let bytes = std::fs::read(digits()).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["run".into(), "/nonexistent/model.onnx".into()], "/nonexistent/model.onnx"),
        (vec!["info".into(), bad.display().to_string()], "cannot load model"),
        (vec!["run".into(), digits(), "--input".into(), "nope=/x.npy".into()], "/x.npy"),
        (vec!["run".into(), digits(), "--provider".into(), "gpu9".into()], "gpu9"),
        (vec!["run".into(), digits(), "--input".into(), "image".into()], "NAME=VALUE"),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = onyx(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle) && err.starts_with("error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
    }
    // A wrong input shape names the input and both shapes.
    let wrong = dir.join("wrong.npy");
    onyx::npy::write(&wrong, &onyx::Tensor::from_vec(vec![1, 64], vec![0.5f32; 64]).unwrap()).unwrap();
    let out = onyx(&["run", &digits(), "--input", &format!("image={}", wrong.display())]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("input 'image'") && err.contains("float[batch,1,8,8]") && err.contains("float[1,64]"),
        "{err}"
    );
    assert_eq!(onyx(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(onyx(&["run"]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}
