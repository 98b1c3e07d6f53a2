//! Tiny LLMs made by onnxruntime-genai's model builder (`models/llm/`, from
//! `scripts/make_llm_models.py`: Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2 and ERNIE at the
//! builder's cpu, webgpu and dml targets, fp32/fp16/int4, and Llama at cpu fp16 (MultiHeadAttention)
//! and cuda fp16/int4), run step by step as
//! onnxruntime-genai runs them: a prompt, then decode steps that feed each step's own present
//! cache back as the next step's past, in both cache forms (a growing cache; a fixed-capacity
//! buffer as genai's shared buffer). Each step's logits and presents are compared with ONNX
//! Runtime's (`scripts/make_llm_model_refs.py`, run by `scripts/test.sh` into
//! `$ONYX_TEST_MODELS/llm_models`). The same sequences run on the wgpu EP too (lavapipe in
//! CI), its LLM operators on the GPU.

mod reference;

use std::collections::BTreeMap;
use std::path::Path;

use onyx::{npy, Provider, SessionBuilder, Tensor};
use reference::{cases, compare, manifest_dir};
use serde_json::Value as Json;

/// The ops a GPU session must run on the GPU, when the model has them.
const GPU_OPS: [&str; 6] = [
    "GroupQueryAttention",
    "MatMulNBits",
    "SimplifiedLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "RotaryEmbedding",
    "GatherBlockQuantized",
];

/// Runs one sequence's steps in order on `providers` (none: the CPU EP), within `widen` times
/// the manifest's tolerances; returns a report per step, or what failed.
fn run_sequence(dir: &Path, steps: &[&Json], providers: &[Provider], widen: f64) -> Result<Vec<String>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let model = root.join(steps[0]["model"].as_str().unwrap());
    let session = SessionBuilder::new()
        .with_providers(providers.iter().cloned())
        .commit_from_file(&model)
        .map_err(|e| format!("session: {e}"))?;
    if !providers.is_empty() {
        // GroupQueryAttention's windowed cache runs on the CPU EP only.
        let graph = onyx::load_model(&model).map_err(|e| e.to_string())?.graph;
        let windowed: Vec<&str> = graph
            .nodes
            .iter()
            .filter(|n| n.int_or("sliding_window_cache", 0).is_ok_and(|v| v == 1))
            .map(|n| n.name.as_str())
            .collect();
        let gpu_op =
            |a: &&onyx::NodeAssignment| GPU_OPS.contains(&a.op.as_str()) && !windowed.contains(&a.node.as_str());
        let on_cpu: Vec<&str> = session
            .assignments()
            .iter()
            .filter(|a| a.provider == "cpu")
            .filter(gpu_op)
            .map(|a| a.op.as_str())
            .collect();
        if !on_cpu.is_empty() {
            return Err(format!("ran on the CPU: {on_cpu:?}"));
        }
    }
    let mut previous: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut reports = vec![];
    for step in steps {
        let feed = step["feed"].as_object().cloned().unwrap_or_default();
        let mut inputs = vec![];
        for (name, file) in step["inputs"].as_object().unwrap() {
            // The model's own outputs of the previous step where the step feeds them back.
            let value = match feed.get(name).and_then(Json::as_str).and_then(|out| previous.get(out)) {
                Some(own) => own.clone(),
                None => npy::read(&dir.join(file.as_str().unwrap())).map_err(|e| e.to_string())?,
            };
            inputs.push((name.clone(), value));
        }
        let outputs = session.run(inputs).map_err(|e| format!("step {}: run: {e}", step["step"]))?;
        let (rtol, atol) = (widen * step["rtol"].as_f64().unwrap(), widen * step["atol"].as_f64().unwrap());
        let mut worst: Vec<String> = vec![];
        previous.clear();
        for (name, file) in step["outputs"].as_object().unwrap() {
            let want = npy::read(&dir.join(file.as_str().unwrap())).map_err(|e| e.to_string())?;
            let got = outputs.get(name).map_err(|e| e.to_string())?.as_tensor().map_err(|e| e.to_string())?.clone();
            let err =
                compare(&got, &want, rtol, atol).map_err(|e| format!("step {}: output '{name}': {e}", step["step"]))?;
            if name == "logits" {
                worst.push(format!("logits {err:.1e}"));
            }
            previous.insert(name.clone(), got);
        }
        reports.push(worst.join(" "));
    }
    Ok(reports)
}

/// Runs every sequence on `providers` (tolerances times `widen`); asserts that at least
/// `min_passed` match and none differs.
fn check_all(providers: &[Provider], widen: f64, min_passed: usize) {
    let dir = manifest_dir("llm_models");
    let cases = cases(&dir);
    let mut sequences: BTreeMap<&str, Vec<&Json>> = BTreeMap::new();
    for case in &cases {
        sequences.entry(case["sequence"].as_str().unwrap()).or_default().push(case);
    }
    let (mut passed, mut failures) = (0, vec![]);
    for (name, steps) in &mut sequences {
        steps.sort_by_key(|c| c["step"].as_u64());
        match run_sequence(&dir, steps, providers, widen) {
            Ok(reports) => {
                passed += 1;
                println!("{name}: ok ({})", reports.join(", "));
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    println!("{passed} sequences match");
    assert!(
        failures.is_empty(),
        "{} of {} sequences differ from ONNX Runtime:\n{}",
        failures.len(),
        sequences.len(),
        failures.join("\n")
    );
    assert!(passed >= min_passed, "only {passed} of {} sequences ran", sequences.len());
}

#[test]
fn builder_models_match_onnx_runtime_step_by_step() {
    check_all(&[], 1.0, 121);
}

/// The same on the wgpu EP, its LLM operators on the GPU (lavapipe in CI; skipped without
/// an adapter outside CI). Tolerances are twice the CPU's: the GPU's fused kernels round f16
/// intermediates at other points than ONNX Runtime's CPU EP (fp16 logits differ by up to
/// ~1.2x the CPU tolerance; fp32 and int4-on-f32 models pass at 1x).
#[cfg(feature = "wgpu")]
#[test]
fn builder_models_match_onnx_runtime_on_wgpu() {
    let Some(options) = reference::wgpu_options() else { return };
    check_all(&[Provider::Wgpu(options), Provider::Cpu], 2.0, 121);
}
