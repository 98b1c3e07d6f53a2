//! Many threads running one session at once, on the CPU and on wgpu: each output equals the
//! single-threaded run of the same input. And an ignored leak check: resident memory over
//! 100,000 runs (`cargo test -p onyx --test stress -- --ignored --nocapture`).

use onyx::{Session, SessionBuilder, Tensor};
use std::path::{Path, PathBuf};

const THREADS: usize = 16;

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../models/{name}/{name}.onnx"))
}

fn random(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (0..n).map(|_| rng.f32() * 4.0 - 2.0).collect::<Vec<f32>>()).unwrap()
}

fn run(session: &Session, input: &Tensor) -> Vec<f32> {
    let name = session.inputs()[0].name.clone();
    let out = session.run([(name, input.clone())]).unwrap();
    out[0].as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
}

/// Runs `inputs` single-threaded, then `runs` runs on each of [`THREADS`] threads (each thread
/// its own order of inputs) and checks every output against the single-threaded one.
fn stress(session: &Session, inputs: &[Tensor], runs: usize) {
    let expected: Vec<Vec<f32>> = inputs.iter().map(|x| run(session, x)).collect();
    // Different inputs give different outputs: a run that returned another run's result fails.
    assert!(expected.windows(2).all(|w| w[0] != w[1]));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (expected, session) = (&expected, session);
            s.spawn(move || {
                for r in 0..runs {
                    let i = (t * 7 + r * 3) % inputs.len();
                    let got = run(session, &inputs[i]);
                    assert_eq!(got.len(), expected[i].len(), "thread {t} run {r} input {i}");
                    for (k, (g, w)) in got.iter().zip(&expected[i]).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-6 + 1e-5 * w.abs(),
                            "thread {t} run {r} input {i} element {k}: {g} vs {w}"
                        );
                    }
                }
            });
        }
    });
}

#[test]
fn sixteen_threads_on_one_cpu_session() {
    // digits: float[batch,1,8,8]; batches 1 to 5, so runs also share the plan cache.
    let session = SessionBuilder::new().with_intra_threads(2).commit_from_file(model("digits")).unwrap();
    let inputs: Vec<Tensor> = (0..24).map(|i| random(&[1 + i % 5, 1, 8, 8], 100 + i as u64)).collect();
    stress(&session, &inputs, 200);
}

#[test]
fn sixteen_threads_on_one_cpu_session_of_a_cnn() {
    let session = SessionBuilder::new().with_intra_threads(2).commit_from_file(model("tiny_cnn")).unwrap();
    let inputs: Vec<Tensor> = (0..8).map(|i| random(&[1, 3, 32, 32], 200 + i)).collect();
    stress(&session, &inputs, 25);
}

/// The shared wgpu provider, or `None` (outside CI) when there is no adapter.
#[cfg(feature = "wgpu")]
fn gpu() -> Option<std::sync::Arc<onyx::gpu::WgpuProvider>> {
    match onyx::shared_wgpu(&Default::default()) {
        Ok(p) => Some(p),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI=true and no wgpu adapter: {e}"),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn sixteen_threads_on_one_wgpu_session() {
    let Some(gpu) = gpu() else { return };
    let session = SessionBuilder::new()
        .with_providers([onyx::Provider::Custom(gpu)])
        .commit_from_file(model("tiny_cnn"))
        .unwrap();
    assert!(session.assignments().iter().any(|a| a.provider == "wgpu"), "no node runs on wgpu");
    let inputs: Vec<Tensor> = (0..8).map(|i| random(&[1, 3, 32, 32], 300 + i)).collect();
    stress(&session, &inputs, 12);
}

/// Resident memory of this process in bytes, from /proc/self/statm.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm (Linux)");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Runs `session` 10,000 times to warm up, then 100,000 times, sampling resident memory, and
/// fails if it grew by more than 4 MiB.
fn resident_memory_stays_flat(session: &Session) {
    let inputs: Vec<Tensor> = (0..4).map(|i| random(&[1 + i, 1, 8, 8], 400 + i as u64)).collect();
    for i in 0..10_000 {
        run(session, &inputs[i % inputs.len()]);
    }
    let start = resident_bytes();
    let mut samples = vec![];
    for i in 0..100_000 {
        run(session, &inputs[i % inputs.len()]);
        if i % 20_000 == 19_999 {
            samples.push(resident_bytes());
        }
    }
    let end = resident_bytes();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "resident after warm-up {:.2} MiB, every 20k runs {:?} MiB, growth over 100k runs {:.3} MiB",
        mib(start),
        samples.iter().map(|&b| (mib(b) * 100.0).round() / 100.0).collect::<Vec<_>>(),
        mib(end) - mib(start)
    );
    assert!(end < start + (4 << 20), "resident memory grew from {start} to {end} bytes");
}

#[test]
#[ignore = "100,000 runs: run by hand, the figure is in docs/robustness.md"]
fn resident_memory_stays_flat_over_100k_cpu_runs() {
    resident_memory_stays_flat(&SessionBuilder::new().with_intra_threads(1).commit_from_file(model("digits")).unwrap());
}

#[cfg(feature = "wgpu")]
#[test]
#[ignore = "100,000 runs: run by hand, the figure is in docs/robustness.md"]
fn resident_memory_stays_flat_over_100k_wgpu_runs() {
    let Some(gpu) = gpu() else { return };
    let session =
        SessionBuilder::new().with_providers([onyx::Provider::Custom(gpu)]).commit_from_file(model("digits")).unwrap();
    assert!(session.assignments().iter().any(|a| a.provider == "wgpu"), "no node runs on wgpu");
    resident_memory_stays_flat(&session);
}
