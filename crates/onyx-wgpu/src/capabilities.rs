//! What a GPU can do, known from its adapter before its device is opened: which nodes the EP
//! takes depends only on this, so a session is optimized and partitioned while the driver
//! still opens the device.

/// The features and limits of a GPU's device, and whether its f16 products use tensor cores.
#[derive(Clone, Debug)]
pub struct Capabilities {
    features: wgpu::Features,
    limits: wgpu::Limits,
    cooperative: bool,
}

impl Capabilities {
    /// What a device with `features` and `limits` can do; `cooperative`: whether Onyx's f16
    /// GEMM runs on its cooperative matrices.
    pub(crate) fn new(features: wgpu::Features, limits: wgpu::Limits, cooperative: bool) -> Capabilities {
        Capabilities { features, limits, cooperative }
    }

    /// The capabilities of a device opened elsewhere (the application's).
    pub(crate) fn of_device(device: &wgpu::Device) -> Capabilities {
        Capabilities::new(device.features(), device.limits(), false)
    }

    /// The optional features the device has.
    pub(crate) fn features(&self) -> wgpu::Features {
        self.features
    }

    /// Whether shaders may use `f16`.
    pub fn has_f16(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_F16)
    }

    /// Whether f16 matrix products run on cooperative matrices (16x16x16 fragments, f32
    /// accumulators, subgroups of 32).
    pub fn has_cooperative_matrix(&self) -> bool {
        self.cooperative
    }

    /// The device's limits.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }
}
