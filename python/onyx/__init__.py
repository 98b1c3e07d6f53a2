"""Onyx: an ONNX inference runtime whose data lives on the GPU.

`import onyx as ort` runs code written for ONNX Runtime's Python API: InferenceSession,
SessionOptions, RunOptions, OrtValue, IOBinding and ONNX Runtime's exception classes (in
`onyx.capi.onnxruntime_pybind11_state`). Providers: `CPUExecutionProvider`, and
`WgpuExecutionProvider` (any GPU through Vulkan, Metal or DX12), which also answers to
`DmlExecutionProvider` and `WebGpuExecutionProvider`.
"""

from onyx import _onyx
from onyx._binding import IOBinding
from onyx._onyx import OrtValue
from onyx._options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from onyx._session import InferenceSession, ModelMetadata, NodeArg, get_available_providers
from onyx import capi  # noqa: F401
from onyx.capi import onnxruntime_pybind11_state  # noqa: F401

__version__ = _onyx.__version__
version = __version__
package_name = "onyx"

__all__ = [
    "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode",
    "ExecutionOrder", "OrtValue", "IOBinding", "NodeArg", "ModelMetadata", "get_available_providers",
    "get_all_providers", "get_device", "get_version_string", "__version__",
]


def get_all_providers():
    """Every provider name Onyx knows (all are compiled into this build)."""
    return get_available_providers()


def get_device():
    """'GPU' when a wgpu adapter can be used, else 'CPU' (ONNX Runtime's build device)."""
    return "GPU" if "WgpuExecutionProvider" in get_available_providers() else "CPU"


def get_version_string():
    """Onyx's version."""
    return __version__


def set_default_logger_severity(severity):
    """Kept for ONNX Runtime compatibility: Onyx reports through exceptions, not a log."""


def set_seed(seed):
    """Kept for ONNX Runtime compatibility: Onyx's kernels draw no random numbers."""
