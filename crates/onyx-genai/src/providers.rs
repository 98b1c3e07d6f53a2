//! genai_config's execution providers mapped to Onyx's: `cpu` is the CPU EP; `dml`, `webgpu`
//! and `cuda` (until Onyx has a CUDA EP), and `wgpu`, are the wgpu EP with their options.
//!
//! | genai option | wgpu option |
//! | --- | --- |
//! | `device_id` | `adapter` (index among the adapters that pass the filters) |
//! | `performance_preference` (`high_performance`, `minimum_power`, `default`) | `power` |
//! | `hardware_vendor_id` (4318 NVIDIA, 4098 AMD, 32902 Intel) | `vendor` |
//! | `hardware_device_type` (`GPU`, `CPU`) | `device_type` (`CPU`: a software adapter) |
//!
//! Options that tune ONNX Runtime's own providers (`enable_graph_capture`, `validationMode`,
//! ...) have no effect; Onyx's own wgpu options (`backend`, `pipeline_cache_dir`, ...) pass
//! through.

use onyx_runtime::Provider;

use crate::config::ProviderConfig;
use crate::error::{invalid, Result};

/// genai's provider names that Onyx takes.
pub const PROVIDER_NAMES: [&str; 5] = ["cpu", "dml", "webgpu", "cuda", "wgpu"];

/// Options of ONNX Runtime's providers that have no Onyx counterpart.
const ORT_ONLY_OPTIONS: [&str; 9] = [
    "enable_graph_capture",
    "enableGraphCapture",
    "validationMode",
    "enable_cuda_graph",
    "disable_metacommands",
    "storageBufferCacheMode",
    "enable_skip_layer_norm_strict_mode",
    "prefer_nhwc",
    "hardware_device_id",
];

pub(crate) fn check_name(name: &str) -> Result<()> {
    if PROVIDER_NAMES.contains(&name) {
        Ok(())
    } else {
        Err(invalid(format!("unknown provider '{name}' (known: {})", PROVIDER_NAMES.join(", "))))
    }
}

/// The Onyx providers for a provider list, in priority order (the CPU when empty).
pub fn resolve(list: &[ProviderConfig]) -> Result<Vec<Provider>> {
    list.iter().map(resolve_one).collect()
}

fn resolve_one(entry: &ProviderConfig) -> Result<Provider> {
    check_name(&entry.name)?;
    if entry.name == "cpu" {
        return Ok(Provider::Cpu);
    }
    let mut provider: Provider = "wgpu".parse()?;
    for (key, value) in &entry.options {
        let bad = |e: onyx_runtime::Error| invalid(format!("provider '{}' option {key}={value}: {e}", entry.name));
        match key.as_str() {
            k if ORT_ONLY_OPTIONS.contains(&k) => {}
            "device_id" => provider.set_option("adapter", value).map_err(bad)?,
            "performance_preference" => {
                let power = match value.as_str() {
                    "high_performance" => "high",
                    "minimum_power" => "low",
                    "default" => "default",
                    _ => return Err(invalid(format!("provider '{}' option performance_preference: expected high_performance, minimum_power or default, got '{value}'", entry.name))),
                };
                provider.set_option("power", power).map_err(bad)?
            }
            "hardware_vendor_id" => provider.set_option("vendor", value).map_err(bad)?,
            "hardware_device_type" => match value.to_ascii_uppercase().as_str() {
                "GPU" => {}
                "CPU" => provider.set_option("device_type", "cpu").map_err(bad)?,
                _ => return Err(invalid(format!(
                    "provider '{}' option hardware_device_type: expected GPU or CPU, got '{value}' (Onyx runs no NPU)",
                    entry.name
                ))),
            },
            _ => provider.set_option(key, value).map_err(bad)?,
        }
    }
    Ok(provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, options: &[(&str, &str)]) -> ProviderConfig {
        ProviderConfig {
            name: name.into(),
            options: options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn maps_names_and_options() {
        assert!(matches!(resolve(&[entry("cpu", &[])]).unwrap()[..], [Provider::Cpu]));
        let err = resolve(&[entry("openvino", &[])]).err().unwrap().to_string();
        assert!(err.contains("unknown provider 'openvino'"), "{err}");
        if cfg!(feature = "wgpu") {
            let gpu = resolve(&[entry(
                "dml",
                &[("enable_graph_capture", "1"), ("device_id", "0"), ("hardware_vendor_id", "4318")],
            )])
            .unwrap();
            assert_eq!(gpu.len(), 1);
            let err = resolve(&[entry("webgpu", &[("performance_preference", "fastest")])]).err().unwrap().to_string();
            assert!(err.contains("performance_preference"), "{err}");
            let err = resolve(&[entry("dml", &[("no_such_option", "1")])]).err().unwrap().to_string();
            assert!(err.contains("no_such_option"), "{err}");
        }
    }
}
