//! End-to-end: real graph structures (a resnet18-shaped CNN, a BERT-style encoder, a mix of ops,
//! If, external data, model-local functions) against ONNX Runtime's outputs, computed by
//! `scripts/make_test_models.py` (run by `scripts/test.sh`).

use std::path::{Path, PathBuf};

use onyx::{npy, DataType, SessionBuilder, Tensor};
use serde_json::Value as Json;

fn models_dir() -> PathBuf {
    let dir = std::env::var_os("ONYX_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels"));
    assert!(
        dir.join("manifest.json").exists(),
        "no test models in {}: run `bash scripts/test.sh` (it generates them with ONNX Runtime)",
        dir.display()
    );
    dir
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DataType::Float => t.as_slice::<f32>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Double => t.as_slice::<f64>().unwrap().to_vec(),
        DataType::Int64 => t.as_slice::<i64>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Int32 => t.as_slice::<i32>().unwrap().iter().map(|&x| x as f64).collect(),
        DataType::Bool | DataType::Uint8 => t.view().unwrap().bytes().unwrap().iter().map(|&x| x as f64).collect(),
        other => panic!("no comparison for {other}"),
    }
}

/// Largest |got - want| / max(|want|, 1e-3 * max|want|) and whether all are within rtol/atol.
fn compare(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<f64, String> {
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

fn run_case(dir: &Path, case: &Json) -> Result<String, String> {
    let model = dir.join(case["model"].as_str().unwrap());
    let session = SessionBuilder::new().commit_from_file(&model).map_err(|e| format!("session: {e}"))?;
    let mut inputs = vec![];
    for (name, file) in case["inputs"].as_object().unwrap() {
        inputs.push((name.clone(), npy::read(&dir.join(file.as_str().unwrap())).map_err(|e| e.to_string())?));
    }
    let outputs = session.run(inputs).map_err(|e| format!("run: {e}"))?;
    let (rtol, atol) = (case["rtol"].as_f64().unwrap_or(1e-4), case["atol"].as_f64().unwrap_or(1e-5));
    let mut report = vec![];
    for (name, file) in case["outputs"].as_object().unwrap() {
        let want = npy::read(&dir.join(file.as_str().unwrap())).map_err(|e| e.to_string())?;
        let got = outputs.get(name).map_err(|e| e.to_string())?.as_tensor().map_err(|e| e.to_string())?;
        let worst = compare(got, &want, rtol, atol).map_err(|e| format!("output '{name}': {e}"))?;
        report.push(format!("{name}: max rel err {worst:.2e}"));
    }
    Ok(report.join(", "))
}

#[test]
fn models_match_onnx_runtime() {
    let dir = models_dir();
    let manifest: Json = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let cases = manifest.as_array().expect("manifest is a list");
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for required in ["resnet18", "bert4"] {
        assert!(names.contains(&required), "manifest lacks {required}: {names:?}");
    }
    let mut failures = vec![];
    for case in cases {
        let name = case["name"].as_str().unwrap();
        match run_case(&dir, case) {
            Ok(report) => println!("{name}: ok ({report})"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} models differ from their reference (ONNX Runtime; Pillow for ImageDecoder):\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn resnet18_and_bert_match_within_1e4_relative() {
    let dir = models_dir();
    let manifest: Json = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    for name in ["resnet18", "bert4"] {
        let case = manifest.as_array().unwrap().iter().find(|c| c["name"] == name).unwrap();
        let mut strict = case.clone();
        strict["rtol"] = 1e-4.into();
        strict["atol"] = 1e-5.into();
        let report = run_case(&dir, &strict).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("{name}: {report}");
    }
}
