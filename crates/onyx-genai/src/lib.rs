//! # onyx-genai
//!
//! LLM generation on Onyx with the model folders of onnxruntime-genai (`genai_config.json`,
//! the decoder's ONNX file, `tokenizer.json`), through an API that mirrors onnxruntime-genai's:
//! [`Config`], [`Model`], [`Tokenizer`], [`GeneratorParams`] and [`Generator`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use onyx_genai::{Generator, GeneratorParams, Model, Tokenizer};
//!
//! # fn main() -> onyx_genai::Result<()> {
//! let model = Arc::new(Model::new("models/llm/llama-cpu-int4")?);
//! let tokenizer = Tokenizer::new(model.config())?;
//! let mut params = GeneratorParams::new(model.config());
//! params.set_search_option("max_length", 64.0)?;
//! let mut generator = Generator::new(&model, &params)?;
//! generator.append_tokens(&tokenizer.encode("The runtime")?)?;
//! let mut stream = tokenizer.create_stream();
//! while !generator.is_done() {
//!     generator.generate_next_token()?;
//!     print!("{}", stream.decode(generator.get_next_tokens()[0])?);
//! }
//! # Ok(()) }
//! ```
//!
//! | module | owns |
//! | --- | --- |
//! | `config` | genai_config.json: every key of genai 0.18, unknown keys as warnings |
//! | `providers` | genai's provider names and options mapped to Onyx's EPs |
//! | `model` | the decoder's session and the names of its inputs and outputs |
//! | `last_logits` | the graph rewrite that computes the last position's logits only |
//! | `tokenizer` | tokenizer.json, streaming decode |
//! | `chat` | chat templates rendered as transformers renders them |
//! | `search` | search options, logits processing, greedy and sampling |
//! | `beam` | beam search's scoring |
//! | `kv_cache` | the cache's form (growing, or GroupQueryAttention's shared buffer) and capacity |
//! | `cache_ops` | cache rows, positions and growth on the cache's device |
//! | `generator` | the loop: runs, the KV cache on the device, rewind |

mod beam;
mod cache_ops;
mod chat;
mod config;
mod error;
mod generator;
mod kv_cache;
mod last_logits;
mod model;
mod providers;
mod search;
mod tokenizer;

pub use config::{
    Config, DecoderConfig, DecoderInputs, DecoderOutputs, ModelConfig, ProviderConfig, SearchConfig,
    SessionOptionsConfig, SlidingWindow, CONFIG_FILE,
};
pub use error::{Error, Result};
pub use generator::Generator;
pub use model::Model;
pub use providers::PROVIDER_NAMES;
pub use search::GeneratorParams;
pub use tokenizer::{Tokenizer, TokenizerStream};
