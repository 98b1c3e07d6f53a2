//! Onyx core: the model IR, values and devices, the execution-provider seam, shape inference,
//! and sessions that partition, plan and run a graph over execution providers.

#![warn(missing_docs)]

pub mod device;
mod dtype;
pub mod ep;
mod error;
pub mod host_pool;
pub mod ir;
pub mod ops;
pub mod optimizer;
pub mod session;
mod tensor;
pub mod types;
mod value;

pub use device::Device;
pub use dtype::DataType;
pub use error::{Error, Location, Result};
pub use session::{
    IoBinding, NodeAssignment, NodeTime, OptimizationLevel, OutputTarget, Outputs, RunOptions, Session, SessionOptions,
    FOLDED,
};
pub use tensor::{element_count, ByteSource, Element, HostBuffer, Tensor, TensorData, TensorView, ViewData};
pub use value::{InputValue, Map, Optional, Sequence, Value};
