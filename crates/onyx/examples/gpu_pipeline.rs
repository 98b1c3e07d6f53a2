//! The GPU pipeline: pre-processing, inference and post-processing on one queue of the
//! application's own device, with one readback at the end and no CPU wait between stages.
//!
//! 1. The application owns the wgpu device and queue, and an RGBA8 image in a buffer.
//! 2. Its compute shader normalizes the image into an `f32` NCHW buffer.
//! 3. Onyx runs a CNN on that buffer (wrapped, not copied) and writes the logits into another
//!    buffer of the application's, through an `IoBinding`.
//! 4. The application's second shader computes softmax and the top 5 classes from the logits.
//! 5. One readback of 5 (class, probability) pairs.
//!
//! Run: `cargo run --release --example gpu_pipeline` (any Vulkan, Metal or DX12 GPU; on Linux
//! without one, Mesa's lavapipe: package mesa-vulkan-drivers).

use std::sync::Arc;

use onyx::gpu::{wgpu, GpuContext, WgpuOptions, WgpuProvider};
use onyx::{DataType, IoBinding, Provider, SessionBuilder};

const SIDE: u32 = 32;
const CLASSES: u32 = 10;
const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/tiny_cnn/tiny_cnn.onnx");

const NORMALIZE: &str = r#"
@group(0) @binding(0) var<storage, read> rgba: array<u32>;
@group(0) @binding(1) var<storage, read_write> nchw: array<f32>;
const SIDE: u32 = 32u;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = gid.x;
    if (p >= SIDE * SIDE) { return; }
    let px = unpack4x8unorm(rgba[p]);
    let mean = vec3<f32>(0.485, 0.456, 0.406);
    let sd = vec3<f32>(0.229, 0.224, 0.225);
    let v = (px.rgb - mean) / sd;
    nchw[p] = v.r;
    nchw[SIDE * SIDE + p] = v.g;
    nchw[2u * SIDE * SIDE + p] = v.b;
}
"#;

const TOP5: &str = r#"
@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> top: array<vec2<f32>>;
@compute @workgroup_size(1)
fn main() {
    var m = logits[0];
    for (var i = 1u; i < 10u; i++) { m = max(m, logits[i]); }
    var sum = 0.0;
    for (var i = 0u; i < 10u; i++) { sum += exp(logits[i] - m); }
    var taken = 0u;
    for (var k = 0u; k < 5u; k++) {
        var best = 0u;
        var best_v = -1.0;
        for (var i = 0u; i < 10u; i++) {
            let p = exp(logits[i] - m) / sum;
            if ((taken & (1u << i)) == 0u && p > best_v) { best = i; best_v = p; }
        }
        taken |= 1u << best;
        top[k] = vec2<f32>(f32(best), best_v);
    }
}
"#;

/// A test image: smooth colour gradients with a bright square, as RGBA8 pixels.
fn image() -> Vec<u32> {
    (0..SIDE * SIDE)
        .map(|p| {
            let (x, y) = (p % SIDE, p / SIDE);
            let square = (10..22).contains(&x) && (8..20).contains(&y);
            let r = if square { 250 } else { x * 8 };
            let g = if square { 240 } else { y * 8 };
            let b = (x + y) * 4;
            r | (g << 8) | (b << 16) | (255 << 24)
        })
        .collect()
}

/// One compute pass of `shader` over `groups` workgroups with `buffers` bound in order.
fn dispatch(device: &wgpu::Device, queue: &wgpu::Queue, shader: &str, buffers: &[&wgpu::Buffer], groups: u32) {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(shader.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let entries: Vec<_> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
        .collect();
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    }
    queue.submit([encoder.finish()]);
}

fn buffer(device: &wgpu::Device, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage, mapped_at_creation: false })
}

/// Runs the whole pipeline and returns the top 5 (class, probability) pairs.
fn pipeline() -> onyx::Result<Vec<(u32, f32)>> {
    // 1. The application's device and queue.
    let adapter = onyx::gpu::adapters(&WgpuOptions::default())
        .into_iter()
        .next()
        .ok_or_else(|| onyx::Error::Device("no GPU adapter".into()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default()))
        .map_err(|e| onyx::Error::Device(e.to_string()))?;
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let pixels = buffer(&device, 4 * (SIDE * SIDE) as u64, storage);
    let input = buffer(&device, 4 * 3 * (SIDE * SIDE) as u64, storage);
    let logits = buffer(&device, 4 * CLASSES as u64, storage);
    let top = buffer(&device, 8 * 5, storage);
    let readback = buffer(&device, 8 * 5, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
    queue.write_buffer(&pixels, 0, bytemuck::cast_slice(&image()));

    // 2. Pre-processing on the application's queue.
    dispatch(&device, &queue, NORMALIZE, &[&pixels, &input], (SIDE * SIDE).div_ceil(64));

    // 3. Inference on the same queue: Onyx wraps the application's buffers.
    let ctx: Arc<GpuContext> = GpuContext::from_device(device.clone(), queue.clone(), adapter.get_info());
    let provider = Arc::new(WgpuProvider::with_context(ctx.clone()));
    let session = SessionBuilder::new().with_providers([Provider::Custom(provider)]).commit_from_file(MODEL)?;
    let mut binding = IoBinding::new();
    binding
        .bind_input("image", ctx.wrap_buffer(&input, 0, DataType::Float, vec![1, 3, SIDE as usize, SIDE as usize])?)
        .bind_output("logits", ctx.wrap_buffer(&logits, 0, DataType::Float, vec![1, CLASSES as usize])?);
    session.run_with_binding(binding)?; // submitted, not waited for

    // 4. Post-processing, ordered after the inference by the queue.
    dispatch(&device, &queue, TOP5, &[&logits, &top], 1);

    // 5. The one readback.
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&top, 0, &readback, 0, 8 * 5);
    queue.submit([encoder.finish()]);
    readback.map_async(wgpu::MapMode::Read, .., |_| {});
    device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| onyx::Error::Device(e.to_string()))?;
    let view = readback.get_mapped_range(..).map_err(|e| onyx::Error::Device(e.to_string()))?;
    let pairs: &[[f32; 2]] = bytemuck::cast_slice(&view);
    Ok(pairs.iter().map(|[c, p]| (*c as u32, *p)).collect())
}

fn main() -> onyx::Result<()> {
    for (rank, (class, p)) in pipeline()?.iter().enumerate() {
        println!("{}. class {class}: {:.4}", rank + 1, p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pipeline's top 5 equal softmax(logits) of the CPU EP on the same normalized image.
    #[test]
    fn the_gpu_pipeline_agrees_with_the_cpu() {
        let top = match pipeline() {
            Ok(t) => t,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipping: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let mut nchw = vec![0f32; 3 * (SIDE * SIDE) as usize];
        let (mean, std) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
        for (p, px) in image().iter().enumerate() {
            for c in 0..3 {
                let v = ((px >> (8 * c)) & 255) as f32 / 255.0;
                nchw[c * (SIDE * SIDE) as usize + p] = (v - mean[c]) / std[c];
            }
        }
        let cpu = SessionBuilder::new().with_providers([Provider::Cpu]).commit_from_file(MODEL).unwrap();
        let shape = [1, 3, SIDE as usize, SIDE as usize];
        let out = cpu.run([("image", onyx::TensorView::from_slice(&shape, &nchw).unwrap())]).unwrap();
        let logits = out.get("logits").unwrap().as_tensor().unwrap().as_slice::<f32>().unwrap().to_vec();
        let m = logits.iter().cloned().fold(f32::MIN, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - m).exp()).sum();
        let mut want: Vec<(u32, f32)> =
            logits.iter().enumerate().map(|(i, l)| (i as u32, (l - m).exp() / sum)).collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1));
        for ((gc, gp), (wc, wp)) in top.iter().zip(&want) {
            assert!((gp - wp).abs() < 1e-4, "probability {gp} vs {wp}");
            assert!(gc == wc || (gp - wp).abs() < 1e-4, "class {gc} vs {wc}");
        }
    }
}
