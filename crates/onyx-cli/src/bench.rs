//! `onyx bench`.

use std::path::Path;
use std::time::Instant;

use onyx::Result;

use crate::{run::gather_inputs, SessionArgs};

/// Peak resident memory of this process in bytes (Linux `VmHWM`; 0 where unknown).
fn peak_host_bytes() -> u64 {
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

/// Times session creation, the first run, and `runs` runs after `warmup` untimed ones.
pub fn bench(model: &Path, inputs: &[String], warmup: usize, runs: usize, json: bool, args: &SessionArgs) -> Result<()> {
    if runs == 0 {
        return Err(onyx::Error::InvalidArgument("--runs: expected at least 1".into()));
    }
    let start = Instant::now();
    let session = args.builder()?.commit_from_file(model)?;
    let session_create_ms = start.elapsed().as_secs_f64() * 1e3;
    let inputs = gather_inputs(&session, inputs)?;
    let start = Instant::now();
    session.run(inputs.clone())?;
    let first_run_ms = start.elapsed().as_secs_f64() * 1e3;
    for _ in 0..warmup {
        session.run(inputs.clone())?;
    }
    let bar = indicatif::ProgressBar::new(runs as u64);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        session.run(inputs.clone())?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        bar.inc(1);
    }
    bar.finish_and_clear();
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
    if json {
        println!("{report}");
    }
    Ok(())
}
