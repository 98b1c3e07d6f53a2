//! The wgpu EP through the facade: sessions on the GPU against the CPU, IO binding with zero
//! host copies, wrapped application buffers, concurrent runs, and the errors bad bindings give.
//!
//! Without an adapter these tests print a note and pass, except with `CI=true` (CI installs
//! Mesa's software Vulkan), where they fail.
#![cfg(feature = "wgpu")]

use std::sync::Arc;

use onyx::gpu::{wgpu, WgpuProvider};
use onyx::ir::{Graph, Model, Node};
use onyx::types::{Dim, TensorType, ValueInfo, ValueType};
use onyx::{DataType, Device, IoBinding, Provider, SessionBuilder, Tensor, Value};

/// The shared wgpu provider, or `None` (outside CI) when there is no adapter.
fn gpu() -> Option<Arc<WgpuProvider>> {
    match onyx::shared_wgpu(&Default::default()) {
        Ok(p) => Some(p),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI=true and no wgpu adapter: {e}"),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

fn random(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (0..n).map(|_| rng.f32() * 4.0 - 2.0).collect::<Vec<f32>>()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "element {i}: {g} vs {w}");
    }
}

/// y = Relu(x * w + b) - x, with w and b initializers: GPU nodes only.
fn small_model(n: usize) -> Model {
    let tensor = |dims: &[usize]| {
        ValueType::Tensor(TensorType {
            dtype: DataType::Float,
            shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
        })
    };
    let node = |op: &str, inputs: &[&str], output: &str| Node {
        name: output.into(),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        ..Default::default()
    };
    let mut graph = Graph {
        nodes: vec![
            node("Mul", &["x", "w"], "xw"),
            node("Add", &["xw", "b"], "s"),
            node("Relu", &["s"], "r"),
            node("Sub", &["r", "x"], "y"),
        ],
        inputs: vec![ValueInfo::new("x", tensor(&[2, n]))],
        outputs: vec![ValueInfo::new("y", tensor(&[2, n]))],
        ..Default::default()
    };
    graph.initializers.insert("w".into(), random(&[n], 1));
    graph.initializers.insert("b".into(), random(&[1], 2));
    let mut model = Model { ir_version: 10, graph, ..Default::default() };
    model.opsets.insert(String::new(), 17);
    model
}

fn cpu_result(model: Model, x: &Tensor) -> Vec<f32> {
    let session = SessionBuilder::new().with_providers([Provider::Cpu]).commit_from_model(model).unwrap();
    floats(session.run([("x", x.clone())]).unwrap().get("y").unwrap())
}

fn gpu_session(model: Model, gpu: &Arc<WgpuProvider>) -> onyx::Session {
    SessionBuilder::new()
        .with_providers([Provider::Custom(gpu.clone())])
        .with_cpu_fallback(false)
        .commit_from_model(model)
        .unwrap()
}

#[test]
fn a_session_on_the_gpu_matches_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let x = random(&[2, 1001], 3);
    let session = gpu_session(small_model(1001), &gpu);
    assert!(session.assignments().iter().all(|a| a.provider == "wgpu"));
    let got = floats(session.run([("x", x.clone())]).unwrap().get("y").unwrap());
    assert_close(&got, &cpu_result(small_model(1001), &x));
}

#[test]
fn a_bound_run_on_gpu_values_copies_nothing_between_host_and_device() {
    if gpu().is_none() {
        return;
    }
    // A device of its own, so that other tests' copies do not show in its counters.
    let gpu = Arc::new(WgpuProvider::new(&Default::default()).unwrap());
    let ctx = gpu.context().unwrap();
    let x = random(&[2, 333], 4);
    let session = gpu_session(small_model(333), &gpu);
    let x_gpu = ctx.upload(x.view().unwrap()).unwrap();
    let before = ctx.transfer_counts();
    let mut outputs = vec![];
    for _ in 0..3 {
        let mut binding = IoBinding::new();
        binding.bind_input("x", x_gpu.clone()).bind_output_to_device("y", gpu.context().unwrap().onyx_device());
        outputs.push(session.run_with_binding(binding).unwrap());
    }
    assert_eq!(ctx.transfer_counts(), before, "a bound GPU run made host copies");
    let y = outputs[2].get("y").unwrap().as_tensor().unwrap();
    assert!(matches!(y.device(), Device::Wgpu(_)));
    let host = ctx.download(y).unwrap();
    assert_close(host.as_slice::<f32>().unwrap(), &cpu_result(small_model(333), &x));
}

/// A buffer of the application's, with the usages a tensor needs, holding `data`.
fn app_buffer(ctx: &onyx::gpu::GpuContext, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("app"),
        size: bytes,
        usage,
        mapped_at_creation: false,
    })
}

#[test]
fn wrapped_application_buffers_are_read_and_written_in_place() {
    let Some(gpu) = gpu() else { return };
    let ctx = gpu.context().unwrap();
    let n = 77;
    let x = random(&[2, n], 5);
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let input = app_buffer(ctx, 4 * 2 * n as u64, usage);
    ctx.queue().write_buffer(&input, 0, x.view().unwrap().bytes().unwrap());
    // The output goes 256 bytes into a larger buffer of the application's.
    let output = app_buffer(ctx, 256 + 4 * 2 * n as u64, usage);
    let x_gpu = ctx.wrap_buffer(&input, 0, DataType::Float, vec![2, n]).unwrap();
    let y_gpu = ctx.wrap_buffer(&output, 256, DataType::Float, vec![2, n]).unwrap();
    let session = gpu_session(small_model(n), &gpu);
    let mut binding = IoBinding::new();
    binding.bind_input("x", x_gpu).bind_output("y", y_gpu.clone());
    let outputs = session.run_with_binding(binding).unwrap();
    let y = outputs.get("y").unwrap().as_tensor().unwrap();
    assert_eq!(onyx::gpu::gpu_buffer(y).unwrap().offset(), 256, "the output is the bound tensor");
    let host = ctx.download(&y_gpu).unwrap();
    assert_close(host.as_slice::<f32>().unwrap(), &cpu_result(small_model(n), &x));
}

#[test]
fn bad_buffers_and_bindings_are_named_errors() {
    let Some(gpu) = gpu() else { return };
    let ctx = gpu.context().unwrap();
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let small = app_buffer(ctx, 64, storage);
    let e = ctx.wrap_buffer(&small, 0, DataType::Float, vec![2, 77]).unwrap_err().to_string();
    assert!(e.contains("needs 616 bytes") && e.contains("64"), "{e}");
    let no_storage = app_buffer(ctx, 1024, wgpu::BufferUsages::COPY_SRC);
    let e = ctx.wrap_buffer(&no_storage, 0, DataType::Float, vec![4]).unwrap_err().to_string();
    assert!(e.contains("STORAGE"), "{e}");
    let big = app_buffer(ctx, 4096, storage);
    let e = ctx.wrap_buffer(&big, 4, DataType::Float, vec![4]).unwrap_err().to_string();
    assert!(e.contains("offset 4"), "{e}");

    let other = WgpuProvider::new(&Default::default()).unwrap();
    let foreign = app_buffer(other.context().unwrap(), 4096, storage);
    let e = ctx.wrap_buffer(&foreign, 0, DataType::Float, vec![4]).unwrap_err().to_string();
    assert!(e.contains("another device"), "{e}");
    ctx.wrap_buffer(&big, 0, DataType::Float, vec![4]).expect("a buffer of this device wraps");

    let session = gpu_session(small_model(77), &gpu);
    let wrong_shape = ctx.upload(random(&[3, 77], 1).view().unwrap()).unwrap();
    let mut binding = IoBinding::new();
    binding.bind_input("x", wrong_shape).bind_output_to_device("y", gpu.context().unwrap().onyx_device());
    let e = session.run_with_binding(binding).unwrap_err().to_string();
    assert!(e.contains("'x'") && e.contains('3'), "{e}");

    let x = ctx.upload(random(&[2, 77], 1).view().unwrap()).unwrap();
    let wrong_out = ctx.alloc(DataType::Float, vec![77]).unwrap();
    let mut binding = IoBinding::new();
    binding.bind_input("x", x.clone()).bind_output("y", wrong_out);
    let e = session.run_with_binding(binding).unwrap_err().to_string();
    assert!(e.contains("'y'") && e.contains("[77]"), "{e}");

    let mut binding = IoBinding::new();
    binding.bind_input("x", x).bind_output_to_device("nope", Device::Cpu);
    let e = session.run_with_binding(binding).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn concurrent_runs_on_one_gpu_session_are_correct() {
    let Some(gpu) = gpu() else { return };
    let session = Arc::new(gpu_session(small_model(513), &gpu));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let session = session.clone();
            std::thread::spawn(move || {
                for r in 0..10 {
                    let x = random(&[2, 513], 100 * t + r);
                    let got = floats(session.run([("x", x.clone())]).unwrap().get("y").unwrap());
                    assert_close(&got, &cpu_result(small_model(513), &x));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn nodes_the_gpu_cannot_run_fall_back_to_the_cpu_with_copies() {
    let Some(gpu) = gpu() else { return };
    // Einsum has no wgpu kernel.
    let mut model = small_model(64);
    model.graph.nodes.push(Node {
        name: "einsum".into(),
        op_type: "Einsum".into(),
        inputs: vec!["y".into()],
        outputs: vec!["z".into()],
        attributes: vec![onyx::ir::Attribute {
            name: "equation".into(),
            value: onyx::ir::AttrValue::String(b"ij->ij".to_vec()),
        }],
        ..Default::default()
    });
    model.graph.outputs[0].name = "z".into();
    let cpu = SessionBuilder::new().with_providers([Provider::Cpu]).commit_from_model(model.clone()).unwrap();
    let mixed =
        SessionBuilder::new().with_providers([Provider::Custom(gpu.clone())]).commit_from_model(model.clone()).unwrap();
    assert!(mixed.assignments().iter().any(|a| a.provider == "cpu"));
    assert!(mixed.copies_per_run() >= 1);
    let x = random(&[2, 64], 9);
    let want = floats(cpu.run([("x", x.clone())]).unwrap().get("z").unwrap());
    assert_close(&floats(mixed.run([("x", x)]).unwrap().get("z").unwrap()), &want);
    let e = SessionBuilder::new()
        .with_providers([Provider::Custom(gpu)])
        .with_cpu_fallback(false)
        .commit_from_model(model)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("einsum") && e.contains("fallback"), "{e}");
}

#[test]
fn a_lost_device_gives_errors_not_panics_or_hangs() {
    if gpu().is_none() {
        return;
    }
    let gpu = Arc::new(WgpuProvider::new(&Default::default()).unwrap());
    let session = gpu_session(small_model(40), &gpu);
    let x = random(&[2, 40], 9);
    let resident = gpu.context().unwrap().upload(x.view().unwrap()).unwrap();
    session.run([("x", x.clone())]).expect("runs before the loss");
    gpu.context().unwrap().device().destroy();
    let e = session.run([("x", x.clone())]).unwrap_err().to_string();
    assert!(e.contains("lost"), "{e}");
    let e = gpu.context().unwrap().download(&resident).unwrap_err().to_string();
    assert!(e.contains("lost"), "{e}");
    let e = gpu.context().unwrap().upload(x.view().unwrap()).unwrap_err().to_string();
    assert!(e.contains("lost"), "{e}");
}

/// bert4 (4 encoder layers, `scripts/make_test_models.py`) with its batch and sequence fixed,
/// so the optimizer fuses each attention block: the fused attention nodes run on the GPU and
/// the outputs match ONNX Runtime's.
#[test]
fn bert_with_fused_attention_on_the_gpu_matches_onnx_runtime() {
    let Some(gpu) = gpu() else { return };
    let dir = std::env::var_os("ONYX_TEST_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/testmodels"))
        .join("bert4");
    if !dir.join("model.onnx").exists() {
        eprintln!("no generated test models: run scripts/test.sh");
        return;
    }
    let read = |f: &str| onyx::npy::read(&dir.join(f)).unwrap();
    let ids = read("inputs/input_ids.npy");
    let dims = ids.shape().to_vec();
    let session = SessionBuilder::new()
        .with_providers([Provider::Custom(gpu)])
        .with_free_dimension_override_by_name("batch", dims[0])
        .with_free_dimension_override_by_name("sequence", dims[1])
        .commit_from_file(dir.join("model.onnx"))
        .unwrap();
    // PackedAttention: q, k and v read in place from their projections, packed into one product.
    let attention = |a: &onyx::NodeAssignment| a.op == "Attention" || a.op == "PackedAttention";
    let on_gpu = session.assignments().iter().filter(|a| attention(a) && a.provider == "wgpu").count();
    assert_eq!(on_gpu, 4, "{:?}", session.assignments());
    // Each block's output projection and second MLP product feed a SkipLayerNormalization:
    // GemmSkipLayerNormalization, which sums the product's split-K slices as it normalizes.
    let fused_norms = session.assignments().iter().filter(|a| a.op == "GemmSkipLayerNormalization").count();
    assert_eq!(fused_norms, 8, "{:?}", session.assignments());
    let outputs = session.run([("input_ids", ids), ("attention_mask", read("inputs/attention_mask.npy"))]).unwrap();
    for entry in std::fs::read_dir(dir.join("outputs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let want = onyx::npy::read(&path).unwrap();
        let got = outputs.get(&name).unwrap();
        let want = want.as_slice::<f32>().unwrap();
        let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
        for (i, (g, w)) in floats(got).iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * scale, "{name}[{i}]: {g} vs {w}");
        }
    }
}

/// `host_stats().device_buffer_bytes` (what `onyx bench` reports as peak device memory) counts
/// the device buffers Onyx holds.
#[test]
fn device_buffer_memory_is_counted() {
    if gpu().is_none() {
        return;
    }
    // A device of its own, so that other tests' buffers do not move the count.
    let ctx = onyx::gpu::GpuContext::new(&Default::default()).unwrap();
    let before = ctx.host_stats().device_buffer_bytes;
    let tensor = ctx.alloc(DataType::Float, vec![1 << 20]).unwrap();
    let after = ctx.host_stats().device_buffer_bytes;
    assert!(after >= before + (4 << 20), "{before} -> {after}");
    drop(tensor);
}

#[test]
fn pipelines_kept_on_disk_serve_a_later_provider_with_the_same_results() {
    if gpu().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("onyx-gpu-test-pipeline-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = onyx::gpu::WgpuOptions::default();
    options.set("pipeline_cache_dir", dir.to_str().unwrap()).unwrap();
    let x = random(&[2, 777], 5);
    let want = cpu_result(small_model(777), &x);
    let mut written = 0;
    for start in 0..2 {
        // A provider of its own each time, as a later process opens one.
        let gpu = Arc::new(WgpuProvider::new(&options).unwrap());
        let session = gpu_session(small_model(777), &gpu);
        assert_close(&floats(session.run([("x", x.clone())]).unwrap().get("y").unwrap()), &want);
        drop(session); // waits for its pipelines, and so for the cache's write
        let ctx = gpu.context().unwrap();
        let Some(cache) = ctx.pipeline_cache() else {
            assert!(!ctx.device().features().contains(wgpu::Features::PIPELINE_CACHE), "no cache on a Vulkan device");
            return;
        };
        assert_eq!((&cache.rejected, &cache.save_error), (&None, &None));
        if start == 0 {
            assert_eq!(cache.loaded_bytes, 0);
            assert!(cache.saved_bytes > 0 && cache.path.starts_with(&dir), "{cache:?}");
            written = std::fs::metadata(&cache.path).unwrap().len();
        } else {
            assert_eq!(cache.loaded_bytes as u64, written);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
