//! Saving models: load → save → load gives the same graph and the same outputs on the CPU EP,
//! for the models in `models/` and those `scripts/make_test_models.py` writes, saved inline, with
//! external data, and as a session optimized them; and the files pass `onnx.checker.check_model(full_check=True)` when the
//! `onnx` Python package is there (CI installs it, so there it must be).

use std::path::{Path, PathBuf};
use std::process::Command;

use onyx::ir::{AttrValue, Graph, Model};
use onyx::types::{Dim, ValueType};
use onyx::{npy, DataType, OptimizationLevel, SaveOptions, SessionBuilder, Tensor, TensorData};
use serde_json::Value as Json;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The generated test models (see models.rs), by name, with their input files.
fn test_models() -> Vec<(String, PathBuf, Vec<(String, PathBuf)>)> {
    let dir =
        std::env::var_os("ONYX_TEST_MODELS").map(PathBuf::from).unwrap_or_else(|| root().join("target/testmodels"));
    let manifest = dir.join("manifest.json");
    assert!(manifest.exists(), "no test models in {}: run `bash scripts/test.sh` (it generates them)", dir.display());
    let cases: Json = serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    cases
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let inputs = c["inputs"].as_object().unwrap();
            let inputs = inputs.iter().map(|(n, f)| (n.clone(), dir.join(f.as_str().unwrap()))).collect();
            (c["name"].as_str().unwrap().to_string(), dir.join(c["model"].as_str().unwrap()), inputs)
        })
        .collect()
}

/// Every model to round-trip: the repository's and the generated ones.
fn all_models() -> Vec<(String, PathBuf, Vec<(String, PathBuf)>)> {
    let mut models = vec![
        (
            "digits".to_string(),
            root().join("models/digits/digits.onnx"),
            vec![("image".to_string(), root().join("models/digits/sample_7.npy"))],
        ),
        ("tiny_cnn".to_string(), root().join("models/tiny_cnn/tiny_cnn.onnx"), vec![]),
    ];
    models.extend(test_models());
    models
}

/// Seeded random values for an input without a file (free dimensions become 2).
fn random_input(ty: &ValueType, seed: u64) -> Tensor {
    let t = ty.as_tensor().expect("tensor inputs");
    let shape: Vec<usize> =
        t.shape.as_ref().unwrap().iter().map(|d| if let Dim::Fixed(n) = d { *n } else { 2 }).collect();
    let n = shape.iter().product();
    let mut rng = fastrand::Rng::with_seed(seed);
    match t.dtype {
        DataType::Float => Tensor::from_vec(shape, (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect()).unwrap(),
        DataType::Int64 => Tensor::from_vec(shape, (0..n).map(|_| rng.i64(0..4)).collect()).unwrap(),
        other => panic!("no random values for {other}"),
    }
}

/// The outputs of `model` on the CPU EP at `level`, as (name, "dtype shape bytes"), and the
/// model the session ran (optimized at `level`).
fn run(model: Model, level: OptimizationLevel, inputs: &[(String, Tensor)]) -> (Vec<(String, String)>, Model) {
    let session = SessionBuilder::new().with_optimization_level(level).commit_from_model(model).unwrap();
    let outputs = session.run(inputs.iter().map(|(n, t)| (n.as_str(), t.clone()))).unwrap();
    let outputs = outputs
        .iter()
        .map(|(name, v)| {
            let t = v.as_tensor().unwrap();
            (name.to_string(), format!("{} {:?} {:?}", t.dtype(), t.shape(), t.view().unwrap().bytes().unwrap()))
        })
        .collect();
    (outputs, session.model().clone())
}

fn inputs_for(model: &Model, files: &[(String, PathBuf)]) -> Vec<(String, Tensor)> {
    let mut inputs: Vec<(String, Tensor)> = files.iter().map(|(n, f)| (n.clone(), npy::read(f).unwrap())).collect();
    for (i, info) in model.graph.runtime_inputs().enumerate() {
        if !inputs.iter().any(|(n, _)| n == &info.name) {
            inputs.push((info.name.clone(), random_input(&info.ty, 77 + i as u64)));
        }
    }
    inputs
}

/// The structure of a graph and the elements of every tensor in it (Tensor's Debug omits them).
fn fingerprint(g: &Graph) -> String {
    let bytes = |t: &Tensor| match t.data() {
        TensorData::Strings(s) => format!("{s:?}"),
        _ => format!("{:?}", t.view().unwrap().bytes().unwrap()),
    };
    let mut out = format!("{g:?}\n");
    for (name, t) in &g.initializers {
        out += &format!("{name}: {}\n", bytes(t));
    }
    for a in g.nodes.iter().flat_map(|n| &n.attributes) {
        match &a.value {
            AttrValue::Tensor(t) | AttrValue::SparseTensor(t) => out += &format!("{}: {}\n", a.name, bytes(t)),
            AttrValue::Tensors(ts) | AttrValue::SparseTensors(ts) => ts.iter().for_each(|t| out += &bytes(t)),
            AttrValue::Graph(sub) => out += &fingerprint(sub),
            AttrValue::Graphs(subs) => subs.iter().for_each(|s| out += &fingerprint(s)),
            _ => {}
        }
    }
    out
}

fn metadata(m: &Model) -> String {
    format!(
        "{} {} {} {:?} {:?} {:?} {}",
        m.ir_version, m.producer_name, m.producer_version, m.model_version, m.opsets, m.metadata, m.doc
    )
}

/// Runs `onnx.checker.check_model(path, full_check=True)` on each file; `None` when the onnx
/// package is missing outside CI.
fn onnx_check(paths: &[PathBuf]) -> Option<Result<(), String>> {
    let script = "import sys, onnx\nfor p in sys.argv[1:]:\n    onnx.checker.check_model(p, full_check=True)\n    print('ok', p)";
    let has_onnx = Command::new("python3").args(["-c", "import onnx"]).output().is_ok_and(|o| o.status.success());
    if !has_onnx {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI must have the onnx Python package");
        println!("note: python3 cannot import onnx; the saved files were not checked with onnx.checker");
        return None;
    }
    let out = Command::new("python3").arg("-c").arg(script).args(paths).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some(if out.status.success() { Ok(()) } else { Err(text) })
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn load_save_load_keeps_graphs_and_outputs() {
    let tmp = TempDir(std::env::temp_dir().join(format!("onyx-save-{}", std::process::id())));
    // Every tensor of 1 KiB or more in the data file (smaller ones, such as Unsqueeze axes,
    // stay inline: onnx's shape inference reads them).
    let external = SaveOptions { external_data_above: 0, ..SaveOptions::default() };
    let mut data_files = 0;
    let mut saved = vec![];
    let mut failures = vec![];
    for (name, path, input_files) in all_models() {
        let original = onyx::load_model(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let inputs = inputs_for(&original, &input_files);
        let (want, optimized) = run(original.clone(), OptimizationLevel::All, &inputs);
        // The optimized model, run as written, must compute what the session computed.
        let variants = [
            ("inline", &original, SaveOptions::default(), OptimizationLevel::All),
            ("external", &original, external.clone(), OptimizationLevel::All),
            ("optimized", &optimized, SaveOptions::default(), OptimizationLevel::Disable),
        ];
        for (variant, model, options, level) in variants {
            let dir = tmp.0.join(&name).join(variant);
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join("model.onnx");
            onyx::save_model_with_options(model, &out, &options).unwrap_or_else(|e| panic!("{name} {variant}: {e}"));
            if dir.join("model.onnx.data").exists() {
                assert_eq!(variant, "external", "{name}");
                data_files += 1;
            }
            let back = onyx::load_model(&out).unwrap_or_else(|e| panic!("{name} {variant}: reload: {e}"));
            let mut problems = vec![];
            if fingerprint(&back.graph) != fingerprint(&model.graph) {
                problems.push("the graph differs".to_string());
            }
            if metadata(&back) != metadata(model) {
                problems.push(format!("metadata: {} vs {}", metadata(&back), metadata(model)));
            }
            if onyx::model_to_bytes(&back).unwrap() != onyx::model_to_bytes(model).unwrap() {
                problems.push("saving the reloaded model gives other bytes".into());
            }
            if run(back, level, &inputs).0 != want {
                problems.push("outputs differ".into());
            }
            if problems.is_empty() {
                println!("{name} ({variant}): same graph, same outputs");
            } else {
                failures.push(format!("{name} ({variant}): {}", problems.join("; ")));
            }
            saved.push(out);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(saved.len() >= 3 * 10, "{} files", saved.len());
    assert!(data_files >= 5, "only {data_files} models were saved with external data");
    if let Some(result) = onnx_check(&saved) {
        result.unwrap_or_else(|e| panic!("onnx.checker rejects a saved file:\n{e}"));
        println!("onnx.checker (full_check) accepts all {} files", saved.len());
    }
}

/// A model built in code with an initializer of every element type, a sparse and a string
/// Constant, an If, and sequence and optional outputs: it round-trips, runs, and the checker
/// accepts it.
#[test]
fn every_element_type_and_value_kind_passes_the_onnx_checker() {
    use onyx::ir::{Attribute, Node};
    use onyx::types::{TensorType, ValueInfo};
    let mut rng = fastrand::Rng::with_seed(8);
    let mut graph = Graph { name: "kinds".into(), ..Default::default() };
    for dtype in DataType::ALL {
        let t = if dtype == DataType::String {
            Tensor::from_strings(vec![2], vec!["a".into(), "bé".into()]).unwrap()
        } else {
            let mut bytes: Vec<u8> = (0..dtype.byte_len(5).unwrap()).map(|_| rng.u8(..)).collect();
            if dtype == DataType::Bool {
                bytes.iter_mut().for_each(|b| *b &= 1);
            }
            Tensor::from_bytes(dtype, vec![5], onyx::HostBuffer::from_vec(bytes)).unwrap()
        };
        graph.initializers.insert(format!("w_{dtype}"), t);
    }
    let node = |op: &str, inputs: &[&str], output: &str, attributes: Vec<Attribute>| Node {
        name: output.into(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attributes,
        ..Default::default()
    };
    let attr = |name: &str, value| Attribute { name: name.into(), value };
    let float =
        |name: &str, dims: &[usize]| ValueInfo::new(name, ValueType::Tensor(TensorType::fixed(DataType::Float, dims)));
    let sparse = Tensor::from_vec(vec![2, 3], vec![0.0f32, 1.5, 0.0, 0.0, -2.0, 0.0]).unwrap();
    let branch = |name: &str, op: &str| Graph {
        name: name.into(),
        nodes: vec![node(op, &["x"], &format!("{name}_y"), vec![])],
        outputs: vec![float(&format!("{name}_y"), &[2, 3])],
        ..Default::default()
    };
    graph.nodes = vec![
        node("Constant", &[], "sparse", vec![attr("sparse_value", AttrValue::SparseTensor(sparse))]),
        node(
            "Constant",
            &[],
            "words",
            vec![attr("value_strings", AttrValue::Strings(vec![b"x".to_vec(), b"yz".to_vec()]))],
        ),
        node("Add", &["x", "sparse"], "sum", vec![]),
        node(
            "If",
            &["cond"],
            "chosen",
            vec![
                attr("then_branch", AttrValue::Graph(Box::new(branch("then", "Relu")))),
                attr("else_branch", AttrValue::Graph(Box::new(branch("else", "Neg")))),
            ],
        ),
        node("SequenceConstruct", &["sum", "chosen"], "seq", vec![]),
        node("Optional", &["sum"], "maybe", vec![]),
    ];
    let seq = ValueType::Sequence(Box::new(ValueType::Tensor(TensorType::fixed(DataType::Float, &[2, 3]))));
    let opt = ValueType::Optional(Box::new(ValueType::Tensor(TensorType::fixed(DataType::Float, &[2, 3]))));
    graph.inputs =
        vec![float("x", &[2, 3]), ValueInfo::new("cond", ValueType::Tensor(TensorType::fixed(DataType::Bool, &[])))];
    let words = ValueInfo::new("words", ValueType::Tensor(TensorType::fixed(DataType::String, &[2])));
    graph.outputs = vec![ValueInfo::new("seq", seq), ValueInfo::new("maybe", opt), words, float("chosen", &[2, 3])];
    let model =
        Model { opsets: [(String::new(), 23)].into(), producer_name: "onyx-tests".into(), graph, ..Default::default() };

    let tmp = TempDir(std::env::temp_dir().join(format!("onyx-save-kinds-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let path = tmp.0.join("kinds.onnx");
    onyx::save_model(&model, &path).unwrap();
    let back = onyx::load_model(&path).unwrap();
    let mut want = model.clone();
    want.ir_version = 11; // filled in for opset 23
    onyx::ir::check_model(&mut want).unwrap();
    assert_eq!(fingerprint(&back.graph), fingerprint(&want.graph));
    assert_eq!(metadata(&back), metadata(&want));
    let x = Tensor::from_vec(vec![2, 3], (0..6).map(|i| i as f32 - 2.5).collect()).unwrap();
    let cond = Tensor::from_bools(vec![], vec![false]).unwrap();
    let session = SessionBuilder::new().commit_from_model(back).unwrap();
    let out = session.run([("x", x), ("cond", cond)]).unwrap();
    let chosen = out.get("chosen").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec();
    assert_eq!(chosen, [2.5, 1.5, 0.5, -0.5, -1.5, -2.5]);
    if let Some(result) = onnx_check(&[path]) {
        result.unwrap_or_else(|e| panic!("onnx.checker rejects the file:\n{e}"));
    }
}
