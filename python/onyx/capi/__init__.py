"""Where ONNX Runtime keeps its native module: `onyx.capi.onnxruntime_pybind11_state` has the
same exception classes, so that `from onnxruntime.capi.onnxruntime_pybind11_state import Fail`
becomes `from onyx.capi.onnxruntime_pybind11_state import Fail`."""
