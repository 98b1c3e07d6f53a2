//! Bad model files end in a clear error, never a panic: the corpus is made by
//! `scripts/make_malformed_models.py` with the substring each error must contain.

use std::path::{Path, PathBuf};

use onyx::SessionBuilder;
use serde_json::Value as Json;

fn corpus() -> PathBuf {
    let base = std::env::var_os("ONYX_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels"));
    let dir = base.join("malformed");
    assert!(dir.join("malformed.json").exists(), "no malformed corpus in {}: run `bash scripts/test.sh`", dir.display());
    dir
}

#[test]
fn malformed_models_give_clear_errors() {
    let dir = corpus();
    let cases: Json = serde_json::from_str(&std::fs::read_to_string(dir.join("malformed.json")).unwrap()).unwrap();
    let mut failures = vec![];
    for case in cases.as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let expect = case["expect"].as_str().unwrap();
        let result = std::panic::catch_unwind(|| SessionBuilder::new().commit_from_file(dir.join(file)));
        match result {
            Err(_) => failures.push(format!("{file}: panicked")),
            Ok(Ok(_)) => failures.push(format!("{file}: loaded, expected an error containing '{expect}'")),
            Ok(Err(e)) => {
                let msg = e.to_string();
                println!("{file}: {msg}");
                if !msg.to_lowercase().contains(&expect.to_lowercase()) {
                    failures.push(format!("{file}: error '{msg}' lacks '{expect}'"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
