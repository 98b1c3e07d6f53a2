//! The GPU's cost per compute dispatch, the floor under every kernel Onyx records: run
//! `cargo run --release -p onyx-wgpu --example dispatch_cost [ELEMENTS]` on the machine to
//! measure (ELEMENTS: floats each dispatch adds 1 to, 64 by default).
//!
//! Times 400 dispatches of one small kernel in one submission (median of 15) against one, in
//! three patterns: a chain (each reads the previous one's output: wgpu puts a barrier between
//! them), independent (all read one buffer, each writes its own: no barriers) and the same
//! buffers each time (dependent; a bind group per dispatch, as in a run); each with all
//! dispatches in one compute pass, and with a pass per dispatch. BENCHMARKS.md (2026-11-29, session 32) has the H200's figures.

use std::error::Error;
use std::time::Instant;

use onyx_wgpu::{wgpu, GpuContext, WgpuOptions};

const SHADER: &str = r#"
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < p[0]) { y[g.x] = x[g.x] + 1.0; }
}
"#;

/// Dispatches per submission.
const DISPATCHES: usize = 400;

fn main() -> Result<(), Box<dyn Error>> {
    let elements: u32 = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(64);
    let ctx = GpuContext::new(&WgpuOptions::default())?;
    let (device, queue) = (ctx.device(), ctx.queue());
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let layout = pipeline.get_bind_group_layout(0);
    let buffer = |size: u64| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    };
    let params = buffer(16);
    queue.write_buffer(&params, 0, bytemuck::cast_slice(&[elements, 0, 0, 0]));
    let buffers: Vec<wgpu::Buffer> = (0..=DISPATCHES).map(|_| buffer(u64::from(elements.max(1)) * 4)).collect();
    let bind = |x: &wgpu::Buffer, y: &wgpu::Buffer| {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: x.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: y.as_entire_binding() },
            ],
        })
    };
    let chain: Vec<_> = (0..DISPATCHES).map(|i| bind(&buffers[i], &buffers[i + 1])).collect();
    let independent: Vec<_> = (0..DISPATCHES).map(|i| bind(&buffers[0], &buffers[i + 1])).collect();
    let same: Vec<_> = (0..DISPATCHES).map(|_| bind(&buffers[0], &buffers[1])).collect();
    let groups = elements.div_ceil(64).max(1);
    // Median microseconds from submission to completion of the dispatches of `bind_groups`.
    let time = |bind_groups: &[wgpu::BindGroup], pass_each: bool| -> Result<f64, Box<dyn Error>> {
        let mut times = vec![];
        for _ in 0..15 {
            let mut encoder = device.create_command_encoder(&Default::default());
            let passes = if pass_each { bind_groups.len() } else { 1 };
            let per_pass = bind_groups.len() / passes;
            for chunk in bind_groups.chunks(per_pass) {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                for bind_group in chunk {
                    pass.set_bind_group(0, bind_group, &[]);
                    pass.dispatch_workgroups(groups, 1, 1);
                }
            }
            let commands = encoder.finish();
            let start = Instant::now();
            let index = queue.submit([commands]);
            device.poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    println!("{} ({elements} elements a dispatch)", ctx.adapter_info().name);
    for (name, bind_groups) in [("chain", &chain), ("independent", &independent), ("same buffers", &same)] {
        for pass_each in [false, true] {
            let (one, all) = (time(&bind_groups[..1], pass_each)?, time(bind_groups, pass_each)?);
            let per = (all - one) / (DISPATCHES - 1) as f64;
            let passes = if pass_each { "a pass each" } else { "one pass" };
            println!("{name:12} {passes:12} 1 dispatch {one:8.1} us, {DISPATCHES}: {all:9.1} us, {per:6.2} us per extra dispatch");
        }
    }
    Ok(())
}
