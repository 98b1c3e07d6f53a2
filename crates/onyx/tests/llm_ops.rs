//! The operators of onnxruntime-genai's LLM models (SimplifiedLayerNormalization,
//! SkipSimplifiedLayerNormalization, MatMulNBits, GatherBlockQuantized, RotaryEmbedding,
//! GroupQueryAttention, MultiHeadAttention, Attention), one node per case, against ONNX Runtime's CPU EP on random data of
//! awkward sizes: `scripts/make_llm_op_cases.py`, run by `scripts/test.sh` into
//! `$ONYX_TEST_MODELS/llm_ops`.

mod reference;

use std::collections::BTreeMap;

use reference::{cases, manifest_dir, run_case};

/// Outputs a case's reference computed with a cache buffer bound as both past and present
/// (ONNX Runtime's shared-buffer path). A plain run writes zeros where that path keeps the
/// buffer's old contents, so they are compared only where the cache is written in place.
fn shared_outputs(case: &serde_json::Value) -> Vec<&str> {
    case["share"].as_array().map_or(vec![], |pairs| pairs.iter().filter_map(|p| p[1].as_str()).collect())
}

#[test]
fn llm_ops_match_onnx_runtime_on_the_cpu() {
    let dir = manifest_dir("llm_ops");
    let cases = cases(&dir);
    let mut per_op: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = vec![];
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        *per_op.entry(case["op"].as_str().unwrap()).or_default() += 1;
        match run_case(&dir, case, &[], &shared_outputs(case)) {
            Ok(report) => println!("{name}: ok ({report})"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    println!("cases per op: {per_op:?}");
    for (op, min) in [
        ("SimplifiedLayerNormalization", 4),
        ("SkipSimplifiedLayerNormalization", 4),
        ("MatMulNBits", 15),
        ("GatherBlockQuantized", 6),
        ("RotaryEmbedding", 6),
        ("GroupQueryAttention", 30),
        ("MultiHeadAttention", 10),
        ("Attention", 6),
    ] {
        assert!(per_op.get(op).copied().unwrap_or(0) >= min, "fewer than {min} {op} cases: {per_op:?}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ONNX Runtime:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The same cases on the wgpu EP (the nodes it does not take fall back to the CPU EP), against
/// ONNX Runtime's outputs (lavapipe in CI; skipped without an adapter outside CI).
#[cfg(feature = "wgpu")]
#[test]
fn llm_ops_match_onnx_runtime_on_wgpu() {
    let Some(options) = reference::wgpu_options() else { return };
    let dir = manifest_dir("llm_ops");
    let providers = [onyx::Provider::Wgpu(options), onyx::Provider::Cpu];
    let failures: Vec<String> = cases(&dir)
        .iter()
        .filter_map(|case| {
            run_case(&dir, case, &providers, &shared_outputs(case)).err().map(|e| format!("{}: {e}", case["name"]))
        })
        .collect();
    assert!(failures.is_empty(), "{} cases differ from ONNX Runtime on wgpu:\n{}", failures.len(), failures.join("\n"));
}
