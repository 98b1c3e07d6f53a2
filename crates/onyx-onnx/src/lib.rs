//! Loads ONNX files into the Onyx IR.
//!
//! [`load_model`] reads a `.onnx` file (external data resolved, and memory-mapped, inside the
//! model's folder only), converts every part of the `ModelProto` into [`onyx_core::ir::Model`],
//! inlines model-local functions and checks the result with [`onyx_core::ir::check_model`].
//! [`tensor_from_pb_bytes`] and [`value_from_pb_bytes`] read the serialized values of ONNX's
//! test data sets. [`save_model`] and [`model_to_bytes`] write a `Model` back to ONNX (large
//! models with their large tensors in an external data file).
//!
//! Tensor bytes are taken as little-endian, as ONNX stores them; Onyx targets little-endian hosts.

#![warn(missing_docs)]

/// The ONNX protobuf messages, generated at build time from the vendored schema.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

mod attribute;
mod external;
mod functions;
mod graph;
mod load;
mod save;
mod sparse;
mod tensor;
#[cfg(test)]
mod testutil;
mod types;
mod values;

pub use load::{load_model, load_model_from_bytes};
pub use save::{model_to_bytes, save_model, save_model_with_options, SaveOptions};
pub use values::{tensor_from_pb_bytes, value_from_pb_bytes};

/// Subgraphs nested deeper than this are rejected while converting (the same limit as the
/// checker's), so a malicious file cannot overflow the stack.
pub(crate) use onyx_core::ir::MAX_SUBGRAPH_DEPTH;

/// The domain as the IR spells it: `ai.onnx` is the default domain `""`.
pub(crate) fn normalize_domain(domain: Option<&str>) -> String {
    match domain.unwrap_or("") {
        "ai.onnx" => String::new(),
        d => d.to_string(),
    }
}

/// Adds `context` in front of the message of an error about model content.
pub(crate) fn in_context(err: onyx_core::Error, context: &str) -> onyx_core::Error {
    use onyx_core::Error;
    match err {
        Error::InvalidModel(m) => Error::InvalidModel(format!("{context}: {m}")),
        Error::InvalidArgument(m) => Error::InvalidModel(format!("{context}: {m}")),
        Error::Load(m) => Error::Load(format!("{context}: {m}")),
        Error::Io { path, source } => Error::Io { path: format!("{context}: {path}"), source },
        other => other,
    }
}
