//! Operator definitions: which ops exist in which opset, and type/shape inference.

pub mod contrib;
pub mod infer;
pub mod layout;
mod onnx_attributes;
mod onnx_ops;
pub mod registry;
pub mod resize;
