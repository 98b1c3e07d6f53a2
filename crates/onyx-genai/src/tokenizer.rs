//! The folder's tokenizer (`tokenizer.json` through Hugging Face's `tokenizers` crate), and a
//! stream that turns generated tokens into text without splitting a UTF-8 character.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::chat::{self, SpecialTokens, SPECIAL_TOKEN_KEYS};
use crate::config::Config;
use crate::error::{invalid, Error, Result};

/// Tokenizer of a model folder: `tokenizer.json`, with `tokenizer_config.json`'s chat template
/// (or `chat_template.jinja`) where the folder has one. Cloning it is cheap: clones share the
/// vocabulary.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    vocab_size: usize,
    /// The chat template's source, if the folder has one.
    chat_template: Option<String>,
    special_tokens: SpecialTokens,
}

impl Tokenizer {
    /// Loads the tokenizer of the folder `config` was read from.
    pub fn new(config: &Config) -> Result<Tokenizer> {
        Tokenizer::from_dir(&config.dir, config.model.vocab_size)
    }

    /// Loads `dir/tokenizer.json` (and `tokenizer_config.json`, `chat_template.jinja`); ids at
    /// or above `vocab_size` are refused by [`Tokenizer::decode`].
    pub fn from_dir(dir: &Path, vocab_size: usize) -> Result<Tokenizer> {
        let file = dir.join("tokenizer.json");
        let bytes = std::fs::read(&file)
            .map_err(|e| Error::File { file: file.clone(), message: format!("cannot read: {e}") })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| Error::File { file, message: format!("not a tokenizer: {e}") })?;
        let (chat_template, special_tokens) = read_tokenizer_config(dir)?;
        Ok(Tokenizer { inner: Arc::new(inner), vocab_size, chat_template, special_tokens })
    }

    /// The ids of `text`, with the special tokens its post-processor adds (BOS for Llama).
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        let encoding = self.inner.encode(text, true).map_err(|e| invalid(format!("cannot encode the text: {e}")))?;
        Ok(encoding.get_ids().iter().map(|&id| id as i32).collect())
    }

    /// The ids of each text.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Vec<Vec<i32>>> {
        texts.iter().map(|t| self.encode(t)).collect()
    }

    /// The text of `ids`, special tokens left out (as genai decodes).
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        let ids = self.checked_ids(ids)?;
        self.inner.decode(&ids, true).map_err(|e| invalid(format!("cannot decode the tokens: {e}")))
    }

    /// The text of each sequence.
    pub fn decode_batch(&self, sequences: &[&[i32]]) -> Result<Vec<String>> {
        sequences.iter().map(|ids| self.decode(ids)).collect()
    }

    /// The id of a token's text, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<i32> {
        self.inner.token_to_id(token).map(|id| id as i32)
    }

    /// A stream that decodes tokens one at a time (it holds a clone of this tokenizer).
    pub fn create_stream(&self) -> TokenizerStream {
        TokenizerStream { tokenizer: self.clone(), tokens: vec![], prefix: 0, read: 0 }
    }

    /// The chat template's source, if the folder has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Renders a chat (`messages`: a JSON list of `{"role": ..., "content": ...}`; `tools`: a
    /// JSON list) into the prompt text, with `template` or the folder's own (genai's
    /// `apply_chat_template`); `add_generation_prompt` ends it with the assistant's turn.
    pub fn apply_chat_template(
        &self,
        template: Option<&str>,
        messages: &str,
        tools: Option<&str>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = template.or(self.chat_template.as_deref()).ok_or_else(|| invalid("the model folder has no chat template (tokenizer_config.json chat_template or chat_template.jinja): pass one"))?;
        chat::render(template, messages, tools, add_generation_prompt, &self.special_tokens)
    }

    fn checked_ids(&self, ids: &[i32]) -> Result<Vec<u32>> {
        ids.iter()
            .map(|&id| match u32::try_from(id) {
                Ok(u) if (u as usize) < self.vocab_size.max(self.inner.get_vocab_size(true)) => Ok(u),
                _ => Err(invalid(format!("token id {id} is outside the vocabulary of {} tokens", self.vocab_size))),
            })
            .collect()
    }
}

/// `tokenizer_config.json`'s chat template and named special tokens; `chat_template.jinja`
/// wins over the config's template, as in transformers.
fn read_tokenizer_config(dir: &Path) -> Result<(Option<String>, SpecialTokens)> {
    let file: PathBuf = dir.join("tokenizer_config.json");
    let mut template = None;
    let mut special = SpecialTokens::default();
    if let Ok(text) = std::fs::read_to_string(&file) {
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::File { file: file.clone(), message: e.to_string() })?;
        template = match json.get("chat_template") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // A list of named templates: the one named "default".
            Some(serde_json::Value::Array(named)) => {
                named.iter().find(|t| t["name"] == "default").and_then(|t| t["template"].as_str()).map(str::to_string)
            }
            Some(other) => {
                return Err(Error::File {
                    file,
                    message: format!("chat_template: expected a string or a list of named templates, got {other}"),
                })
            }
        };
        for key in SPECIAL_TOKEN_KEYS {
            let token = match json.get(key) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(v) => v.get("content").and_then(|c| c.as_str()).map(str::to_string),
                None => None,
            };
            special.names.extend(token.map(|t| (key, t)));
        }
    }
    let jinja = dir.join("chat_template.jinja");
    if let Ok(text) = std::fs::read_to_string(&jinja) {
        template = Some(text);
    }
    Ok((template, special))
}

/// Decodes generated tokens one at a time. Each piece is whole UTF-8 characters (a token that
/// ends inside a character waits for the next), and the pieces join to exactly
/// [`Tokenizer::decode`] of all the tokens.
pub struct TokenizerStream {
    tokenizer: Tokenizer,
    tokens: Vec<u32>,
    /// Tokens before `prefix` are never decoded again; `prefix..read` gives the context that a
    /// decoder's leading-space rules see.
    prefix: usize,
    read: usize,
}

impl TokenizerStream {
    /// Adds a token; returns the new text (empty while a character is incomplete).
    pub fn decode(&mut self, token: i32) -> Result<String> {
        let id = self.tokenizer.checked_ids(&[token])?[0];
        self.tokens.push(id);
        let decode = |ids: &[u32]| {
            self.tokenizer.inner.decode(ids, true).map_err(|e| invalid(format!("cannot decode the tokens: {e}")))
        };
        let before = decode(&self.tokens[self.prefix..self.read])?;
        let now = decode(&self.tokens[self.prefix..])?;
        if now.len() > before.len() && now.starts_with(&before) && !now.ends_with(char::REPLACEMENT_CHARACTER) {
            let piece = now[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.tokens.len();
            Ok(piece)
        } else {
            Ok(String::new())
        }
    }
}
