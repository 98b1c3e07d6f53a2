//! `genai_config.json`: onnxruntime-genai 0.18's schema, its defaults, and the providers a
//! session runs on.
//!
//! Every key of the schema is read; a key Onyx does not know is a warning ([`Config::warnings`]),
//! so folders made by newer builders keep loading. A malformed value is an error naming the file
//! and the key path (`model.decoder.num_hidden_layers: invalid type ...`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use serde_json::Value as Json;

use crate::error::{invalid, Error, Result};

/// The name of the configuration file in a model folder.
pub const CONFIG_FILE: &str = "genai_config.json";

/// A model folder's configuration, with the provider list the API or CLI may override.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// The model: token ids, sizes, the decoder's file and I/O names.
    pub model: ModelConfig,
    /// Default search options (a [`crate::GeneratorParams`] starts from these).
    #[serde(default)]
    pub search: SearchConfig,
    /// The folder the file was read from (model and tokenizer files are relative to it).
    #[serde(skip)]
    pub dir: PathBuf,
    /// Keys of the file Onyx does not know, as paths (`model.decoder.foo`).
    #[serde(skip)]
    warnings: Vec<String>,
    /// Onyx's option (not a genai key): compute the logits of every position a run feeds, as
    /// genai does, for callers that read them through `get_output("logits")`. Off by default:
    /// generation reads the last position's only, and the model then computes only those
    /// (the language-model head is the largest product of a prompt step).
    #[serde(skip)]
    pub all_position_logits: bool,
    /// The file's JSON, which [`Config::overlay`] patches.
    #[serde(skip)]
    source: Json,
}

/// `model`: what the decoder is and how its inputs and outputs are named.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    /// The architecture (`llama`, `qwen2`, `phi3`, `gemma2`, ...).
    #[serde(rename = "type")]
    pub model_type: String,
    /// The beginning-of-sequence token.
    #[serde(default)]
    pub bos_token_id: Option<i64>,
    /// The end-of-sequence tokens (the file gives one id or a list).
    #[serde(default, deserialize_with = "one_or_many")]
    pub eos_token_id: Vec<i64>,
    /// The padding token (the first EOS when absent).
    #[serde(default)]
    pub pad_token_id: Option<i64>,
    /// Separator token (encoder models).
    #[serde(default)]
    pub sep_token_id: Option<i64>,
    /// First decoder token (encoder-decoder models).
    #[serde(default)]
    pub decoder_start_token_id: Option<i64>,
    /// Size of the vocabulary: the logits' last dimension.
    pub vocab_size: usize,
    /// The longest sequence the model was trained for.
    #[serde(default)]
    pub context_length: usize,
    /// The decoder.
    pub decoder: DecoderConfig,
    /// Encoder of encoder-decoder models (not run by Onyx yet).
    #[serde(default)]
    pub encoder: Option<Json>,
    /// Embedding model of multimodal pipelines (not run by Onyx yet).
    #[serde(default)]
    pub embedding: Option<Json>,
    /// Vision model of multimodal pipelines (not run by Onyx yet).
    #[serde(default)]
    pub vision: Option<Json>,
    /// Speech model of multimodal pipelines (not run by Onyx yet).
    #[serde(default)]
    pub speech: Option<Json>,
    /// Image token of multimodal models.
    #[serde(default)]
    pub image_token_id: Option<i64>,
    /// Video token of multimodal models.
    #[serde(default)]
    pub video_token_id: Option<i64>,
    /// Vision start token of multimodal models.
    #[serde(default)]
    pub vision_start_token_id: Option<i64>,
}

/// `model.decoder`.
#[derive(Debug, Clone, Deserialize)]
pub struct DecoderConfig {
    /// The ONNX file, relative to the folder.
    pub filename: String,
    /// Session options, the execution providers among them.
    #[serde(default)]
    pub session_options: SessionOptionsConfig,
    /// Size of one attention head.
    #[serde(default)]
    pub head_size: usize,
    /// Width of the hidden state.
    #[serde(default)]
    pub hidden_size: usize,
    /// Query heads.
    #[serde(default)]
    pub num_attention_heads: usize,
    /// Layers, each with a key and a value cache.
    pub num_hidden_layers: usize,
    /// Key/value heads (grouped-query attention); the query heads when absent.
    #[serde(default)]
    pub num_key_value_heads: usize,
    /// Input names.
    #[serde(default)]
    pub inputs: DecoderInputs,
    /// Output names.
    #[serde(default)]
    pub outputs: DecoderOutputs,
    /// Layers whose cache holds only the last `window_size` positions.
    #[serde(default)]
    pub sliding_window: Option<SlidingWindow>,
    /// A pipeline of several models (not run by Onyx yet).
    #[serde(default)]
    pub pipeline: Option<Json>,
}

/// `model.decoder.inputs`: names, `%d` standing for the layer.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[allow(missing_docs)]
pub struct DecoderInputs {
    pub input_ids: String,
    pub inputs_embeds: String,
    pub attention_mask: String,
    pub position_ids: String,
    pub past_key_names: String,
    pub past_value_names: String,
    pub past_names: String,
    pub cross_past_key_names: String,
    pub cross_past_value_names: String,
    pub past_sequence_length: String,
    pub current_sequence_length: String,
    pub total_sequence_length: String,
    pub encoder_hidden_states: String,
    pub encoder_attention_mask: String,
    pub cache_indirection: String,
    pub rnn_states_prev: String,
}

impl Default for DecoderInputs {
    fn default() -> Self {
        DecoderInputs {
            input_ids: "input_ids".into(),
            inputs_embeds: "inputs_embeds".into(),
            attention_mask: "attention_mask".into(),
            position_ids: "position_ids".into(),
            past_key_names: "past_key_values.%d.key".into(),
            past_value_names: "past_key_values.%d.value".into(),
            past_names: "past_%d".into(),
            cross_past_key_names: "past_key_cross_%d".into(),
            cross_past_value_names: "past_value_cross_%d".into(),
            past_sequence_length: "past_sequence_length".into(),
            current_sequence_length: "current_sequence_length".into(),
            total_sequence_length: "total_sequence_length".into(),
            encoder_hidden_states: "encoder_hidden_states".into(),
            encoder_attention_mask: "encoder_attention_mask".into(),
            cache_indirection: "cache_indirection".into(),
            rnn_states_prev: "rnn_states_prev".into(),
        }
    }
}

/// `model.decoder.outputs`: names, `%d` standing for the layer.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
#[allow(missing_docs)]
pub struct DecoderOutputs {
    pub logits: String,
    pub present_key_names: String,
    pub present_value_names: String,
    pub present_names: String,
    pub output_cross_qk_names: String,
    pub rnn_states: String,
}

impl Default for DecoderOutputs {
    fn default() -> Self {
        DecoderOutputs {
            logits: "logits".into(),
            present_key_names: "present.%d.key".into(),
            present_value_names: "present.%d.value".into(),
            present_names: "present_%d".into(),
            output_cross_qk_names: "output_cross_qk_%d".into(),
            rnn_states: "rnn_states".into(),
        }
    }
}

/// `model.decoder.sliding_window`.
#[derive(Debug, Clone, Deserialize)]
pub struct SlidingWindow {
    /// Positions a windowed layer attends to.
    pub window_size: usize,
    /// Whether genai slides the cache itself (Onyx's builds evict in the attention op).
    #[serde(default)]
    pub slide_key_value_cache: bool,
    /// Whether genai feeds the prompt in windows.
    #[serde(default)]
    pub slide_inputs: bool,
    /// Padding value of slid inputs.
    #[serde(default)]
    pub pad_value: i64,
    /// Left or right alignment of slid inputs.
    #[serde(default)]
    pub alignment: Option<String>,
    /// The windowed layers (all when absent).
    #[serde(default)]
    pub layers: Option<Vec<usize>>,
    /// Extra positions kept beyond the window.
    #[serde(default)]
    pub cache_slack: usize,
}

/// `model.decoder.session_options`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SessionOptionsConfig {
    /// Execution providers in priority order (an empty list is the CPU).
    pub provider_options: Vec<ProviderConfig>,
    /// Threads within a node (0: the runtime's default).
    pub intra_op_num_threads: Option<usize>,
    /// Threads across nodes (Onyx runs nodes in order: read, not used).
    pub inter_op_num_threads: Option<usize>,
    /// `ORT_DISABLE_ALL`, `ORT_ENABLE_BASIC`, `ORT_ENABLE_EXTENDED` or `ORT_ENABLE_ALL`.
    pub graph_optimization_level: Option<String>,
    /// ONNX Runtime's `session.disable_cpu_ep_fallback`.
    pub disable_cpu_ep_fallback: Option<bool>,
    /// Settings that tune ONNX Runtime itself: read so that they are known, without effect.
    pub log_id: Option<String>,
    #[allow(missing_docs)]
    pub log_severity_level: Option<i64>,
    #[allow(missing_docs)]
    pub enable_cpu_mem_arena: Option<bool>,
    #[allow(missing_docs)]
    pub enable_mem_pattern: Option<bool>,
    #[allow(missing_docs)]
    pub enable_profiling: Option<Json>,
    #[allow(missing_docs)]
    pub custom_ops_library: Option<String>,
    #[allow(missing_docs)]
    pub config_entries: Option<BTreeMap<String, Json>>,
    #[allow(missing_docs)]
    pub use_env_allocators: Option<bool>,
    #[allow(missing_docs)]
    pub disable_quant_qdq: Option<bool>,
    #[allow(missing_docs)]
    pub enable_quant_qdq_cleanup: Option<bool>,
    #[allow(missing_docs)]
    pub ep_context_enable: Option<bool>,
    #[allow(missing_docs)]
    pub ep_context_embed_mode: Option<Json>,
    #[allow(missing_docs)]
    pub ep_context_file_path: Option<String>,
}

/// One entry of `provider_options`: `{"dml": {"device_id": "0"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// genai's provider name: `cpu`, `dml`, `webgpu`, `cuda` (Onyx also takes `wgpu`).
    pub name: String,
    /// Its options as strings, by key (`device_filtering_options` flattened in).
    pub options: Vec<(String, String)>,
}

impl<'de> Deserialize<'de> for ProviderConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let map = BTreeMap::<String, BTreeMap<String, Json>>::deserialize(d)?;
        let mut entries = map.into_iter();
        let (Some((name, raw)), None) = (entries.next(), entries.next()) else {
            return Err(D::Error::custom("expected one provider name mapped to its options, e.g. {\"dml\": {}}"));
        };
        let mut options = vec![];
        for (key, value) in raw {
            match value {
                Json::Object(filters) if key == "device_filtering_options" => {
                    options.extend(filters.into_iter().map(|(k, v)| (k, scalar_string(v))))
                }
                v => options.push((key, scalar_string(v))),
            }
        }
        Ok(ProviderConfig { name, options })
    }
}

fn scalar_string(v: Json) -> String {
    match v {
        Json::String(s) => s,
        other => other.to_string(),
    }
}

/// `search`: the defaults of generation (onnxruntime-genai's defaults where a key is absent).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SearchConfig {
    /// Sample the next token instead of taking the most likely one.
    pub do_sample: bool,
    /// Beams of beam search (1: no beam search).
    pub num_beams: usize,
    /// Sequences kept per prompt at the end of beam search.
    pub num_return_sequences: usize,
    /// Tokens (prompt included) before EOS may be chosen.
    pub min_length: usize,
    /// Tokens (prompt and generated) at which generation stops; 0: the context length.
    pub max_length: usize,
    /// Beam search stops when `num_beams` sequences are finished.
    pub early_stopping: bool,
    /// genai keeps one cache buffer of `max_length` positions; Onyx's cache grows instead.
    pub past_present_share_buffer: bool,
    /// Divides the logits of tokens already in the sequence (multiplies negative ones).
    pub repetition_penalty: f32,
    /// Beam scores divided by length to this power.
    pub length_penalty: f32,
    /// Diverse beam search (not supported by genai's CPU search either).
    pub diversity_penalty: f32,
    /// N-grams of this size never repeat (0: off).
    pub no_repeat_ngram_size: usize,
    /// Logits divided by this before sampling.
    pub temperature: f32,
    /// Sampling keeps the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Sampling keeps the most likely tokens whose probabilities sum to `top_p`.
    pub top_p: f32,
    /// Seed of sampling; negative: a random seed.
    pub random_seed: i64,
    /// Prompt tokens run per step (0: the whole prompt at once).
    pub chunk_size: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            do_sample: false,
            num_beams: 1,
            num_return_sequences: 1,
            min_length: 0,
            max_length: 0,
            early_stopping: true,
            past_present_share_buffer: false,
            repetition_penalty: 1.0,
            length_penalty: 1.0,
            diversity_penalty: 0.0,
            no_repeat_ngram_size: 0,
            temperature: 1.0,
            top_k: 50,
            top_p: 0.0,
            random_seed: -1,
            chunk_size: 0,
        }
    }
}

/// Merges `patch` into `base`: objects key by key, other values replaced.
fn merge_json(base: &mut Json, patch: &Json) {
    match (base, patch) {
        (Json::Object(base), Json::Object(patch)) => {
            for (key, value) in patch {
                match base.get_mut(key) {
                    Some(slot) => merge_json(slot, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, patch) => *base = patch.clone(),
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(i64),
        Many(Vec<i64>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(id) => vec![id],
        OneOrMany::Many(ids) => ids,
    })
}

impl Config {
    /// Reads `genai_config.json` of a model folder.
    pub fn new(dir: impl AsRef<Path>) -> Result<Config> {
        let dir = dir.as_ref();
        let file = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&file)
            .map_err(|e| Error::File { file: file.clone(), message: format!("cannot read: {e}") })?;
        let mut config = Config::from_json(&text).map_err(|message| Error::File { file, message })?;
        config.dir = dir.to_path_buf();
        Ok(config)
    }

    /// Parses the text of a `genai_config.json`; the error names the key path.
    pub fn from_json(text: &str) -> Result<Config, String> {
        let mut unknown = vec![];
        let mut json = serde_json::Deserializer::from_str(text);
        let mut note = |path: serde_ignored::Path<'_>| unknown.push(path.to_string());
        let ignored = serde_ignored::Deserializer::new(&mut json, &mut note);
        let mut config: Config =
            serde_path_to_error::deserialize(ignored).map_err(|e| match e.path().to_string().as_str() {
                "." => e.inner().to_string(),
                path => format!("{path}: {}", e.inner()),
            })?;
        json.end().map_err(|e| e.to_string())?;
        config.warnings = unknown;
        config.source = serde_json::from_str(text).map_err(|e| e.to_string())?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        let m = &self.model;
        if m.vocab_size == 0 {
            return Err("model.vocab_size: expected a positive size, got 0".into());
        }
        for (key, id) in m
            .eos_token_id
            .iter()
            .map(|id| ("eos_token_id", *id))
            .chain(m.bos_token_id.map(|id| ("bos_token_id", id)))
            .chain(m.pad_token_id.map(|id| ("pad_token_id", id)))
        {
            if id < 0 || id as usize >= m.vocab_size {
                return Err(format!("model.{key}: {id} is outside the vocabulary of {} tokens", m.vocab_size));
            }
        }
        if let Some(w) = &m.decoder.sliding_window {
            if w.window_size == 0 {
                return Err("model.decoder.sliding_window.window_size: expected a positive size, got 0".into());
            }
            if let Some(bad) = w.layers.iter().flatten().find(|&&l| l >= m.decoder.num_hidden_layers) {
                return Err(format!(
                    "model.decoder.sliding_window.layers: layer {bad} does not exist (num_hidden_layers is {})",
                    m.decoder.num_hidden_layers
                ));
            }
        }
        Ok(())
    }

    /// Keys of the file Onyx does not know, as paths; the CLI prints them on stderr.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The EOS tokens.
    pub fn eos_token_ids(&self) -> &[i64] {
        &self.model.eos_token_id
    }

    /// The padding token: `pad_token_id`, else the first EOS, else 0.
    pub fn pad_token_id(&self) -> i64 {
        self.model.pad_token_id.or(self.model.eos_token_id.first().copied()).unwrap_or(0)
    }

    /// Removes every provider: the model runs on the CPU (genai's `clear_providers`).
    pub fn clear_providers(&mut self) {
        self.model.decoder.session_options.provider_options.clear();
    }

    /// Appends a provider by genai's name (`cpu`, `dml`, `webgpu`, `cuda`, or `wgpu`), unless
    /// it is already listed.
    pub fn append_provider(&mut self, name: &str) -> Result<()> {
        crate::providers::check_name(name)?;
        let list = &mut self.model.decoder.session_options.provider_options;
        if !list.iter().any(|p| p.name == name) {
            list.push(ProviderConfig { name: name.to_string(), options: vec![] });
        }
        Ok(())
    }

    /// Sets an option of a listed provider, appending the provider if needed.
    pub fn set_provider_option(&mut self, provider: &str, key: &str, value: &str) -> Result<()> {
        self.append_provider(provider)?;
        let list = &mut self.model.decoder.session_options.provider_options;
        let entry = list
            .iter_mut()
            .find(|p| p.name == provider)
            .ok_or_else(|| invalid(format!("provider '{provider}' is not listed")))?;
        entry.options.retain(|(k, _)| k != key);
        entry.options.push((key.to_string(), value.to_string()));
        Ok(())
    }

    /// Applies a JSON object on top of the configuration (genai's `Config::overlay`, e.g.
    /// `{"search": {"max_length": 512}}`): objects merge key by key, any other value replaces
    /// the one it names. Providers set through the API stay unless the overlay sets
    /// `model.decoder.session_options.provider_options`. On an error nothing changes.
    pub fn overlay(&mut self, json: &str) -> Result<()> {
        let patch: Json = serde_json::from_str(json).map_err(|e| invalid(format!("overlay: not JSON: {e}")))?;
        if !patch.is_object() {
            return Err(invalid(format!("overlay: expected a JSON object, got {patch}")));
        }
        let mut merged = self.source.clone();
        merge_json(&mut merged, &patch);
        let mut next = Config::from_json(&merged.to_string()).map_err(|e| invalid(format!("overlay: {e}")))?;
        next.dir = std::mem::take(&mut self.dir);
        next.all_position_logits = self.all_position_logits;
        if patch.pointer("/model/decoder/session_options/provider_options").is_none() {
            next.model.decoder.session_options.provider_options =
                std::mem::take(&mut self.model.decoder.session_options.provider_options);
        }
        *self = next;
        Ok(())
    }

    /// The decoder's ONNX file.
    pub fn decoder_path(&self) -> PathBuf {
        self.dir.join(&self.model.decoder.filename)
    }

    /// `max_length` as generation uses it: the search's, else the context length, never more
    /// than the context length when that is known.
    pub fn max_length(&self) -> usize {
        let context = self.model.context_length;
        match (self.search.max_length, context) {
            (0, c) => c,
            (m, 0) => m,
            (m, c) => m.min(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"model": {"type": "llama", "vocab_size": 10, "eos_token_id": [2, 3], "context_length": 64,
        "decoder": {"filename": "model.onnx", "num_hidden_layers": 2,
            "session_options": {"log_id": "x", "provider_options": [{"dml": {"device_id": 1, "device_filtering_options": {"hardware_vendor_id": 4318}}}]}}},
        "search": {"max_length": 100, "top_k": 1}}"#;

    #[test]
    fn reads_defaults_eos_lists_and_providers() {
        let c = Config::from_json(MINIMAL).unwrap();
        assert_eq!(c.model.eos_token_id, [2, 3]);
        assert_eq!(c.pad_token_id(), 2);
        assert_eq!(c.model.decoder.inputs.past_key_names, "past_key_values.%d.key");
        assert_eq!(c.search.top_k, 1);
        assert!((c.search.repetition_penalty - 1.0).abs() < f32::EPSILON);
        assert_eq!(c.max_length(), 64, "max_length is capped by the context");
        let dml = &c.model.decoder.session_options.provider_options[0];
        assert_eq!(dml.name, "dml");
        assert_eq!(
            dml.options,
            [("hardware_vendor_id".to_string(), "4318".to_string()), ("device_id".to_string(), "1".to_string())]
        );
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    #[test]
    fn unknown_keys_are_warnings_with_their_path() {
        let text = MINIMAL.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 2, \"future_key\": {\"a\": 1}");
        let c = Config::from_json(&text).unwrap();
        assert_eq!(c.warnings(), ["model.decoder.future_key"]);
    }

    #[test]
    fn malformed_values_name_their_key() {
        let err = Config::from_json(&MINIMAL.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": \"two\""))
            .unwrap_err();
        assert!(err.starts_with("model.decoder.num_hidden_layers:"), "{err}");
        let err = Config::from_json(&MINIMAL.replace("[2, 3]", "[2, 30]")).unwrap_err();
        assert!(err.contains("model.eos_token_id: 30 is outside"), "{err}");
        let err = Config::from_json(r#"{"model": {"type": "llama"}}"#).unwrap_err();
        assert!(err.contains("vocab_size"), "{err}");
        assert!(Config::from_json("{\"model\": ").is_err());
    }

    #[test]
    fn providers_can_be_overridden() {
        let mut c = Config::from_json(MINIMAL).unwrap();
        c.clear_providers();
        c.set_provider_option("webgpu", "device_id", "0").unwrap();
        assert_eq!(
            c.model.decoder.session_options.provider_options,
            [ProviderConfig { name: "webgpu".into(), options: vec![("device_id".into(), "0".into())] }]
        );
        assert!(c.append_provider("tpu").unwrap_err().to_string().contains("unknown provider 'tpu'"));
    }

    #[test]
    fn overlays_merge_keep_api_providers_and_fail_atomically() {
        let mut c = Config::from_json(MINIMAL).unwrap();
        c.dir = PathBuf::from("/models/x");
        c.clear_providers();
        c.overlay(
            r#"{"search": {"max_length": 32, "do_sample": true}, "model": {"decoder": {"num_hidden_layers": 3}}}"#,
        )
        .unwrap();
        assert_eq!((c.search.max_length, c.search.do_sample, c.search.top_k), (32, true, 1), "merged key by key");
        assert_eq!(c.model.decoder.num_hidden_layers, 3);
        assert_eq!(c.model.eos_token_id, [2, 3], "untouched keys stay");
        assert!(c.model.decoder.session_options.provider_options.is_empty(), "clear_providers is kept");
        assert_eq!(c.dir, PathBuf::from("/models/x"));
        c.overlay(r#"{"model": {"decoder": {"session_options": {"provider_options": [{"webgpu": {}}]}}}}"#).unwrap();
        assert_eq!(c.model.decoder.session_options.provider_options[0].name, "webgpu");
        for (bad, says) in [
            (r#"{"search": {"max_length": "long"}}"#, "search.max_length"),
            ("[1]", "expected a JSON object"),
            ("{", "not JSON"),
        ] {
            let err = c.overlay(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert_eq!((c.search.max_length, c.dir.to_str()), (32, Some("/models/x")), "a failed overlay changes nothing");
    }
}
