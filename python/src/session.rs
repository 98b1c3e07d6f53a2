//! `Session`: the native half of `onyx.InferenceSession` (whose Python half keeps ONNX
//! Runtime's argument handling). Runs release the GIL: several Python threads may run one
//! session at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use onyx::ep::ExecutionProvider;
use onyx::types::{Dim, ValueInfo, ValueType};
use onyx::{Device, IoBinding, OptimizationLevel, Optional, Outputs, SessionBuilder, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::control::{Control, RunFlag};
use crate::convert::{to_fed, to_python, Fed};
use crate::errors::{to_py, InvalidArgument, Phase};
use crate::providers::{device_provider, provider};
use crate::value::{type_string, OrtValue};

/// A loaded model on its execution providers.
#[pyclass(frozen, module = "onyx._onyx", name = "Session")]
pub struct Session {
    inner: onyx::Session,
    /// Declared types of the inputs, for converting lists and scalars.
    types: HashMap<String, ValueType>,
}

/// One kernel call of a profiled run: node, op, provider, input shapes, microseconds.
type KernelTime = (String, String, String, [Vec<(&'static str, Vec<usize>)>; 2], f64);

/// Where a bound output goes: a device by name and id, or into an OrtValue.
#[derive(FromPyObject)]
pub enum OutputPlace<'py> {
    /// Into this OrtValue (its previous value is replaced).
    Value(Bound<'py, OrtValue>),
    /// A new value on `(device_type, device_id)`.
    Device(String, u32),
}

#[pymethods]
impl Session {
    /// Loads `model` (a path or the bytes of a model) on `providers`, a list of ONNX Runtime
    /// provider names with their options.
    #[new]
    #[pyo3(signature = (model, providers, optimization_level = 99, intra_threads = 0,
        free_dims_by_name = Vec::new(), free_dims_by_denotation = Vec::new(), cpu_fallback = true,
        initializers = Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        providers: Vec<(String, Vec<(String, String)>)>,
        optimization_level: i64,
        intra_threads: usize,
        free_dims_by_name: Vec<(String, usize)>,
        free_dims_by_denotation: Vec<(String, usize)>,
        cpu_fallback: bool,
        initializers: Vec<(String, Bound<'_, OrtValue>)>,
    ) -> PyResult<Self> {
        let list = providers.iter().map(|(name, options)| provider(name, options)).collect::<PyResult<Vec<_>>>()?;
        let mut builder = SessionBuilder::new()
            .with_providers(list)
            .with_optimization_level(level(optimization_level)?)
            .with_intra_threads(intra_threads)
            .with_cpu_fallback(cpu_fallback);
        for (name, value) in free_dims_by_name {
            builder = builder.with_free_dimension_override_by_name(name, value);
        }
        for (denotation, value) in free_dims_by_denotation {
            builder = builder.with_free_dimension_override(denotation, value);
        }
        for (name, value) in initializers {
            let tensor = match value.get().host_value(py)? {
                Value::Tensor(t) => t,
                other => {
                    return Err(InvalidArgument::new_err(format!(
                        "add_initializer('{name}'): expected a tensor, got a {}",
                        other.kind()
                    )))
                }
            };
            builder = builder.with_initializer(name, tensor);
        }
        let inner = if let Ok(bytes) = model.cast::<PyBytes>() {
            let bytes = bytes.as_bytes();
            py.detach(|| builder.commit_from_memory(bytes))
        } else {
            let path: PathBuf = model.extract()?;
            py.detach(|| builder.commit_from_file(path))
        }
        .map_err(|e| to_py(e, Phase::Load))?;
        let types = inner
            .inputs()
            .iter()
            .chain(inner.overridable_initializers())
            .map(|i| (i.name.clone(), i.ty.clone()))
            .collect();
        Ok(Session { inner, types })
    }

    /// The inputs a caller feeds: (name, type string, shape).
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, String, Bound<'py, PyAny>)>> {
        self.inner.inputs().iter().map(|i| node_arg(py, i)).collect()
    }

    /// The outputs: (name, type string, shape).
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, String, Bound<'py, PyAny>)>> {
        self.inner.outputs().iter().map(|i| node_arg(py, i)).collect()
    }

    /// Graph inputs that have an initializer (a default value): (name, type string, shape).
    fn overridable_initializers<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, String, Bound<'py, PyAny>)>> {
        self.inner.overridable_initializers().map(|i| node_arg(py, i)).collect()
    }

    /// The model's metadata, under ONNX Runtime's `ModelMetadata` field names.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let model = self.inner.model();
        let meta = PyDict::new(py);
        meta.set_item("producer_name", &model.producer_name)?;
        meta.set_item("graph_name", &model.graph.name)?;
        meta.set_item("domain", &model.domain)?;
        meta.set_item("description", &model.doc)?;
        meta.set_item("graph_description", &model.graph.doc)?;
        // As ONNX Runtime: a model without a version reads i64::MAX.
        meta.set_item("version", model.model_version.unwrap_or(i64::MAX))?;
        let custom = PyDict::new(py);
        for (key, value) in &model.metadata {
            custom.set_item(key, value)?;
        }
        meta.set_item("custom_metadata_map", custom)?;
        Ok(meta)
    }

    /// Names of the providers the session runs on, in priority order (Onyx's names).
    fn provider_names(&self) -> Vec<String> {
        self.inner.provider_names().into_iter().map(String::from).collect()
    }

    /// Runs the model on `feed` (input name to numpy array, list, scalar, string, OrtValue or
    /// None) and returns `output_names` (all outputs when None) as numpy arrays, lists (for
    /// sequences), dicts (maps) or None (absent optionals).
    #[pyo3(signature = (output_names, feed, flag = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        feed: &Bound<'py, PyDict>,
        flag: Option<&RunFlag>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let (names, outputs) = self.execute(py, output_names, feed, flag)?;
        names.iter().map(|n| to_python(py, output(&outputs, n)?)).collect()
    }

    /// [`Session::run`], also timing each kernel call (for `end_profiling`).
    fn run_profiled<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        feed: &Bound<'py, PyDict>,
    ) -> PyResult<(Vec<Bound<'py, PyAny>>, Vec<KernelTime>)> {
        let fed = self.feed(feed)?;
        let inputs = inputs_of(&fed)?;
        let (outputs, times) = py.detach(|| self.inner.run_profiled(inputs)).map_err(|e| to_py(e, Phase::Run))?;
        let names = output_names.unwrap_or_else(|| self.output_names());
        let values = names.iter().map(|n| to_python(py, output(&outputs, n)?)).collect::<PyResult<Vec<_>>>()?;
        let named = |list: Vec<(onyx::DataType, Vec<usize>)>| list.into_iter().map(|(d, s)| (d.name(), s)).collect();
        let times = times
            .into_iter()
            .map(|t| {
                let [inputs, outputs] = t.io_types;
                (t.node, t.op, t.provider, [named(inputs), named(outputs)], t.us)
            })
            .collect();
        Ok((values, times))
    }

    /// [`Session::run`] with the outputs as OrtValues (on the host).
    #[pyo3(signature = (output_names, feed, flag = None))]
    fn run_values(
        &self,
        py: Python<'_>,
        output_names: Option<Vec<String>>,
        feed: &Bound<'_, PyDict>,
        flag: Option<&RunFlag>,
    ) -> PyResult<Vec<OrtValue>> {
        let (names, outputs) = self.execute(py, output_names, feed, flag)?;
        names.iter().map(|n| Ok(OrtValue::new(output(&outputs, n)?.clone(), None))).collect()
    }

    /// Runs with bound inputs (any value `run` takes, OrtValues on a GPU read where they are)
    /// and bound outputs (a device, or an OrtValue to hold the result). Returns the outputs as
    /// OrtValues, in the order bound.
    #[pyo3(signature = (inputs, outputs, flag = None))]
    fn run_binding<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<(String, Bound<'py, PyAny>)>,
        outputs: Vec<(String, OutputPlace<'py>)>,
        flag: Option<&RunFlag>,
    ) -> PyResult<Vec<Bound<'py, OrtValue>>> {
        let mut fed = Vec::with_capacity(inputs.len());
        for (name, value) in &inputs {
            fed.push((name.clone(), to_fed(value, name, self.types.get(name))?));
        }
        let mut binding = IoBinding::new();
        for (name, f) in &fed {
            binding.bind_input(name.clone(), f.input().map_err(|e| to_py(e, Phase::Run))?);
        }
        let mut places = Vec::with_capacity(outputs.len());
        for (name, place) in &outputs {
            let provider = match place {
                OutputPlace::Value(v) => provider_of(v.get().device())?,
                OutputPlace::Device(device_type, id) => device_provider(device_type, *id)?,
            };
            let device = provider.as_ref().map_or(Device::Cpu, |p| p.device());
            match (place, device) {
                (OutputPlace::Value(v), Device::Wgpu(_)) => match v.get().device_tensor() {
                    Some(t) => binding.bind_output(name.clone(), t),
                    None => binding.bind_output_to_device(name.clone(), device),
                },
                _ => binding.bind_output_to_device(name.clone(), device),
            };
            places.push(provider);
        }
        let control = Control::new(flag);
        binding.set_run_options(control.options.clone());
        let results = control.finish(py.detach(|| self.inner.run_with_binding(binding)))?;
        let mut out = Vec::with_capacity(outputs.len());
        for ((name, place), provider) in outputs.iter().zip(places) {
            let value = output(&results, name)?.clone();
            let holder = match place {
                OutputPlace::Value(v) => {
                    check_preallocated(name, v.get(), &value)?;
                    v.get().set(py, value, provider)?;
                    v.clone()
                }
                OutputPlace::Device(..) => Bound::new(py, OrtValue::new(value, provider))?,
            };
            out.push(holder);
        }
        Ok(out)
    }
}

impl Session {
    fn output_names(&self) -> Vec<String> {
        self.inner.outputs().iter().map(|o| o.name.clone()).collect()
    }

    fn feed<'py>(&self, feed: &Bound<'py, PyDict>) -> PyResult<Vec<(String, Fed<'py>)>> {
        let mut fed = Vec::with_capacity(feed.len());
        for (key, value) in feed.iter() {
            let name: String = key.extract()?;
            let f = to_fed(&value, &name, self.types.get(&name))?;
            fed.push((name, f));
        }
        // As in ONNX Runtime, an optional input left out of the feed is an absent optional.
        for info in self.inner.inputs() {
            if let ValueType::Optional(elem) = &info.ty {
                if !fed.iter().any(|(n, _)| *n == info.name) {
                    let none = Optional { elem_type: (**elem).clone(), value: None };
                    fed.push((info.name.clone(), Fed::Value(Value::Optional(none))));
                }
            }
        }
        Ok(fed)
    }

    /// Runs `feed`, producing `output_names` (all when None) on the host.
    fn execute(
        &self,
        py: Python<'_>,
        output_names: Option<Vec<String>>,
        feed: &Bound<'_, PyDict>,
        flag: Option<&RunFlag>,
    ) -> PyResult<(Vec<String>, Outputs)> {
        let fed = self.feed(feed)?;
        let inputs = inputs_of(&fed)?;
        let control = Control::new(flag);
        let outputs = match &output_names {
            None => py.detach(|| self.inner.run_with_options(inputs, &control.options)),
            Some(names) => {
                let mut binding = IoBinding::new();
                for (name, value) in inputs {
                    binding.bind_input(name, value);
                }
                for name in names {
                    binding.bind_output_to_device(name.clone(), Device::Cpu);
                }
                binding.set_run_options(control.options.clone());
                py.detach(|| self.inner.run_with_binding(binding))
            }
        };
        let outputs = control.finish(outputs)?;
        Ok((output_names.unwrap_or_else(|| self.output_names()), outputs))
    }
}

/// An output bound into an OrtValue must have the OrtValue's dtype and shape, as in ONNX Runtime.
fn check_preallocated(name: &str, target: &OrtValue, produced: &Value) -> PyResult<()> {
    if let (Some((dtype, shape)), Value::Tensor(t)) = (target.tensor_type(), produced) {
        if dtype != t.dtype() || shape != t.shape() {
            return Err(InvalidArgument::new_err(format!(
                "output '{name}': the bound OrtValue is {dtype}{shape:?}, the output {}{:?}",
                t.dtype(),
                t.shape()
            )));
        }
    }
    Ok(())
}

fn inputs_of<'a>(fed: &'a [(String, Fed<'_>)]) -> PyResult<Vec<(&'a str, onyx::InputValue<'a>)>> {
    fed.iter().map(|(n, f)| Ok((n.as_str(), f.input().map_err(|e| to_py(e, Phase::Run))?))).collect()
}

fn output<'a>(outputs: &'a Outputs, name: &str) -> PyResult<&'a Value> {
    outputs.get(name).map_err(|e| to_py(e, Phase::Run))
}

/// The provider of a device an OrtValue is on (None: the host).
fn provider_of(device: Device) -> PyResult<Option<Arc<dyn ExecutionProvider>>> {
    match device {
        Device::Cpu => Ok(None),
        Device::Wgpu(_) => device_provider("wgpu", 0),
        other => Err(InvalidArgument::new_err(format!("an OrtValue on {other} cannot be bound here"))),
    }
}

/// ONNX Runtime's graph optimization level (0, 1, 2, 3 or 99) as Onyx's.
fn level(value: i64) -> PyResult<OptimizationLevel> {
    Ok(match value {
        0 => OptimizationLevel::Disable,
        1 => OptimizationLevel::Basic,
        2 | 3 => OptimizationLevel::Extended,
        99 => OptimizationLevel::All,
        other => {
            return Err(InvalidArgument::new_err(format!(
                "graph_optimization_level: expected 0, 1, 2, 3 or 99, found {other}"
            )))
        }
    })
}

/// (name, ONNX Runtime's type string, shape: ints, dim names and None for unknown dims; an
/// optional tensor's shape is the tensor's).
fn node_arg<'py>(py: Python<'py>, info: &ValueInfo) -> PyResult<(String, String, Bound<'py, PyAny>)> {
    let tensor = match &info.ty {
        ValueType::Optional(inner) => inner.as_ref(),
        other => other,
    };
    let dims: Vec<Bound<'py, PyAny>> = match tensor {
        ValueType::Tensor(t) | ValueType::SparseTensor(t) => match &t.shape {
            Some(dims) => dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => n.into_pyobject(py).map(|v| v.into_any()).map_err(PyErr::from),
                    Dim::Symbol(s) => Ok(s.into_pyobject(py)?.into_any()),
                    Dim::Unknown => Ok(py.None().into_bound(py)),
                })
                .collect::<PyResult<_>>()?,
            None => vec![],
        },
        _ => vec![],
    };
    Ok((info.name.clone(), type_string(&info.ty), PyList::new(py, dims)?.into_any()))
}
