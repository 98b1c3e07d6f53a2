//! Choosing execution providers by name.

use std::sync::Arc;

use onyx_core::ep::ExecutionProvider;
use onyx_core::{Error, Result};
use onyx_cpu::CpuProvider;

/// An execution provider to put in a session's priority list.
#[derive(Clone)]
pub enum Provider {
    /// The CPU EP (always compiled in).
    Cpu,
    /// Any provider instance, e.g. one created from the application's own device.
    Custom(Arc<dyn ExecutionProvider>),
}

impl Provider {
    /// The provider instance.
    pub fn instantiate(&self) -> Result<Arc<dyn ExecutionProvider>> {
        match self {
            Provider::Cpu => Ok(Arc::new(CpuProvider::new())),
            Provider::Custom(p) => Ok(p.clone()),
        }
    }
}

impl std::str::FromStr for Provider {
    type Err = Error;

    /// Parses `cpu` (and, when compiled in, the GPU providers' names).
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Provider::Cpu),
            "wgpu" | "cuda" => Err(Error::InvalidArgument(format!(
                "execution provider '{s}' is not compiled into this build (available: cpu)"
            ))),
            other => Err(Error::InvalidArgument(format!("unknown execution provider '{other}' (available: cpu)"))),
        }
    }
}

/// One instance of every provider compiled into this build, for listing devices.
pub fn compiled_providers() -> Vec<Arc<dyn ExecutionProvider>> {
    vec![Arc::new(CpuProvider::new())]
}
