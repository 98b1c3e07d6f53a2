"""onyx-only GPU providers (onnxruntime has neither): WgpuExecutionProvider and
DmlExecutionProvider sessions, compared with onnxruntime's CPU outputs, and a
wgpu OrtValue round trip. Skipped with ONYX_TEST_AGAINST_ITSELF=1.

Without a usable GPU adapter a provider may fall back to the CPU (as ORT does
with a provider it cannot create); set ONYX_TEST_REQUIRE_GPU=1 to demand that
the requested provider is the one used."""

import os

import numpy as np
import pytest

import model_builders as mb
from conftest import AGAINST_ITSELF, CPU
from diffutil import assert_same, nodeargs, rand

pytestmark = pytest.mark.skipif(AGAINST_ITSELF, reason="onnxruntime has no wgpu/dml EP")

REQUIRE_GPU = os.environ.get("ONYX_TEST_REQUIRE_GPU") == "1"
GPU_PROVIDERS = ["WgpuExecutionProvider", "DmlExecutionProvider"]
# GPU float tolerance: reductions may be ordered differently
RTOL, ATOL = 1e-4, 1e-5


def _gpu_session(onyx, path, provider):
    sess = onyx.InferenceSession(path, providers=[provider])
    used = sess.get_providers()
    assert type(used) is list and used and all(type(p) is str for p in used)
    if REQUIRE_GPU:
        assert used[0] == provider, f"asked for {provider}, got {used}"
    else:
        assert used[0] in (provider, "CPUExecutionProvider"), used
    return sess


@pytest.mark.parametrize("provider", GPU_PROVIDERS)
def test_gpu_provider_is_available(onyx, provider):
    """Both GPU providers are listed by onyx.get_available_providers()."""
    assert provider in onyx.get_available_providers()


@pytest.mark.parametrize("provider", GPU_PROVIDERS)
@pytest.mark.parametrize("model", ["add", "matmul", "mlp"])
def test_gpu_provider_matches_ort_cpu(ort, onyx, save_model, rng, provider, model):
    """Add / MatMul / the small MLP on a GPU provider equal ORT's CPU outputs."""
    proto, feed = {
        "add": (mb.binary("Add", "float32"),
                {"a": rand(rng, "float32", (5, 7)), "b": rand(rng, "float32", (5, 7))}),
        "matmul": (mb.matmul("float32"), {"x": rand(rng, "float32", (6, 13))}),
        "mlp": (mb.mlp(), {"x": rand(rng, "float32", (4, 13))}),
    }[model]
    path = save_model(proto)
    ref = ort.InferenceSession(path, providers=CPU)
    got = _gpu_session(onyx, path, provider)
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    for _ in range(2):  # a second run reuses the plan / device buffers
        assert_same(ref.run(None, feed), got.run(None, feed), f"{provider} {model}",
                    rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("provider", GPU_PROVIDERS)
def test_gpu_provider_with_cpu_fallback_listed(ort, onyx, save_model, rng, provider):
    """providers=[gpu, 'CPUExecutionProvider'] works and agrees with ORT's CPU."""
    path = save_model(mb.matmul("float32"))
    ref = ort.InferenceSession(path, providers=CPU)
    got = onyx.InferenceSession(path, providers=[provider, "CPUExecutionProvider"])
    assert "CPUExecutionProvider" in got.get_providers()
    x = rand(rng, "float32", (3, 13))
    assert_same(ref.run(None, {"x": x}), got.run(None, {"x": x}), rtol=RTOL, atol=ATOL)


def test_wgpu_ortvalue_round_trip(onyx, rng):
    """ortvalue_from_numpy(x, 'wgpu'): device_name() is 'wgpu' and numpy()
    brings the same values back."""
    x = rand(rng, "float32", (3, 5))
    try:
        v = onyx.OrtValue.ortvalue_from_numpy(x, "wgpu")
    except Exception as e:  # noqa: BLE001
        if REQUIRE_GPU:
            raise
        pytest.skip(f"no wgpu device here: {type(e).__name__}: {e}")
    assert v.device_name().lower() == "wgpu"
    assert v.shape() == [3, 5] and v.data_type() == "tensor(float)"
    out = v.numpy()
    assert type(out) is np.ndarray and out.dtype == np.float32
    np.testing.assert_array_equal(out, x)


def test_wgpu_iobinding_matches_ort_cpu(ort, onyx, save_model, rng):
    """IO binding on a wgpu session: CPU inputs bound, outputs copied back."""
    path = save_model(mb.binary("Add", "float32"))
    a, b = rand(rng, "float32", (4, 7)), rand(rng, "float32", (4, 7))
    ref = ort.InferenceSession(path, providers=CPU)
    got = _gpu_session(onyx, path, "WgpuExecutionProvider")
    io = got.io_binding()
    io.bind_cpu_input("a", a)
    io.bind_cpu_input("b", b)
    io.bind_output("c")
    got.run_with_iobinding(io)
    assert_same(ref.run(None, {"a": a, "b": b}), io.copy_outputs_to_cpu(),
                rtol=RTOL, atol=ATOL)
