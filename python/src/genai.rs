//! `onyx.genai`: onnxruntime-genai's Python API (`Config`, `Model`, `Tokenizer`,
//! `TokenizerStream`, `GeneratorParams`, `Generator`, `Tensor`) over `onyx::genai`. Errors are
//! `RuntimeError`s, as genai raises them; Ctrl-C during a model run raises KeyboardInterrupt.

use std::sync::Arc;

use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use onyx::genai::{self as og, Error as GenaiError};
use onyx::{RunOptions, Tensor};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};

use crate::control::Control;
use crate::convert::tensor_to_numpy;

/// A genai error as the `RuntimeError` genai raises.
fn err(e: GenaiError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// The error of a generator's run: the signal's exception (KeyboardInterrupt) when Ctrl-C
/// stopped it, a RuntimeError otherwise (genai's for `terminate_session` too).
fn run_err(control: &Control, e: GenaiError) -> PyErr {
    match e {
        GenaiError::Runtime(onyx::Error::Terminated) => control.signal().unwrap_or_else(|| {
            PyRuntimeError::new_err("the generation was terminated: terminate_session is set to \"1\"")
        }),
        other => err(other),
    }
}

/// A folder's genai_config.json, with the providers and options the caller changes before
/// loading a [`Model`] from it.
#[pyclass(module = "onyx.genai", name = "Config")]
pub struct Config {
    inner: og::Config,
}

#[pymethods]
impl Config {
    /// Reads `path`/genai_config.json.
    #[new]
    fn new(path: std::path::PathBuf) -> PyResult<Config> {
        Ok(Config { inner: og::Config::new(path).map_err(err)? })
    }

    /// Removes every provider: the model runs on the CPU.
    fn clear_providers(&mut self) {
        self.inner.clear_providers();
    }

    /// Onyx's option (not genai's): the logits output of a run holds every position it fed,
    /// as genai's does. Off by default: only the last position's logits are computed.
    #[getter]
    fn get_all_position_logits(&self) -> bool {
        self.inner.all_position_logits
    }

    #[setter]
    fn set_all_position_logits(&mut self, value: bool) {
        self.inner.all_position_logits = value;
    }

    /// Appends a provider by genai's name (`cpu`, `dml`, `webgpu`, `cuda`; all but `cpu` run
    /// on Onyx's wgpu EP).
    fn append_provider(&mut self, provider: &str) -> PyResult<()> {
        self.inner.append_provider(provider).map_err(err)
    }

    /// Sets a provider's option (`device_id`, `performance_preference`, ...).
    fn set_provider_option(&mut self, provider: &str, key: &str, value: &str) -> PyResult<()> {
        self.inner.set_provider_option(provider, key, value).map_err(err)
    }

    /// Applies a JSON object on top of the configuration (`{"search": {"max_length": 64}}`).
    fn overlay(&mut self, json: &str) -> PyResult<()> {
        self.inner.overlay(json).map_err(err)
    }

    /// Filters the adapters `provider` may use by type (`GPU`, `CPU`).
    fn set_decoder_provider_options_hardware_device_type(&mut self, provider: &str, value: &str) -> PyResult<()> {
        self.inner.set_provider_option(provider, "hardware_device_type", value).map_err(err)
    }

    /// Filters the adapters `provider` may use by device id.
    fn set_decoder_provider_options_hardware_device_id(&mut self, provider: &str, value: u32) -> PyResult<()> {
        self.inner.set_provider_option(provider, "hardware_device_id", &value.to_string()).map_err(err)
    }

    /// Filters the adapters `provider` may use by PCI vendor (4318 NVIDIA, 4098 AMD, 32902
    /// Intel).
    fn set_decoder_provider_options_hardware_vendor_id(&mut self, provider: &str, value: u32) -> PyResult<()> {
        self.inner.set_provider_option(provider, "hardware_vendor_id", &value.to_string()).map_err(err)
    }

    /// Removes the device-type filter of `provider`.
    fn clear_decoder_provider_options_hardware_device_type(&mut self, provider: &str) {
        self.remove_option(provider, "hardware_device_type");
    }

    /// Removes the device-id filter of `provider`.
    fn clear_decoder_provider_options_hardware_device_id(&mut self, provider: &str) {
        self.remove_option(provider, "hardware_device_id");
    }

    /// Removes the vendor filter of `provider`.
    fn clear_decoder_provider_options_hardware_vendor_id(&mut self, provider: &str) {
        self.remove_option(provider, "hardware_vendor_id");
    }
}

impl Config {
    fn remove_option(&mut self, provider: &str, key: &str) {
        let list = &mut self.inner.model.decoder.session_options.provider_options;
        for entry in list.iter_mut().filter(|p| p.name == provider) {
            entry.options.retain(|(k, _)| k != key);
        }
    }
}

/// A loaded model folder: its decoder's session on the configured providers.
#[pyclass(frozen, module = "onyx.genai", name = "Model")]
pub struct Model {
    inner: Arc<og::Model>,
}

#[pymethods]
impl Model {
    /// Loads a folder (a path) or a [`Config`] (with its changed providers).
    #[new]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Model> {
        let config = match source.cast::<Config>() {
            Ok(config) => config.borrow().inner.clone(),
            Err(_) => og::Config::new(source.extract::<std::path::PathBuf>()?).map_err(err)?,
        };
        let model = py.detach(|| og::Model::from_config(&config)).map_err(err)?;
        Ok(Model { inner: Arc::new(model) })
    }

    /// The architecture (`llama`, `qwen2`, ...).
    #[getter]
    fn r#type(&self) -> String {
        self.inner.config().model.model_type.clone()
    }

    /// The device genai would name for the first provider: `CPU`, `DML`, `WebGPU` or `CUDA`
    /// (the last three run on Onyx's wgpu EP).
    #[getter]
    fn device_type(&self) -> &'static str {
        let providers = &self.inner.config().model.decoder.session_options.provider_options;
        match providers.first().map(|p| p.name.as_str()) {
            Some("dml") => "DML",
            Some("webgpu") | Some("wgpu") => "WebGPU",
            Some("cuda") => "CUDA",
            _ => "CPU",
        }
    }
}

/// The model folder's tokenizer.
#[pyclass(frozen, module = "onyx.genai", name = "Tokenizer")]
pub struct Tokenizer {
    inner: og::Tokenizer,
    config: og::Config,
}

#[pymethods]
impl Tokenizer {
    /// The tokenizer of a [`Model`], a [`Config`] or a folder.
    #[new]
    fn new(source: &Bound<'_, PyAny>) -> PyResult<Tokenizer> {
        let config = if let Ok(model) = source.cast::<Model>() {
            model.get().inner.config().clone()
        } else if let Ok(config) = source.cast::<Config>() {
            config.borrow().inner.clone()
        } else {
            og::Config::new(source.extract::<std::path::PathBuf>()?).map_err(err)?
        };
        Ok(Tokenizer { inner: og::Tokenizer::new(&config).map_err(err)?, config })
    }

    /// The token ids of `text` (int32), with the special tokens the tokenizer adds.
    fn encode<'py>(&self, py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyArray1<i32>>> {
        Ok(PyArray1::from_vec(py, self.inner.encode(text).map_err(err)?))
    }

    /// The text of token ids (an int32 array or a list), special tokens left out.
    fn decode(&self, tokens: &Bound<'_, PyAny>) -> PyResult<String> {
        self.inner.decode(&token_ids(tokens)?).map_err(err)
    }

    /// The ids of each text, as a `[texts, longest]` int32 [`Tensor`] padded on the right with
    /// the pad token.
    fn encode_batch(&self, texts: Vec<String>) -> PyResult<PyTensor> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let rows = self.inner.encode_batch(&refs).map_err(err)?;
        let width = rows.iter().map(Vec::len).max().unwrap_or(0);
        let pad = self.config.pad_token_id() as i32;
        let flat: Vec<i32> =
            rows.iter().flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(pad, width - r.len()))).collect();
        let tensor = Tensor::from_vec(vec![rows.len(), width], flat).map_err(|e| err(e.into()))?;
        Ok(PyTensor { inner: tensor })
    }

    /// The text of each row of a `[rows, length]` [`Tensor`] or 2-D array of token ids.
    fn decode_batch(&self, tokens: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let rows = token_rows(tokens)?;
        rows.iter().map(|r| self.inner.decode(r).map_err(err)).collect()
    }

    /// The id of a token's text, -1 when the vocabulary has no such token.
    fn to_token_id(&self, token: &str) -> i32 {
        self.inner.token_to_id(token).unwrap_or(-1)
    }

    /// The prompt text of a chat: `messages` a JSON list of `{"role", "content"}`, `tools` a
    /// JSON list; `template_str` overrides the folder's chat template.
    #[pyo3(signature = (messages, *, template_str = None, tools = None, add_generation_prompt = true))]
    fn apply_chat_template(
        &self,
        messages: &str,
        template_str: Option<&str>,
        tools: Option<&str>,
        add_generation_prompt: bool,
    ) -> PyResult<String> {
        let template = template_str.filter(|t| !t.is_empty());
        let tools = tools.filter(|t| !t.is_empty());
        self.inner.apply_chat_template(template, messages, tools, add_generation_prompt).map_err(err)
    }

    /// A stream that decodes generated tokens one at a time into whole characters.
    fn create_stream(&self) -> TokenizerStream {
        TokenizerStream { inner: self.inner.create_stream() }
    }

    /// The beginning-of-sequence token (-1 when the folder has none).
    #[getter]
    fn bos_token_id(&self) -> i64 {
        self.config.model.bos_token_id.unwrap_or(-1)
    }

    /// The end-of-sequence tokens.
    #[getter]
    fn eos_token_ids(&self) -> Vec<i64> {
        self.config.eos_token_ids().to_vec()
    }

    /// The padding token.
    #[getter]
    fn pad_token_id(&self) -> i64 {
        self.config.pad_token_id()
    }
}

/// Decodes generated tokens one at a time; the pieces join to the decode of all of them.
#[pyclass(module = "onyx.genai", name = "TokenizerStream")]
pub struct TokenizerStream {
    inner: og::TokenizerStream,
}

#[pymethods]
impl TokenizerStream {
    /// The new text that `token` completes (empty while a character is incomplete).
    fn decode(&mut self, token: i32) -> PyResult<String> {
        self.inner.decode(token).map_err(err)
    }
}

/// The options of one generation, starting from the folder's `search` section.
#[pyclass(module = "onyx.genai", name = "GeneratorParams")]
pub struct GeneratorParams {
    inner: og::GeneratorParams,
}

#[pymethods]
impl GeneratorParams {
    /// The defaults of `model`'s folder.
    #[new]
    fn new(model: &Model) -> GeneratorParams {
        GeneratorParams { inner: og::GeneratorParams::new(model.inner.config()) }
    }

    /// Sets search options by genai's names (`max_length=64, do_sample=True, top_k=5`, ...).
    #[pyo3(signature = (**options))]
    fn set_search_options(&mut self, options: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let Some(options) = options else { return Ok(()) };
        for (key, value) in options.iter() {
            let name: String = key.extract()?;
            let number = if value.is_instance_of::<PyBool>() {
                f64::from(u8::from(value.extract::<bool>()?))
            } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
                value.extract::<f64>()?
            } else {
                return Err(PyRuntimeError::new_err(format!(
                    "search option {name}: expected a float, bool or int, got {}",
                    crate::convert::type_name(&value)
                )));
            };
            self.inner.set_search_option(&name, number).map_err(err)?;
        }
        Ok(())
    }

    /// The search options as genai lists them: booleans as bools, every number as a float.
    fn get_search_options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner.search;
        let dict = PyDict::new(py);
        for (name, value) in [
            ("do_sample", s.do_sample),
            ("early_stopping", s.early_stopping),
            ("past_present_share_buffer", s.past_present_share_buffer),
        ] {
            dict.set_item(name, value)?;
        }
        for (name, value) in [
            ("batch_size", 1.0),
            ("chunk_size", s.chunk_size as f64),
            ("diversity_penalty", f64::from(s.diversity_penalty)),
            ("length_penalty", f64::from(s.length_penalty)),
            ("max_length", self.inner.max_length() as f64),
            ("min_length", s.min_length as f64),
            ("no_repeat_ngram_size", s.no_repeat_ngram_size as f64),
            ("num_beams", s.num_beams as f64),
            ("num_return_sequences", s.num_return_sequences as f64),
            ("random_seed", s.random_seed as f64),
            ("repetition_penalty", f64::from(s.repetition_penalty)),
            ("temperature", f64::from(s.temperature)),
            ("top_k", s.top_k as f64),
            ("top_p", f64::from(s.top_p)),
        ] {
            dict.set_item(name, value)?;
        }
        Ok(dict)
    }

    /// Constrained decoding (llguidance) is not in Onyx yet: an error, never a silent no-op.
    #[pyo3(signature = (r#type, data, enable_ff_tokens = false))]
    fn set_guidance(&mut self, r#type: &str, data: &str, enable_ff_tokens: bool) -> PyResult<()> {
        let _ = (data, enable_ff_tokens);
        Err(PyRuntimeError::new_err(format!(
            "set_guidance({type:?}): guided generation (llguidance) is not supported by Onyx yet"
        )))
    }
}

/// One generation: feed tokens, generate the next ones; the KV cache stays on the model's
/// device.
#[pyclass(module = "onyx.genai", name = "Generator")]
pub struct Generator {
    inner: og::Generator,
    /// `set_runtime_option("terminate_session", ...)`'s flag, given to every run.
    terminate: RunOptions,
}

#[pymethods]
impl Generator {
    /// A generator of `model` with `params`.
    #[new]
    fn new(model: &Model, params: &GeneratorParams) -> PyResult<Generator> {
        Ok(Generator {
            inner: og::Generator::new(&model.inner, &params.inner).map_err(err)?,
            terminate: RunOptions::new(),
        })
    }

    /// Appends tokens (an int32 array or list, or a one-row [`Tensor`]) and runs the model on
    /// them.
    fn append_tokens(&mut self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let rows = match tokens.cast::<PyTensor>() {
            Ok(t) => token_rows(t.as_any())?,
            Err(_) => vec![token_ids(tokens)?],
        };
        let [row] = <[Vec<i32>; 1]>::try_from(rows).map_err(|rows| {
            PyRuntimeError::new_err(format!(
                "append_tokens: {} prompts given; Onyx's generator takes one prompt (batch_size 1)",
                rows.len()
            ))
        })?;
        self.run(py, |g| g.append_tokens(&row))
    }

    /// Chooses the next token (running the model first when needed) and appends it.
    fn generate_next_token(&mut self, py: Python<'_>) -> PyResult<()> {
        self.run(py, og::Generator::generate_next_token)
    }

    /// Whether EOS was generated or the sequence reached max_length.
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// The token each sequence chose last (int32).
    fn get_next_tokens<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        PyArray1::from_slice(py, self.inner.get_next_tokens())
    }

    /// Sequence `index`: the prompt and the generated tokens (int32).
    fn get_sequence<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyArray1<i32>>> {
        Ok(PyArray1::from_slice(py, self.inner.get_sequence(index).map_err(err)?))
    }

    /// Tokens in the sequence, prompt included.
    fn token_count(&self) -> usize {
        self.inner.token_count()
    }

    /// The last position's logits `[batch, 1, vocab]` as float32.
    fn get_logits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        tensor_to_numpy(py, &self.inner.get_logits().map_err(err)?)
    }

    /// Replaces the last logits (`[batch, vocab]` floats): the next token is chosen from them.
    fn set_logits(&mut self, logits: &Bound<'_, PyAny>) -> PyResult<()> {
        let array = crate::convert::numpy(logits.py())?.call_method1("ascontiguousarray", (logits, "float32"))?;
        let array = array.cast_into::<numpy::PyArrayDyn<f32>>()?;
        let tensor = Tensor::from_vec(array.shape().to_vec(), array.to_vec()?).map_err(|e| err(e.into()))?;
        self.inner.set_logits(tensor).map_err(err)
    }

    /// The last run's output `name` (`logits`, a `present.*` cache tensor) as a numpy array.
    fn get_output<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let tensor = py.detach(|| self.inner.get_output_on_host(name)).map_err(err)?;
        tensor_to_numpy(py, &tensor)
    }

    /// Keeps the first `new_length` tokens; generation goes on after them.
    fn rewind_to(&mut self, new_length: usize) -> PyResult<()> {
        self.inner.rewind_to(new_length).map_err(err)
    }

    /// `terminate_session` `"1"` stops the run in progress (and later ones) at its next node;
    /// `"0"` lets runs go again.
    fn set_runtime_option(&mut self, key: &str, value: &str) -> PyResult<()> {
        match (key, value) {
            ("terminate_session", "1") => self.terminate.set_terminate(true),
            ("terminate_session", "0") => self.terminate.set_terminate(false),
            ("terminate_session", other) => {
                return Err(PyRuntimeError::new_err(format!(
                    "terminate_session: expected \"0\" or \"1\", got {other:?}"
                )))
            }
            (other, _) => return Err(PyRuntimeError::new_err(format!("unknown runtime option '{other}'"))),
        }
        Ok(())
    }
}

impl Generator {
    /// Runs `step` without the GIL, stoppable by the terminate option and by Ctrl-C.
    fn run(&mut self, py: Python<'_>, step: impl FnOnce(&mut og::Generator) -> og::Result<()> + Send) -> PyResult<()> {
        let control = Control::with_options(self.terminate.clone());
        self.inner.set_run_options(control.options.clone());
        let generator = &mut self.inner;
        py.detach(move || step(generator)).map_err(|e| run_err(&control, e))
    }
}

/// A tensor of genai's API: `Tokenizer.encode_batch`'s result, `append_tokens`'s argument.
#[pyclass(frozen, module = "onyx.genai", name = "Tensor")]
pub struct PyTensor {
    inner: Tensor,
}

#[pymethods]
impl PyTensor {
    /// A tensor holding a copy of a numpy array.
    #[new]
    fn new(array: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        match crate::convert::to_value(array, "Tensor", None)? {
            onyx::Value::Tensor(inner) => Ok(PyTensor { inner }),
            _ => Err(PyRuntimeError::new_err("Tensor: expected a numpy array")),
        }
    }

    /// The tensor as a new numpy array.
    fn as_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        tensor_to_numpy(py, &self.inner)
    }

    /// The dimensions.
    fn shape(&self) -> Vec<usize> {
        self.inner.shape().to_vec()
    }

    /// The element type as ONNX's number (1 float, 6 int32, 7 int64, ...).
    fn r#type(&self) -> i32 {
        self.inner.dtype() as i32
    }
}

/// Token ids from an int32-convertible array or list (flattened).
fn token_ids(tokens: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
    let np = crate::convert::numpy(tokens.py())?;
    let array = np.call_method1("asarray", (tokens,))?;
    let kind: String = array.getattr("dtype")?.getattr("kind")?.extract()?;
    if !(kind == "i" || kind == "u") && array.getattr("size")?.extract::<usize>()? > 0 {
        return Err(PyRuntimeError::new_err(format!(
            "token ids: expected integers, got an array of {}",
            array.getattr("dtype")?.str()?
        )));
    }
    let flat = np.call_method1("ascontiguousarray", (array.call_method0("ravel")?, "int32"))?;
    Ok(flat.cast_into::<PyArray1<i32>>()?.to_vec()?)
}

/// Rows of token ids from a 2-D [`PyTensor`] or array.
fn token_rows(tokens: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<i32>>> {
    let array = match tokens.cast::<PyTensor>() {
        Ok(t) => t.get().as_numpy(tokens.py())?,
        Err(_) => crate::convert::numpy(tokens.py())?.call_method1("asarray", (tokens,))?,
    };
    let shape: Vec<usize> = array.getattr("shape")?.extract()?;
    let [rows, width] = shape[..] else {
        return Err(PyRuntimeError::new_err(format!(
            "token ids: expected a [rows, length] tensor, got shape {shape:?}"
        )));
    };
    let flat = token_ids(&array)?;
    Ok((0..rows).map(|r| flat[r * width..(r + 1) * width].to_vec()).collect())
}

/// Adds `onyx._onyx.genai`'s classes to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let genai = PyModule::new(m.py(), "genai")?;
    genai.add_class::<Config>()?;
    genai.add_class::<Model>()?;
    genai.add_class::<Tokenizer>()?;
    genai.add_class::<TokenizerStream>()?;
    genai.add_class::<GeneratorParams>()?;
    genai.add_class::<Generator>()?;
    genai.add_class::<PyTensor>()?;
    m.add_submodule(&genai)
}
