//! A model folder's decoder as a session, and the names and types of its inputs and outputs.

use onyx_runtime::types::{Dim, ValueType};
use onyx_runtime::{DataType, Device, OptimizationLevel, Session, SessionBuilder};

use crate::cache_ops::CacheOps;
use crate::config::Config;
use crate::error::{invalid, Error, Result};
use crate::{kv_cache, last_logits, providers};

/// A loaded model folder: its configuration and the decoder's session on the configured
/// providers. `Send + Sync`: many [`crate::Generator`]s on many threads share one.
pub struct Model {
    config: Config,
    session: Session,
    io: DecoderIo,
    cache_device: Device,
    cache_ops: CacheOps,
}

/// The decoder's inputs and outputs that generation feeds and reads.
#[derive(Debug, Clone)]
pub(crate) struct DecoderIo {
    pub input_ids: (String, DataType),
    pub attention_mask: Option<(String, DataType)>,
    pub position_ids: Option<(String, DataType)>,
    pub logits: String,
    pub layers: Vec<LayerIo>,
    pub cache_dtype: DataType,
    pub kv_heads: usize,
    pub head_size: usize,
    /// Whether generation keeps the cache in GroupQueryAttention's shared-buffer form (see
    /// [`crate::kv_cache`]).
    pub shared_buffer: bool,
}

/// One layer's cache inputs and outputs.
#[derive(Debug, Clone)]
pub(crate) struct LayerIo {
    pub past_key: String,
    pub past_value: String,
    pub present_key: String,
    pub present_value: String,
    /// Positions of a windowed layer's fixed-size cache (GroupQueryAttention evicts the oldest
    /// itself); `None`: the cache grows with the sequence.
    pub window: Option<usize>,
}

impl Model {
    /// Loads the folder `dir` on the providers its genai_config.json lists.
    pub fn new(dir: impl AsRef<std::path::Path>) -> Result<Model> {
        Model::from_config(&Config::new(dir)?)
    }

    /// Loads the model `config` describes, on the providers it lists (as the API or CLI may have
    /// changed them).
    pub fn from_config(config: &Config) -> Result<Model> {
        for (key, present) in [
            ("encoder", config.model.encoder.is_some()),
            ("vision", config.model.vision.is_some()),
            ("speech", config.model.speech.is_some()),
            ("embedding", config.model.embedding.is_some()),
            ("decoder.pipeline", config.model.decoder.pipeline.is_some()),
        ] {
            if present {
                return Err(Error::File {
                    file: config.dir.join(crate::config::CONFIG_FILE),
                    message: format!(
                        "model.{key}: models of several parts are not supported yet (only decoder-only models)"
                    ),
                });
            }
        }
        let options = &config.model.decoder.session_options;
        let mut instances = vec![];
        for provider in providers::resolve(&options.provider_options)? {
            instances.push(provider.instantiate()?);
        }
        let cache_device = instances.iter().map(|p| p.device()).find(|d| *d != Device::Cpu).unwrap_or(Device::Cpu);
        let mut builder = SessionBuilder::new().with_cpu_fallback(options.disable_cpu_ep_fallback != Some(true));
        for instance in &instances {
            builder = builder.with_provider(instance.clone());
        }
        if let Some(threads) = options.intra_op_num_threads {
            builder = builder.with_intra_threads(threads);
        }
        if let Some(level) = &options.graph_optimization_level {
            builder = builder.with_optimization_level(optimization_level(level)?);
        }
        let path = config.decoder_path();
        let file_error = |e: onyx_runtime::Error| Error::File { file: path.clone(), message: e.to_string() };
        let mut graph_model = onyx_runtime::load_model(&path).map_err(file_error)?;
        if !config.all_position_logits {
            last_logits::keep_last_position(&mut graph_model.graph, &config.model.decoder.outputs.logits);
        }
        let shares_buffer = kv_cache::shares_buffer(&graph_model.graph, config);
        let session = builder.commit_from_model(graph_model).map_err(file_error)?;
        let mut io = DecoderIo::resolve(config, &session).map_err(|message| Error::File { file: path, message })?;
        // On a GPU the buffer is updated in place by the GPU's GroupQueryAttention kernels.
        let on_cache_device = cache_device == Device::Cpu
            || session.assignments().iter().filter(|a| a.op == "GroupQueryAttention").all(|a| a.provider != "cpu");
        io.shared_buffer = shares_buffer
            && on_cache_device
            && io.attention_mask.is_some()
            && io.layers.iter().all(|l| l.window.is_none());
        Ok(Model {
            config: config.clone(),
            session,
            io,
            cache_device,
            cache_ops: CacheOps::new(instances, cache_device),
        })
    }

    /// The configuration the model was loaded with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The decoder's session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Where the KV cache lives: the first GPU provider's device, else the host.
    pub fn cache_device(&self) -> Device {
        self.cache_device
    }

    /// Whether generation keeps this decoder's KV cache in GroupQueryAttention's shared-buffer
    /// form (one buffer per layer whose capacity doubles, updated in place) rather than growing
    /// it by each run's new tokens.
    pub fn shares_kv_buffer(&self) -> bool {
        self.io.shared_buffer
    }

    pub(crate) fn io(&self) -> &DecoderIo {
        &self.io
    }

    pub(crate) fn cache_ops(&self) -> &CacheOps {
        &self.cache_ops
    }
}

/// genai's `graph_optimization_level` names.
fn optimization_level(name: &str) -> Result<OptimizationLevel> {
    Ok(match name {
        "ORT_DISABLE_ALL" => OptimizationLevel::Disable,
        "ORT_ENABLE_BASIC" => OptimizationLevel::Basic,
        "ORT_ENABLE_EXTENDED" | "ORT_ENABLE_LAYOUT" => OptimizationLevel::Extended,
        "ORT_ENABLE_ALL" => OptimizationLevel::All,
        other => return Err(invalid(format!("model.decoder.session_options.graph_optimization_level: expected ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED or ORT_ENABLE_ALL, got '{other}'"))),
    })
}

impl DecoderIo {
    /// Matches the configuration's names with the session's inputs and outputs.
    fn resolve(config: &Config, session: &Session) -> Result<DecoderIo, String> {
        let decoder = &config.model.decoder;
        let (inputs, outputs) = (&decoder.inputs, &decoder.outputs);
        let input = |name: &str| session.inputs().iter().find(|i| i.name == name);
        let tensor_type = |name: &str| match input(name).map(|i| &i.ty) {
            Some(ValueType::Tensor(t)) => Some((t.dtype, t.shape.clone())),
            _ => None,
        };
        let integer = |key: &str, name: &str| -> Result<Option<(String, DataType)>, String> {
            match tensor_type(name) {
                None => Ok(None),
                Some((dtype @ (DataType::Int64 | DataType::Int32), _)) => Ok(Some((name.to_string(), dtype))),
                Some((other, _)) => Err(format!(
                    "input '{name}' (model.decoder.inputs.{key}): expected int64 or int32, found {other:?}"
                )),
            }
        };
        let input_ids = integer("input_ids", &inputs.input_ids)?.ok_or_else(|| format!("the decoder has no input '{}' (model.decoder.inputs.input_ids); inputs_embeds models are not supported yet", inputs.input_ids))?;
        let attention_mask = integer("attention_mask", &inputs.attention_mask)?;
        let position_ids = integer("position_ids", &inputs.position_ids)?;
        if !session.outputs().iter().any(|o| o.name == outputs.logits) {
            return Err(format!("the decoder has no output '{}' (model.decoder.outputs.logits)", outputs.logits));
        }
        let windowed = |layer: usize| match &decoder.sliding_window {
            Some(w) if w.layers.as_ref().is_none_or(|l| l.contains(&layer)) => Some(w.window_size + w.cache_slack),
            _ => None,
        };
        let mut layers = vec![];
        let (mut cache_dtype, mut head_size) = (None, decoder.head_size);
        let mut kv_heads =
            if decoder.num_key_value_heads > 0 { decoder.num_key_value_heads } else { decoder.num_attention_heads };
        for layer in 0..decoder.num_hidden_layers {
            let name = |template: &str| template.replace("%d", &layer.to_string());
            let l = LayerIo {
                past_key: name(&inputs.past_key_names),
                past_value: name(&inputs.past_value_names),
                present_key: name(&outputs.present_key_names),
                present_value: name(&outputs.present_value_names),
                window: None,
            };
            let mut window = None;
            for past in [&l.past_key, &l.past_value] {
                let Some((dtype, shape)) = tensor_type(past) else {
                    return Err(format!("the decoder has no input '{past}' (model.decoder.inputs.past_key_names / past_value_names, layer {layer} of num_hidden_layers {})", decoder.num_hidden_layers));
                };
                if cache_dtype.is_some_and(|d| d != dtype) {
                    return Err(format!(
                        "input '{past}': the cache is {dtype:?} here and {:?} in another layer",
                        cache_dtype.unwrap_or(dtype)
                    ));
                }
                cache_dtype = Some(dtype);
                let dims = shape.ok_or_else(|| format!("input '{past}': expected a cache of rank 4 [batch, kv_heads, length, head_size], found an unknown rank"))?;
                let [_, heads, length, size] = dims.as_slice() else {
                    return Err(format!("input '{past}': expected a cache of rank 4 [batch, kv_heads, length, head_size], found rank {}", dims.len()));
                };
                if let Dim::Fixed(h) = heads {
                    kv_heads = *h;
                }
                if let Dim::Fixed(d) = size {
                    head_size = *d;
                }
                // A windowed layer's cache dims are named *_sliding_length by the builder.
                if matches!(length, Dim::Symbol(s) if s.contains("sliding")) || matches!(length, Dim::Fixed(_)) {
                    window = windowed(layer).or(match length {
                        Dim::Fixed(n) => Some(*n),
                        _ => None,
                    });
                }
            }
            for present in [&l.present_key, &l.present_value] {
                if !session.outputs().iter().any(|o| &o.name == present) {
                    return Err(format!("the decoder has no output '{present}' (model.decoder.outputs.present_key_names / present_value_names)"));
                }
            }
            layers.push(LayerIo { window, ..l });
        }
        if kv_heads == 0 || head_size == 0 {
            return Err("the cache's heads and head size are neither in the decoder's input shapes nor in model.decoder (num_key_value_heads, head_size)".into());
        }
        Ok(DecoderIo {
            input_ids,
            attention_mask,
            position_ids,
            logits: outputs.logits.clone(),
            layers,
            cache_dtype: cache_dtype.unwrap_or(DataType::Float),
            kv_heads,
            head_size,
            shared_buffer: false,
        })
    }
}
