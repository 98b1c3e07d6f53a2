//! How the wgpu EP picks its adapter, as provider options users know from ONNX Runtime's
//! DirectML/WebGPU EPs.

use onyx_core::{Error, Result};

/// PCI vendor ids users filter adapters by.
pub mod vendor {
    /// NVIDIA.
    pub const NVIDIA: u32 = 4318;
    /// AMD.
    pub const AMD: u32 = 4098;
    /// Intel.
    pub const INTEL: u32 = 32902;
}

/// Which adapter the wgpu EP opens. The default takes the best adapter of any backend:
/// discrete before integrated before virtual before software.
#[derive(Debug, Clone, Default)]
pub struct WgpuOptions {
    /// Index into the adapters that pass the other filters, in `onyx devices` order.
    pub adapter_index: Option<usize>,
    /// Only adapters of this PCI vendor (see [`vendor`]).
    pub vendor_id: Option<u32>,
    /// Only adapters of this kind.
    pub device_type: Option<wgpu::DeviceType>,
    /// Ordering among the adapters that pass the filters.
    pub power_preference: wgpu::PowerPreference,
    /// Backends to look at; empty means all that are compiled in.
    pub backends: wgpu::Backends,
    /// Keeps the f16 matrix products off the adapter's cooperative matrices (tensor cores),
    /// which Onyx otherwise uses where the adapter offers them (wgpu's experimental
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX`): the way back if a driver gets them wrong.
    pub no_cooperative_matrix: bool,
    /// Makes runs wait for the tuned GEMM, convolution and attention pipelines instead of
    /// running simple startup kernels while the driver compiles them (see
    /// [`GpuContext::set_startup_kernels`](crate::GpuContext::set_startup_kernels)).
    pub no_startup_kernels: bool,
    /// A directory where compiled pipelines are kept between processes, for starts where the
    /// driver's own shader cache is off or cold (see [`PipelineCacheStatus`]); Vulkan only.
    /// The directory must be private to the user: the files go to the driver's compiler.
    ///
    /// [`PipelineCacheStatus`]: crate::PipelineCacheStatus
    pub pipeline_cache_dir: Option<std::path::PathBuf>,
}

impl WgpuOptions {
    /// Sets one option from its string form, as the CLI's `--provider-option key=value` gives it.
    /// Keys: `adapter`, `vendor`, `device_type` (discrete, integrated, virtual, cpu),
    /// `power` (high-performance, low-power, default), `backend` (vulkan, metal, dx12),
    /// `cooperative_matrix` (true, false), `startup_kernels` (true, false), `pipeline_cache_dir`
    /// (a directory).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad =
            |expected: &str| Error::InvalidArgument(format!("wgpu option {key}: expected {expected}, got '{value}'"));
        match key {
            "adapter" | "adapter_index" => self.adapter_index = Some(value.parse().map_err(|_| bad("an index"))?),
            "vendor" | "vendor_id" => {
                self.vendor_id = Some(match value.to_ascii_lowercase().as_str() {
                    "nvidia" => vendor::NVIDIA,
                    "amd" => vendor::AMD,
                    "intel" => vendor::INTEL,
                    v => v.parse().map_err(|_| bad("a PCI vendor id or nvidia/amd/intel"))?,
                })
            }
            "device_type" => {
                self.device_type = Some(match value {
                    "discrete" => wgpu::DeviceType::DiscreteGpu,
                    "integrated" => wgpu::DeviceType::IntegratedGpu,
                    "virtual" => wgpu::DeviceType::VirtualGpu,
                    "cpu" => wgpu::DeviceType::Cpu,
                    _ => return Err(bad("discrete, integrated, virtual or cpu")),
                })
            }
            "power" | "power_preference" => {
                self.power_preference = match value {
                    "high-performance" | "high" => wgpu::PowerPreference::HighPerformance,
                    "low-power" | "low" => wgpu::PowerPreference::LowPower,
                    "default" | "none" => wgpu::PowerPreference::None,
                    _ => return Err(bad("high-performance, low-power or default")),
                }
            }
            "backend" => {
                self.backends = match value {
                    "vulkan" => wgpu::Backends::VULKAN,
                    "metal" => wgpu::Backends::METAL,
                    "dx12" => wgpu::Backends::DX12,
                    "all" => wgpu::Backends::empty(),
                    _ => return Err(bad("vulkan, metal, dx12 or all")),
                }
            }
            "cooperative_matrix" => {
                self.no_cooperative_matrix = match value {
                    "true" | "1" => false,
                    "false" | "0" => true,
                    _ => return Err(bad("true or false")),
                }
            }
            "startup_kernels" => {
                self.no_startup_kernels = match value {
                    "true" | "1" => false,
                    "false" | "0" => true,
                    _ => return Err(bad("true or false")),
                }
            }
            "pipeline_cache_dir" => {
                if value.is_empty() {
                    return Err(bad("a directory"));
                }
                self.pipeline_cache_dir = Some(value.into())
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown wgpu option '{key}' (known: adapter, vendor, device_type, power, backend, \
                     cooperative_matrix, startup_kernels, pipeline_cache_dir)"
                )))
            }
        }
        Ok(())
    }

    /// Whether an adapter passes the vendor and device-type filters.
    pub(crate) fn accepts(&self, info: &wgpu::AdapterInfo) -> bool {
        self.vendor_id.is_none_or(|v| v == info.vendor) && self.device_type.is_none_or(|t| t == info.device_type)
    }

    /// Sort key: lower is preferred.
    pub(crate) fn rank(&self, info: &wgpu::AdapterInfo) -> u8 {
        use wgpu::DeviceType::*;
        match (self.power_preference, info.device_type) {
            (wgpu::PowerPreference::LowPower, IntegratedGpu) => 0,
            (wgpu::PowerPreference::LowPower, DiscreteGpu) => 1,
            (_, DiscreteGpu) => 0,
            (_, IntegratedGpu) => 1,
            (_, VirtualGpu) => 2,
            (_, Other) => 3,
            (_, Cpu) => 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_options_and_names_bad_ones() {
        let mut o = WgpuOptions::default();
        o.set("vendor", "nvidia").unwrap();
        o.set("device_type", "cpu").unwrap();
        o.set("power", "low-power").unwrap();
        o.set("adapter", "1").unwrap();
        assert_eq!(o.vendor_id, Some(vendor::NVIDIA));
        assert_eq!(o.device_type, Some(wgpu::DeviceType::Cpu));
        assert_eq!(o.adapter_index, Some(1));
        assert!(!o.no_cooperative_matrix);
        o.set("cooperative_matrix", "false").unwrap();
        assert!(o.no_cooperative_matrix);
        assert!(o.set("cooperative_matrix", "maybe").unwrap_err().to_string().contains("maybe"));
        let e = o.set("power", "fast").unwrap_err().to_string();
        assert!(e.contains("power") && e.contains("fast"), "{e}");
        o.set("pipeline_cache_dir", "/tmp/onyx").unwrap();
        assert_eq!(o.pipeline_cache_dir.as_deref(), Some(std::path::Path::new("/tmp/onyx")));
        assert!(o.set("pipeline_cache_dir", "").unwrap_err().to_string().contains("directory"));
        assert!(o.set("colour", "red").unwrap_err().to_string().contains("colour"));
    }
}
