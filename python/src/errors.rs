//! ONNX Runtime's exception classes (`onnxruntime.capi.onnxruntime_pybind11_state`), and which
//! one each Onyx error becomes, so that `except InvalidArgument:` written for ONNX Runtime
//! catches what Onyx raises.

use onyx::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(onnxruntime_pybind11_state, Fail, PyException, "A failure without a more precise class.");
create_exception!(
    onnxruntime_pybind11_state,
    InvalidArgument,
    PyException,
    "A bad argument: input name, dtype or shape, option."
);
create_exception!(onnxruntime_pybind11_state, NoSuchFile, PyException, "A model or data file that does not exist.");
create_exception!(onnxruntime_pybind11_state, NoModel, PyException, "No model was loaded.");
create_exception!(onnxruntime_pybind11_state, EngineError, PyException, "An internal error of the runtime.");
create_exception!(onnxruntime_pybind11_state, RuntimeException, PyException, "A kernel failed while the model ran.");
create_exception!(
    onnxruntime_pybind11_state,
    InvalidProtobuf,
    PyException,
    "Bytes that do not decode as an ONNX model."
);
create_exception!(onnxruntime_pybind11_state, ModelLoaded, PyException, "The model is already loaded.");
create_exception!(
    onnxruntime_pybind11_state,
    NotImplemented,
    PyException,
    "An operator or feature Onyx does not implement."
);
create_exception!(onnxruntime_pybind11_state, InvalidGraph, PyException, "A model whose graph is invalid.");
create_exception!(onnxruntime_pybind11_state, EPFail, PyException, "An execution provider (a device) failed.");

/// When an error happened: ONNX Runtime raises different classes for the same fault found
/// while loading a model and while running it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Creating a session: reading, checking and planning the model.
    Load,
    /// Running a session.
    Run,
}

/// The Python exception for an Onyx error, of the class ONNX Runtime raises for that fault.
pub fn to_py(error: Error, phase: Phase) -> PyErr {
    let message = error.to_string();
    match (&error, phase) {
        (Error::Io { source, .. }, _) if source.kind() == std::io::ErrorKind::NotFound => NoSuchFile::new_err(message),
        // A file that cannot be read as a model (a directory, say): ONNX Runtime's "Protobuf
        // parsing failed".
        (Error::Io { .. }, Phase::Load) => InvalidProtobuf::new_err(message),
        (Error::Io { .. }, Phase::Run) => Fail::new_err(message),
        (Error::Load(_), _) => InvalidProtobuf::new_err(message),
        (Error::InvalidModel(_), _) => InvalidArgument::new_err(message),
        // ONNX Runtime: "Unsupported model IR version", "opset ... is under development".
        (Error::Version(_), _) => Fail::new_err(message),
        (Error::Attribute { .. }, _) => InvalidGraph::new_err(message),
        (Error::UnknownOp { .. }, Phase::Load) => InvalidGraph::new_err(message),
        (Error::UnknownOp { .. } | Error::Unsupported(_), _) => NotImplemented::new_err(message),
        // ONNX Runtime reports a kernel's failure ("Non-zero status code returned while running
        // MatMul node") as Fail.
        (Error::NodeInput { .. } | Error::Node { .. } | Error::Limit { .. }, _) => Fail::new_err(message),
        (Error::Device(_), _) => EPFail::new_err(message),
        (Error::Input { .. } | Error::UnknownOutput { .. } | Error::DType { .. } | Error::ValueKind { .. }, _) => {
            InvalidArgument::new_err(message)
        }
        (Error::InvalidArgument(_), _) => InvalidArgument::new_err(message),
        (Error::Terminated, _) => Fail::new_err("Exiting due to terminate flag being set to true."),
    }
}

/// Adds the exception classes to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Fail", py.get_type::<Fail>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("NoSuchFile", py.get_type::<NoSuchFile>())?;
    m.add("NoModel", py.get_type::<NoModel>())?;
    m.add("EngineError", py.get_type::<EngineError>())?;
    m.add("RuntimeException", py.get_type::<RuntimeException>())?;
    m.add("InvalidProtobuf", py.get_type::<InvalidProtobuf>())?;
    m.add("ModelLoaded", py.get_type::<ModelLoaded>())?;
    m.add("NotImplemented", py.get_type::<NotImplemented>())?;
    m.add("InvalidGraph", py.get_type::<InvalidGraph>())?;
    m.add("EPFail", py.get_type::<EPFail>())?;
    Ok(())
}
