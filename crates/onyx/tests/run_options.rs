//! Stopping runs: RunOptions' terminate flag (before a run, and from another thread during
//! one) and the interrupt check made on the calling thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use onyx::ir::{Graph, Model, Node};
use onyx::types::{TensorType, ValueInfo, ValueType};
use onyx::{DataType, Error, IoBinding, RunOptions, Session, SessionBuilder, Tensor};

const N: usize = 192;

/// `depth` MatMuls of an N x N input by itself, chained: long enough to be stopped midway.
fn chain(depth: usize) -> Session {
    let nodes = (0..depth)
        .map(|i| {
            let input = if i == 0 { "x".to_string() } else { format!("h{i}") };
            Node {
                name: format!("mm{i}"),
                op_type: "MatMul".into(),
                inputs: vec![input, "w".into()],
                outputs: vec![if i + 1 == depth { "y".to_string() } else { format!("h{}", i + 1) }],
                ..Default::default()
            }
        })
        .collect();
    let info = |n: &str| ValueInfo::new(n, ValueType::Tensor(TensorType::fixed(DataType::Float, &[N, N])));
    let model = Model {
        ir_version: 8,
        opsets: BTreeMap::from([(String::new(), 17)]),
        graph: Graph { nodes, inputs: vec![info("x"), info("w")], outputs: vec![info("y")], ..Default::default() },
        ..Default::default()
    };
    SessionBuilder::new().with_intra_threads(1).commit_from_model(model).unwrap()
}

fn inputs() -> [(&'static str, Tensor); 2] {
    // Entries near 1/N keep the chained products finite.
    let x: Vec<f32> = (0..N * N).map(|i| ((i * 7919) % 97) as f32 / (97.0 * N as f32)).collect();
    let w: Vec<f32> = (0..N * N).map(|i| ((i * 104_729) % 89) as f32 / (44.0 * N as f32)).collect();
    [("x", Tensor::from_vec(vec![N, N], x).unwrap()), ("w", Tensor::from_vec(vec![N, N], w).unwrap())]
}

fn floats(outputs: &onyx::Outputs) -> Vec<f32> {
    outputs[0].as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn a_terminated_options_stops_the_run_and_clearing_it_lets_runs_go() {
    let session = chain(2);
    let options = RunOptions::new();
    options.set_terminate(true);
    let err = session.run_with_options(inputs(), &options).unwrap_err();
    assert!(matches!(err, Error::Terminated), "{err}");
    let mut binding = IoBinding::new();
    for (name, value) in inputs() {
        binding.bind_input(name, value);
    }
    binding.bind_output_to_device("y", onyx::Device::Cpu).set_run_options(options.clone());
    assert!(matches!(session.run_with_binding(binding), Err(Error::Terminated)));

    options.set_terminate(false);
    let got = session.run_with_options(inputs(), &options).unwrap();
    let want = session.run(inputs()).unwrap();
    assert_eq!(floats(&got), floats(&want));
}

#[test]
fn terminate_from_another_thread_stops_a_run_midway() {
    let session = chain(400);
    let options = RunOptions::new();
    let stopper = options.clone();
    let started = std::time::Instant::now();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            stopper.set_terminate(true);
        });
        session.run_with_options(inputs(), &options)
    });
    let stopped_after = started.elapsed();
    let full = {
        let t = std::time::Instant::now();
        session.run(inputs()).unwrap();
        t.elapsed()
    };
    assert!(full > Duration::from_millis(150), "the chain is too short to test a stop ({full:?})");
    assert!(matches!(result, Err(Error::Terminated)), "the run was not stopped");
    assert!(stopped_after < full, "the stopped run took as long as a whole one ({stopped_after:?} vs {full:?})");
}

#[test]
fn the_interrupt_check_runs_on_the_calling_thread_and_can_stop_the_run() {
    let session = chain(400);
    let calls = Arc::new(AtomicUsize::new(0));
    let caller = std::thread::current().id();
    let seen = calls.clone();
    let options = RunOptions::new().with_interrupt_check(move || {
        assert_eq!(std::thread::current().id(), caller, "the check ran on another thread");
        seen.fetch_add(1, Ordering::Relaxed) >= 2
    });
    let result = session.run_with_options(inputs(), &options);
    assert!(matches!(result, Err(Error::Terminated)), "the run was not stopped");
    assert!(calls.load(Ordering::Relaxed) >= 3);
    // The interrupt stopped that run only: the options' terminate flag is still clear. The
    // stopped run was long, so the next one is watched too.
    assert!(!options.is_terminated());
    assert!(matches!(session.run_with_options(inputs(), &options), Err(Error::Terminated)));

    // A check that never answers true leaves the run's result as it is.
    let quiet = RunOptions::new().with_interrupt_check(|| false);
    let got = chain(3).run_with_options(inputs(), &quiet).unwrap();
    let want = chain(3).run(inputs()).unwrap();
    assert_eq!(floats(&got), floats(&want));
}
