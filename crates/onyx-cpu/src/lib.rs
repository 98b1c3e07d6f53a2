//! The CPU execution provider: the embedded default, and the reference that every other EP's
//! kernels are tested against. Kernels live in `ops/<family>.rs`.

pub mod ops;
mod parallel;
mod provider;
mod registry;

pub use provider::CpuProvider;
pub use registry::{BuildFn, Registry};
