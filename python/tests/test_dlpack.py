"""DLPack on the CPU: OrtValue.__dlpack__/__dlpack_device__ and OrtValue.from_dlpack, with numpy
(and torch where it is installed), compared between onnxruntime and onyx: the same values, and
memory shared, not copied."""

import numpy as np
import pytest

import model_builders as mb
from conftest import AGAINST_ITSELF
from diffutil import rand

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "uint64", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_export_shares_the_numpy_arrays_memory(ort, onyx, rng, dtype):
    x = rand(rng, dtype, (3, 5))
    for mod in (ort, onyx):
        v = mod.OrtValue.ortvalue_from_numpy(x)
        assert v.__dlpack_device__() == (1, 0)
        y = np.from_dlpack(v)
        assert y.dtype == x.dtype and y.shape == x.shape
        np.testing.assert_array_equal(y, x)
        assert np.shares_memory(x, y), mod.__name__


@pytest.mark.parametrize("dtype", DTYPES)
def test_import_shares_the_producers_memory(ort, onyx, rng, dtype):
    x = rand(rng, dtype, (4, 3))
    got = []
    for mod in (ort, onyx):
        v = mod.OrtValue.from_dlpack(x)
        assert v.data_ptr() == x.ctypes.data, mod.__name__
        got.append((v.numpy(), v.data_type(), v.shape()))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    assert got[1][1:] == got[0][1:]


def test_an_ortvalue_goes_through_dlpack_and_back_into_a_run(ort, onyx, sessions, rng):
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = rand(rng, "float32", (4, 7)), rand(rng, "float32", (4, 7))
    results = []
    for mod, sess in ((ort, ref), (onyx, got)):
        # A producer's tensor in, a run, the output out through DLPack.
        va = mod.OrtValue.from_dlpack(mod.OrtValue.ortvalue_from_numpy(a))
        (c,) = sess.run_with_ort_values(["c"], {"a": va, "b": mod.OrtValue.ortvalue_from_numpy(b)})
        first, second = np.from_dlpack(c), np.from_dlpack(c)
        assert np.shares_memory(first, second), "the output is exported where it lives"
        results.append(first.copy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)
    np.testing.assert_allclose(results[1], a + b, rtol=1e-6)


def test_a_bare_capsule_is_imported(ort, onyx, rng):
    x = rand(rng, "float32", (2, 6))
    for mod in (ort, onyx):
        capsule = mod.OrtValue.ortvalue_from_numpy(x).__dlpack__()
        v = mod.OrtValue.from_dlpack(capsule)
        assert v.data_ptr() == x.ctypes.data, mod.__name__
        np.testing.assert_array_equal(v.numpy(), x)


def test_torch_on_the_cpu(ort, onyx, rng):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for mod in (ort, onyx):
        v = mod.OrtValue.from_dlpack(t)
        assert v.data_ptr() == t.data_ptr(), mod.__name__
        back = torch.from_dlpack(v)
        assert back.data_ptr() == t.data_ptr()
        assert torch.equal(back, t)


@pytest.mark.skipif(AGAINST_ITSELF, reason="onyx's own messages")
def test_what_dlpack_cannot_carry_is_an_error(onyx):
    strings = onyx.OrtValue.ortvalue_from_shape_and_type([2], 8)  # ONNX's string type
    with pytest.raises(RuntimeError, match="no string type"):
        strings.__dlpack__()
    try:
        gpu = onyx.OrtValue.ortvalue_from_numpy(np.ones(3, np.float32), "wgpu")
    except Exception:
        pytest.skip("no wgpu adapter")
    with pytest.raises(RuntimeError, match="copy it to the CPU first"):
        np.from_dlpack(gpu)
