"""Bad input: onyx must raise the same exception class as onnxruntime (same
builtin, or the same name in <pkg>.capi.onnxruntime_pybind11_state).

The `expected` column is what onnxruntime 1.32 raises; it is checked on the
reference too, so the table below documents ORT's behaviour."""

import importlib
import pathlib

import numpy as np
import pytest
from onnx import helper

import model_builders as mb
from conftest import CPU, known_gap
from diffutil import builtin_base, raises_same

ORT_EXCEPTIONS = ["Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError",
                  "RuntimeException", "InvalidProtobuf", "ModelLoaded", "NotImplemented",
                  "InvalidGraph", "EPFail"]


@pytest.fixture(scope="module")
def onyx_state(onyx):
    """onyx.capi.onnxruntime_pybind11_state (where the exception classes live)."""
    return importlib.import_module(onyx.__name__ + ".capi.onnxruntime_pybind11_state")


@pytest.mark.parametrize("name", ORT_EXCEPTIONS)
def test_exception_classes_exist(onyx_state, name):
    """Every ORT exception class exists in onyx.capi.onnxruntime_pybind11_state,
    is an Exception, has that module as __module__ and the same builtin base."""
    ref = getattr(importlib.import_module("onnxruntime.capi.onnxruntime_pybind11_state"), name)
    got = getattr(onyx_state, name)
    assert isinstance(got, type) and issubclass(got, Exception)
    assert got.__name__ == name
    assert got.__module__ == onyx_state.__name__
    assert issubclass(got, builtin_base(ref))


def _same(ort_call, onyx_call, expected, onyx_state):
    ref, got = raises_same(ort_call, onyx_call, expected=expected)
    if type(ref).__module__ != "builtins":
        assert getattr(onyx_state, type(got).__name__) is type(got), \
            "onyx's exception is not the class exported by its capi module"
    return ref, got


# ------------------------------------------------------------ run()

X = np.ones((2, 7), np.float32)

# case id -> (expected ORT class, model builder, feed or callable(sess))
RUN_CASES = {
    "wrong_dtype_float64": ("InvalidArgument", lambda: mb.binary("Add", "float32"),
                            {"a": X.astype(np.float64), "b": X}),
    "wrong_dtype_int32_for_int64": ("InvalidArgument", lambda: mb.binary("Add", "int64"),
                                    {"a": X.astype(np.int32), "b": X.astype(np.int64)}),
    "wrong_rank": ("InvalidArgument", lambda: mb.binary("Add", "float32"),
                   {"a": np.ones((2, 7, 1), np.float32), "b": X}),
    "wrong_fixed_dim": ("InvalidArgument", lambda: mb.binary("Add", "float32", shape=(2, 7)),
                        {"a": np.ones((2, 6), np.float32), "b": np.ones((2, 6), np.float32)}),
    "unknown_input_name": ("InvalidArgument", lambda: mb.binary("Add", "float32"),
                           {"a": X, "b": X, "zz": X}),
    "missing_input": ("ValueError", lambda: mb.binary("Add", "float32"), {"a": X}),
    "dict_as_input": ("InvalidArgument", lambda: mb.binary("Add", "float32"),
                      {"a": {"k": 1.0}, "b": X}),
    "str_as_input": ("RuntimeError", lambda: mb.binary("Add", "float32"),
                     {"a": "hello", "b": X}),
    "bytes_as_input": ("RuntimeError", lambda: mb.binary("Add", "float32"),
                       {"a": b"abc", "b": X}),
    "tuple_as_input": ("RuntimeError", lambda: mb.binary("Add", "float32"),
                       {"a": ((1.0,) * 7,) * 2, "b": X}),
    "ragged_list": ("RuntimeError", lambda: mb.binary("Add", "float32"),
                    {"a": [[1.0] * 7, [1.0] * 6], "b": X}),
    "list_of_str_for_float": ("RuntimeError", lambda: mb.binary("Add", "float32"),
                              {"a": [["x"] * 7] * 2, "b": X}),
    "python_float_scalar": ("RuntimeError", mb.scalar_add,
                            {"a": 1.5, "b": np.array(2.0, np.float32)}),
    "numpy_scalar": ("RuntimeError", mb.scalar_add,
                     {"a": np.float32(1.5), "b": np.array(2.0, np.float32)}),
    "none_for_tensor_input": ("Fail", lambda: mb.binary("Add", "float32"),
                              {"a": None, "b": X}),
    "reshape_to_bad_shape": ("Fail", mb.reshape_dynamic,
                             {"x": np.ones(6, np.float32), "s": np.array([4], np.int64)}),
    "matmul_dim_mismatch": ("Fail", mb.matmul_two_inputs,
                            {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 2), np.float32)}),
    "non_str_feed_key": ("ValueError", lambda: mb.binary("Add", "float32"), {0: X, "b": X}),
}



#: Where Onyx raises another class than onnxruntime, and why.
RUN_GAPS = {
    "matmul_dim_mismatch": "by design: Onyx checks that a dimension named in several inputs has one "
                           "size before running, and raises InvalidArgument naming both inputs",
}
LOAD_GAPS = {}


def _cases(cases, gaps):
    return [pytest.param(c, marks=known_gap(gaps[c])) if c in gaps else c for c in cases]


@pytest.mark.parametrize("case", _cases(RUN_CASES, RUN_GAPS))
def test_run_bad_feed(sessions, onyx_state, case):
    """run(None, feed) with a bad feed raises the same class on both."""
    expected, build, feed = RUN_CASES[case]
    ref, got = sessions(build())
    _same(lambda: ref.run(None, feed), lambda: got.run(None, feed), expected, onyx_state)


@pytest.mark.parametrize("case,expected,output_names", [
    ("unknown_output_name", "InvalidArgument", ["zz"]),
    ("output_names_as_str", "TypeError", "c"),
    ("output_name_not_str", "TypeError", [0]),
])
def test_run_bad_output_names(sessions, onyx_state, case, expected, output_names):
    """Unknown or mistyped output names raise the same class."""
    ref, got = sessions(mb.binary("Add", "float32"))
    feed = {"a": X, "b": X}
    _same(lambda: ref.run(output_names, feed), lambda: got.run(output_names, feed),
          expected, onyx_state)


@pytest.mark.parametrize("case,expected,feed", [
    ("feed_is_list", "AttributeError", [X, X]),
    ("feed_is_none", "AttributeError", None),
])
def test_run_feed_not_a_mapping(sessions, onyx_state, case, expected, feed):
    """A feed that is not a dict fails as ORT's Python layer does (it calls .keys())."""
    ref, got = sessions(mb.binary("Add", "float32"))
    _same(lambda: ref.run(None, feed), lambda: got.run(None, feed), expected, onyx_state)


# ------------------------------------------------------------ loading


def _model_bytes(model):
    return model.SerializeToString()


def _with(model, edit):
    edit(model)
    return model


LOAD_CASES = {
    "nonexistent_path": ("NoSuchFile", lambda tmp: str(tmp / "does" / "not" / "exist.onnx")),
    "nonexistent_pathlib": ("NoSuchFile", lambda tmp: tmp / "missing.onnx"),
    "directory_path": ("InvalidProtobuf", lambda tmp: str(tmp)),
    "bytes_not_a_model": ("InvalidProtobuf", lambda tmp: b"not a model"),
    "empty_bytes": ("InvalidArgument", lambda tmp: b""),
    "file_not_a_model": ("InvalidProtobuf", lambda tmp: _write(tmp / "junk.onnx", b"\xff" * 37)),
    "int_as_path": ("TypeError", lambda tmp: 123),
    "model_proto_object": ("TypeError", lambda tmp: mb.binary("Add", "float32")),
    "bytearray": ("TypeError", lambda tmp: bytearray(_model_bytes(mb.binary("Add", "float32")))),
    "unknown_op_type": ("InvalidGraph", lambda tmp: _model_bytes(mb.unknown_op())),
    "unknown_attribute": ("InvalidGraph", lambda tmp: _model_bytes(_with(
        mb.binary("Add", "float32"),
        lambda m: m.graph.node[0].attribute.append(
            helper.make_attribute("foo", 1))))),
    "dangling_node_input": ("InvalidArgument", lambda tmp: _model_bytes(mb.dangling_input())),
    "type_mismatch_in_graph": ("Fail", lambda tmp: _model_bytes(mb.type_mismatch())),
    "opset_too_new": ("Fail", lambda tmp: _model_bytes(_with(
        mb.binary("Add", "float32"), lambda m: setattr(m.opset_import[0], "version", 99)))),
    "ir_version_too_new": ("Fail", lambda tmp: _model_bytes(_with(
        mb.binary("Add", "float32"), lambda m: setattr(m, "ir_version", 99)))),
}


def _write(path, data):
    pathlib.Path(path).write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", _cases(LOAD_CASES, LOAD_GAPS))
def test_load_bad_model(ort, onyx, onyx_state, tmp_path, case):
    """InferenceSession(bad source) raises the same class on both."""
    expected, source = LOAD_CASES[case]
    arg = source(tmp_path)
    _same(lambda: ort.InferenceSession(arg, providers=CPU),
          lambda: onyx.InferenceSession(arg, providers=CPU), expected, onyx_state)


def test_load_invalid_log_severity(ort, onyx, onyx_state, save_model):
    """SessionOptions.log_severity_level = 7 is accepted on the options but the
    session refuses it (ORT: RuntimeError)."""
    path = save_model(mb.binary("Add", "float32"))

    def make(mod):
        so = mod.SessionOptions()
        so.log_severity_level = 7
        return lambda: mod.InferenceSession(path, so, providers=CPU)
    _same(make(ort), make(onyx), "RuntimeError", onyx_state)


def test_load_sess_options_wrong_type(ort, onyx, onyx_state, save_model):
    """sess_options that is not a SessionOptions (ORT: TypeError; with
    providers= given ORT's Python layer raises AttributeError first, which is
    not required here)."""
    path = save_model(mb.binary("Add", "float32"))
    _same(lambda: ort.InferenceSession(path, sess_options="x"),
          lambda: onyx.InferenceSession(path, sess_options="x"),
          "TypeError", onyx_state)


def test_invalid_provider_name(ort, onyx, save_model):
    """An unknown provider name: ORT does not raise; it warns (UserWarning
    'Specified provider ... is not in available provider names') and falls back
    to CPU. onyx must do the same."""
    path = save_model(mb.binary("Add", "float32"))
    with pytest.warns(UserWarning):
        ref = ort.InferenceSession(path, providers=["NoSuchExecutionProvider"])
    with pytest.warns(UserWarning):
        got = onyx.InferenceSession(path, providers=["NoSuchExecutionProvider"])
    assert got.get_providers() == ref.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(got.run(None, {"a": X, "b": X})[0], 2 * X)


# ------------------------------------------------------------ OrtValue


@pytest.mark.parametrize("case,expected,make", [
    ("string_array", "RuntimeError", lambda ov: ov.ortvalue_from_numpy(np.array(["a", "b"]))),
    ("object_array", "RuntimeError",
     lambda ov: ov.ortvalue_from_numpy(np.array(["a", "b"], dtype=object))),
    ("python_list", "RuntimeError", lambda ov: ov.ortvalue_from_numpy([1.0, 2.0])),
    ("unknown_device", "Exception", lambda ov: ov.ortvalue_from_numpy(X, "foo")),
    ("negative_shape", "RuntimeError",
     lambda ov: ov.ortvalue_from_shape_and_type([-1, 3], np.float32)),
])
def test_ortvalue_bad_input(ort, onyx, onyx_state, case, expected, make):
    """OrtValue factories refuse the same inputs with the same class (note: ORT
    raises a plain Exception for an unknown device type)."""
    _same(lambda: make(ort.OrtValue), lambda: make(onyx.OrtValue), expected, onyx_state)


def test_sequence_ortvalue_numpy(ort, onyx, onyx_state, sessions):
    """numpy()/shape() of a sequence OrtValue raise the same class (RuntimeError)."""
    ref, got = sessions(mb.seq_construct())
    a = np.ones((2, 3), np.float32)
    r = ref.run_with_ort_values(None, {"a": ort.OrtValue.ortvalue_from_numpy(a),
                                       "b": ort.OrtValue.ortvalue_from_numpy(a)})[0]
    g = got.run_with_ort_values(None, {"a": onyx.OrtValue.ortvalue_from_numpy(a),
                                       "b": onyx.OrtValue.ortvalue_from_numpy(a)})[0]
    _same(r.numpy, g.numpy, "RuntimeError", onyx_state)
    _same(r.shape, g.shape, "RuntimeError", onyx_state)
