//! Onyx's runtime layer: sessions over execution providers chosen by name. Users depend on the
//! `onyx` facade, which re-exports all of this (and `onyx-genai` as `onyx::genai`); the layer is
//! its own crate so that `onyx-genai` can build sessions without depending on the facade.
//!
//! ```no_run
//! use onyx_runtime::{SessionBuilder, Tensor, TensorView};
//!
//! # fn main() -> onyx_runtime::Result<()> {
//! let session = SessionBuilder::new().commit_from_file("models/digits/digits.onnx")?;
//! let pixels = vec![0.0f32; 64];
//! let shape = [1, 1, 8, 8];
//! // Borrow the caller's memory: no copy.
//! let outputs = session.run([("image", TensorView::from_slice(&shape, &pixels)?)])?;
//! let probabilities = outputs.get("probabilities")?.as_tensor()?.as_slice::<f32>()?;
//! println!("{probabilities:?}");
//! # Ok(()) }
//! ```

mod builder;
pub mod npy;
mod provider;

pub use builder::SessionBuilder;
pub use onyx_core::ep::{self, ExecutionProvider};
pub use onyx_core::optimizer;
pub use onyx_core::{
    element_count, ir, types, ByteSource, DataType, Device, Element, Error, HostBuffer, InputValue, IoBinding, Location, Map,
    NodeAssignment, NodeTime, OptimizationLevel, Optional, OutputTarget, Outputs, Result, RunOptions, Sequence, Session,
    SessionOptions, Tensor, TensorData, TensorView, Value, FOLDED,
};
pub use onyx_cpu::CpuProvider;
pub use onyx_onnx::{load_model, load_model_from_bytes};
pub use onyx_onnx::{model_to_bytes, save_model, save_model_with_options, SaveOptions};
/// The wgpu execution provider: device tensors, the application's own device and queue.
#[cfg(feature = "wgpu")]
pub use onyx_wgpu as gpu;
#[cfg(feature = "wgpu")]
pub use provider::shared_wgpu;
pub use provider::{compiled_devices, provider_names, Provider};
