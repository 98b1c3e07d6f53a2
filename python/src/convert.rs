//! Python values to Onyx values and back. A numpy array that is C-contiguous, aligned and in
//! native byte order is read in place; any other array is copied once into one that is. Lists,
//! scalars and strings are converted to the dtype the model declares for the input, as ONNX
//! Runtime does.

use half::f16;
use numpy::{
    Element, PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use onyx::types::ValueType;
use onyx::{DataType, Error, InputValue, Map, Optional, Sequence, Tensor, TensorData, TensorView, Value};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::errors::{to_py, Fail, InvalidArgument, Phase};
use crate::value::OrtValue;
use pyo3::exceptions::PyRuntimeError;

/// The Onyx element type of a numpy dtype, if it has one.
pub fn dtype_of(descr: &Bound<'_, PyArrayDescr>) -> Option<DataType> {
    use DataType::*;
    Some(match (descr.kind(), descr.itemsize()) {
        (b'f', 2) => Float16,
        (b'f', 4) => Float,
        (b'f', 8) => Double,
        (b'i', 1) => Int8,
        (b'i', 2) => Int16,
        (b'i', 4) => Int32,
        (b'i', 8) => Int64,
        (b'u', 1) => Uint8,
        (b'u', 2) => Uint16,
        (b'u', 4) => Uint32,
        (b'u', 8) => Uint64,
        (b'b', 1) => Bool,
        (b'c', 8) => Complex64,
        (b'c', 16) => Complex128,
        (b'U' | b'S' | b'O', _) => String,
        _ => return None,
    })
}

/// numpy's name for an Onyx element type (`object` for strings), if numpy has the type.
pub fn numpy_name(dtype: DataType) -> Option<&'static str> {
    use DataType::*;
    Some(match dtype {
        Float16 => "float16",
        Float => "float32",
        Double => "float64",
        Int8 => "int8",
        Int16 => "int16",
        Int32 => "int32",
        Int64 => "int64",
        Uint8 => "uint8",
        Uint16 => "uint16",
        Uint32 => "uint32",
        Uint64 => "uint64",
        Bool => "bool",
        Complex64 => "complex64",
        Complex128 => "complex128",
        String => "object",
        _ => return None,
    })
}

/// The `numpy` module, imported once.
pub fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    NUMPY.get_or_try_init(py, || py.import("numpy").map(Bound::unbind)).map(|m| m.bind(py))
}

/// One input of a run, ready to be lent to it.
pub enum Fed<'py> {
    /// A numpy array of a dense element type, read in place.
    Array(Bound<'py, PyUntypedArray>, DataType),
    /// A value converted from Python (strings, sequences, optionals) or held by an OrtValue.
    Value(Value),
}

impl Fed<'_> {
    /// The input as a run takes it: a view of the array's memory, or the value.
    pub fn input(&self) -> onyx::Result<InputValue<'_>> {
        match self {
            Fed::Array(array, dtype) => Ok(TensorView::from_bytes(*dtype, array.shape(), array_bytes(array))?.into()),
            Fed::Value(value) => Ok(InputValue::Value(value.clone())),
        }
    }
}

/// The elements of a C-contiguous, aligned, non-empty array, as bytes.
fn array_bytes<'a>(array: &'a Bound<'_, PyUntypedArray>) -> &'a [u8] {
    let len = array.len() * array.dtype().itemsize();
    // SAFETY: `array` is C-contiguous and not empty (checked by `to_fed` before any array
    // reaches here), so
    // its `len` elements of `itemsize` bytes lie one after another from `data`; the borrow of
    // `array` keeps the array, and so its memory, alive for `'a`. numpy cannot move or free
    // that memory while a reference exists. As with ONNX Runtime, the caller must not write to
    // the array from another thread while a run reads it.
    unsafe { std::slice::from_raw_parts(array_data(array), len) }
}

/// The address of an array's first element.
pub fn array_data(array: &Bound<'_, PyUntypedArray>) -> *const u8 {
    // SAFETY: `as_array_ptr` points at the live array object `array` holds; only its data
    // pointer field is read.
    unsafe { (*array.as_array_ptr()).fields.data as *const u8 }
}

/// Converts the Python value given for input `name`, whose declared type is `expected`.
pub fn to_fed<'py>(obj: &Bound<'py, PyAny>, name: &str, expected: Option<&ValueType>) -> PyResult<Fed<'py>> {
    if let Ok(value) = obj.cast::<OrtValue>() {
        return Ok(Fed::Value(value.get().value(name)?));
    }
    if let Ok(array) = obj.cast::<PyUntypedArray>() {
        return array_to_fed(array, name);
    }
    match expected {
        Some(ValueType::Optional(elem)) if obj.is_none() => {
            Ok(Fed::Value(Value::Optional(Optional { elem_type: (**elem).clone(), value: None })))
        }
        Some(ValueType::Optional(elem)) => {
            let inner = to_value(obj, name, Some(elem))?;
            Ok(Fed::Value(Value::Optional(Optional { elem_type: (**elem).clone(), value: Some(Box::new(inner)) })))
        }
        Some(ValueType::Sequence(elem)) => Ok(Fed::Value(to_sequence(obj, name, elem)?)),
        _ if obj.is_none() => Err(Fail::new_err(format!("input '{name}': expected a tensor, found None"))),
        _ if obj.is_instance_of::<PyDict>() => {
            Err(InvalidArgument::new_err(format!("input '{name}': expected a numpy array or a list, found a dict")))
        }
        _ if obj.is_instance_of::<PyList>() => {
            let dtype = expected.and_then(|t| t.as_tensor()).map(|t| t.dtype);
            let array = list_to_array(obj, name, dtype)?;
            array_to_fed(&array, name)
        }
        // As ONNX Runtime: a tensor input takes an array or a (nested) list, not a scalar.
        _ => Err(PyRuntimeError::new_err(format!(
            "input '{name}': expected a numpy array or a list, found {}",
            type_name(obj)
        ))),
    }
}

/// Converts a Python value to an owned Onyx value (the elements of sequences and optionals).
pub fn to_value(obj: &Bound<'_, PyAny>, name: &str, expected: Option<&ValueType>) -> PyResult<Value> {
    Ok(match to_fed(obj, name, expected)? {
        Fed::Array(array, dtype) => Value::Tensor(
            TensorView::from_bytes(dtype, array.shape(), array_bytes(&array)).map_err(invalid)?.to_tensor(),
        ),
        Fed::Value(v) => v,
    })
}

fn to_sequence(obj: &Bound<'_, PyAny>, name: &str, elem: &ValueType) -> PyResult<Value> {
    let items = if let Ok(list) = obj.cast::<PyList>() {
        list.iter().map(|item| to_value(&item, name, Some(elem))).collect::<PyResult<Vec<_>>>()?
    } else if let Ok(tuple) = obj.cast::<PyTuple>() {
        tuple.iter().map(|item| to_value(&item, name, Some(elem))).collect::<PyResult<Vec<_>>>()?
    } else {
        return Err(InvalidArgument::new_err(format!(
            "input '{name}': expected a list of values for a sequence, found {}",
            type_name(obj)
        )));
    };
    Ok(Value::Sequence(Sequence { elem_type: elem.clone(), items }))
}

/// `numpy.asarray(list, dtype)`: a list converted to the declared dtype.
fn list_to_array<'py>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    dtype: Option<DataType>,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let np = numpy(obj.py())?;
    let converted = match dtype.and_then(numpy_name) {
        Some(dtype) => np.call_method1("asarray", (obj, dtype)),
        None => np.call_method1("asarray", (obj,)),
    }
    .map_err(|e| {
        PyRuntimeError::new_err(format!(
            "input '{name}': cannot make a tensor{} from the list: {e}",
            dtype.map(|d| format!(" of {d}")).unwrap_or_default()
        ))
    })?;
    Ok(converted.cast_into::<PyUntypedArray>()?)
}

fn array_to_fed<'py>(array: &Bound<'py, PyUntypedArray>, name: &str) -> PyResult<Fed<'py>> {
    let descr = array.dtype();
    let Some(dtype) = dtype_of(&descr) else {
        return Err(InvalidArgument::new_err(format!(
            "input '{name}': numpy dtype {} has no ONNX element type",
            descr.str()?
        )));
    };
    if dtype == DataType::String {
        return Ok(Fed::Value(Value::Tensor(strings(array, name)?)));
    }
    if array.len() == 0 {
        // No elements to read: a tensor of the shape (an empty slice has no alignment to view).
        return Ok(Fed::Value(Value::Tensor(Tensor::zeros(dtype, array.shape().to_vec()).map_err(invalid)?)));
    }
    let native = descr.is_native_byteorder().unwrap_or(true);
    if array.is_c_contiguous() && array.is_aligned() && native {
        return Ok(Fed::Array(array.clone(), dtype));
    }
    // One copy into a C-ordered, aligned array of native byte order.
    let np = numpy(array.py())?;
    let native_descr = descr.call_method1("newbyteorder", ("=",))?;
    let kwargs = PyDict::new(array.py());
    kwargs.set_item("dtype", native_descr)?;
    kwargs.set_item("order", "C")?;
    let copy = np.call_method("array", (array,), Some(&kwargs))?.cast_into::<PyUntypedArray>()?;
    Ok(Fed::Array(copy, dtype))
}

/// A string tensor from a numpy array of str, bytes (UTF-8) or objects that are either.
fn strings(array: &Bound<'_, PyUntypedArray>, name: &str) -> PyResult<Tensor> {
    let items = array.call_method0("ravel")?.call_method0("tolist")?;
    let items = items.cast::<PyList>()?;
    let mut out = Vec::with_capacity(items.len());
    for item in items.iter() {
        if item.is_instance_of::<PyString>() {
            out.push(item.extract::<String>()?);
        } else if let Ok(b) = item.cast::<PyBytes>() {
            let text = std::str::from_utf8(b.as_bytes())
                .map_err(|e| InvalidArgument::new_err(format!("input '{name}': a bytes element is not UTF-8: {e}")))?;
            out.push(text.to_owned());
        } else {
            return Err(InvalidArgument::new_err(format!(
                "input '{name}': expected str elements for a string tensor, found {}",
                type_name(&item)
            )));
        }
    }
    Tensor::from_strings(array.shape().to_vec(), out).map_err(invalid)
}

fn invalid(e: Error) -> PyErr {
    to_py(e, Phase::Run)
}

/// The Python type name of `obj`, for messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "an object".into())
}

/// A host value as Python: numpy arrays for tensors, lists for sequences, dicts for maps,
/// `None` for an absent optional.
pub fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Value::Tensor(t) => tensor_to_numpy(py, t),
        Value::Sequence(s) => {
            let items = s.items.iter().map(|v| to_python(py, v)).collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any())
        }
        Value::Map(m) => map_to_dict(py, m),
        Value::Optional(o) => match &o.value {
            Some(v) => to_python(py, v),
            None => Ok(py.None().into_bound(py)),
        },
    }
}

fn map_to_dict<'py>(py: Python<'py>, map: &Map) -> PyResult<Bound<'py, PyAny>> {
    let keys = tensor_to_numpy(py, &map.keys)?.call_method0("tolist")?;
    let dict = PyDict::new(py);
    for (key, value) in keys.try_iter()?.zip(&map.values.items) {
        let value = match value {
            // ONNX Runtime gives a map's scalar values as Python numbers.
            Value::Tensor(t) if t.shape().iter().product::<usize>() == 1 => {
                tensor_to_numpy(py, t)?.call_method0("item")?
            }
            other => to_python(py, other)?,
        };
        dict.set_item(key?, value)?;
    }
    Ok(dict.into_any())
}

/// A host tensor as a new numpy array (the elements copied).
pub fn tensor_to_numpy<'py>(py: Python<'py>, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let shape = tensor.shape().to_vec();
    fn typed<'py, T: Element + onyx::Element>(
        py: Python<'py>,
        t: &Tensor,
        shape: Vec<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let elements = t.as_slice::<T>().map_err(invalid)?;
        Ok(PyArray1::<T>::from_slice(py, elements).reshape(shape)?.into_any())
    }
    if let TensorData::Device(_) = tensor.data() {
        return Err(InvalidArgument::new_err(format!(
            "a tensor on {} must be copied to the host first (OrtValue.numpy() does)",
            tensor.device()
        )));
    }
    match tensor.dtype() {
        DataType::Float => typed::<f32>(py, tensor, shape),
        DataType::Double => typed::<f64>(py, tensor, shape),
        DataType::Float16 => typed::<f16>(py, tensor, shape),
        DataType::Int8 => typed::<i8>(py, tensor, shape),
        DataType::Int16 => typed::<i16>(py, tensor, shape),
        DataType::Int32 => typed::<i32>(py, tensor, shape),
        DataType::Int64 => typed::<i64>(py, tensor, shape),
        DataType::Uint8 => typed::<u8>(py, tensor, shape),
        DataType::Uint16 => typed::<u16>(py, tensor, shape),
        DataType::Uint32 => typed::<u32>(py, tensor, shape),
        DataType::Uint64 => typed::<u64>(py, tensor, shape),
        DataType::Bool => {
            let bytes = host_bytes(tensor)?;
            let bools: Vec<bool> = bytes.iter().map(|&b| b != 0).collect();
            Ok(PyArray1::<bool>::from_vec(py, bools).reshape(shape)?.into_any())
        }
        DataType::String => {
            let TensorData::Strings(items) = tensor.data() else {
                return Err(InvalidArgument::new_err("a string tensor without strings"));
            };
            let list = PyList::new(py, items.iter())?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("dtype", "object")?;
            let array = numpy(py)?.call_method("array", (list,), Some(&kwargs))?;
            array.call_method1("reshape", (shape,))
        }
        other => {
            let Some(name) = numpy_name(other) else {
                return Err(InvalidArgument::new_err(format!("tensor of {other}: numpy has no such element type")));
            };
            let raw = PyArray1::<u8>::from_slice(py, host_bytes(tensor)?);
            raw.call_method1("view", (name,))?.call_method1("reshape", (shape,))
        }
    }
}

fn host_bytes(tensor: &Tensor) -> PyResult<&[u8]> {
    match tensor.data() {
        TensorData::Host(buffer) => Ok(buffer.bytes()),
        _ => Err(InvalidArgument::new_err(format!("tensor of {} is not dense host memory", tensor.dtype()))),
    }
}
