"""InferenceSession.run over ops and dtypes, input layouts, Python inputs,
strings, scalars and empty tensors: onyx's outputs must equal onnxruntime's
(list of numpy arrays with the same dtype, shape and values)."""

import numpy as np
import pytest

import model_builders as mb
from conftest import AGAINST_ITSELF
from diffutil import ALL_DTYPES, NUMERIC_DTYPES, assert_same, rand, run_both

# dtypes ORT's CPU EP implements, per op (probed on onnxruntime 1.32)
MATMUL_DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint32", "uint64"]
RELU_DTYPES = ["float32", "float64", "float16", "int8", "int32"]


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op", ["Add", "Mul", "Sub"])
def test_binary_op(sessions, rng, op, dtype):
    """Elementwise Add/Mul/Sub; run(None, feed) and run(['c'], feed)."""
    ref, got = sessions(mb.binary(op, dtype))
    feed = {"a": rand(rng, dtype, (5, 7)), "b": rand(rng, dtype, (5, 7))}
    r, _ = run_both(ref, got, None, feed)
    assert type(r) is list and len(r) == 1
    run_both(ref, got, ["c"], feed)


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_broadcast_add(sessions, rng, dtype):
    """Add of [batch, 7] and [7] broadcasts."""
    ref, got = sessions(mb.broadcast_add(dtype))
    run_both(ref, got, None, {"a": rand(rng, dtype, (3, 7)), "b": rand(rng, dtype, (7,))})


@pytest.mark.parametrize("dtype", MATMUL_DTYPES)
def test_matmul(sessions, rng, dtype):
    """MatMul x[batch, 13] @ W[13, 11] (W an initializer)."""
    ref, got = sessions(mb.matmul(dtype))
    run_both(ref, got, None, {"x": rand(rng, dtype, (6, 13))})


@pytest.mark.parametrize("shape_a,shape_b", [((3, 5), (5, 4)), ((1, 1), (1, 1)),
                                             ((0, 5), (5, 4)), ((3, 0), (0, 4)),
                                             ((9, 17), (17, 1))])
def test_matmul_shapes(sessions, rng, shape_a, shape_b):
    """MatMul with both operands fed, including zero-sized dims (k=0 gives zeros)."""
    ref, got = sessions(mb.matmul_two_inputs())
    run_both(ref, got, None, {"a": rand(rng, "float32", shape_a),
                              "b": rand(rng, "float32", shape_b)})


@pytest.mark.parametrize("dtype", RELU_DTYPES)
def test_relu(sessions, rng, dtype):
    """Relu, negative inputs included."""
    ref, got = sessions(mb.unary("Relu", dtype))
    run_both(ref, got, None, {"x": rand(rng, dtype, (4, 7))})


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_identity(sessions, rng, dtype):
    """Identity passes every dtype through, bool included."""
    ref, got = sessions(mb.identity(dtype, ("n", 3)))
    run_both(ref, got, None, {"x": rand(rng, dtype, (5, 3))})


def _cast_input(rng, src, dst):
    """Values that every target type represents: no negatives where either side
    is unsigned or bool, fractions for floats, zeros included (for bool)."""
    unsigned = np.dtype(src).kind in "ub" or np.dtype(dst).kind in "ub"
    if src == "bool":
        return rand(rng, "bool", (4, 5))
    low = 0 if unsigned else -100
    if np.dtype(src).kind == "f":
        x = rng.uniform(low, 100, size=(4, 5)).astype(src)
    else:
        x = rng.integers(low, 100, size=(4, 5)).astype(src)
    x.flat[0], x.flat[1] = 0, 1
    return x


@pytest.mark.parametrize("dst", ALL_DTYPES)
@pytest.mark.parametrize("src", ALL_DTYPES)
def test_cast(sessions, rng, src, dst):
    """Cast between every pair of numeric and bool dtypes."""
    ref, got = sessions(mb.cast(src, dst))
    run_both(ref, got, None, {"x": _cast_input(rng, src, dst)})


@pytest.mark.parametrize("opset,ir", mb.OPSET_IR)
def test_opset_and_ir_versions(sessions, rng, opset, ir):
    """The same graphs saved with opset 17/19/21 and ir_version 8/9/10."""
    ref, got = sessions(mb.mlp(opset=opset, ir=ir))
    run_both(ref, got, None, {"x": rand(rng, "float32", (3, 13))})
    ref, got = sessions(mb.cast("float32", "int32", opset=opset, ir=ir))
    run_both(ref, got, None, {"x": _cast_input(rng, "float32", "int32")})


def test_cast_int_to_string(sessions):
    """Cast int32 -> string gives an object array of str ('-20', ...)."""
    ref, got = sessions(mb.cast("int32", "string", shape=("n",)))
    run_both(ref, got, None, {"x": np.array([1, -20, 300, 0, 7], np.int32)})


def test_cast_string_to_float(sessions):
    """Cast string -> float32 parses decimal and exponent forms."""
    ref, got = sessions(mb.cast("string", "float32", shape=("n",)))
    run_both(ref, got, None, {"x": np.array(["1.5", "-2", "1e3", "0", "0.25"])})


def test_output_selection_and_order(sessions, rng):
    """run([names]) returns exactly the requested outputs, in the requested order,
    repeated names included."""
    ref, got = sessions(mb.add_mul_two_outputs())
    feed = {"a": rand(rng, "float32", (3, 7)), "b": rand(rng, "float32", (3, 7))}
    for names in (None, ["sum", "prod"], ["prod", "sum"], ["prod"], ["sum", "sum"],
                  ("prod", "sum")):
        r, _ = run_both(ref, got, names, feed)
        assert len(r) == (2 if names is None else len(names))


def test_repeated_runs_different_batch(sessions, rng):
    """One session, runs with batch sizes 1, 5, 2, 5 (plans per shape)."""
    ref, got = sessions(mb.mlp())
    for batch in (1, 5, 2, 5):
        run_both(ref, got, None, {"x": rand(rng, "float32", (batch, 13))})


# ------------------------------------------------------------ layouts


def _layouts(rng):
    base = rand(rng, "float32", (7, 5))
    wide = rand(rng, "float32", (5, 21))
    return {
        "transposed": base.T,
        "step_slice": wide[:, ::3],
        "negative_strides": base.T[::-1, ::-1],
        "fortran": np.asfortranarray(rand(rng, "float32", (5, 7))),
        "broadcast_view": np.broadcast_to(rand(rng, "float32", (1, 7)), (5, 7)),
        "readonly": _readonly(rand(rng, "float32", (5, 7))),
        "big_endian": rand(rng, "float32", (5, 7)).astype(">f4"),
    }


def _readonly(x):
    x.flags.writeable = False
    return x


# onnxruntime 1.32 reinterprets the bytes of a non-native byte order array as
# native order (a '>f4' 1.0 reads as 4.6e-41). onyx must convert instead, so
# these cases compare with ORT fed the native-order copy; against ORT itself
# they are expected to fail.
ORT_MISREADS_BYTE_ORDER = pytest.mark.xfail(
    AGAINST_ITSELF, reason="onnxruntime misreads non-native byte order", strict=False)

LAYOUTS = ["transposed", "step_slice", "negative_strides", "fortran", "broadcast_view",
           "readonly", pytest.param("big_endian", marks=ORT_MISREADS_BYTE_ORDER)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_input_layouts(sessions, rng, layout):
    """Non-contiguous, Fortran-ordered, broadcast (stride 0), read-only and
    non-native byte order inputs give the values of the equal C-contiguous array.

    ORT 1.32 misreads '>f4' arrays (it reinterprets the bytes as native order), so
    for big_endian the reference run is fed the native-order copy; for all other
    layouts ORT's result on the layout itself is checked to equal that too."""
    x = _layouts(rng)[layout]
    b = rand(rng, "float32", (5, 7))
    native = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    ref, got = sessions(mb.binary("Add", "float32"))
    if layout != "big_endian":
        assert_same(ref.run(None, {"a": native, "b": b}), ref.run(None, {"a": x, "b": b}))
    run_both(ref, got, None, {"a": x, "b": b}, ref_feed={"a": native, "b": b})


@ORT_MISREADS_BYTE_ORDER
@pytest.mark.parametrize("dtype", ["float64", "int64", "int32", "int16", "uint16"])
def test_big_endian_other_dtypes(sessions, rng, dtype):
    """Non-native byte order of other widths (Identity), compared by value."""
    x = rand(rng, dtype, (5, 3))
    swapped = x.astype(x.dtype.newbyteorder(">"))
    ref, got = sessions(mb.identity(dtype, ("n", 3)))
    run_both(ref, got, None, {"x": swapped}, ref_feed={"x": x})


# ------------------------------------------------------------ Python inputs


@pytest.mark.parametrize("dtype,value", [
    ("float32", [[1.5, -2.0, 3.25, 0.5, 1.0, 2.0, 4.0]]),
    ("float32", [[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]]),
    ("float64", [[1.5, -2.0, 3.25, 0.5, 1.0, 2.0, 4.0]]),
    ("int64", [[1, -2, 3, 4, 5, 6, 7]]),
    ("int32", [[1, -2, 3, 4, 5, 6, 7]]),
], ids=["float_list", "int_list_to_float", "float_list_to_double", "int64_list",
        "int32_list"])
def test_python_list_inputs(sessions, dtype, value):
    """Nested Python lists are converted to the input's element type."""
    ref, got = sessions(mb.binary("Add", dtype))
    run_both(ref, got, None, {"a": value, "b": value})


def test_python_bool_list_input(sessions):
    """A list of Python bools feeds a bool input."""
    ref, got = sessions(mb.identity("bool"))
    run_both(ref, got, None, {"x": [True, False, True, True]})


# ------------------------------------------------------------ strings


STRING_CASES = {
    "ascii": np.array(["a", "hello", "x y z"]),
    "non_ascii": np.array(["héllo", "日本語", "ß", "emoji 🦀", ""]),
    "object_array": np.array(["abc", "Ünïcödé", ""], dtype=object),
    "python_list": ["one", "двa", "три"],
    "single": np.array(["only"]),
    "empty": np.array([], dtype=str),
}


@pytest.mark.parametrize("case", list(STRING_CASES))
def test_string_identity(sessions, case):
    """String tensors in and out: object arrays of str, non-ASCII preserved."""
    ref, got = sessions(mb.identity("string"))
    r, g = run_both(ref, got, None, {"x": STRING_CASES[case]})
    assert r[0].dtype == object


def test_string_2d(sessions):
    """A 2-D string tensor keeps its shape."""
    ref, got = sessions(mb.identity("string", ("n", 2)))
    run_both(ref, got, None, {"x": np.array([["a", "ü"], ["", "long string " * 20]])})


# ------------------------------------------------------------ scalars, empties


def test_scalar_inputs_and_outputs(sessions):
    """0-d arrays in, a 0-d ndarray out (not a numpy scalar)."""
    ref, got = sessions(mb.scalar_add())
    r, g = run_both(ref, got, None, {"a": np.array(1.5, np.float32),
                                     "b": np.array(-0.25, np.float32)})
    assert type(r[0]) is np.ndarray and r[0].shape == ()


@pytest.mark.parametrize("shape", [(0, 7), (3, 0)], ids=["zero_batch", "zero_inner"])
def test_empty_tensors(sessions, shape):
    """Tensors with a zero dim flow through Add and keep their shape."""
    ref, got = sessions(mb.binary("Add", "float32", shape=("batch", "k")))
    x = np.zeros(shape, np.float32)
    run_both(ref, got, None, {"a": x, "b": x})


def test_empty_string_tensor(sessions):
    """A zero-length string tensor."""
    ref, got = sessions(mb.identity("string"))
    r, _ = run_both(ref, got, None, {"x": np.array([], dtype=object)})
    assert r[0].shape == (0,)


def test_run_with_run_options(ort, onyx, sessions, rng):
    """run(names, feed, RunOptions()) positionally and by keyword."""
    ref, got = sessions(mb.binary("Add", "float32"))
    feed = {"a": rand(rng, "float32", (2, 7)), "b": rand(rng, "float32", (2, 7))}
    r = ref.run(None, feed, ort.RunOptions())
    g = got.run(None, feed, onyx.RunOptions())
    assert_same(r, g)
    r = ref.run(None, feed, run_options=ort.RunOptions())
    g = got.run(None, feed, run_options=onyx.RunOptions())
    assert_same(r, g)
