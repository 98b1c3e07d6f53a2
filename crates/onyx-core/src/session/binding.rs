//! IO binding: which values a run reads and where it leaves each output, so that a run whose
//! inputs and outputs live on a GPU moves no bytes between the host and the device.

use crate::device::Device;
use crate::{InputValue, Tensor};

/// Where a run leaves one output.
#[derive(Debug, Clone)]
pub enum OutputTarget {
    /// Copied to host memory (the default of [`crate::Session::run`]).
    Host,
    /// Left on `device` as a new value: on the device that computed it, no copy at all.
    Device(Device),
    /// Written into this preallocated device tensor (same dtype and shape), which the run's
    /// outputs then hold. The copy stays on the device.
    Into(Tensor),
}

/// Inputs and output targets for [`crate::Session::run_with_binding`], in the manner of ONNX
/// Runtime's `IoBinding`. Only bound outputs are produced.
#[derive(Default)]
pub struct IoBinding<'a> {
    pub(crate) inputs: Vec<(String, InputValue<'a>)>,
    pub(crate) outputs: Vec<(String, OutputTarget)>,
    pub(crate) options: Option<super::RunOptions>,
}

impl<'a> IoBinding<'a> {
    /// An empty binding.
    pub fn new() -> Self {
        IoBinding::default()
    }

    /// Binds an input to a value on any device (a GPU tensor is read where it is).
    pub fn bind_input(&mut self, name: impl Into<String>, value: impl Into<InputValue<'a>>) -> &mut Self {
        let name = name.into();
        self.inputs.retain(|(n, _)| *n != name);
        self.inputs.push((name, value.into()));
        self
    }

    /// Asks for an output on `device` (`Device::Cpu` for the host).
    pub fn bind_output_to_device(&mut self, name: impl Into<String>, device: Device) -> &mut Self {
        let target = if device == Device::Cpu { OutputTarget::Host } else { OutputTarget::Device(device) };
        self.bind_output_target(name.into(), target)
    }

    /// Asks for an output to be written into a preallocated device tensor.
    pub fn bind_output(&mut self, name: impl Into<String>, tensor: Tensor) -> &mut Self {
        self.bind_output_target(name.into(), OutputTarget::Into(tensor))
    }

    /// Runs with these options (a run asked to terminate stops at its next node).
    pub fn set_run_options(&mut self, options: super::RunOptions) -> &mut Self {
        self.options = Some(options);
        self
    }

    fn bind_output_target(&mut self, name: String, target: OutputTarget) -> &mut Self {
        self.outputs.retain(|(n, _)| *n != name);
        self.outputs.push((name, target));
        self
    }
}
