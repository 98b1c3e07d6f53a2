//! `onyx._onyx`: the native half of Onyx's Python package. The package `onyx` (python/onyx)
//! gives ONNX Runtime's Python API on top of it: `InferenceSession`, `SessionOptions`,
//! `OrtValue`, IO binding, and ONNX Runtime's exception classes.

use pyo3::prelude::*;

mod control;
mod convert;
mod errors;
mod genai;
mod providers;
mod session;
mod value;

/// ONNX Runtime's provider names that this build runs.
#[pyfunction]
fn available_providers() -> Vec<&'static str> {
    providers::AVAILABLE.to_vec()
}

#[pymodule]
fn _onyx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    control::init();
    m.add_class::<session::Session>()?;
    m.add_class::<control::RunFlag>()?;
    m.add_class::<value::OrtValue>()?;
    m.add_function(wrap_pyfunction!(available_providers, m)?)?;
    errors::register(m)?;
    genai::register(m)?;
    Ok(())
}
