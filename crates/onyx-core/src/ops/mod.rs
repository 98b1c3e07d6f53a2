//! Operator definitions: which ops exist in which opset, and type/shape inference.

pub mod contrib;
pub mod infer;
mod onnx_ops;
pub mod layout;
pub mod registry;
pub mod resize;
