//! # Onyx
//!
//! An ONNX inference runtime whose data can live on the GPU. This crate is the facade users
//! depend on: load a model, pick execution providers, run it; generate text with an
//! onnxruntime-genai model folder through [`genai`].
//!
//! ```no_run
//! use onyx::{SessionBuilder, Tensor, TensorView};
//!
//! # fn main() -> onyx::Result<()> {
//! let session = SessionBuilder::new().commit_from_file("models/digits/digits.onnx")?;
//! let pixels = vec![0.0f32; 64];
//! let shape = [1, 1, 8, 8];
//! // Borrow the caller's memory: no copy.
//! let outputs = session.run([("image", TensorView::from_slice(&shape, &pixels)?)])?;
//! let probabilities = outputs.get("probabilities")?.as_tensor()?.as_slice::<f32>()?;
//! println!("{probabilities:?}");
//! # Ok(()) }
//! ```

pub use onyx_runtime::*;

/// LLM generation with onnxruntime-genai model folders (its `Model`, `Tokenizer`,
/// `GeneratorParams` and `Generator`).
#[cfg(feature = "genai")]
pub use onyx_genai as genai;
