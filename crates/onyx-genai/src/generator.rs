//! The generation loop: feed tokens, keep the KV cache on the model's device, choose the next
//! token (genai's `Generator`).
//!
//! The cache grows with the sequence and stays on the device that computed it (the GPU's when
//! the model runs on one), so a short chat on a long-context model holds a short cache and
//! `max_length` is a limit, not an allocation. In GroupQueryAttention's shared-buffer form (see
//! [`crate::kv_cache`]) each layer's past and present are one buffer whose capacity doubles as
//! the sequence reaches it: a decode step writes its new rows in place and runs the plan of the
//! step before. Otherwise each step feeds the previous step's `present.*` outputs back as
//! `past_key_values.*`. Windowed layers keep their fixed window. Beam search runs its beams as
//! the rows of one batch and reorders the cache rows on the device.

use std::sync::Arc;

use onyx_runtime::{DataType, Device, IoBinding, RunOptions, Tensor, Value};

use crate::beam::BeamSearch;
use crate::error::{invalid, Result};
use crate::kv_cache;
use crate::model::{DecoderIo, Model};
use crate::search::{self, GeneratorParams};

/// One prompt being generated (genai's `Generator`): one sequence, or `num_beams` beams.
pub struct Generator {
    model: Arc<Model>,
    params: GeneratorParams,
    /// The sequences: one, or one per beam (all of one length).
    rows: Vec<Vec<i32>>,
    /// The last chosen token of each row (an EOS is not appended to the row, as in genai).
    next_tokens: Vec<i32>,
    /// Per layer, the key and value cache of the first `cached` tokens of each row (none
    /// before the first run).
    cache: Option<Vec<[Tensor; 2]>>,
    cached: usize,
    /// The last run's logits output, as the model gave it.
    logits: Option<Tensor>,
    /// Whether `logits` belong to the last token of the rows.
    fresh: bool,
    done: bool,
    rng: fastrand::Rng,
    beams: Option<BeamSearch>,
    /// Beam search's result, best first, once done.
    returned: Vec<Vec<i32>>,
    /// What every run of the model is given: a terminate flag, an interrupt check.
    run_options: Option<RunOptions>,
}

impl Generator {
    /// A generator of `model` with `params` (its search options are checked here).
    pub fn new(model: &Arc<Model>, params: &GeneratorParams) -> Result<Generator> {
        let s = &params.search;
        if s.num_return_sequences > s.num_beams {
            return Err(invalid(format!(
                "num_return_sequences {} is above num_beams {}",
                s.num_return_sequences, s.num_beams
            )));
        }
        if s.num_beams > 1 && s.do_sample {
            return Err(invalid("do_sample with num_beams > 1: beam sampling is not supported (genai neither)"));
        }
        if params.max_length == 0 {
            return Err(invalid("max_length is 0 and the model has no context_length: set max_length"));
        }
        let context = model.config().model.context_length;
        if context > 0 && params.max_length > context {
            return Err(invalid(format!(
                "max_length {} is above the model's context_length {context}",
                params.max_length
            )));
        }
        let beams = (s.num_beams > 1).then(|| BeamSearch::new(s));
        Ok(Generator {
            model: model.clone(),
            params: params.clone(),
            rows: vec![vec![]; s.num_beams.max(1)],
            next_tokens: vec![],
            cache: None,
            cached: 0,
            logits: None,
            fresh: false,
            done: false,
            rng: search::rng_for(s),
            beams,
            returned: vec![],
            run_options: None,
        })
    }

    /// Appends tokens (a prompt, or a user's turn after generated text) and runs the model on
    /// them; the cache of what came before is kept. With beam search, only the prompt.
    pub fn append_tokens(&mut self, tokens: &[i32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(invalid("append_tokens: no tokens given"));
        }
        if self.beams.is_some() && self.token_count() > 0 {
            return Err(invalid("append_tokens: with beam search only the prompt can be appended"));
        }
        let vocab = self.model.config().model.vocab_size;
        if let Some(bad) = tokens.iter().find(|&&t| t < 0 || t as usize >= vocab) {
            return Err(invalid(format!("token id {bad} is outside the vocabulary of {vocab} tokens")));
        }
        let total = self.token_count() + tokens.len();
        if total > self.params.max_length {
            return Err(invalid(format!(
                "{total} tokens (prompt and history) exceed max_length {}",
                self.params.max_length
            )));
        }
        let before = self.token_count();
        for row in &mut self.rows {
            row.extend_from_slice(tokens);
        }
        self.next_tokens.clear();
        self.done = false;
        let ran = self.compute_logits();
        if ran.is_err() {
            // A failed or stopped run appends nothing.
            for row in &mut self.rows {
                row.truncate(before);
            }
        }
        ran
    }

    /// Chooses the next token from the last logits (running the model on the last token first
    /// when needed) and appends it.
    pub fn generate_next_token(&mut self) -> Result<()> {
        if self.token_count() == 0 {
            return Err(invalid("generate_next_token: append a prompt first"));
        }
        if self.is_done() {
            return Err(invalid("generate_next_token: the generation is done (EOS or max_length reached)"));
        }
        if !self.fresh {
            self.compute_logits()?;
        }
        let mut logits = self.last_logits()?;
        let eos = self.model.config().eos_token_ids().to_vec();
        for (row, l) in self.rows.iter().zip(&mut logits) {
            search::process_logits(l, row, &self.params.search, &eos);
        }
        self.fresh = false;
        match self.beams.take() {
            Some(mut beams) => {
                let step = beams.step(&logits, &self.rows, &eos);
                if step.tokens.len() < self.rows.len() {
                    return Err(invalid(
                        "beam search: fewer candidates than beams (is the vocabulary smaller than 2 * num_beams?)",
                    ));
                }
                self.reorder(&step.parents)?;
                for (row, &t) in self.rows.iter_mut().zip(&step.tokens) {
                    row.push(t);
                }
                self.next_tokens = step.tokens;
                if beams.is_done() || self.token_count() >= self.params.max_length {
                    self.returned = beams.finish(&self.rows);
                    self.done = true;
                }
                self.beams = Some(beams);
            }
            None => {
                let token = if self.params.search.do_sample {
                    search::sample(&logits[0], &self.params.search, &mut self.rng)
                } else {
                    search::greedy(&logits[0])
                };
                self.next_tokens = vec![token];
                self.done = eos.contains(&(token as i64));
                if !self.done {
                    self.rows[0].push(token);
                }
            }
        }
        Ok(())
    }

    /// Whether EOS was chosen (every beam finished) or the sequence reached max_length.
    pub fn is_done(&self) -> bool {
        self.done || self.token_count() >= self.params.max_length
    }

    /// The token each sequence (each beam) chose last (an EOS too, which the sequence does
    /// not hold).
    pub fn get_next_tokens(&self) -> &[i32] {
        &self.next_tokens
    }

    /// The EOS token that ended the generation, if one did (the sequence leaves it out).
    pub fn generated_eos(&self) -> Option<i32> {
        let eos = self.model.config().eos_token_ids();
        self.next_tokens.first().copied().filter(|t| self.done && self.beams.is_none() && eos.contains(&(*t as i64)))
    }

    /// Sequence `index`'s tokens, prompt included, EOS not (as genai). Beam search: once done,
    /// the `num_return_sequences` best, best first; before, the running beams.
    pub fn get_sequence(&self, index: usize) -> Result<&[i32]> {
        let all = if self.returned.is_empty() { &self.rows } else { &self.returned };
        all.get(index)
            .map(Vec::as_slice)
            .ok_or_else(|| invalid(format!("sequence {index} does not exist (this generator has {})", all.len())))
    }

    /// Tokens in the sequence, prompt included.
    pub fn token_count(&self) -> usize {
        self.rows[0].len()
    }

    /// The last run's output `name`: `logits` (the last position's, `[batch, 1, vocab]`; every
    /// position the run fed with [`crate::Config::all_position_logits`]) or a `present.*` cache
    /// tensor (on the cache's device; a shared buffer whole, its first
    /// [`Generator::token_count`] − 1 or so positions valid, as genai's).
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

    /// The last position's logits of each sequence, `[rows, 1, vocab]` float32 on the host
    /// (genai's `get_logits`).
    pub fn get_logits(&self) -> Result<Tensor> {
        let rows = self.last_logits()?;
        let shape = vec![rows.len(), 1, self.model.config().model.vocab_size];
        Ok(Tensor::from_vec(shape, rows.concat())?)
    }

    /// [`Generator::get_output`] copied to the host when it is on a GPU.
    pub fn get_output_on_host(&self, name: &str) -> Result<Tensor> {
        self.model.cache_ops().to_host(&self.get_output(name)?)
    }

    /// Keeps the first `length` tokens and forgets the rest (genai's `rewind_to`); the next
    /// token is generated after them. The cache is cut on its device; a windowed layer's
    /// cache cannot be cut, so then the kept tokens run again at the next step.
    pub fn rewind_to(&mut self, length: usize) -> Result<()> {
        if self.beams.is_some() {
            return Err(invalid("rewind_to is not supported with beam search"));
        }
        if length > self.token_count() {
            return Err(invalid(format!("rewind_to {length}: the sequence has only {} tokens", self.token_count())));
        }
        self.rows[0].truncate(length);
        self.next_tokens.clear();
        self.fresh = false;
        self.done = false;
        // The last kept token runs again to give the next logits: the cache keeps the others.
        let keep = length.saturating_sub(1).min(self.cached);
        if keep < self.cached {
            let model = self.model.clone();
            let cuttable = model.io().layers.iter().all(|l| l.window.is_none());
            match self.cache.as_mut() {
                // A shared buffer's later rows are past its mask: the next run overwrites them.
                Some(_) if model.io().shared_buffer && keep > 0 => self.cached = keep,
                Some(cache) if cuttable && keep > 0 => {
                    for t in cache.iter_mut().flatten() {
                        *t = model.cache_ops().positions(t, keep)?;
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

    /// Replaces the logits just computed for the last token (`rows × vocab` floats, one row
    /// per sequence, any shape) by the caller's: the next [`Generator::generate_next_token`]
    /// chooses from them (genai's `set_logits`, which also needs them computed: after
    /// [`Generator::append_tokens`]).
    pub fn set_logits(&mut self, logits: Tensor) -> Result<()> {
        let vocab = self.model.config().model.vocab_size;
        let rows = self.rows.len();
        if logits.len() != rows * vocab {
            return Err(invalid(format!(
                "set_logits: expected {} logits ({rows} row(s) of vocab_size {vocab}), got shape {:?}",
                rows * vocab,
                logits.shape()
            )));
        }
        if !matches!(logits.dtype(), DataType::Float | DataType::Float16 | DataType::BFloat16) {
            return Err(invalid(format!("set_logits: expected float logits, got {:?}", logits.dtype())));
        }
        if !self.fresh {
            return Err(invalid(
                "set_logits: the last token's logits are not computed yet (append tokens first; after generate_next_token the model has not run on the new token)",
            ));
        }
        self.logits = Some(logits.reshaped(vec![rows, 1, vocab])?);
        Ok(())
    }

    /// The options every later run of the model is given (terminate: the step in progress
    /// ends at its next node with [`onyx_runtime::Error::Terminated`]).
    pub fn set_run_options(&mut self, options: RunOptions) {
        self.run_options = Some(options);
    }

    /// Bytes the KV cache holds now (a shared buffer's whole capacity).
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
        while self.cached < self.token_count() {
            let end = self.token_count().min(self.cached.saturating_add(chunk));
            self.run(end)?;
        }
        self.fresh = true;
        Ok(())
    }

    /// One run over `rows[..][cached..end]`. Before the first run every row is the same
    /// prompt: it runs once and its cache is copied to every row. On an error the cache is
    /// dropped, so that the next run starts over from the tokens.
    fn run(&mut self, end: usize) -> Result<()> {
        let ran = self.run_once(end);
        if ran.is_err() {
            self.cache = None;
            self.cached = 0;
        }
        ran
    }

    fn run_once(&mut self, end: usize) -> Result<()> {
        let model = self.model.clone();
        let io = model.io();
        let batch = if self.cache.is_none() { 1 } else { self.rows.len() };
        let (past, total, new) = (self.cached, end, end - self.cached);
        let cache = self.cache_for(end)?;
        // A shared buffer's mask spans its capacity: ones over the sequence, then zeros.
        let width = if io.shared_buffer { cache.first().map_or(total, |l| capacity_of(&l[0])) } else { total };
        let new_tokens = self.rows[..batch].iter().flat_map(|r| r[past..end].iter().map(|&t| t as i64));
        let mut binding = IoBinding::new();
        binding.bind_input(io.input_ids.0.clone(), integers(io.input_ids.1, vec![batch, new], new_tokens)?);
        if let Some((name, dtype)) = &io.attention_mask {
            let row = (0..width).map(|p| i64::from(p < total));
            binding
                .bind_input(name.clone(), integers(*dtype, vec![batch, width], (0..batch).flat_map(|_| row.clone()))?);
        }
        if let Some((name, dtype)) = &io.position_ids {
            binding.bind_input(
                name.clone(),
                integers(*dtype, vec![batch, new], (0..batch).flat_map(|_| (past..total).map(|p| p as i64)))?,
            );
        }
        let device = model.cache_device();
        for (l, [key, value]) in io.layers.iter().zip(cache) {
            if io.shared_buffer && device != Device::Cpu {
                // One buffer as past and present: the GPU kernels write the new rows into it.
                binding
                    .bind_output(l.present_key.clone(), key.clone())
                    .bind_output(l.present_value.clone(), value.clone());
            } else {
                // Handed over: on the CPU a shared buffer nobody else holds is written in place.
                binding
                    .bind_output_to_device(l.present_key.clone(), device)
                    .bind_output_to_device(l.present_value.clone(), device);
            }
            binding.bind_input(l.past_key.clone(), key).bind_input(l.past_value.clone(), value);
        }
        binding.bind_output_to_device(io.logits.clone(), Device::Cpu);
        if let Some(options) = &self.run_options {
            binding.set_run_options(options.clone());
        }
        let mut outputs: std::collections::HashMap<String, Value> =
            model.session().run_with_binding(binding)?.into_vec().into_iter().collect();
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
        if batch < self.rows.len() {
            self.reorder(&vec![0; self.rows.len()])?;
        }
        Ok(())
    }

    /// The cache a run up to position `end` reads: the last run's, or a new one (batch 1). A
    /// shared buffer is made, or grown on its device, to the capacity `end` positions need.
    fn cache_for(&mut self, end: usize) -> Result<Vec<[Tensor; 2]>> {
        let model = self.model.clone();
        let io = model.io();
        let cache = self.cache.take();
        if !io.shared_buffer {
            return cache.map_or_else(|| empty_cache(io), Ok);
        }
        let current = cache.as_ref().and_then(|c| c.first()).map_or(0, |l| capacity_of(&l[0]));
        let capacity = kv_cache::capacity(end, current, self.params.max_length);
        let ops = model.cache_ops();
        match cache {
            Some(cache) if capacity == current => Ok(cache),
            Some(cache) => cache.iter().map(|[k, v]| Ok([ops.grow(k, capacity)?, ops.grow(v, capacity)?])).collect(),
            None => {
                let shape = vec![1, io.kv_heads, capacity, io.head_size];
                let zeros = || ops.zeros(io.cache_dtype, shape.clone());
                io.layers.iter().map(|_| Ok([zeros()?, zeros()?])).collect()
            }
        }
    }

    /// Makes row `i` of the cache a copy of row `parents[i]`, and the same for the sequences.
    fn reorder(&mut self, parents: &[usize]) -> Result<()> {
        let identity = parents.iter().enumerate().all(|(i, &p)| i == p)
            && self
                .cache
                .as_ref()
                .is_none_or(|c| c.first().is_none_or(|layer| layer[0].shape().first() == Some(&parents.len())));
        if identity {
            return Ok(());
        }
        let indices: Vec<i64> = parents.iter().map(|&p| p as i64).collect();
        if let Some(cache) = self.cache.as_mut() {
            let ops = self.model.cache_ops();
            for t in cache.iter_mut().flatten() {
                *t = ops.rows(t, &indices)?;
            }
        }
        let rows: Vec<Vec<i32>> = parents.iter().map(|&p| self.rows[p].clone()).collect();
        self.rows = rows;
        Ok(())
    }

    /// The last position's logits of each row, as f32 (a batch-1 prompt run serves every row).
    fn last_logits(&self) -> Result<Vec<Vec<f32>>> {
        let logits = self.logits.as_ref().ok_or_else(|| invalid("the model has not run yet"))?;
        let vocab = self.model.config().model.vocab_size;
        let shape = logits.shape();
        if shape.last() != Some(&vocab) || logits.is_empty() {
            return Err(invalid(format!(
                "logits of shape {shape:?}: expected the last dimension to be vocab_size {vocab}"
            )));
        }
        let batch = shape[0].max(1);
        let per_row = logits.len() / batch;
        let row = |b: usize| -> Result<Vec<f32>> {
            let range = (b + 1) * per_row - vocab..(b + 1) * per_row;
            Ok(match logits.dtype() {
                DataType::Float => logits.as_slice::<f32>()?[range].to_vec(),
                DataType::Float16 => logits.as_slice::<half::f16>()?[range].iter().map(|x| x.to_f32()).collect(),
                DataType::BFloat16 => logits.as_slice::<half::bf16>()?[range].iter().map(|x| x.to_f32()).collect(),
                other => return Err(invalid(format!("logits of type {other:?}: expected a float type"))),
            })
        };
        (0..self.rows.len()).map(|r| row(r.min(batch - 1))).collect()
    }
}

/// An int64 or int32 tensor of `values`.
fn integers(dtype: DataType, shape: Vec<usize>, values: impl Iterator<Item = i64>) -> Result<Tensor> {
    Ok(match dtype {
        DataType::Int32 => Tensor::from_vec(shape, values.map(|v| v as i32).collect::<Vec<_>>())?,
        _ => Tensor::from_vec(shape, values.collect::<Vec<_>>())?,
    })
}

/// The positions a cache tensor `[batch, heads, positions, head_size]` holds; 0 for a tensor of
/// another rank (a model's own outputs are fed back, so this must not panic).
fn capacity_of(t: &Tensor) -> usize {
    t.shape().get(2).copied().unwrap_or(0)
}

/// The cache before the first run (batch 1): no positions, or a windowed layer's zero-filled
/// window.
fn empty_cache(io: &DecoderIo) -> Result<Vec<[Tensor; 2]>> {
    io.layers
        .iter()
        .map(|l| {
            let shape = vec![1, io.kv_heads, l.window.unwrap_or(0), io.head_size];
            Ok([Tensor::zeros(io.cache_dtype, shape.clone())?, Tensor::zeros(io.cache_dtype, shape)?])
        })
        .collect()
}
