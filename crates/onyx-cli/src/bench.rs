//! `onyx bench`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use onyx::gpu::{GpuContext, HostStats, PipelineCacheStatus, SubmitProfile};
use onyx::{Error, Result};

use crate::{run::gather_inputs, SessionArgs};

/// What `onyx bench` measures.
pub struct Options {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Print one JSON object as the last line.
    pub json: bool,
    /// Time every GPU dispatch of a few more runs and list the most expensive kernels.
    pub profile: bool,
}

/// Runs timed per dispatch with `--profile` (each waits for the GPU, so they are not timed).
const PROFILED_RUNS: usize = 10;

/// Kernels listed with `--profile`.
const TOP_KERNELS: usize = 25;

/// Bytes in MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Peak resident memory of this process in bytes (Linux `VmHWM`; 0 where unknown).
pub(crate) fn peak_host_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Times session creation, the first run, and `runs` runs after `warmup` untimed ones (on wgpu,
/// once every pipeline is compiled).
pub fn bench(model: &Path, inputs: &[String], options: Options, args: &SessionArgs) -> Result<()> {
    let Options { warmup, runs, json, profile } = options;
    let gpu = if profile && !crate::profile_cpu::is_cpu(args) { Some(wgpu_context(args)?) } else { None };
    if runs == 0 {
        return Err(onyx::Error::InvalidArgument("--runs: expected at least 1".into()));
    }
    let stats = |gpu: &Option<Arc<GpuContext>>| gpu.as_ref().map(|g| g.host_stats()).unwrap_or_default();
    // Without --profile the GPU opens inside the timed creation, as in an application.
    let before = stats(&gpu);
    let start = Instant::now();
    let session = args.builder()?.commit_from_file(model)?;
    let session_create_ms = start.elapsed().as_secs_f64() * 1e3;
    let shared = shared_gpu(args)?;
    let created = stats(&shared);
    let inputs = gather_inputs(&session, inputs)?;
    let start = Instant::now();
    session.run(inputs.clone())?;
    let first_run_ms = start.elapsed().as_secs_f64() * 1e3;
    // The warm-ups and timed runs measure the tuned kernels: the startup kernels stand in for
    // them only until their pipelines are compiled.
    if let Some(gpu) = &shared {
        gpu.wait_for_pipelines();
    }
    for _ in 0..warmup {
        session.run(inputs.clone())?;
    }
    let warm = stats(&shared);
    let bar = indicatif::ProgressBar::new(runs as u64);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        session.run(inputs.clone())?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let host = shared.as_ref().map(|g| GpuHost {
        open_ms: g.open_ms(),
        before,
        created,
        warm,
        after: stats(&shared),
        runs,
        slowest: g.compile_times().into_iter().take(SLOWEST_COMPILES).collect(),
        cache: g.pipeline_cache(),
    });
    let samples = times.clone();
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let report = serde_json::json!({
        "model": model.display().to_string(),
        "providers": session.provider_names(),
        "session_create_ms": session_create_ms,
        "first_run_ms": first_run_ms,
        "runs": runs,
        "warmup": warmup,
        "p50_ms": percentile(&times, 50.0),
        "p90_ms": percentile(&times, 90.0),
        "p99_ms": percentile(&times, 99.0),
        "min_ms": times.first().copied().unwrap_or(f64::NAN),
        "mean_ms": mean,
        "samples_ms": samples,
        "peak_host_bytes": peak_host_bytes(),
    });
    println!("model            {}", model.display());
    println!("providers        {}", session.provider_names().join(", "));
    println!("session create   {session_create_ms:.2} ms");
    println!("first run        {first_run_ms:.2} ms");
    println!(
        "latency ({runs} runs) p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  min {:.3} ms  mean {mean:.3} ms",
        percentile(&times, 50.0),
        percentile(&times, 90.0),
        percentile(&times, 99.0),
        times.first().copied().unwrap_or(f64::NAN)
    );
    println!("peak host memory {:.1} MiB", peak_host_bytes() as f64 / (1 << 20) as f64);
    let mut report = report;
    if let Some(host) = host {
        host.print();
        report["wgpu"] = host.json();
    }
    if let Some(gpu) = gpu {
        gpu.take_profiles();
        gpu.set_profiling(true)?;
        let result = (0..PROFILED_RUNS).try_for_each(|_| session.run(inputs.clone()).map(drop));
        gpu.set_profiling(false)?;
        result?;
        let summary = ProfileSummary::new(&gpu.take_profiles(), PROFILED_RUNS);
        summary.print(percentile(&times, 50.0) * 1e3);
        report["profile"] = summary.json();
    }
    crate::profile_cpu::maybe_profile(profile, runs, args, &session, &inputs, percentile(&times, 50.0), &mut report)?;
    if json {
        println!("{report}");
    }
    Ok(())
}

/// What the wgpu provider's host side cost: pipelines made while the session was created, and
/// per timed run the dispatches, recording time and bind groups reused.
struct GpuHost {
    /// Milliseconds the GPU device took to open.
    open_ms: f64,
    before: HostStats,
    created: HostStats,
    warm: HostStats,
    after: HostStats,
    runs: usize,
    /// The pipelines whose compilation took longest (key, ms): what a cold start waits for.
    slowest: Vec<(String, f64)>,
    /// The pipeline cache on disk, with `--provider-option pipeline_cache_dir=DIR`.
    cache: Option<PipelineCacheStatus>,
}

/// Pipelines listed by compile time.
const SLOWEST_COMPILES: usize = 5;

impl GpuHost {
    fn per_run(&self) -> (f64, f64, f64) {
        let runs = self.runs as f64;
        let dispatches = (self.after.dispatches - self.warm.dispatches) as f64 / runs;
        let record_us = (self.after.record_ms - self.warm.record_ms) * 1e3 / runs;
        let reused = (self.after.bind_groups_reused - self.warm.bind_groups_reused) as f64;
        let made = (self.after.bind_groups_made - self.warm.bind_groups_made) as f64;
        (dispatches, record_us, 100.0 * reused / (reused + made).max(1.0))
    }

    fn print(&self) {
        let (dispatches, record_us, reused) = self.per_run();
        println!(
            "wgpu device open {:.2} ms (adapter and device, inside session create without --profile)",
            self.open_ms
        );
        println!(
            "wgpu pipelines   {} for the session, {:.1} ms of compiling (background threads, summed; \
             the first run waits for any not done)",
            self.created.pipelines - self.before.pipelines,
            self.warm.compile_ms - self.before.compile_ms
        );
        let slowest: Vec<String> = self.slowest.iter().map(|(key, ms)| format!("{key} {ms:.1} ms")).collect();
        println!("wgpu slowest     {}", slowest.join(", "));
        if let Some(cache) = &self.cache {
            println!("wgpu cache file  {}", describe_cache(cache));
        }
        println!("wgpu per run     {dispatches:.0} dispatches, host recording {record_us:.0} us, bind groups reused {reused:.1}%");
        println!(
            "peak device memory {:.1} MiB (buffers the session and its runs hold; {:.1} MiB after session creation)",
            mib(self.after.device_buffer_bytes.saturating_sub(self.before.device_buffer_bytes)),
            mib(self.created.device_buffer_bytes.saturating_sub(self.before.device_buffer_bytes))
        );
    }

    fn json(&self) -> serde_json::Value {
        let (dispatches, record_us, reused) = self.per_run();
        serde_json::json!({
            "device_open_ms": self.open_ms,
            "session_pipelines": self.created.pipelines - self.before.pipelines,
            "compile_ms": self.warm.compile_ms - self.before.compile_ms,
            "slowest_compiles": self.slowest.iter().map(|(key, ms)| serde_json::json!({"key": key, "ms": ms})).collect::<Vec<_>>(),
            "pipeline_cache": self.cache.as_ref().map(|c| serde_json::json!({
                "path": c.path.display().to_string(),
                "loaded_bytes": c.loaded_bytes,
                "rejected": c.rejected,
                "saved_bytes": c.saved_bytes,
                "save_error": c.save_error,
            })),
            "dispatches_per_run": dispatches,
            "record_us_per_run": record_us,
            "bind_groups_reused_percent": reused,
            "peak_device_bytes": self.after.device_buffer_bytes.saturating_sub(self.before.device_buffer_bytes),
        })
    }
}

/// One line on what a pipeline cache file gave and got.
fn describe_cache(cache: &PipelineCacheStatus) -> String {
    let loaded = match &cache.rejected {
        Some(why) => format!("not used ({why})"),
        None if cache.loaded_bytes == 0 => "none yet".to_string(),
        None => format!("{:.1} KiB loaded", cache.loaded_bytes as f64 / 1024.0),
    };
    let saved = match &cache.save_error {
        Some(e) => format!("not saved: {e}"),
        None if cache.saved_bytes == 0 => "nothing new to write".to_string(),
        None => format!("{:.1} KiB written", cache.saved_bytes as f64 / 1024.0),
    };
    format!("{}: {loaded}, {saved}", cache.path.display())
}

/// The shared GPU context of the wgpu provider the session will use (the same options the
/// session builder gives the provider, so the same device), or `None` without `--provider wgpu`.
fn shared_gpu(args: &SessionArgs) -> Result<Option<Arc<GpuContext>>> {
    if !args.providers.iter().any(|p| p.eq_ignore_ascii_case("wgpu")) {
        return Ok(None);
    }
    let mut options = onyx::gpu::WgpuOptions::default();
    for (key, value) in crate::parse_pairs(&args.provider_options, "--provider-option")? {
        options.set(&key, &value)?;
    }
    Ok(Some(onyx::shared_wgpu(&options)?.context()?.clone()))
}

/// The wgpu provider's GPU the session runs on, which must be able to time dispatches.
fn wgpu_context(args: &SessionArgs) -> Result<Arc<GpuContext>> {
    let gpu = shared_gpu(args)?
        .ok_or_else(|| Error::InvalidArgument("--profile times GPU kernels: give --provider wgpu".into()))?;
    if !gpu.can_profile() {
        return Err(Error::Unsupported(format!(
            "--profile: {} has no timestamp queries inside compute passes (TIMESTAMP_QUERY_INSIDE_PASSES), \
             so single kernels cannot be timed on it",
            gpu.adapter_info().name
        )));
    }
    Ok(gpu)
}

/// One kernel of the profile: a node's dispatches of one shader variant.
#[derive(Default)]
struct KernelTotal {
    op: String,
    node: String,
    shapes: String,
    kernel: String,
    groups: [u32; 3],
    dispatches: usize,
    ns: f64,
}

/// The dispatch timings of profiled runs, summed per kernel and per op type.
struct ProfileSummary {
    runs: usize,
    kernels: Vec<KernelTotal>,
    by_op: Vec<(String, usize, f64)>,
    record_us: f64,
    submissions: usize,
}

impl ProfileSummary {
    fn new(profiles: &[SubmitProfile], runs: usize) -> ProfileSummary {
        let mut kernels: HashMap<(String, String, String, String), KernelTotal> = HashMap::new();
        let mut by_op: HashMap<String, (usize, f64)> = HashMap::new();
        for d in profiles.iter().flat_map(|p| &p.dispatches) {
            let key = (d.op.clone(), d.node.clone(), d.shapes.clone(), d.kernel.clone());
            let k = kernels.entry(key).or_insert_with(|| KernelTotal {
                op: d.op.clone(),
                node: d.node.clone(),
                shapes: d.shapes.clone(),
                kernel: d.kernel.clone(),
                groups: d.groups,
                ..Default::default()
            });
            k.dispatches += 1;
            k.ns += d.ns;
            let o = by_op.entry(if d.op.is_empty() { "(no node)".into() } else { d.op.clone() }).or_default();
            o.0 += 1;
            o.1 += d.ns;
        }
        let mut kernels: Vec<KernelTotal> = kernels.into_values().collect();
        kernels.sort_by(|a, b| b.ns.total_cmp(&a.ns));
        let mut by_op: Vec<(String, usize, f64)> = by_op.into_iter().map(|(op, (n, ns))| (op, n, ns)).collect();
        by_op.sort_by(|a, b| b.2.total_cmp(&a.2));
        let record_us = profiles.iter().map(|p| p.record_us).sum();
        ProfileSummary { runs: runs.max(1), kernels, by_op, record_us, submissions: profiles.len() }
    }

    /// GPU microseconds per run, all dispatches.
    fn gpu_us(&self) -> f64 {
        self.kernels.iter().map(|k| k.ns).sum::<f64>() / 1e3 / self.runs as f64
    }

    fn print(&self, p50_us: f64) {
        let runs = self.runs as f64;
        let total = self.gpu_us();
        let dispatches = self.kernels.iter().map(|k| k.dispatches).sum::<usize>() as f64 / runs;
        println!();
        println!(
            "profile ({} runs): {dispatches:.0} dispatches and {:.1} submissions per run; GPU {total:.0} us per run, \
             recording {:.0} us per run (p50 of the timed runs {p50_us:.0} us)",
            self.runs,
            self.submissions as f64 / runs,
            self.record_us / runs
        );
        println!("{:<14} {:>9} {:>7} {:>7}", "op", "us/run", "share", "calls");
        for (op, n, ns) in &self.by_op {
            let us = ns / 1e3 / runs;
            println!("{op:<14} {us:>9.1} {:>6.1}% {:>7.0}", 100.0 * us / total.max(1e-9), *n as f64 / runs);
        }
        println!();
        println!("{:>8} {:>6}  {:<12} {:<28} {:<22} {:<16} kernel", "us/run", "share", "op", "node", "shape", "groups");
        for k in self.kernels.iter().take(TOP_KERNELS) {
            let us = k.ns / 1e3 / runs;
            let per_run = k.dispatches as f64 / runs;
            let groups = format!(
                "{}x{}x{}{}",
                k.groups[0],
                k.groups[1],
                k.groups[2],
                if per_run > 1.0 { format!(" *{per_run:.0}") } else { String::new() }
            );
            println!(
                "{us:>8.1} {:>5.1}%  {:<12} {:<28} {:<22} {:<16} {}",
                100.0 * us / total.max(1e-9),
                k.op,
                clip(&k.node, 28),
                clip(&k.shapes, 22),
                groups,
                k.kernel
            );
        }
    }

    fn json(&self) -> serde_json::Value {
        let runs = self.runs as f64;
        let kernels: Vec<serde_json::Value> = self
            .kernels
            .iter()
            .map(|k| {
                serde_json::json!({
                    "op": k.op, "node": k.node, "shapes": k.shapes, "kernel": k.kernel, "groups": k.groups,
                    "dispatches_per_run": k.dispatches as f64 / runs, "us_per_run": k.ns / 1e3 / runs,
                })
            })
            .collect();
        serde_json::json!({
            "runs": self.runs,
            "gpu_us_per_run": self.gpu_us(),
            "record_us_per_run": self.record_us / runs,
            "kernels": kernels,
        })
    }
}

/// `s` cut to at most `n` characters (the end kept, where node names differ).
fn clip(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        s.to_string()
    } else {
        format!("..{}", s.chars().skip(count + 2 - n).collect::<String>())
    }
}
