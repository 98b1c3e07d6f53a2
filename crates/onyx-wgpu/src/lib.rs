//! Onyx's wgpu execution provider: ONNX nodes as WGSL compute shaders on any GPU that wgpu
//! reaches (Vulkan, Metal, DX12), on a device Onyx opens or on the application's own.
//!
//! A run records every GPU node into one compute pass of one command encoder and submits it
//! once (see [`GpuRun`]); tensors stay in GPU buffers between nodes, and an application's
//! buffers can be wrapped as tensors without a copy ([`GpuContext::wrap_buffer`]).

mod bind_cache;
mod buffer;
mod capabilities;
mod compile;
mod context;
mod faults;
mod kernel;
mod ops;
mod options;
mod ownership;
mod pipeline_cache;
mod profile;
mod provider;
mod recycle;
mod run;

#[cfg(test)]
mod testkit;

pub use buffer::{gpu_buffer, GpuBuffer};
pub use capabilities::Capabilities;
pub use context::{adapters, GpuContext, HostStats};
pub use options::{vendor, WgpuOptions};
pub use pipeline_cache::PipelineCacheStatus;
pub use profile::{DispatchTime, SubmitProfile};
pub use provider::{describe_adapters, WgpuProvider};
pub use run::GpuRun;
pub use wgpu;
