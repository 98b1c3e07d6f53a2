//! Session API: concurrent runs, run-time input checks, free-dimension overrides.

use std::collections::BTreeMap;

use onyx::ir::{Graph, Model, Node};
use onyx::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx::{DataType, Error, SessionBuilder, Tensor, TensorView};

const K: usize = 6;
const N: usize = 5;

fn weights() -> (Vec<f32>, Vec<f32>) {
    let mut rng = fastrand::Rng::with_seed(11);
    ((0..K * N).map(|_| rng.f32() - 0.5).collect(), (0..N).map(|_| rng.f32() - 0.5).collect())
}

/// Y = Relu(X·W + B) with X: float[batch, 6].
fn model() -> Model {
    let (w, b) = weights();
    let node = |op: &str, i: &[&str], o: &str| Node {
        name: format!("{op}_0"),
        op_type: op.into(),
        inputs: i.iter().map(|s| s.to_string()).collect(),
        outputs: vec![o.into()],
        ..Default::default()
    };
    let mut x = ValueInfo::new(
        "X",
        ValueType::Tensor(TensorType {
            dtype: DataType::Float,
            shape: Some(vec![Dim::Symbol("batch".into()), Dim::Fixed(K)]),
        }),
    );
    x.denotations = vec![Some("DATA_BATCH".into()), None];
    Model {
        ir_version: 8,
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph {
            nodes: vec![node("MatMul", &["X", "W"], "h"), node("Add", &["h", "B"], "z"), node("Relu", &["z"], "Y")],
            inputs: vec![x],
            outputs: vec![ValueInfo::new("Y", ValueType::Unknown)],
            initializers: BTreeMap::from([
                ("W".into(), Tensor::from_vec(vec![K, N], w).unwrap()),
                ("B".into(), Tensor::from_vec(vec![N], b).unwrap()),
            ]),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn reference(x: &[f32]) -> Vec<f32> {
    let (w, b) = weights();
    let rows = x.len() / K;
    let mut y = vec![0.0; rows * N];
    for r in 0..rows {
        for j in 0..N {
            let dot: f32 = (0..K).map(|k| x[r * K + k] * w[k * N + j]).sum();
            y[r * N + j] = (dot + b[j]).max(0.0);
        }
    }
    y
}

#[test]
fn concurrent_runs_on_one_session_are_correct() {
    let session = SessionBuilder::new().with_intra_threads(2).commit_from_model(model()).unwrap();
    std::thread::scope(|s| {
        for t in 0..8usize {
            let session = &session;
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t as u64);
                for _ in 0..50 {
                    let rows = 1 + t + rng.usize(0..5);
                    let x: Vec<f32> = (0..rows * K).map(|_| rng.f32() * 4.0 - 2.0).collect();
                    let shape = [rows, K];
                    let out = session.run([("X", TensorView::from_slice(&shape, &x).unwrap())]).unwrap();
                    let y = out.get("Y").unwrap().as_tensor().unwrap();
                    assert_eq!(y.shape(), &[rows, N]);
                    for (g, w) in y.as_slice::<f32>().unwrap().iter().zip(reference(&x)) {
                        assert!((g - w).abs() < 1e-5, "thread {t}: {g} vs {w}");
                    }
                }
            });
        }
    });
}

#[test]
fn owned_and_borrowed_inputs_agree() {
    let session = SessionBuilder::new().commit_from_model(model()).unwrap();
    let x: Vec<f32> = (0..3 * K).map(|i| (i as f32 * 0.7).cos()).collect();
    let shape = [3, K];
    let a = session.run([("X", TensorView::from_slice(&shape, &x).unwrap())]).unwrap();
    let b = session.run([("X", Tensor::from_vec(vec![3, K], x.clone()).unwrap())]).unwrap();
    assert_eq!(
        a[0].as_tensor().unwrap().as_slice::<f32>().unwrap(),
        b[0].as_tensor().unwrap().as_slice::<f32>().unwrap()
    );
}

#[test]
fn metadata_has_symbolic_and_inferred_shapes() {
    let session = SessionBuilder::new().commit_from_model(model()).unwrap();
    assert_eq!(session.inputs()[0].ty.to_string(), "float[batch,6]");
    assert_eq!(session.outputs()[0].ty.as_tensor().map(|t| t.dtype), Some(DataType::Float));
}

fn run_err(session: &onyx::Session, inputs: Vec<(&str, Tensor)>) -> String {
    match session.run(inputs) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn bad_run_inputs_are_named_errors() {
    let session = SessionBuilder::new().commit_from_model(model()).unwrap();
    let good = || Tensor::from_vec(vec![2, K], vec![0.5f32; 2 * K]).unwrap();
    let e = run_err(&session, vec![]);
    assert!(e.contains("input 'X'") && e.contains("required"), "{e}");
    let e = run_err(&session, vec![("X", good()), ("Z", good())]);
    assert!(e.contains("input 'Z'") && e.contains("one of the model's inputs (X)"), "{e}");
    let e = run_err(&session, vec![("X", Tensor::from_vec(vec![2, K], vec![1i64; 2 * K]).unwrap())]);
    assert!(e.contains("input 'X'") && e.contains("expected float[batch,6]") && e.contains("found int64[2,6]"), "{e}");
    let e = run_err(&session, vec![("X", Tensor::from_vec(vec![2, 7], vec![1.0f32; 14]).unwrap())]);
    assert!(e.contains("dimension 1 is 7, not 6"), "{e}");
    let e = run_err(&session, vec![("X", Tensor::from_vec(vec![12], vec![1.0f32; 12]).unwrap())]);
    assert!(e.contains("rank 1 instead of 2"), "{e}");
    assert!(matches!(session.run(vec![("X", good())]), Ok(_)));
}

#[test]
fn free_dimension_overrides_fix_symbols() {
    for builder in [
        SessionBuilder::new().with_free_dimension_override_by_name("batch", 3),
        SessionBuilder::new().with_free_dimension_override("DATA_BATCH", 3),
    ] {
        let session = builder.commit_from_model(model()).unwrap();
        assert_eq!(session.inputs()[0].ty.to_string(), "float[3,6]");
        let e = run_err(&session, vec![("X", Tensor::from_vec(vec![2, K], vec![0.0f32; 2 * K]).unwrap())]);
        assert!(e.contains("dimension 0 is 2, not 3"), "{e}");
        assert!(session.run([("X", Tensor::from_vec(vec![3, K], vec![0.0f32; 3 * K]).unwrap())]).is_ok());
    }
}

#[test]
fn unknown_provider_and_level_are_errors() {
    assert!(matches!("gpu9".parse::<onyx::Provider>(), Err(Error::InvalidArgument(_))));
    assert!("fast".parse::<onyx::OptimizationLevel>().is_err());
}

/// `model()` with W and B also listed as graph inputs: initializers a run may override.
fn overridable_model(ir_version: i64) -> Model {
    let mut m = model();
    m.ir_version = ir_version;
    let typed =
        |name: &str, dims: &[usize]| ValueInfo::new(name, ValueType::Tensor(TensorType::fixed(DataType::Float, dims)));
    m.graph.inputs.push(typed("W", &[K, N]));
    m.graph.inputs.push(typed("B", &[N]));
    m
}

fn relu_affine(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    let rows = x.len() / K;
    (0..rows * N)
        .map(|i| ((0..K).map(|k| x[i / N * K + k] * w[k * N + i % N]).sum::<f32>() + b[i % N]).max(0.0))
        .collect()
}

#[test]
fn overridable_initializers_are_defaults_a_run_may_replace() {
    let session = SessionBuilder::new().commit_from_model(overridable_model(8)).unwrap();
    let names: Vec<&str> = session.inputs().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["X"], "overridable initializers are not required inputs");
    let names: Vec<&str> = session.overridable_initializers().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["W", "B"]);
    let mut rng = fastrand::Rng::with_seed(5);
    let x: Vec<f32> = (0..3 * K).map(|_| rng.f32() - 0.5).collect();
    let w2: Vec<f32> = (0..K * N).map(|_| rng.f32() * 2.0 - 1.0).collect();
    let b2: Vec<f32> = (0..N).map(|_| rng.f32()).collect();
    let (w, b) = weights();
    let y = |out: onyx::Outputs| out.get("Y").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec();
    let close = |got: &[f32], want: &[f32]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5);
    for _ in 0..2 {
        let got = y(session.run([("X", TensorView::from_slice(&[3, K], &x).unwrap())]).unwrap());
        assert!(close(&got, &relu_affine(&x, &w, &b)), "defaults");
        let got = y(session
            .run([
                ("X", TensorView::from_slice(&[3, K], &x).unwrap()),
                ("W", TensorView::from_slice(&[K, N], &w2).unwrap()),
            ])
            .unwrap());
        assert!(close(&got, &relu_affine(&x, &w2, &b)), "W overridden: nothing folded or packed it");
        let got = y(session
            .run([
                ("X", TensorView::from_slice(&[3, K], &x).unwrap()),
                ("B", TensorView::from_slice(&[N], &b2).unwrap()),
            ])
            .unwrap());
        assert!(close(&got, &relu_affine(&x, &w, &b2)), "B overridden");
    }
    let err = session
        .run([("X", TensorView::from_slice(&[3, K], &x).unwrap()), ("W", TensorView::from_slice(&[N], &b2).unwrap())])
        .unwrap_err()
        .to_string();
    assert!(err.contains("'W'"), "{err}");
    // The session's model keeps them as initializers (what `onyx optimize` saves).
    assert!(session.model().graph.initializers.contains_key("W"));

    // Before IR version 4 every initializer is listed among the inputs, and none is overridable.
    let old = SessionBuilder::new().commit_from_model(overridable_model(3)).unwrap();
    assert_eq!(old.overridable_initializers().count(), 0);
    let err = old
        .run([
            ("X", TensorView::from_slice(&[3, K], &x).unwrap()),
            ("W", TensorView::from_slice(&[K, N], &w2).unwrap()),
        ])
        .unwrap_err()
        .to_string();
    assert!(err.contains("W"), "{err}");
}
