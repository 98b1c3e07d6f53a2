"""ONNX Runtime's `capi._pybind_state`: the same exception classes."""

from onyx.capi.onnxruntime_pybind11_state import *  # noqa: F401,F403
from onyx.capi.onnxruntime_pybind11_state import __all__  # noqa: F401
