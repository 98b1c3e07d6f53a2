"""OrtValue, run_with_ort_values and IO binding on the CPU, compared between
onnxruntime and onyx."""

import numpy as np
import pytest

import model_builders as mb
from diffutil import ALL_DTYPES, assert_same, assert_same_array, raises_same, rand

# ------------------------------------------------------------ OrtValue


def _describe(v):
    """Everything an OrtValue tells about itself, as comparable data."""
    return {
        "shape": v.shape(),
        "shape_types": [type(d).__name__ for d in v.shape()],
        "data_type": v.data_type(),
        "element_type": v.element_type(),
        "element_type_type": type(v.element_type()).__name__,
        "device_name": v.device_name().lower(),
        "is_tensor": v.is_tensor(),
        "has_value": v.has_value(),
        "is_tensor_sequence": v.is_tensor_sequence(),
        "tensor_size_in_bytes": v.tensor_size_in_bytes(),
    }


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_ortvalue_from_numpy(ort, onyx, rng, dtype):
    """ortvalue_from_numpy(x): numpy() equals x; shape() is a list of int,
    data_type() 'tensor(...)', element_type() the ONNX element type as ORT gives
    it (an int such as 1 for float on ORT 1.32), device_name() 'cpu'
    (case-insensitively), is_tensor(), has_value()."""
    x = rand(rng, dtype, (3, 5))
    r = ort.OrtValue.ortvalue_from_numpy(x)
    g = onyx.OrtValue.ortvalue_from_numpy(x)
    assert type(g).__name__ == "OrtValue"
    assert _describe(g) == _describe(r)
    assert_same_array(r.numpy(), g.numpy(), "numpy()")
    np.testing.assert_array_equal(g.numpy(), x)


@pytest.mark.parametrize("shape", [(), (0, 4), (1,), (2, 3, 4)])
def test_ortvalue_shapes(ort, onyx, rng, shape):
    """0-d, empty and 3-D OrtValues report the same shape and round trip."""
    x = rand(rng, "float32", shape)
    r, g = ort.OrtValue.ortvalue_from_numpy(x), onyx.OrtValue.ortvalue_from_numpy(x)
    assert _describe(g) == _describe(r)
    assert_same_array(r.numpy(), g.numpy())


def test_ortvalue_from_non_contiguous(ort, onyx, rng):
    """A transposed array round-trips by value."""
    x = rand(rng, "float32", (4, 6)).T
    r, g = ort.OrtValue.ortvalue_from_numpy(x), onyx.OrtValue.ortvalue_from_numpy(x)
    assert _describe(g) == _describe(r)
    assert_same_array(r.numpy(), g.numpy())


def test_ortvalue_explicit_cpu_device(ort, onyx, rng):
    """ortvalue_from_numpy(x, 'cpu', 0) is a CPU value."""
    x = rand(rng, "float32", (2, 2))
    r, g = ort.OrtValue.ortvalue_from_numpy(x, "cpu", 0), onyx.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
    assert g.device_name().lower() == r.device_name().lower() == "cpu"
    assert_same_array(r.numpy(), g.numpy())


SHAPE_AND_TYPE_ELEMENTS = {"float32": np.float32, "int64": np.int64,
                           "float16": np.float16, "bool": np.bool_, "uint8": np.uint8,
                           "dtype_object": np.dtype("float32")}


@pytest.mark.parametrize("element_type", list(SHAPE_AND_TYPE_ELEMENTS))
@pytest.mark.parametrize("shape", [[2, 3], (4,), [0, 5]])
def test_ortvalue_from_shape_and_type(ort, onyx, element_type, shape):
    """ortvalue_from_shape_and_type(shape, numpy type): shape, types, numpy()
    dtype and shape (values are uninitialized and not compared)."""
    et = SHAPE_AND_TYPE_ELEMENTS[element_type]
    r = ort.OrtValue.ortvalue_from_shape_and_type(shape, et)
    g = onyx.OrtValue.ortvalue_from_shape_and_type(shape, et)
    assert _describe(g) == _describe(r)
    assert g.numpy().dtype == r.numpy().dtype and g.numpy().shape == r.numpy().shape


# ------------------------------------------------------------ run_with_ort_values


def test_run_with_ort_values(ort, onyx, sessions, rng):
    """run_with_ort_values(None / [names], {name: OrtValue}) returns a list of
    OrtValues whose numpy() equal ORT's."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = rand(rng, "float32", (3, 7)), rand(rng, "float32", (3, 7))
    for names in (None, ["c"]):
        r = ref.run_with_ort_values(names, {"a": ort.OrtValue.ortvalue_from_numpy(a),
                                            "b": ort.OrtValue.ortvalue_from_numpy(b)})
        g = got.run_with_ort_values(names, {"a": onyx.OrtValue.ortvalue_from_numpy(a),
                                            "b": onyx.OrtValue.ortvalue_from_numpy(b)})
        assert type(g) is type(r) is list and len(g) == len(r) == 1
        assert type(g[0]).__name__ == "OrtValue"
        assert _describe(g[0]) == _describe(r[0])
        assert_same_array(r[0].numpy(), g[0].numpy())


def test_run_with_ort_values_sequence_output(ort, onyx, sessions, rng):
    """A seq output of run_with_ort_values is an OrtValue that is a tensor
    sequence (is_tensor False, data_type 'seq(tensor(float))')."""
    ref, got = sessions(mb.seq_construct())
    a, b = rand(rng, "float32", (2, 3)), rand(rng, "float32", (4, 3))
    r = ref.run_with_ort_values(None, {"a": ort.OrtValue.ortvalue_from_numpy(a),
                                       "b": ort.OrtValue.ortvalue_from_numpy(b)})[0]
    g = got.run_with_ort_values(None, {"a": onyx.OrtValue.ortvalue_from_numpy(a),
                                       "b": onyx.OrtValue.ortvalue_from_numpy(b)})[0]
    for m in ("is_tensor", "is_tensor_sequence", "has_value", "data_type"):
        assert getattr(g, m)() == getattr(r, m)(), m


def test_run_accepts_ortvalue_in_feed(ort, onyx, sessions, rng):
    """run() accepts an OrtValue as a feed value next to numpy arrays."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = rand(rng, "float32", (3, 7)), rand(rng, "float32", (3, 7))
    r = ref.run(None, {"a": ort.OrtValue.ortvalue_from_numpy(a), "b": b})
    g = got.run(None, {"a": onyx.OrtValue.ortvalue_from_numpy(a), "b": b})
    assert_same(r, g)


# ------------------------------------------------------------ IO binding


def _feed(rng):
    return rand(rng, "float32", (4, 7)), rand(rng, "float32", (4, 7))


def test_iobinding_bind_cpu_input_and_output(sessions, rng):
    """bind_cpu_input + bind_output(name) -> run_with_iobinding ->
    copy_outputs_to_cpu() (list of arrays) and get_outputs() (OrtValues)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    res = []
    for sess in (ref, got):
        io = sess.io_binding()
        assert type(io).__name__ == "IOBinding"
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("c")
        assert sess.run_with_iobinding(io) is None
        outs = io.get_outputs()
        res.append((io.copy_outputs_to_cpu(), [o.numpy() for o in outs],
                    [_describe(o) for o in outs], type(outs).__name__))
    (rc, rn, rd, rt), (gc, gn, gd, gt) = res
    assert_same(rc, gc, "copy_outputs_to_cpu()")
    assert_same(rn, gn, "get_outputs() numpy")
    assert gd == rd and gt == rt


def test_iobinding_bind_output_to_cpu_device(sessions, rng):
    """bind_output(name, 'cpu') works as bind_output(name)."""
    ref, got = sessions(mb.binary("Mul", "float32"))
    a, b = _feed(rng)
    res = []
    for sess in (ref, got):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("c", "cpu")
        sess.run_with_iobinding(io)
        res.append(io.copy_outputs_to_cpu())
    assert_same(*res)


def test_iobinding_ortvalue_input_and_preallocated_output(ort, onyx, sessions, rng):
    """bind_ortvalue_input, and bind_ortvalue_output with a preallocated
    OrtValue (ortvalue_from_shape_and_type), which then holds the result."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    res = []
    for mod, sess in ((ort, ref), (onyx, got)):
        out = mod.OrtValue.ortvalue_from_shape_and_type([4, 7], np.float32)
        io = sess.io_binding()
        io.bind_ortvalue_input("a", mod.OrtValue.ortvalue_from_numpy(a))
        io.bind_ortvalue_input("b", mod.OrtValue.ortvalue_from_numpy(b))
        io.bind_ortvalue_output("c", out)
        io.synchronize_inputs()
        sess.run_with_iobinding(io)
        io.synchronize_outputs()
        res.append((out.numpy(), io.get_outputs()[0].numpy(), io.copy_outputs_to_cpu()))
    assert_same(res[0], res[1])
    np.testing.assert_allclose(res[1][0], a + b, rtol=1e-6)


def test_iobinding_output_into_an_ortvalue_of_a_numpy_array(ort, onyx, sessions, rng):
    """An output bound into an OrtValue made from a numpy array is written into that array,
    run after run (ONNX Runtime's OrtValue shares the array's memory)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    res = []
    for mod, sess in ((ort, ref), (onyx, got)):
        target = np.zeros((4, 7), np.float32)
        io = sess.io_binding()
        out = mod.OrtValue.ortvalue_from_numpy(target)
        io.bind_ortvalue_output("c", out)
        seen = []
        for _ in range(2):
            a, b = _feed(rng)
            io.bind_cpu_input("a", a)
            io.bind_cpu_input("b", b)
            sess.run_with_iobinding(io)
            seen.append((target.copy(), a + b, out.numpy().copy()))
        res.append(seen)
    for (target, want, held) in res[1]:
        np.testing.assert_allclose(target, want, rtol=1e-6)
        np.testing.assert_array_equal(held, target)
    for (t0, _, _), (t1, _, _) in zip(res[0], res[1]):
        assert t0.shape == t1.shape and t0.dtype == t1.dtype


def test_iobinding_rebind_and_rerun(sessions, rng):
    """Rebinding an input (same shape) and rerunning updates the outputs."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    a2 = rand(rng, "float32", (4, 7))
    res = []
    for sess in (ref, got):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("c")
        sess.run_with_iobinding(io)
        first = io.copy_outputs_to_cpu()
        io.bind_cpu_input("a", a2)
        sess.run_with_iobinding(io)
        res.append((first, io.copy_outputs_to_cpu()))
    assert_same(*res)


def test_iobinding_run_options(ort, onyx, sessions, rng):
    """run_with_iobinding(io, RunOptions()) works."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    res = []
    for mod, sess in ((ort, ref), (onyx, got)):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("c")
        sess.run_with_iobinding(io, mod.RunOptions())
        res.append(io.copy_outputs_to_cpu())
    assert_same(*res)


def test_iobinding_raw_pointers(sessions, rng):
    """bind_input/bind_output with device 'cpu', element type, shape and a raw
    buffer pointer: the output lands in the caller's buffer."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    res = []
    for sess in (ref, got):
        out = np.zeros((4, 7), np.float32)
        io = sess.io_binding()
        io.bind_input("a", "cpu", 0, np.float32, list(a.shape), a.ctypes.data)
        io.bind_input("b", "cpu", 0, np.float32, list(b.shape), b.ctypes.data)
        io.bind_output("c", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
        sess.run_with_iobinding(io)
        res.append(out)
    assert_same(*res)
    np.testing.assert_allclose(res[1], a + b, rtol=1e-6)


def test_iobinding_clear_outputs(sessions, rng):
    """After clear_binding_outputs a run requests no output: same class raised
    (ORT: RuntimeError)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    ios = []
    for sess in (ref, got):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("c")
        sess.run_with_iobinding(io)
        io.clear_binding_outputs()
        ios.append(io)
    raises_same(lambda: ref.run_with_iobinding(ios[0]),
                lambda: got.run_with_iobinding(ios[1]), expected="RuntimeError")


def test_iobinding_clear_inputs(sessions, rng):
    """After clear_binding_inputs an input is missing: same class raised
    (ORT: RuntimeError); rebinding makes it run again."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    ios = []
    for sess in (ref, got):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("c")
        io.clear_binding_inputs()
        ios.append(io)
    raises_same(lambda: ref.run_with_iobinding(ios[0]),
                lambda: got.run_with_iobinding(ios[1]), expected="RuntimeError")
    res = []
    for sess, io in zip((ref, got), ios):
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        sess.run_with_iobinding(io)
        res.append(io.copy_outputs_to_cpu())
    assert_same(*res)


def test_iobinding_unknown_input_name(sessions, rng):
    """bind_cpu_input of a name the model lacks raises at bind time
    (ORT: RuntimeError)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, _ = _feed(rng)
    rio, gio = ref.io_binding(), got.io_binding()
    raises_same(lambda: rio.bind_cpu_input("zz", a), lambda: gio.bind_cpu_input("zz", a),
                expected="RuntimeError")


def test_iobinding_unknown_output_name(sessions, rng):
    """bind_output of an unknown name fails at run time (ORT: RuntimeError)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    ios = []
    for sess in (ref, got):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_output("zz")
        ios.append(io)
    raises_same(lambda: ref.run_with_iobinding(ios[0]),
                lambda: got.run_with_iobinding(ios[1]), expected="RuntimeError")


def test_iobinding_wrong_dtype(sessions, rng):
    """A float64 array bound to a float input fails at run time
    (ORT: RuntimeError, not InvalidArgument as in run())."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    ios = []
    for sess in (ref, got):
        io = sess.io_binding()
        io.bind_cpu_input("a", a.astype(np.float64))
        io.bind_cpu_input("b", b)
        io.bind_output("c")
        ios.append(io)
    raises_same(lambda: ref.run_with_iobinding(ios[0]),
                lambda: got.run_with_iobinding(ios[1]), expected="RuntimeError")


def test_iobinding_wrong_preallocated_shape(ort, onyx, sessions, rng):
    """A preallocated output of the wrong shape fails the run (ORT: RuntimeError)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    a, b = _feed(rng)
    ios = []
    for mod, sess in ((ort, ref), (onyx, got)):
        io = sess.io_binding()
        io.bind_cpu_input("a", a)
        io.bind_cpu_input("b", b)
        io.bind_ortvalue_output("c", mod.OrtValue.ortvalue_from_shape_and_type([3, 3],
                                                                               np.float32))
        ios.append(io)
    raises_same(lambda: ref.run_with_iobinding(ios[0]),
                lambda: got.run_with_iobinding(ios[1]), expected="RuntimeError")
