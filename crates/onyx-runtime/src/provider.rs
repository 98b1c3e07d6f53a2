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
    /// The wgpu EP on the adapter the options choose. Sessions given equal options share one
    /// device (and so can pass GPU tensors to each other).
    #[cfg(feature = "wgpu")]
    Wgpu(onyx_wgpu::WgpuOptions),
    /// Any provider instance, e.g. one created from the application's own device.
    Custom(Arc<dyn ExecutionProvider>),
}

impl Provider {
    /// The provider instance.
    pub fn instantiate(&self) -> Result<Arc<dyn ExecutionProvider>> {
        match self {
            Provider::Cpu => Ok(Arc::new(CpuProvider::new())),
            #[cfg(feature = "wgpu")]
            Provider::Wgpu(options) => Ok(shared_wgpu(options)?),
            Provider::Custom(p) => Ok(p.clone()),
        }
    }

    /// Sets a provider option from its `key=value` string form (wgpu: adapter, vendor,
    /// device_type, power, backend). The CPU provider has none.
    pub fn set_option(&mut self, key: &str, value: &str) -> Result<()> {
        match self {
            #[cfg(feature = "wgpu")]
            Provider::Wgpu(options) => options.set(key, value),
            _ => {
                Err(Error::InvalidArgument(format!("this execution provider has no option '{key}' (given '{value}')")))
            }
        }
    }
}

/// The one wgpu provider of this process for `options`, opened on first use.
#[cfg(feature = "wgpu")]
pub fn shared_wgpu(options: &onyx_wgpu::WgpuOptions) -> Result<Arc<onyx_wgpu::WgpuProvider>> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    static OPENED: OnceLock<Mutex<HashMap<String, Arc<onyx_wgpu::WgpuProvider>>>> = OnceLock::new();
    let key = format!("{options:?}");
    let mut opened = OPENED.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(p) = opened.get(&key) {
        return Ok(p.clone());
    }
    let p = Arc::new(onyx_wgpu::WgpuProvider::new(options)?);
    opened.insert(key, p.clone());
    Ok(p)
}

/// Names of the providers compiled into this build.
pub fn provider_names() -> &'static [&'static str] {
    if cfg!(feature = "wgpu") {
        &["cpu", "wgpu"]
    } else {
        &["cpu"]
    }
}

impl std::str::FromStr for Provider {
    type Err = Error;

    /// Parses `cpu` or `wgpu` (when compiled in).
    fn from_str(s: &str) -> Result<Self> {
        let available = provider_names().join(", ");
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Provider::Cpu),
            #[cfg(feature = "wgpu")]
            "wgpu" => Ok(Provider::Wgpu(Default::default())),
            #[cfg(not(feature = "wgpu"))]
            "wgpu" => Err(Error::InvalidArgument(format!(
                "execution provider '{s}' is not compiled into this build (available: {available})"
            ))),
            "cuda" => Err(Error::InvalidArgument(format!(
                "execution provider '{s}' is not compiled into this build (available: {available})"
            ))),
            other => {
                Err(Error::InvalidArgument(format!("unknown execution provider '{other}' (available: {available})")))
            }
        }
    }
}

/// The devices each provider compiled into this build sees, by provider name. Opens no device.
pub fn compiled_devices() -> Vec<(&'static str, Vec<onyx_core::ep::DeviceDescription>)> {
    let cpu = ("cpu", CpuProvider::new().describe_devices());
    #[cfg(feature = "wgpu")]
    let all = vec![cpu, ("wgpu", onyx_wgpu::describe_adapters())];
    #[cfg(not(feature = "wgpu"))]
    let all = vec![cpu];
    all
}
