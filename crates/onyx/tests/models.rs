//! End-to-end: real graph structures (a resnet18-shaped CNN, a BERT-style encoder, a mix of ops,
//! If, external data, model-local functions) against ONNX Runtime's outputs, computed by
//! `scripts/make_test_models.py` (run by `scripts/test.sh`).

mod reference;

use reference::{cases, manifest_dir, run_case};

#[test]
fn models_match_onnx_runtime() {
    let dir = manifest_dir("");
    let cases = cases(&dir);
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for required in ["resnet18", "bert4"] {
        assert!(names.contains(&required), "manifest lacks {required}: {names:?}");
    }
    let mut failures = vec![];
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        match run_case(&dir, case, &[], &[]) {
            Ok(report) => println!("{name}: ok ({report})"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} models differ from their reference (ONNX Runtime; Pillow for ImageDecoder):\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn resnet18_and_bert_match_within_1e4_relative() {
    let dir = manifest_dir("");
    let cases = cases(&dir);
    for name in ["resnet18", "bert4"] {
        let case = cases.iter().find(|c| c["name"] == name).unwrap();
        let mut strict = case.clone();
        strict["rtol"] = 1e-4.into();
        strict["atol"] = 1e-5.into();
        let report = run_case(&dir, &strict, &[], &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("{name}: {report}");
    }
}
