//! `OrtValue`: a value held by Onyx, on the host or on a GPU, that runs read and write without
//! converting it to and from numpy: an LLM's cache, a diffusion loop's latents.

use std::sync::{Arc, Mutex, PoisonError};

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use onyx::ep::ExecutionProvider;
use onyx::types::ValueType;
use onyx::{DataType, Device, Error, HostBuffer, Tensor, TensorData, Value};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::convert::{dtype_of, numpy, to_fed, to_python, Fed};
use crate::errors::{to_py, InvalidArgument, Phase};
use crate::providers::device_provider;

/// ONNX Runtime's name of a value type: `tensor(float)`, `seq(tensor(int64))`,
/// `map(string,tensor(float))`, `optional(tensor(float))`.
pub fn type_string(ty: &ValueType) -> String {
    match ty {
        ValueType::Tensor(t) => format!("tensor({})", t.dtype.name()),
        ValueType::SparseTensor(t) => format!("sparse_tensor({})", t.dtype.name()),
        ValueType::Sequence(e) => format!("seq({})", type_string(e)),
        ValueType::Map(k, v) => format!("map({},{})", k.name(), type_string(v)),
        ValueType::Optional(e) => format!("optional({})", type_string(e)),
        ValueType::Unknown => "unknown".into(),
    }
}

/// The type string of a value.
fn value_type_string(value: &Value) -> String {
    match value {
        Value::Tensor(t) => format!("tensor({})", t.dtype().name()),
        Value::Sequence(s) => format!("seq({})", type_string(&s.elem_type)),
        Value::Map(m) => format!("map({},{})", m.keys.dtype().name(), type_string(&m.values.elem_type)),
        Value::Optional(o) => format!("optional({})", type_string(&o.elem_type)),
    }
}

/// Host bytes that belong to a numpy array, which stays alive as long as they are used.
struct ArrayBytes {
    _array: Py<PyUntypedArray>,
    data: *const u8,
    len: usize,
}

// SAFETY: the pointer is only read, and the memory it points to belongs to `_array`, which this
// struct keeps alive (a `Py` may be dropped on any thread: pyo3 defers the decrement to a thread
// holding the GIL). numpy never moves an array's memory while a reference to the array exists.
unsafe impl Send for ArrayBytes {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for ArrayBytes {}

impl onyx::ByteSource for ArrayBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `data` points at `len` contiguous bytes of the array kept alive by `_array`
        // (taken from a C-contiguous, non-empty array in `ortvalue_from_numpy`).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

struct Held {
    value: Option<Value>,
    /// The provider whose device holds the value (None: the host).
    provider: Option<Arc<dyn ExecutionProvider>>,
    /// The numpy array whose memory the value is (made by `ortvalue_from_numpy` on the CPU):
    /// an output bound into this OrtValue is written there, as ONNX Runtime writes it.
    array: Option<Py<PyUntypedArray>>,
}

/// A value Onyx holds (ONNX Runtime's `OrtValue`): made from numpy without a copy on the CPU,
/// or uploaded once to a GPU (`device_type="wgpu"`, also `"dml"` and `"webgpu"`), and bound to
/// runs' inputs and outputs so that data stays where it is between runs.
#[pyclass(frozen, module = "onyx._onyx", name = "OrtValue")]
pub struct OrtValue {
    held: Mutex<Held>,
}

impl OrtValue {
    /// A host or device value.
    pub fn new(value: Value, provider: Option<Arc<dyn ExecutionProvider>>) -> Self {
        OrtValue { held: Mutex::new(Held { value: Some(value), provider, array: None }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value (shared, not copied), for input `name` of a run.
    pub fn value(&self, name: &str) -> PyResult<Value> {
        self.lock()
            .value
            .clone()
            .ok_or_else(|| InvalidArgument::new_err(format!("input '{name}': the OrtValue holds no value")))
    }

    /// The device tensor, if this value is one.
    pub fn device_tensor(&self) -> Option<Tensor> {
        match &self.lock().value {
            Some(Value::Tensor(t)) if t.device() != Device::Cpu => Some(t.clone()),
            _ => None,
        }
    }

    /// The element type and shape, when the value is a tensor.
    pub fn tensor_type(&self) -> Option<(DataType, Vec<usize>)> {
        match &self.lock().value {
            Some(Value::Tensor(t)) => Some((t.dtype(), t.shape().to_vec())),
            _ => None,
        }
    }

    /// The device this value is on.
    pub fn device(&self) -> Device {
        match &self.lock().value {
            Some(Value::Tensor(t)) => t.device(),
            _ => Device::Cpu,
        }
    }

    /// Takes a bound output after a run: written into the numpy array this value shares when
    /// it has one (the output has its dtype and shape, checked by the caller), else held in
    /// place of the old value.
    pub fn set(&self, py: Python<'_>, value: Value, provider: Option<Arc<dyn ExecutionProvider>>) -> PyResult<()> {
        let array = self.lock().array.as_ref().map(|a| a.clone_ref(py));
        if let (Some(array), Value::Tensor(t), None) = (array, &value, &provider) {
            let produced = crate::convert::tensor_to_numpy(py, t)?;
            numpy(py)?.call_method1("copyto", (array, produced))?;
            return Ok(());
        }
        let mut held = self.lock();
        held.value = Some(value);
        held.provider = provider;
        held.array = None;
        Ok(())
    }

    /// The numpy array whose memory holds this CPU tensor. A tensor Onyx made (a run's output)
    /// is copied into a new array once, which the OrtValue then shares: later exports share it.
    fn numpy_backed(&self, py: Python<'_>) -> PyResult<Py<PyUntypedArray>> {
        if let Some(array) = &self.lock().array {
            return Ok(array.clone_ref(py));
        }
        let tensor = self.tensor()?;
        if tensor.device() != Device::Cpu {
            return Err(PyRuntimeError::new_err(format!(
                "DLPack: a tensor on {} is not exported; copy it to the CPU first (OrtValue.numpy())",
                tensor.device()
            )));
        }
        if tensor.dtype() == DataType::String {
            return Err(PyRuntimeError::new_err("DLPack has no string type: a string tensor is not exported"));
        }
        let array = crate::convert::tensor_to_numpy(py, &tensor)?.cast_into::<PyUntypedArray>()?;
        let shared = if array.len() == 0 { tensor } else { share_array(&array, tensor.dtype())? };
        let mut held = self.lock();
        held.value = Some(Value::Tensor(shared));
        held.array = Some(array.clone().unbind());
        Ok(array.unbind())
    }

    fn tensor(&self) -> PyResult<Tensor> {
        match &self.lock().value {
            Some(Value::Tensor(t)) => Ok(t.clone()),
            Some(other) => Err(PyRuntimeError::new_err(format!(
                "only OrtValues that are tensors have this, and this one holds a {}",
                other.kind()
            ))),
            None => Err(PyRuntimeError::new_err("the OrtValue holds no value")),
        }
    }

    /// The value on the host (a device tensor copied back).
    pub fn host_value(&self, py: Python<'_>) -> PyResult<Value> {
        let (value, provider) = {
            let held = self.lock();
            (held.value.clone(), held.provider.clone())
        };
        let value = value.ok_or_else(|| InvalidArgument::new_err("the OrtValue holds no value"))?;
        match (value, provider) {
            (Value::Tensor(t), Some(p)) if t.device() != Device::Cpu => {
                let host = py.detach(|| p.download(&t)).map_err(|e| to_py(e, Phase::Run))?;
                Ok(Value::Tensor(host))
            }
            (value, _) => Ok(value),
        }
    }
}

/// A tensor viewing a C-contiguous numpy array's memory (no copy).
fn share_array(array: &Bound<'_, PyUntypedArray>, dtype: DataType) -> PyResult<Tensor> {
    let len = array.len() * numpy::PyArrayDescrMethods::itemsize(&array.dtype());
    let data = crate::convert::array_data(array);
    let bytes = ArrayBytes { _array: array.clone().unbind(), data, len };
    let buffer = HostBuffer::new(Arc::new(bytes), 0, len).map_err(invalid)?;
    Tensor::from_bytes(dtype, array.shape().to_vec(), buffer).map_err(invalid)
}

fn invalid(e: Error) -> PyErr {
    to_py(e, Phase::Run)
}

#[pymethods]
impl OrtValue {
    /// An OrtValue from a numpy array: on the CPU it shares the array's memory when the array is
    /// C-contiguous and native-endian (else holds a copy); on a GPU it is uploaded once.
    #[staticmethod]
    #[pyo3(signature = (array, device_type = "cpu", device_id = 0))]
    fn ortvalue_from_numpy(array: &Bound<'_, PyAny>, device_type: &str, device_id: u32) -> PyResult<OrtValue> {
        let only_arrays = || {
            PyRuntimeError::new_err(format!(
                "an OrtValue is made from a numpy array of numbers or bools, found {}",
                crate::convert::type_name(array)
            ))
        };
        if !array.is_instance_of::<PyUntypedArray>() {
            return Err(only_arrays());
        }
        let (tensor, shared) = match to_fed(array, "array", None)? {
            Fed::Array(a, dtype) => (share_array(&a, dtype)?, Some(a.unbind())),
            Fed::Value(Value::Tensor(t)) if t.dtype() != DataType::String => (t, None),
            Fed::Value(_) => return Err(only_arrays()),
        };
        let value = place(array.py(), tensor, device_type, device_id)?;
        if value.device() == Device::Cpu {
            value.lock().array = shared;
        }
        Ok(value)
    }

    /// A new tensor of `shape` and numpy element type `element_type` (zero-filled), on the
    /// device asked for.
    #[staticmethod]
    #[pyo3(signature = (shape, element_type, device_type = "cpu", device_id = 0))]
    fn ortvalue_from_shape_and_type(
        py: Python<'_>,
        shape: Vec<i64>,
        element_type: &Bound<'_, PyAny>,
        device_type: &str,
        device_id: u32,
    ) -> PyResult<OrtValue> {
        let dtype = if let Ok(code) = element_type.extract::<i32>() {
            DataType::from_onnx(code).ok_or_else(|| {
                InvalidArgument::new_err(format!("element type {code}: not an ONNX element type code"))
            })?
        } else {
            let descr = numpy(py)?.call_method1("dtype", (element_type,))?;
            let descr = descr.cast::<numpy::PyArrayDescr>()?;
            dtype_of(descr)
                .ok_or_else(|| InvalidArgument::new_err(format!("element type {descr}: not an ONNX element type")))?
        };
        let shape = shape
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .map_err(|_| PyRuntimeError::new_err(format!("shape {shape:?}: dimensions must be >= 0")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let tensor = if dtype == DataType::String {
            Tensor::from_strings(shape.clone(), vec![String::new(); shape.iter().product()])
        } else {
            Tensor::zeros(dtype, shape)
        }
        .map_err(invalid)?;
        place(py, tensor, device_type, device_id)
    }

    /// The tensor as a numpy array (a device tensor is copied back).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.tensor()?;
        let value = self.host_value(py)?;
        to_python(py, &value)
    }

    /// The tensor's shape.
    fn shape(&self) -> PyResult<Vec<usize>> {
        Ok(self.tensor()?.shape().to_vec())
    }

    /// A DLPack capsule of the tensor (CPU only), sharing its memory: `torch.from_dlpack`,
    /// `numpy.from_dlpack` read it without a copy. Keyword arguments are DLPack's
    /// (`stream`, `max_version`, `dl_device`, `copy`).
    #[pyo3(signature = (**kwargs))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.numpy_backed(py)?.bind(py).call_method("__dlpack__", (), kwargs)
    }

    /// DLPack's device of the tensor: `(1, 0)`, the CPU (GPU OrtValues are not exported).
    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        self.numpy_backed(py)?;
        Ok((1, 0))
    }

    /// ONNX Runtime's name for `__dlpack__()`.
    fn to_dlpack<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.__dlpack__(py, None)
    }

    /// An OrtValue sharing the memory of a DLPack tensor on the CPU (an object with
    /// `__dlpack__`, such as a torch tensor or numpy array, or a capsule); `is_bool_tensor`
    /// reads uint8 data as bools, for producers without a bool type.
    #[staticmethod]
    #[pyo3(signature = (data, is_bool_tensor = false))]
    fn from_dlpack(py: Python<'_>, data: &Bound<'_, PyAny>, is_bool_tensor: bool) -> PyResult<OrtValue> {
        let np = numpy(py)?;
        let source = if data.hasattr("__dlpack__")? {
            data.clone()
        } else {
            // A bare capsule: numpy takes producers, so one that hands it over.
            py.import("onyx._dlpack")?.getattr("Capsule")?.call1((data,))?
        };
        let mut array = np.call_method1("from_dlpack", (source,))?;
        if is_bool_tensor && array.getattr("dtype")?.getattr("name")?.extract::<String>()? == "uint8" {
            array = array.call_method1("view", ("bool",))?;
        }
        OrtValue::ortvalue_from_numpy(&array, "cpu", 0)
    }

    /// Whether the value is a sequence of tensors.
    fn is_tensor_sequence(&self) -> bool {
        matches!(&self.lock().value, Some(Value::Sequence(s)) if matches!(s.elem_type, ValueType::Tensor(_)))
    }

    /// Bytes of the tensor's elements.
    fn tensor_size_in_bytes(&self) -> PyResult<usize> {
        let tensor = self.tensor()?;
        tensor
            .dtype()
            .byte_len(tensor.len())
            .ok_or_else(|| InvalidArgument::new_err(format!("a {} tensor has no byte size", tensor.dtype())))
    }

    /// The type as ONNX Runtime writes it, e.g. `tensor(float)`.
    fn data_type(&self) -> PyResult<String> {
        match &self.lock().value {
            Some(v) => Ok(value_type_string(v)),
            None => Err(InvalidArgument::new_err("the OrtValue holds no value")),
        }
    }

    /// The ONNX element type code of the tensor's elements (1 for float, 7 for int64, ...).
    fn element_type(&self) -> PyResult<i32> {
        Ok(self.tensor()?.dtype().onnx_code())
    }

    /// The device: `cpu`, or `wgpu` for a GPU tensor.
    fn device_name(&self) -> &'static str {
        match self.device() {
            Device::Cpu => "cpu",
            Device::Wgpu(_) => "wgpu",
            Device::Cuda(_) => "cuda",
            Device::Other(_) => "other",
        }
    }

    /// Whether the value is a tensor.
    fn is_tensor(&self) -> bool {
        matches!(self.lock().value, Some(Value::Tensor(_)))
    }

    /// Whether the value is present (false for an absent optional).
    fn has_value(&self) -> bool {
        match &self.lock().value {
            Some(Value::Optional(o)) => o.value.is_some(),
            Some(_) => true,
            None => false,
        }
    }

    /// The address of a host tensor's first element (0 for a GPU tensor: wgpu has no pointers).
    fn data_ptr(&self) -> PyResult<usize> {
        let tensor = self.tensor()?;
        Ok(match tensor.data() {
            TensorData::Host(b) => b.bytes().as_ptr() as usize,
            _ => 0,
        })
    }

    fn __repr__(&self) -> String {
        let device = self.device_name();
        match &self.lock().value {
            Some(v) => format!("OrtValue({}, {device})", v.describe()),
            None => "OrtValue(empty)".into(),
        }
    }
}

/// The value on the device `device_type` names (uploaded once for a GPU).
fn place(py: Python<'_>, tensor: Tensor, device_type: &str, device_id: u32) -> PyResult<OrtValue> {
    match device_provider(device_type, device_id)? {
        None => Ok(OrtValue::new(Value::Tensor(tensor), None)),
        Some(provider) => {
            let view = tensor.view().map_err(invalid)?;
            let uploaded = py.detach(|| provider.upload(view)).map_err(invalid)?;
            Ok(OrtValue::new(Value::Tensor(uploaded), Some(provider)))
        }
    }
}
