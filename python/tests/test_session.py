"""InferenceSession construction, providers, NodeArgs, model metadata and the
module-level functions, compared between onnxruntime and onyx."""

import importlib
import os
import pathlib

import numpy as np
import pytest
from onnx import TensorProto as T

import model_builders as mb
from conftest import AGAINST_ITSELF, CPU
from diffutil import assert_same, nodeargs, raises_same, rand, run_both


@pytest.mark.skipif(AGAINST_ITSELF, reason="onyx is onnxruntime in this mode")
def test_onyx_is_importable():
    """`import onyx` works (a failure, not a skip, when it does not)."""
    mod = importlib.import_module("onyx")
    assert hasattr(mod, "InferenceSession")


# ------------------------------------------------------------ construction


@pytest.mark.parametrize("source", ["str", "pathlib", "bytes"])
@pytest.mark.parametrize("providers", [None, CPU], ids=["default_providers", "cpu"])
def test_session_from_source(ort, onyx, save_model, rng, source, providers):
    """A session loads from a str path, an os.PathLike and bytes, with default and
    explicit CPU providers; providers read back ['CPUExecutionProvider']."""
    path = save_model(mb.binary("Add", "float32"))
    arg = {"str": path, "pathlib": pathlib.Path(path),
           "bytes": pathlib.Path(path).read_bytes()}[source]
    kw = {} if providers is None else {"providers": providers}
    ref = ort.InferenceSession(arg, **kw)
    got = onyx.InferenceSession(arg, **kw)
    assert ref.get_providers() == ["CPUExecutionProvider"]
    assert got.get_providers() == ref.get_providers()
    assert type(got.get_providers()) is list
    a, b = rand(rng, "float32", (5, 7)), rand(rng, "float32", (5, 7))
    run_both(ref, got, None, {"a": a, "b": b})


def test_session_keyword_arguments(ort, onyx, save_model, rng):
    """path_or_bytes=, sess_options=, providers= are accepted as keywords."""
    path = save_model(mb.binary("Mul", "float32"))
    ref = ort.InferenceSession(path_or_bytes=path, sess_options=ort.SessionOptions(),
                               providers=CPU)
    got = onyx.InferenceSession(path_or_bytes=path, sess_options=onyx.SessionOptions(),
                                providers=CPU)
    feed = {"a": rand(rng, "float32", (3, 7)), "b": rand(rng, "float32", (3, 7))}
    run_both(ref, got, None, feed)
    r = ref.run(output_names=["c"], input_feed=feed, run_options=None)
    g = got.run(output_names=["c"], input_feed=feed, run_options=None)
    assert_same(r, g)


def test_providers_as_name_and_options_tuple(sessions, rng):
    """providers=[('CPUExecutionProvider', {})] is accepted like ORT does."""
    ref, got = sessions(mb.binary("Add", "float32"), providers=[("CPUExecutionProvider", {})])
    assert got.get_providers() == ref.get_providers() == ["CPUExecutionProvider"]
    run_both(ref, got, None, {"a": rand(rng, "float32", (2, 7)),
                              "b": rand(rng, "float32", (2, 7))})


def test_provider_options_for_cpu(sessions):
    """get_provider_options() has a 'CPUExecutionProvider' entry on both."""
    ref, got = sessions(mb.binary("Add", "float32"))
    r, g = ref.get_provider_options(), got.get_provider_options()
    assert type(g) is dict
    assert set(g) == set(r)


# ------------------------------------------------------------ NodeArgs


def test_nodeargs_symbolic_dims(sessions):
    """Names, type strings and shapes (dim_param names as str) of inputs/outputs."""
    ref, got = sessions(mb.add_mul_two_outputs())
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())
    assert type(got.get_inputs()) is list


TYPED_CASES = {
    "float": (T.FLOAT, ["n", None, 3]),
    "double": (T.DOUBLE, [2, "m"]),
    "float16": (T.FLOAT16, [None]),
    "int64": (T.INT64, ["batch", 4]),
    "int32": (T.INT32, [1, 2, 3]),
    "int8": (T.INT8, [5]),
    "uint8": (T.UINT8, ["h", "w", 3]),
    "uint16": (T.UINT16, [4]),
    "int16": (T.INT16, [4]),
    "uint32": (T.UINT32, [4]),
    "uint64": (T.UINT64, [4]),
    "bool": (T.BOOL, [2, 2]),
    "string": (T.STRING, ["n"]),
    "scalar": (T.FLOAT, []),
    "unknown_rank": (T.FLOAT, None),
}


@pytest.mark.parametrize("case", list(TYPED_CASES))
def test_nodearg_type_and_shape(sessions, case):
    """NodeArg.type as ORT writes it ('tensor(float16)', ...) and .shape with
    ints, str dim_params and None for unknown dims; in and out declared alike."""
    elem, shape = TYPED_CASES[case]
    ref, got = sessions(mb.typed_io(elem, shape, shape))
    assert ref.get_inputs()[0].type == mb.TYPE_STR[elem]
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())


def test_output_shape_inferred_when_undeclared(sessions):
    """An output declared without a shape gets the inferred shape (ORT runs
    shape inference when loading: Identity of x['n', None, 3] -> ['n', None, 3])."""
    ref, got = sessions(mb.typed_io(T.FLOAT, ["n", None, 3], None))
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())


@pytest.mark.parametrize("model", ["seq_construct", "seq_input", "optional_input",
                                   "empty_optional"])
def test_nodeargs_sequences_and_optionals(sessions, model):
    """'seq(tensor(float))' and 'optional(tensor(float))' NodeArgs."""
    ref, got = sessions(getattr(mb, model)())
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())


def test_nodearg_str(sessions):
    """str(NodeArg) reads "NodeArg(name='a', type='tensor(float)', shape=['batch', 7])"."""
    ref, got = sessions(mb.binary("Add", "float32"))
    assert [str(a) for a in got.get_inputs()] == [str(a) for a in ref.get_inputs()]
    assert [str(a) for a in got.get_outputs()] == [str(a) for a in ref.get_outputs()]


def test_overridable_initializers(sessions, rng):
    """An initializer also listed as a graph input: not in get_inputs(), listed by
    get_overridable_initializers(); runs with and without overriding it."""
    ref, got = sessions(mb.overridable_initializer())
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_overridable_initializers()) == \
        nodeargs(ref.get_overridable_initializers())
    a = rand(rng, "float32", (2, 7))
    run_both(ref, got, None, {"a": a})
    run_both(ref, got, None, {"a": a, "w": rand(rng, "float32", (2, 7))})


def _keep(mod, kept, array):
    """An OrtValue of `array`, kept alive with it (ONNX Runtime reads its memory later)."""
    value = mod.OrtValue.ortvalue_from_numpy(array)
    kept.append((array, value))
    return value


@pytest.mark.parametrize("builder", ["overridable_initializer", "plain_initializer"])
def test_add_initializer_replaces_the_models_value(ort, onyx, save_model, rng, builder):
    """SessionOptions.add_initializer: the session runs with the given value instead of the
    model's (an overridable initializer or a plain one); a name the model lacks is ignored."""
    path = save_model(getattr(mb, builder)())
    a, w = rand(rng, "float32", (2, 7)), rand(rng, "float32", (2, 7))
    kept, got = [], []
    for mod in (ort, onyx):
        so = mod.SessionOptions()
        so.add_initializer("w", _keep(mod, kept, w))
        so.add_initializer("not_in_the_model", _keep(mod, kept, w))
        sess = mod.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        got.append(sess.run(None, {"a": a})[0])
    np.testing.assert_allclose(got[1], got[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], a + w, rtol=1e-6)
    raises_same(lambda: ort.SessionOptions().add_initializer("w", w),
                lambda: onyx.SessionOptions().add_initializer("w", w))


def test_no_overridable_initializers(sessions):
    """A model whose initializers are not graph inputs lists none."""
    ref, got = sessions(mb.matmul("float32"))
    assert nodeargs(got.get_overridable_initializers()) == \
        nodeargs(ref.get_overridable_initializers()) == []


# ------------------------------------------------------------ metadata


META_FIELDS = ["producer_name", "graph_name", "domain", "description",
               "graph_description", "version", "custom_metadata_map"]


@pytest.mark.parametrize("builder", ["with_metadata", "binary_plain"])
def test_modelmeta(sessions, builder):
    """get_modelmeta() fields, values and Python types (custom map from
    metadata_props); a model without metadata gives ORT's defaults."""
    model = mb.with_metadata() if builder == "with_metadata" else mb.binary("Add", "float32")
    ref, got = sessions(model)
    rm, gm = ref.get_modelmeta(), got.get_modelmeta()
    for field in META_FIELDS:
        r, g = getattr(rm, field), getattr(gm, field)
        assert type(g) is type(r), field
        assert g == r, field
    if builder == "with_metadata":
        assert rm.custom_metadata_map["note"] == "värde ✓"


# ------------------------------------------------------------ module level


def test_available_providers(ort, onyx):
    """get_available_providers() is a list of str containing the CPU EP."""
    got = onyx.get_available_providers()
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert type(got) is list and all(type(p) is str for p in got)
    assert "CPUExecutionProvider" in got


def test_get_device(ort, onyx):
    """get_device() returns a str (ORT: 'CPU')."""
    assert type(ort.get_device()) is str
    assert type(onyx.get_device()) is str and onyx.get_device()


def test_version_strings(ort, onyx):
    """__version__ and get_version_string() are non-empty str."""
    for mod in (ort, onyx):
        assert type(mod.__version__) is str and mod.__version__
        assert type(mod.get_version_string()) is str and mod.get_version_string()


def test_public_classes_exist(ort, onyx):
    """The classes user code reaches for are there under the same names."""
    for name in ["InferenceSession", "SessionOptions", "RunOptions", "OrtValue",
                 "IOBinding", "NodeArg", "ModelMetadata", "GraphOptimizationLevel",
                 "ExecutionMode"]:
        assert hasattr(ort, name)
        assert hasattr(onyx, name), name


def test_session_get_inputs_after_run(sessions, rng):
    """NodeArgs stay the same after a run (nothing in a session mutates them)."""
    ref, got = sessions(mb.binary("Add", "float32"))
    before = nodeargs(got.get_inputs())
    run_both(ref, got, None, {"a": rand(rng, "float32", (4, 7)),
                              "b": rand(rng, "float32", (4, 7))})
    assert nodeargs(got.get_inputs()) == before == nodeargs(ref.get_inputs())


def test_pathlike_subclass(ort, onyx, save_model):
    """Any os.PathLike works, not just pathlib.Path."""
    path = save_model(mb.binary("Add", "float32"))

    class MyPath(os.PathLike):
        def __fspath__(self):
            return path

    ref = ort.InferenceSession(MyPath(), providers=CPU)
    got = onyx.InferenceSession(MyPath(), providers=CPU)
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    x = np.ones((1, 7), np.float32)
    run_both(ref, got, None, {"a": x, "b": x})
