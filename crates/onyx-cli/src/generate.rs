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
    #[arg(long, value_delimiter = ',', num_args = 1, conflicts_with = "chat")]
    input_ids: Option<Vec<i32>>,
    /// An interactive chat through the folder's chat template: a user turn per line of stdin,
    /// the history kept in the cache between turns.
    #[arg(long, conflicts_with = "prompt")]
    chat: bool,
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

    if args.chat {
        return chat(&model, &tokenizer, &params, args.json);
    }
    let input_tokens = match (&args.prompt, &args.input_ids) {
        (Some(text), _) => tokenizer.encode(text)?,
        (None, Some(ids)) => ids.clone(),
        (None, None) => {
            return Err(onyx::genai::Error::InvalidArgument(
                "give the prompt: --prompt TEXT, --input-ids 1,2,3 or --chat".into(),
            ))
        }
    };
    let mut generator = Generator::new(&model, &params)?;
    let turn = run_turn(&mut generator, &tokenizer, &input_tokens)?;
    if args.json {
        let _ = writeln!(std::io::stdout(), "{}", turn.report(&tokenizer, &generator, &model)?);
    }
    Ok(())
}

/// One prompt's generation: the new input tokens, the tokens made and when.
struct Turn {
    input_tokens: Vec<i32>,
    output_tokens: Vec<i32>,
    start: Instant,
    prompt_seconds: f64,
    first_token: Instant,
    end: Instant,
}

/// Appends `input_tokens`, generates until EOS or max_length, streams the text to stdout.
fn run_turn(generator: &mut Generator, tokenizer: &Tokenizer, input_tokens: &[i32]) -> Result<Turn> {
    let start = Instant::now();
    let before = generator.token_count() + input_tokens.len();
    generator.append_tokens(input_tokens)?;
    let prompt_seconds = start.elapsed().as_secs_f64();
    let mut stream = tokenizer.create_stream();
    let mut stdout = std::io::stdout().lock();
    let mut first_token = None;
    // Beams reorder until the end: their text is printed once the best is known.
    let beams = generator.params().search.num_beams > 1;
    while !generator.is_done() {
        generator.generate_next_token()?;
        first_token.get_or_insert_with(Instant::now);
        if !beams {
            let piece = stream.decode(generator.get_next_tokens()[0])?;
            // A closed stdout (`| head`) ends the output, not the generation's error.
            let _ = write!(stdout, "{piece}").and_then(|_| stdout.flush());
        }
    }
    let end = Instant::now();
    let mut output_tokens = generator.get_sequence(0)?[before..].to_vec();
    if beams {
        let _ = write!(stdout, "{}", tokenizer.decode(&output_tokens)?);
    }
    let _ = writeln!(stdout);
    // genai's sequence leaves a generated EOS out; the report includes it.
    output_tokens.extend(generator.generated_eos());
    Ok(Turn {
        input_tokens: input_tokens.to_vec(),
        output_tokens,
        start,
        prompt_seconds,
        first_token: first_token.unwrap_or(end),
        end,
    })
}

impl Turn {
    /// The `--json` line.
    fn report(&self, tokenizer: &Tokenizer, generator: &Generator, model: &Model) -> Result<serde_json::Value> {
        let decoded = self.output_tokens.len().saturating_sub(1);
        let decode_seconds = (self.end - self.first_token).as_secs_f64();
        Ok(serde_json::json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "text": tokenizer.decode(&self.output_tokens)?,
            "time_to_first_token_ms": (self.first_token - self.start).as_secs_f64() * 1e3,
            "prompt_tokens_per_s": self.input_tokens.len() as f64 / self.prompt_seconds,
            "decode_tokens_per_s": if decoded > 0 { decoded as f64 / decode_seconds } else { 0.0 },
            "peak_host_bytes": crate::bench::peak_host_bytes(),
            "cache_bytes": generator.cache_bytes(),
            "provider": model.session().provider_names(),
        }))
    }
}

/// `--chat`: each line of stdin is a user turn; the whole history is rendered through the
/// folder's chat template, and only the tokens after what the cache already holds run.
fn chat(model: &Arc<Model>, tokenizer: &Tokenizer, params: &GeneratorParams, json: bool) -> Result<()> {
    if tokenizer.chat_template().is_none() {
        return Err(onyx::genai::Error::InvalidArgument("--chat: the model folder has no chat template (tokenizer_config.json chat_template or chat_template.jinja)".into()));
    }
    let mut generator = Generator::new(model, params)?;
    let mut messages: Vec<serde_json::Value> = vec![];
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.read_line(&mut line).map_err(|e| onyx::genai::Error::InvalidArgument(format!("reading stdin: {e}")))?
            == 0
        {
            return Ok(());
        }
        messages.push(serde_json::json!({"role": "user", "content": line.trim_end_matches(['\n', '\r'])}));
        let prompt =
            tokenizer.apply_chat_template(None, &serde_json::Value::Array(messages.clone()).to_string(), None, true)?;
        let ids = tokenizer.encode(&prompt)?;
        if ids.is_empty() {
            return Err(onyx::genai::Error::InvalidArgument("--chat: the chat template rendered no tokens".into()));
        }
        // Keep the cache of the history the new rendering starts with; run the rest.
        let held = generator.get_sequence(0)?;
        let common = held.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        generator.rewind_to(common)?;
        let turn = run_turn(&mut generator, tokenizer, &ids[common..])?;
        let reply = tokenizer.decode(&turn.output_tokens)?;
        messages.push(serde_json::json!({"role": "assistant", "content": reply}));
        if json {
            println!("{}", turn.report(tokenizer, &generator, model)?);
        }
    }
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
    let pairs = parse_pairs(&args.provider_options, "--provider-option")
        .map_err(|e| onyx::genai::Error::InvalidArgument(e.to_string()))?;
    for (key, value) in pairs {
        let gpu = config
            .model
            .decoder
            .session_options
            .provider_options
            .iter()
            .find(|p| p.name != "cpu")
            .map(|p| p.name.clone());
        let gpu = gpu.ok_or_else(|| {
            onyx::genai::Error::InvalidArgument(format!("--provider-option {key}: no GPU provider given"))
        })?;
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
