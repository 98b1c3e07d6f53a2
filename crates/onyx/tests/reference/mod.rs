//! Running the cases of a reference manifest (`scripts/make_test_models.py`,
//! `scripts/make_llm_op_cases.py`): each case a model, its inputs and the outputs ONNX Runtime
//! (or another reference) computed, compared with numpy's `allclose` rule. Each test file
//! uses the part it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use onyx::{npy, DataType, Provider, SessionBuilder, Tensor};
use serde_json::Value as Json;

/// The folder of generated test models (`$ONYX_TEST_MODELS`, else `target/testmodels`),
/// joined with `sub`; panics with how to make them when its manifest is missing.
pub fn manifest_dir(sub: &str) -> PathBuf {
    let dir = std::env::var_os("ONYX_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels"))
        .join(sub);
    assert!(
        dir.join("manifest.json").exists(),
        "no test models in {}: run `bash scripts/test.sh` (it generates them with ONNX Runtime)",
        dir.display()
    );
    dir
}

/// The manifest's cases.
pub fn cases(dir: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: Json = serde_json::from_str(&text).unwrap();
    manifest.as_array().expect("the manifest is a list").clone()
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DataType::Float => t.as_slice::<f32>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Double => t.as_slice::<f64>().unwrap().to_vec(),
        DataType::Float16 => t.as_slice::<half::f16>().unwrap().iter().map(|x| x.to_f64()).collect(),
        DataType::BFloat16 => t.as_slice::<half::bf16>().unwrap().iter().map(|x| x.to_f64()).collect(),
        DataType::Int64 => t.as_slice::<i64>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Int32 => t.as_slice::<i32>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Bool | DataType::Uint8 => t.view().unwrap().bytes().unwrap().iter().map(|&x| x as f64).collect(),
        other => panic!("no comparison for {other}"),
    }
}

/// Largest `|got - want| / max(|want|, 1e-3 * max|want|)`, or where `got` is not within
/// `atol + rtol * |want|` of `want`.
pub fn compare(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<f64, String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {}{:?}, want {}{:?}", got.dtype(), got.shape(), want.dtype(), want.shape()));
    }
    let (g, w) = (as_f64(got), as_f64(want));
    let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-12);
    let mut worst = 0.0f64;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if (a - b).abs() > atol + rtol * b.abs() || a.is_nan() != b.is_nan() {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
        worst = worst.max((a - b).abs() / b.abs().max(1e-3 * scale));
    }
    Ok(worst)
}

/// Runs one case on `providers` (the CPU EP when empty) and compares every output but those
/// in `skip`; returns a one-line report or what differed.
pub fn run_case(dir: &Path, case: &Json, providers: &[Provider], skip: &[&str]) -> Result<String, String> {
    let model = dir.join(case["model"].as_str().unwrap());
    let mut builder = SessionBuilder::new();
    if !providers.is_empty() {
        builder = builder.with_providers(providers.iter().cloned());
    }
    let session = builder.commit_from_file(&model).map_err(|e| format!("session: {e}"))?;
    let mut inputs = vec![];
    for (name, file) in case["inputs"].as_object().unwrap() {
        inputs.push((name.clone(), npy::read(&dir.join(file.as_str().unwrap())).map_err(|e| e.to_string())?));
    }
    let outputs = session.run(inputs).map_err(|e| format!("run: {e}"))?;
    let (rtol, atol) = (case["rtol"].as_f64().unwrap_or(1e-4), case["atol"].as_f64().unwrap_or(1e-5));
    let mut report = vec![];
    for (name, file) in case["outputs"].as_object().unwrap() {
        if skip.contains(&name.as_str()) {
            continue;
        }
        let want = npy::read(&dir.join(file.as_str().unwrap())).map_err(|e| e.to_string())?;
        let got = outputs.get(name).map_err(|e| e.to_string())?.as_tensor().map_err(|e| e.to_string())?;
        let worst = compare(got, &want, rtol, atol).map_err(|e| format!("output '{name}': {e}"))?;
        report.push(format!("{name}: max rel err {worst:.2e}"));
    }
    Ok(report.join(", "))
}

/// The wgpu EP's default options, or `None` (outside CI) when there is no adapter: the test
/// is then skipped. In CI (`CI=true`) a missing adapter fails it.
#[cfg(feature = "wgpu")]
pub fn wgpu_options() -> Option<onyx::gpu::WgpuOptions> {
    let options = onyx::gpu::WgpuOptions::default();
    match onyx::shared_wgpu(&options) {
        Ok(_) => Some(options),
        Err(e) => {
            assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true and no wgpu adapter: {e}");
            eprintln!("skipping: {e}");
            None
        }
    }
}
