"""Helpers shared by the differential tests: compare onnxruntime (the
reference) with onyx value by value, type by type, exception by exception."""

import numpy as np

#: (rtol, atol) per float dtype
TOLERANCES = {
    np.dtype(np.float16): (2e-3, 2e-3),
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-12),
}

NUMERIC_DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "uint16",
                  "int32", "int64", "uint32", "uint64"]
ALL_DTYPES = NUMERIC_DTYPES + ["bool"]


def rand(rng, dtype, shape, low=None, high=None):
    """Seeded random data of a dtype, never all zeros; small magnitudes so that
    integer Add/Mul/MatMul do not overflow."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        out = rng.integers(0, 2, size=shape).astype(bool)
        if out.size:
            out.flat[0] = True
        return out
    if dtype.kind == "f":
        lo = -3.0 if low is None else low
        hi = 3.0 if high is None else high
        out = rng.uniform(lo, hi, size=shape).astype(dtype)
    else:
        lo = (0 if dtype.kind == "u" else -9) if low is None else low
        hi = 10 if high is None else high
        out = rng.integers(lo, hi, size=shape).astype(dtype)
    if out.size:
        out.flat[0] = 1
    return out


# ---------------------------------------------------------------- values


def assert_same(ref, got, where="output", rtol=None, atol=None):
    """Assert that onyx's ``got`` equals onnxruntime's ``ref``: same Python
    type, and for arrays the same dtype, shape, contiguity and values
    (allclose for floats, exact otherwise). Recurses into lists and dicts;
    ``None`` (an empty optional) must stay ``None``."""
    if ref is None:
        assert got is None, f"{where}: expected None (as onnxruntime), got {type(got)}"
        return
    assert type(got) is type(ref), \
        f"{where}: Python type {type(got)!r} != onnxruntime's {type(ref)!r}"
    if isinstance(ref, (list, tuple)):
        assert len(got) == len(ref), f"{where}: length {len(got)} != {len(ref)}"
        for i, (r, g) in enumerate(zip(ref, got)):
            assert_same(r, g, f"{where}[{i}]", rtol, atol)
    elif isinstance(ref, dict):
        assert set(got) == set(ref), f"{where}: keys {sorted(got)} != {sorted(ref)}"
        for k in ref:
            assert_same(ref[k], got[k], f"{where}[{k!r}]", rtol, atol)
    elif isinstance(ref, np.ndarray):
        assert_same_array(ref, got, where, rtol, atol)
    else:
        assert got == ref, f"{where}: {got!r} != {ref!r}"


def assert_same_array(ref, got, where="array", rtol=None, atol=None):
    """dtype, shape, C-contiguity, writeability and values of two arrays."""
    assert isinstance(got, np.ndarray), f"{where}: not an ndarray but {type(got)!r}"
    assert got.dtype == ref.dtype, f"{where}: dtype {got.dtype} != {ref.dtype}"
    assert got.shape == ref.shape, f"{where}: shape {got.shape} != {ref.shape}"
    assert got.flags.c_contiguous == ref.flags.c_contiguous, f"{where}: C-contiguity differs"
    assert got.flags.writeable == ref.flags.writeable, f"{where}: writeable flag differs"
    if ref.dtype.kind == "f":
        r_tol, a_tol = TOLERANCES[ref.dtype]
        np.testing.assert_allclose(got, ref, rtol=rtol if rtol is not None else r_tol,
                                   atol=atol if atol is not None else a_tol,
                                   err_msg=where)
    elif ref.dtype == object:
        assert got.tolist() == ref.tolist(), f"{where}: {got!r} != {ref!r}"
        assert [type(x) for x in got.flat] == [type(x) for x in ref.flat], \
            f"{where}: element types differ"
    else:
        np.testing.assert_array_equal(got, ref, err_msg=where)


def nodeargs(args):
    """NodeArgs as comparable tuples, with the Python types of shape entries."""
    return [(a.name, a.type, a.shape, type(a.shape).__name__,
             [type(d).__name__ for d in a.shape] if isinstance(a.shape, list) else None)
            for a in args]


def snapshot(feed):
    """Deep value copy of a feed, to check that a run does not write its inputs."""
    out = {}
    for k, v in feed.items():
        if isinstance(v, np.ndarray):
            out[k] = v.copy()
        elif isinstance(v, list):
            out[k] = [x.copy() if isinstance(x, np.ndarray) else x for x in v]
        else:
            out[k] = v
    return out


def run_both(ref_sess, got_sess, output_names, feed, ref_feed=None, **kw):
    """Run the same feed through both sessions, compare, return (ref, got).
    ``ref_feed`` (optional) is fed to onnxruntime instead, where ORT needs a
    differently laid out but equal-valued input."""
    before = snapshot(feed)
    ref = ref_sess.run(output_names, feed if ref_feed is None else ref_feed, **kw)
    got = got_sess.run(output_names, feed, **kw)
    assert_same(ref, got, "run() result")
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(feed[k], v, err_msg=f"onyx modified input {k!r}")
    return ref, got


# ---------------------------------------------------------------- exceptions


def builtin_base(cls):
    """The first class in cls's MRO that lives in builtins (Exception,
    ValueError, ...)."""
    for c in cls.__mro__:
        if c.__module__ == "builtins":
            return c
    return BaseException


def _module_tail(mod):
    return mod.split(".", 1)[1] if "." in mod else mod


def check_same_exception(ref_exc, got_exc):
    """onyx's exception must match onnxruntime's: for a builtin the very same
    class; for ORT's own classes (onnxruntime.capi.onnxruntime_pybind11_state.X)
    the same name in <pkg>.capi.onnxruntime_pybind11_state, subclassing the same
    builtin base. onyx's message must not be empty."""
    rc, gc = type(ref_exc), type(got_exc)
    detail = (f"onnxruntime raised {rc.__module__}.{rc.__qualname__}: {ref_exc}\n"
              f"onyx raised {gc.__module__}.{gc.__qualname__}: {got_exc}")
    if rc.__module__ == "builtins":
        assert gc is rc, "exception class differs (must be the same builtin)\n" + detail
    else:
        assert gc.__name__ == rc.__name__, "exception class name differs\n" + detail
        assert _module_tail(gc.__module__) == _module_tail(rc.__module__), \
            "exception module differs\n" + detail
        base = builtin_base(rc)
        assert issubclass(gc, base), f"onyx's class is no {base.__name__}\n" + detail
    assert str(got_exc).strip(), "onyx's exception message is empty\n" + detail


def raises_same(ort_call, onyx_call, expected=None):
    """Call both; both must raise, with the same exception class (see
    check_same_exception). ``expected`` (a class name), when given, documents
    and checks what onnxruntime raises. Returns (ort_exc, onyx_exc)."""
    try:
        ort_call()
    except Exception as e:  # noqa: BLE001 - any class is data here
        ref = e
    else:
        raise AssertionError("reference onnxruntime did not raise: the test is wrong")
    if expected is not None:
        assert type(ref).__name__ == expected, \
            f"reference onnxruntime raised {type(ref).__name__} ({ref}), not {expected}"
    try:
        onyx_call()
    except Exception as e:  # noqa: BLE001
        got = e
    else:
        raise AssertionError(
            f"onyx did not raise; onnxruntime raised {type(ref).__name__}: {ref}")
    check_same_exception(ref, got)
    return ref, got
