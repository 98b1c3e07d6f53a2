//! ONNX Runtime's execution provider names and options, mapped onto Onyx's providers. Code
//! written for DirectML (`DmlExecutionProvider`) or ONNX Runtime's WebGPU EP runs on Onyx's
//! wgpu EP, on any GPU.

use std::sync::Arc;

use onyx::ep::ExecutionProvider;
use onyx::Provider;
use pyo3::prelude::*;

use crate::errors::{to_py, InvalidArgument, Phase};

/// The provider names `get_available_providers()` lists, in ONNX Runtime's priority order.
pub const AVAILABLE: &[&str] =
    &["WgpuExecutionProvider", "DmlExecutionProvider", "WebGpuExecutionProvider", "CPUExecutionProvider"];

/// DirectML's options that have no meaning on wgpu, accepted so that DirectML code runs as is.
const DML_IGNORED: &[&str] = &["disable_metacommands", "enable_graph_capture", "enable_dynamic_graph_fusion"];
/// ONNX Runtime WebGPU EP's options that have no meaning on Onyx's wgpu EP.
const WEBGPU_IGNORED: &[&str] = &[
    "preferredLayout",
    "enableGraphCapture",
    "storageBufferCacheMode",
    "uniformBufferCacheMode",
    "queryResolveBufferCacheMode",
    "defaultBufferCacheMode",
    "validationMode",
    "forceCpuNodeNames",
    "enablePIXCapture",
];

/// The Onyx provider for ONNX Runtime's provider `name` with its options.
pub fn provider(name: &str, options: &[(String, String)]) -> PyResult<Provider> {
    let invalid = |e| to_py(e, Phase::Load);
    match name {
        "CPUExecutionProvider" => {
            // ONNX Runtime's CPU EP takes only arena settings, which Onyx has no use for.
            if let Some((key, _)) = options.iter().find(|(k, _)| k != "use_arena" && k != "arena_extend_strategy") {
                return Err(unknown_option(name, key));
            }
            Ok(Provider::Cpu)
        }
        "WgpuExecutionProvider" => {
            let mut provider = Provider::Wgpu(Default::default());
            for (key, value) in options {
                provider.set_option(key, value).map_err(invalid)?;
            }
            Ok(provider)
        }
        "DmlExecutionProvider" => {
            let mut provider = Provider::Wgpu(Default::default());
            for (key, value) in options {
                match key.as_str() {
                    "device_id" => set_adapter(&mut provider, name, value)?,
                    "performance_preference" => {
                        let power = match value.as_str() {
                            "default" => "default",
                            "high_performance" => "high-performance",
                            "minimum_power" => "low-power",
                            other => {
                                return Err(InvalidArgument::new_err(format!(
                                    "{name} option performance_preference: expected default, high_performance or minimum_power, found '{other}'"
                                )))
                            }
                        };
                        provider.set_option("power", power).map_err(invalid)?;
                    }
                    k if DML_IGNORED.contains(&k) => {}
                    other => return Err(unknown_option(name, other)),
                }
            }
            Ok(provider)
        }
        "WebGpuExecutionProvider" => {
            let mut provider = Provider::Wgpu(Default::default());
            for (key, value) in options {
                match key.as_str() {
                    "deviceId" | "device_id" => set_adapter(&mut provider, name, value)?,
                    "powerPreference" => provider.set_option("power", value).map_err(invalid)?,
                    k if WEBGPU_IGNORED.contains(&k) => {}
                    other => return Err(unknown_option(name, other)),
                }
            }
            Ok(provider)
        }
        other => Err(InvalidArgument::new_err(format!(
            "unknown execution provider '{other}' (available: {})",
            AVAILABLE.join(", ")
        ))),
    }
}

/// Device 0 is the best adapter (the one `WgpuExecutionProvider` opens by default, so that both
/// share one device); another id is that adapter's index.
fn set_adapter(provider: &mut Provider, name: &str, value: &str) -> PyResult<()> {
    let id: u32 = value.parse().map_err(|_| {
        InvalidArgument::new_err(format!("{name} option device_id: expected an integer, found '{value}'"))
    })?;
    if id != 0 {
        provider.set_option("adapter", value).map_err(|e| to_py(e, Phase::Load))?;
    }
    Ok(())
}

fn unknown_option(provider: &str, key: &str) -> PyErr {
    InvalidArgument::new_err(format!("{provider} has no option '{key}'"))
}

/// The provider owning device `device_type` (`cpu`: none; `wgpu`, `dml`, `webgpu`: the wgpu EP
/// on adapter `device_id`, shared with sessions using that adapter).
pub fn device_provider(device_type: &str, device_id: u32) -> PyResult<Option<Arc<dyn ExecutionProvider>>> {
    match device_type.to_ascii_lowercase().as_str() {
        "cpu" => Ok(None),
        "wgpu" | "dml" | "webgpu" | "gpu" => {
            let mut options = onyx::gpu::WgpuOptions::default();
            if device_id != 0 {
                options.set("adapter", &device_id.to_string()).map_err(|e| to_py(e, Phase::Run))?;
            }
            let provider = onyx::shared_wgpu(&options).map_err(|e| to_py(e, Phase::Run))?;
            Ok(Some(provider))
        }
        other => Err(pyo3::exceptions::PyException::new_err(format!(
            "Unsupported device type: {other} (expected cpu, wgpu, dml or webgpu)"
        ))),
    }
}
