//! Loads ONNX files into the Onyx IR.

/// The ONNX protobuf messages, generated at build time from the vendored schema.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}
