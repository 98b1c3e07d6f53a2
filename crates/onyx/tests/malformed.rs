//! Bad model files end in a clear error, never a panic, an abort or a hang: the corpus is made by
//! `scripts/make_malformed_models.py` with the substring each error must contain. The CLI's
//! side (exit code 1 on every case) is in crates/onyx-cli/tests/malformed.rs.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use onyx::SessionBuilder;
use serde_json::Value as Json;

/// Longest any case may take: loading and checking these small files is instantaneous, so
/// anything near this is a hang.
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

/// Loads `path` into a session on another thread: `None` if it takes longer than [`TIMEOUT`],
/// else the error message (`Ok` if it loaded, `Err("panicked")` on a panic).
fn load(path: PathBuf) -> Option<Result<Result<(), String>, ()>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(|| {
            SessionBuilder::new().commit_from_file(&path).map(|_| ()).map_err(|e| e.to_string())
        });
        let _ = tx.send(result.map_err(|_| ()));
    });
    rx.recv_timeout(TIMEOUT).ok()
}

#[test]
fn malformed_models_give_clear_errors() {
    let dir = corpus();
    let cases: Json = serde_json::from_str(&std::fs::read_to_string(dir.join("malformed.json")).unwrap()).unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 30, "the corpus has {} cases: regenerate it", cases.len());
    let mut failures = vec![];
    for case in cases {
        let file = case["file"].as_str().unwrap();
        let expect = case["expect"].as_str().unwrap();
        match load(dir.join(file)) {
            None => failures.push(format!("{file}: no answer within {TIMEOUT:?}")),
            Some(Err(())) => failures.push(format!("{file}: panicked")),
            Some(Ok(Ok(()))) => failures.push(format!("{file}: loaded, expected an error containing '{expect}'")),
            Some(Ok(Err(msg))) => {
                println!("{file}: {msg}");
                if !msg.to_lowercase().contains(&expect.to_lowercase()) {
                    failures.push(format!("{file}: error '{msg}' lacks '{expect}'"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// Inputs the `run` fuzz target found crashing the CPU kernels (fixed; the inputs themselves are
// kept in fuzz/corpus/run/regress_*): each must now give outputs or an error.

mod fuzz_findings {
    use std::collections::BTreeMap;

    use onyx::ir::{AttrValue, Attribute, Graph, Model, Node};
    use onyx::types::{Dim, TensorType, ValueInfo, ValueType};
    use onyx::{DataType, SessionBuilder, Tensor};

    fn one_node(op: &str, inputs: &[(&str, DataType, usize)], attributes: Vec<Attribute>, opset: i64) -> Model {
        let info = |(name, dtype, rank): &(&str, DataType, usize)| {
            let dims = (0..*rank).map(|d| Dim::Symbol(format!("{name}{d}"))).collect();
            ValueInfo::new(*name, ValueType::Tensor(TensorType { dtype: *dtype, shape: Some(dims) }))
        };
        Model {
            ir_version: 8,
            opsets: BTreeMap::from([(String::new(), opset)]),
            graph: Graph {
                name: "finding".into(),
                nodes: vec![Node {
                    name: "n".into(),
                    op_type: op.into(),
                    inputs: inputs.iter().map(|i| i.0.to_string()).collect(),
                    outputs: vec!["y".into()],
                    attributes,
                    ..Default::default()
                }],
                inputs: inputs.iter().map(info).collect(),
                outputs: vec![ValueInfo::new("y", ValueType::Unknown)],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn floats(shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| i as f32 * 0.5 - 1.0).collect::<Vec<f32>>()).unwrap()
    }

    fn ints(v: &[i64]) -> Tensor {
        Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn expand_to_an_empty_shape_with_a_huge_dim_is_an_error_not_an_allocation_failure() {
        let m = one_node("Expand", &[("x", DataType::Float, 2), ("s", DataType::Int64, 1)], vec![], 17);
        let session = SessionBuilder::new().commit_from_model(m).unwrap();
        let ok = session.run([("x", floats(&[1, 1])), ("s", ints(&[3, 0]))]).unwrap();
        assert_eq!(ok.get("y").unwrap().as_tensor().unwrap().shape(), [3, 0]);
        let err = session.run([("x", floats(&[1, 1])), ("s", ints(&[1 << 62, 0]))]).unwrap_err().to_string();
        assert!(err.contains("Expand node 'n'") && err.contains("index maps"), "{err}");
    }

    #[test]
    fn pad_with_extreme_pads_is_an_error_not_an_overflow() {
        let mode = Attribute { name: "mode".into(), value: AttrValue::String(b"reflect".to_vec()) };
        let m = one_node("Pad", &[("x", DataType::Float, 2), ("p", DataType::Int64, 1)], vec![mode], 17);
        let session = SessionBuilder::new().commit_from_model(m).unwrap();
        let ok = session.run([("x", floats(&[2, 3])), ("p", ints(&[0, 1, 0, 1]))]).unwrap();
        let y = ok.get("y").unwrap().as_tensor().unwrap();
        assert_eq!(y.shape(), [2, 5]);
        assert_eq!(y.as_slice::<f32>().unwrap()[..5], [-0.5, -1.0, -0.5, 0.0, -0.5]);
        let err = session.run([("x", floats(&[2, 3])), ("p", ints(&[i64::MIN, 0, i64::MAX, 0]))]).unwrap_err();
        assert!(err.to_string().contains("Pad node 'n'"), "{err}");
    }

    #[test]
    fn reducing_a_tensor_with_an_empty_kept_axis_gives_an_empty_output() {
        let keep = Attribute { name: "keepdims".into(), value: AttrValue::Int(0) };
        let m = one_node("ReduceMean", &[("x", DataType::Float, 2), ("a", DataType::Int64, 1)], vec![keep], 18);
        let session = SessionBuilder::new().commit_from_model(m).unwrap();
        let y = session.run([("x", floats(&[3, 0])), ("a", ints(&[0]))]).unwrap();
        assert_eq!(y.get("y").unwrap().as_tensor().unwrap().shape(), [0]);
        let y = session.run([("x", floats(&[3, 2])), ("a", ints(&[0]))]).unwrap();
        assert_eq!(y.get("y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap(), &[0.0, 0.5]);
    }
}
