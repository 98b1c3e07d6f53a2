//! `onyx`: inspect, run and benchmark ONNX models; generate text with LLM folders.

mod bench;
mod devices;
mod generate;
mod info;
mod optimize;
mod profile_cpu;
mod random;
mod run;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use onyx::{Error, OptimizationLevel, Provider, Result, SessionBuilder};

/// Onyx: an ONNX inference runtime.
#[derive(Parser)]
#[command(name = "onyx", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Producer, opsets, inputs and outputs, op histogram, parameters, and which EP takes each node.
    Info {
        /// The .onnx file.
        model: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Runs a model once; writes each output as .npy and summarizes it.
    Run {
        /// The .onnx file.
        model: PathBuf,
        /// NAME=FILE.npy; inputs not given get seeded random values.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Folder for the outputs (`<name>.npy`, unsafe characters replaced by `_`).
        #[arg(long)]
        output_dir: Option<PathBuf>,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Measures session creation, first run and steady-state latency.
    Bench {
        /// The .onnx file.
        model: PathBuf,
        /// NAME=FILE.npy; inputs not given get seeded random values.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Untimed runs before measuring.
        #[arg(long, default_value_t = 5)]
        warmup: usize,
        /// Timed runs.
        #[arg(long, default_value_t = 30)]
        runs: usize,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// After the timed runs, time every GPU dispatch of a few more runs and list the most
        /// expensive kernels (wgpu; needs timestamp queries inside passes); with only the CPU
        /// provider, time every node of as many more runs as `--runs` instead (host wall time
        /// per op type and per node: mean per run and best run).
        #[arg(long)]
        profile: bool,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Optimizes a model for a level and providers, saves it, and prints node counts per op.
    Optimize(optimize::OptimizeArgs),
    /// The execution providers compiled in and the devices each one sees.
    Devices,
    /// Generates text with an onnxruntime-genai model folder, streamed to stdout.
    Generate(generate::GenerateArgs),
}

/// Options that shape the session, shared by info, run and bench.
#[derive(Args, Clone)]
struct SessionArgs {
    /// Execution provider, in priority order (repeatable): cpu, wgpu.
    #[arg(long = "provider", value_name = "P", default_value = "cpu")]
    providers: Vec<String>,
    /// Provider option KEY=VALUE for the GPU provider (wgpu: adapter, vendor, device_type, power,
    /// backend, cooperative_matrix, startup_kernels, pipeline_cache_dir); repeatable.
    #[arg(long = "provider-option", value_name = "KEY=VALUE")]
    provider_options: Vec<String>,
    /// Fix a free dimension: NAME=N (symbolic dims default to 1 for random inputs).
    #[arg(long = "free-dim", value_name = "NAME=N")]
    free_dims: Vec<String>,
    /// Fail instead of running unsupported nodes on the CPU.
    #[arg(long)]
    disable_cpu_fallback: bool,
    /// Graph optimization level: disable, basic, extended or all.
    #[arg(long, default_value = "all")]
    optimization: String,
    /// Threads inside kernels (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

impl SessionArgs {
    fn builder(&self) -> Result<SessionBuilder> {
        let mut providers = self.providers.iter().map(|p| p.parse::<Provider>()).collect::<Result<Vec<_>>>()?;
        for (key, value) in parse_pairs(&self.provider_options, "--provider-option")? {
            let gpu = providers.iter_mut().find(|p| !matches!(p, Provider::Cpu));
            let gpu =
                gpu.ok_or_else(|| Error::InvalidArgument(format!("--provider-option {key}: no GPU provider given")))?;
            gpu.set_option(&key, &value)?;
        }
        let level: OptimizationLevel = self.optimization.parse()?;
        let mut b = SessionBuilder::new()
            .with_providers(providers)
            .with_optimization_level(level)
            .with_intra_threads(self.threads)
            .with_cpu_fallback(!self.disable_cpu_fallback);
        for (name, value) in parse_pairs(&self.free_dims, "--free-dim")? {
            let n: usize = value.parse().map_err(|_| {
                Error::InvalidArgument(format!("--free-dim {name}={value}: expected a non-negative integer"))
            })?;
            b = b.with_free_dimension_override_by_name(name, n);
        }
        Ok(b)
    }
}

/// Splits `NAME=VALUE` arguments.
fn parse_pairs(args: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    args.iter()
        .map(|a| {
            a.split_once('=')
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .ok_or_else(|| Error::InvalidArgument(format!("{flag} {a}: expected NAME=VALUE")))
        })
        .collect()
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("onyx: internal error: {info}");
    }));
    let cli = Cli::parse();
    let result = std::panic::catch_unwind(|| match cli.command {
        Command::Generate(args) => generate::generate(&args).map_err(|e| e.to_string()),
        Command::Info { model, json, session } => info::info(&model, json, &session).map_err(|e| e.to_string()),
        Command::Run { model, inputs, output_dir, session } => {
            run::run(&model, &inputs, output_dir.as_deref(), &session).map_err(|e| e.to_string())
        }
        Command::Bench { model, inputs, warmup, runs, json, profile, session } => {
            bench::bench(&model, &inputs, bench::Options { warmup, runs, json, profile }, &session)
                .map_err(|e| e.to_string())
        }
        Command::Optimize(args) => optimize::optimize(&args).map_err(|e| e.to_string()),
        Command::Devices => devices::devices().map_err(|e| e.to_string()),
    });
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(1),
    }
}
