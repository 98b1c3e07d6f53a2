//! The generation loop: feed tokens, keep the KV cache on the model's device, choose the next
//! token (genai's `Generator`).
//!
//! The cache grows with the sequence: each step feeds the previous step's `present.*` outputs
//! back as `past_key_values.*`, left on the device that computed them (the GPU's when the model
//! runs on one), so a short chat on a long-context model holds a short cache and `max_length`
//! is a limit, not an allocation. Windowed layers keep their fixed window.

use std::sync::Arc;

use onyx_runtime::{DataType, Device, HostBuffer, IoBinding, Tensor, Value};

use crate::error::{invalid, Result};
use crate::model::{DecoderIo, Model};
use crate::search::{self, GeneratorParams};

/// One sequence being generated (genai's `Generator`, one prompt per generator for now).
pub struct Generator {
    model: Arc<Model>,
    params: GeneratorParams,
    tokens: Vec<i32>,
    /// The last chosen token (an EOS is not appended to `tokens`, as in genai).
    next_token: Option<i32>,
    /// Per layer, the key and value cache of the first `cached` tokens (none before the first
    /// run).
    cache: Option<Vec<[Tensor; 2]>>,
    cached: usize,
    /// The last run's logits output, as the model gave it.
    logits: Option<Tensor>,
    /// Whether `logits` belong to the last token of `tokens`.
    fresh: bool,
    done: bool,
    rng: fastrand::Rng,
}

impl Generator {
    /// A generator of `model` with `params` (its search options are checked here).
    pub fn new(model: &Arc<Model>, params: &GeneratorParams) -> Result<Generator> {
        let s = &params.search;
        if s.num_beams > 1 {
            return Err(invalid(format!("num_beams {}: beam search is not supported yet (use num_beams 1)", s.num_beams)));
        }
        if s.num_return_sequences > 1 {
            return Err(invalid(format!("num_return_sequences {}: one sequence per prompt without beam search", s.num_return_sequences)));
        }
        if params.max_length == 0 {
            return Err(invalid("max_length is 0 and the model has no context_length: set max_length"));
        }
        let context = model.config().model.context_length;
        if context > 0 && params.max_length > context {
            return Err(invalid(format!("max_length {} is above the model's context_length {context}", params.max_length)));
        }
        Ok(Generator { model: model.clone(), params: params.clone(), tokens: vec![], next_token: None, cache: None, cached: 0, logits: None, fresh: false, done: false, rng: search::rng_for(s) })
    }

    /// Appends tokens (a prompt, or a user's turn after generated text) and runs the model on
    /// them; the cache of what came before is kept.
    pub fn append_tokens(&mut self, tokens: &[i32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(invalid("append_tokens: no tokens given"));
        }
        let vocab = self.model.config().model.vocab_size;
        if let Some(bad) = tokens.iter().find(|&&t| t < 0 || t as usize >= vocab) {
            return Err(invalid(format!("token id {bad} is outside the vocabulary of {vocab} tokens")));
        }
        let total = self.tokens.len() + tokens.len();
        if total > self.params.max_length {
            return Err(invalid(format!("{total} tokens (prompt and history) exceed max_length {}", self.params.max_length)));
        }
        self.tokens.extend_from_slice(tokens);
        self.next_token = None;
        self.done = false;
        self.compute_logits()
    }

    /// Chooses the next token from the last logits (running the model on the last token first
    /// when needed) and appends it.
    pub fn generate_next_token(&mut self) -> Result<()> {
        if self.tokens.is_empty() {
            return Err(invalid("generate_next_token: append a prompt first"));
        }
        if self.done {
            return Err(invalid("generate_next_token: the generation is done (EOS or max_length reached)"));
        }
        if !self.fresh {
            self.compute_logits()?;
        }
        let mut logits = self.last_logits()?;
        let eos = self.model.config().eos_token_ids();
        search::process_logits(&mut logits, &self.tokens, &self.params.search, eos);
        let token = if self.params.search.do_sample { search::sample(&logits, &self.params.search, &mut self.rng) } else { search::greedy(&logits) };
        self.next_token = Some(token);
        self.done = eos.contains(&(token as i64));
        if !self.done {
            self.tokens.push(token);
            self.fresh = false;
        }
        Ok(())
    }

    /// Whether EOS was chosen or the sequence reached max_length.
    pub fn is_done(&self) -> bool {
        self.done || self.tokens.len() >= self.params.max_length
    }

    /// The token each sequence chose last (an EOS too, which the sequence does not hold).
    pub fn get_next_tokens(&self) -> &[i32] {
        self.next_token.as_ref().map(std::slice::from_ref).unwrap_or(&[])
    }

    /// The EOS token that ended the generation, if one did (the sequence leaves it out).
    pub fn generated_eos(&self) -> Option<i32> {
        self.next_token.filter(|t| self.done && self.model.config().eos_token_ids().contains(&(*t as i64)))
    }

    /// Sequence `index`'s tokens, prompt included, EOS not (as genai; index 0: the only one
    /// for now).
    pub fn get_sequence(&self, index: usize) -> Result<&[i32]> {
        if index == 0 {
            Ok(&self.tokens)
        } else {
            Err(invalid(format!("sequence {index} does not exist (this generator has 1)")))
        }
    }

    /// Tokens in the sequence, prompt included.
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// The last run's output `name`: `logits` (as the model gave them, every position the run
    /// computed) or a `present.*` cache tensor (on the cache's device).
    pub fn get_output(&self, name: &str) -> Result<Tensor> {
        let io = self.model.io();
        if name == io.logits {
            return self.logits.clone().ok_or_else(|| invalid("get_output: the model has not run yet"));
        }
        let cache = self.cache.as_ref().ok_or_else(|| invalid("get_output: the model has not run yet"))?;
        for (layer, l) in io.layers.iter().enumerate() {
            for (i, present) in [&l.present_key, &l.present_value].into_iter().enumerate() {
                if present == name {
                    return Ok(cache[layer][i].clone());
                }
            }
        }
        Err(invalid(format!("get_output: the decoder has no output '{name}' that generation keeps")))
    }

    /// Keeps the first `length` tokens and forgets the rest (genai's `rewind_to`); the next
    /// token is generated after them. Where the cache can be cut (on the host, no windowed
    /// layer) it is; otherwise the kept tokens run again at the next step.
    pub fn rewind_to(&mut self, length: usize) -> Result<()> {
        if length > self.tokens.len() {
            return Err(invalid(format!("rewind_to {length}: the sequence has only {} tokens", self.tokens.len())));
        }
        self.tokens.truncate(length);
        self.next_token = None;
        self.fresh = false;
        self.done = false;
        // The last kept token runs again to give the next logits: the cache keeps the others.
        let keep = length.saturating_sub(1).min(self.cached);
        if keep < self.cached {
            let io = self.model.io();
            let cuttable = io.layers.iter().all(|l| l.window.is_none()) && self.model.cache_device() == Device::Cpu;
            match self.cache.as_mut() {
                Some(cache) if cuttable && keep > 0 => {
                    for layer in cache.iter_mut() {
                        for t in layer.iter_mut() {
                            *t = cut_cache(t, keep)?;
                        }
                    }
                    self.cached = keep;
                }
                _ => {
                    self.cache = None;
                    self.cached = 0;
                }
            }
        }
        if length == 0 {
            self.logits = None;
        }
        Ok(())
    }

    /// Bytes the KV cache holds now.
    pub fn cache_bytes(&self) -> usize {
        let io = self.model.io();
        self.cache.as_ref().map_or(0, |c| c.iter().flatten().map(|t| t.len() * io.cache_dtype.bit_width() / 8).sum())
    }

    /// The generation's options.
    pub fn params(&self) -> &GeneratorParams {
        &self.params
    }

    /// Runs the model on the tokens the cache does not hold yet (in chunks of `chunk_size`
    /// when set), leaving the logits of the last one.
    fn compute_logits(&mut self) -> Result<()> {
        let chunk = match self.params.search.chunk_size {
            0 => usize::MAX,
            n => n,
        };
        while self.cached < self.tokens.len() {
            let end = self.tokens.len().min(self.cached.saturating_add(chunk));
            self.run(end)?;
        }
        self.fresh = true;
        Ok(())
    }

    /// One run over `tokens[cached..end]`.
    fn run(&mut self, end: usize) -> Result<()> {
        let model = self.model.clone();
        let io = model.io();
        let new = &self.tokens[self.cached..end];
        let (past, total) = (self.cached, end);
        let mut binding = IoBinding::new();
        binding.bind_input(io.input_ids.0.clone(), integers(io.input_ids.1, vec![1, new.len()], new.iter().map(|&t| t as i64))?);
        if let Some((name, dtype)) = &io.attention_mask {
            binding.bind_input(name.clone(), integers(*dtype, vec![1, total], std::iter::repeat_n(1, total))?);
        }
        if let Some((name, dtype)) = &io.position_ids {
            binding.bind_input(name.clone(), integers(*dtype, vec![1, new.len()], (past..total).map(|p| p as i64))?);
        }
        let cache = match self.cache.take() {
            Some(cache) => cache,
            None => empty_cache(io)?,
        };
        let device = model.cache_device();
        for (l, [key, value]) in io.layers.iter().zip(cache) {
            binding.bind_input(l.past_key.clone(), key).bind_input(l.past_value.clone(), value);
            binding.bind_output_to_device(l.present_key.clone(), device).bind_output_to_device(l.present_value.clone(), device);
        }
        binding.bind_output_to_device(io.logits.clone(), Device::Cpu);
        let mut outputs: std::collections::HashMap<String, Value> = model.session().run_with_binding(binding)?.into_vec().into_iter().collect();
        let mut take = |name: &str| -> Result<Tensor> {
            let value = outputs.remove(name).ok_or_else(|| invalid(format!("the decoder gave no output '{name}'")))?;
            Ok(value.into_tensor()?)
        };
        self.logits = Some(take(&io.logits)?);
        let mut next = Vec::with_capacity(io.layers.len());
        for l in &io.layers {
            next.push([take(&l.present_key)?, take(&l.present_value)?]);
        }
        self.cache = Some(next);
        self.cached = end;
        Ok(())
    }

    /// The last position's logits as f32.
    fn last_logits(&self) -> Result<Vec<f32>> {
        let logits = self.logits.as_ref().ok_or_else(|| invalid("the model has not run yet"))?;
        let vocab = self.model.config().model.vocab_size;
        let width = *logits.shape().last().unwrap_or(&0);
        if width != vocab || logits.is_empty() {
            return Err(invalid(format!("logits of shape {:?}: expected the last dimension to be vocab_size {vocab}", logits.shape())));
        }
        let start = logits.len() - vocab;
        Ok(match logits.dtype() {
            DataType::Float => logits.as_slice::<f32>()?[start..].to_vec(),
            DataType::Float16 => logits.as_slice::<half::f16>()?[start..].iter().map(|x| x.to_f32()).collect(),
            DataType::BFloat16 => logits.as_slice::<half::bf16>()?[start..].iter().map(|x| x.to_f32()).collect(),
            other => return Err(invalid(format!("logits of type {other:?}: expected a float type"))),
        })
    }
}

/// An int64 or int32 tensor of `values`.
fn integers(dtype: DataType, shape: Vec<usize>, values: impl Iterator<Item = i64>) -> Result<Tensor> {
    Ok(match dtype {
        DataType::Int32 => Tensor::from_vec(shape, values.map(|v| v as i32).collect::<Vec<_>>())?,
        _ => Tensor::from_vec(shape, values.collect::<Vec<_>>())?,
    })
}

/// The cache before the first run: no positions, or a windowed layer's zero-filled window.
fn empty_cache(io: &DecoderIo) -> Result<Vec<[Tensor; 2]>> {
    io.layers
        .iter()
        .map(|l| {
            let shape = vec![1, io.kv_heads, l.window.unwrap_or(0), io.head_size];
            Ok([Tensor::zeros(io.cache_dtype, shape.clone())?, Tensor::zeros(io.cache_dtype, shape)?])
        })
        .collect()
}

/// The first `keep` positions of a host cache tensor `[batch, heads, length, head_size]`.
fn cut_cache(t: &Tensor, keep: usize) -> Result<Tensor> {
    let &[batch, heads, length, size] = t.shape() else {
        return Err(invalid(format!("cache of shape {:?}: expected rank 4", t.shape())));
    };
    let elem = t.dtype().bit_width() / 8;
    let bytes = t.view()?.bytes()?;
    let (row, kept) = (length * size * elem, keep * size * elem);
    let mut out = Vec::with_capacity(batch * heads * kept);
    for chunk in bytes.chunks_exact(row) {
        out.extend_from_slice(&chunk[..kept]);
    }
    Ok(Tensor::from_bytes(t.dtype(), vec![batch, heads, keep, size], HostBuffer::from_vec(out))?)
}
