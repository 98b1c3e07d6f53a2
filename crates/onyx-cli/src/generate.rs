//! `onyx generate`: text from an onnxruntime-genai model folder, streamed as it is made.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use onyx::genai::{Config, Generator, GeneratorParams, Model, Result, Tokenizer};

use crate::parse_pairs;

/// Arguments of `onyx generate` (a contract: tests outside the repository rely on it).
#[derive(Args)]
pub struct GenerateArgs {
    /// The model folder (genai_config.json, the decoder's .onnx, tokenizer.json).
    dir: PathBuf,
    /// The prompt, encoded by the folder's tokenizer.
    #[arg(long, conflicts_with = "input_ids")]
    prompt: Option<String>,
    /// The prompt as token ids: 1,2,3.
    #[arg(long, value_delimiter = ',', num_args = 1)]
    input_ids: Option<Vec<i32>>,
    /// Tokens at which generation stops, prompt included (genai's max_length).
    #[arg(long)]
    max_length: Option<usize>,
    /// Execution provider replacing genai_config.json's (cpu, wgpu, dml, webgpu, cuda);
    /// repeatable, in priority order.
    #[arg(long = "provider", value_name = "P")]
    providers: Vec<String>,
    /// Provider option KEY=VALUE for the first GPU provider (genai's: device_id,
    /// performance_preference, hardware_vendor_id, ...; or Onyx's wgpu options); repeatable.
    #[arg(long = "provider-option", value_name = "KEY=VALUE")]
    provider_options: Vec<String>,
    /// Sample instead of taking the most likely token.
    #[arg(long)]
    do_sample: bool,
    /// Sampling keeps the K most likely tokens (0: all).
    #[arg(long)]
    top_k: Option<usize>,
    /// Sampling keeps the most likely tokens whose probabilities reach P.
    #[arg(long)]
    top_p: Option<f64>,
    /// Logits are divided by T before sampling.
    #[arg(long)]
    temperature: Option<f64>,
    /// Penalty for tokens already in the sequence (1: none).
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// Beams of beam search.
    #[arg(long)]
    num_beams: Option<usize>,
    /// Seed of sampling (the same seed draws the same text).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object with the tokens and timings as the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// Loads the folder, generates, streams the text to stdout.
pub fn generate(args: &GenerateArgs) -> Result<()> {
    let mut config = Config::new(&args.dir)?;
    for key in config.warnings() {
        eprintln!("warning: {}: unknown key '{key}' ignored", config.dir.join(onyx::genai::CONFIG_FILE).display());
    }
    apply_providers(&mut config, args)?;
    let model = Arc::new(Model::from_config(&config)?);
    let tokenizer = Tokenizer::new(&config)?;
    let params = search_params(&config, args)?;

    let input_tokens = match (&args.prompt, &args.input_ids) {
        (Some(text), _) => tokenizer.encode(text)?,
        (None, Some(ids)) => ids.clone(),
        (None, None) => return Err(onyx::genai::Error::InvalidArgument("give the prompt: --prompt TEXT or --input-ids 1,2,3".into())),
    };
    let mut generator = Generator::new(&model, &params)?;
    let start = Instant::now();
    generator.append_tokens(&input_tokens)?;
    let prompt_seconds = start.elapsed().as_secs_f64();
    let mut stream = tokenizer.create_stream();
    let mut stdout = std::io::stdout().lock();
    let mut first_token = None;
    while !generator.is_done() {
        generator.generate_next_token()?;
        first_token.get_or_insert_with(Instant::now);
        let piece = stream.decode(generator.get_next_tokens()[0])?;
        // A closed stdout (`| head`) ends the output, not the generation's error.
        let _ = write!(stdout, "{piece}").and_then(|_| stdout.flush());
    }
    let end = Instant::now();
    let _ = writeln!(stdout);
    let mut output_tokens = generator.get_sequence(0)?[input_tokens.len()..].to_vec();
    // genai's sequence leaves a generated EOS out; the report includes it.
    if let Some(&eos) = generator.get_next_tokens().first().filter(|t| config.eos_token_ids().contains(&(**t as i64))) {
        output_tokens.push(eos);
    }
    if args.json {
        let first = first_token.unwrap_or(end);
        let decoded = output_tokens.len().saturating_sub(1);
        let decode_seconds = (end - first).as_secs_f64();
        let report = serde_json::json!({
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "text": tokenizer.decode(&output_tokens)?,
            "time_to_first_token_ms": (first - start).as_secs_f64() * 1e3,
            "prompt_tokens_per_s": input_tokens.len() as f64 / prompt_seconds,
            "decode_tokens_per_s": if decoded > 0 { decoded as f64 / decode_seconds } else { 0.0 },
            "peak_host_bytes": crate::bench::peak_host_bytes(),
            "cache_bytes": generator.cache_bytes(),
            "provider": model.session().provider_names(),
        });
        let _ = writeln!(stdout, "{report}");
    }
    Ok(())
}

/// `--provider` replaces the folder's providers; `--provider-option` sets options of the
/// first GPU provider.
fn apply_providers(config: &mut Config, args: &GenerateArgs) -> Result<()> {
    if !args.providers.is_empty() {
        config.clear_providers();
        for p in &args.providers {
            config.append_provider(&p.to_ascii_lowercase())?;
        }
    }
    let pairs = parse_pairs(&args.provider_options, "--provider-option").map_err(|e| onyx::genai::Error::InvalidArgument(e.to_string()))?;
    for (key, value) in pairs {
        let gpu = config.model.decoder.session_options.provider_options.iter().find(|p| p.name != "cpu").map(|p| p.name.clone());
        let gpu = gpu.ok_or_else(|| onyx::genai::Error::InvalidArgument(format!("--provider-option {key}: no GPU provider given")))?;
        config.set_provider_option(&gpu, &key, &value)?;
    }
    Ok(())
}

/// The folder's search options with the command line's on top.
fn search_params(config: &Config, args: &GenerateArgs) -> Result<GeneratorParams> {
    let mut params = GeneratorParams::new(config);
    let options: [(&str, Option<f64>); 6] = [
        ("max_length", args.max_length.map(|v| v as f64)),
        ("top_k", args.top_k.map(|v| v as f64)),
        ("top_p", args.top_p),
        ("temperature", args.temperature),
        ("repetition_penalty", args.repetition_penalty),
        ("num_beams", args.num_beams.map(|v| v as f64)),
    ];
    for (name, value) in options {
        if let Some(v) = value {
            params.set_search_option(name, v)?;
        }
    }
    if let Some(seed) = args.seed {
        params.search.random_seed = (seed & i64::MAX as u64) as i64;
    }
    if args.do_sample {
        params.set_search_option("do_sample", 1.0)?;
    }
    Ok(params)
}
