"""SessionOptions, RunOptions, the option enums and free-dimension overrides,
compared between onnxruntime and onyx."""

import numpy as np
import pytest

import model_builders as mb
from diffutil import assert_same, nodeargs, raises_same, rand, run_both

# ------------------------------------------------------------ enums


@pytest.mark.parametrize("enum", ["GraphOptimizationLevel", "ExecutionMode"])
def test_enum_members(ort, onyx, enum):
    """Same member names with the same int values, comparable to ints."""
    r, g = getattr(ort, enum), getattr(onyx, enum)
    names = list(r.__members__)
    for name in names:
        assert hasattr(g, name), name
        assert int(getattr(g, name)) == int(getattr(r, name)), name
        assert getattr(g, name) == int(getattr(r, name)), name
        assert str(getattr(g, name)) == str(getattr(r, name)), name


# ------------------------------------------------------------ SessionOptions

SO_FIELDS = ["graph_optimization_level", "intra_op_num_threads", "inter_op_num_threads",
             "execution_mode", "log_severity_level", "log_verbosity_level",
             "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse",
             "enable_profiling", "profile_file_prefix", "logid",
             "optimized_model_filepath", "use_deterministic_compute"]


def _plain(v):
    """An enum member as (class name, int); other values as they are."""
    if hasattr(v, "__members__") or type(v).__name__ in ("GraphOptimizationLevel",
                                                          "ExecutionMode"):
        return (type(v).__name__, int(v))
    return v


@pytest.mark.parametrize("field", SO_FIELDS)
def test_session_options_defaults(ort, onyx, field):
    """A fresh SessionOptions reads the same defaults, with the same types."""
    r, g = getattr(ort.SessionOptions(), field), getattr(onyx.SessionOptions(), field)
    assert type(g).__name__ == type(r).__name__, field
    assert _plain(g) == _plain(r), field


SO_VALUES = [
    ("graph_optimization_level", "ORT_DISABLE_ALL"),
    ("graph_optimization_level", "ORT_ENABLE_BASIC"),
    ("graph_optimization_level", "ORT_ENABLE_EXTENDED"),
    ("graph_optimization_level", "ORT_ENABLE_ALL"),
    ("execution_mode", "ORT_SEQUENTIAL"),
    ("execution_mode", "ORT_PARALLEL"),
    ("intra_op_num_threads", 1),
    ("intra_op_num_threads", 3),
    ("inter_op_num_threads", 2),
    ("log_severity_level", 0),
    ("log_severity_level", 3),
    ("log_verbosity_level", 1),
    ("enable_cpu_mem_arena", False),
    ("enable_mem_pattern", False),
    ("enable_mem_reuse", False),
    ("enable_profiling", True),
    ("profile_file_prefix", "my_profile_"),
    ("logid", "session-7"),
    ("use_deterministic_compute", True),
]


def _resolve(mod, field, value):
    if field == "graph_optimization_level":
        return getattr(mod.GraphOptimizationLevel, value)
    if field == "execution_mode":
        return getattr(mod.ExecutionMode, value)
    return value


@pytest.mark.parametrize("field,value", SO_VALUES, ids=[f"{f}={v}" for f, v in SO_VALUES])
def test_session_options_set_and_read_back(ort, onyx, field, value):
    """Each field is settable and reads back equal (and of the same type)."""
    out = []
    for mod in (ort, onyx):
        so = mod.SessionOptions()
        setattr(so, field, _resolve(mod, field, value))
        out.append(getattr(so, field))
    r, g = out
    assert type(g).__name__ == type(r).__name__
    assert _plain(g) == _plain(r)


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC",
                                   "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"])
@pytest.mark.parametrize("mode", ["ORT_SEQUENTIAL", "ORT_PARALLEL"])
def test_sessions_run_under_options(sessions, rng, level, mode):
    """Sessions made with each optimization level and execution mode (and a few
    thread/memory settings) give the same results."""
    def options(mod):
        so = mod.SessionOptions()
        so.graph_optimization_level = getattr(mod.GraphOptimizationLevel, level)
        so.execution_mode = getattr(mod.ExecutionMode, mode)
        so.intra_op_num_threads = 2
        so.inter_op_num_threads = 1
        so.enable_cpu_mem_arena = False
        so.enable_mem_pattern = False
        so.log_severity_level = 3
        return so
    ref, got = sessions(mb.mlp(), options=options)
    run_both(ref, got, None, {"x": rand(rng, "float32", (4, 13))})


def test_get_session_options_reads_back(sessions):
    """session.get_session_options() reflects the options it was made with."""
    def options(mod):
        so = mod.SessionOptions()
        so.intra_op_num_threads = 2
        so.graph_optimization_level = mod.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.log_severity_level = 3
        return so
    ref, got = sessions(mb.binary("Add", "float32"), options=options)
    r, g = ref.get_session_options(), got.get_session_options()
    for field in ("intra_op_num_threads", "graph_optimization_level", "log_severity_level"):
        assert _plain(getattr(g, field)) == _plain(getattr(r, field)), field


@pytest.mark.parametrize("key,value", [("session.intra_op.allow_spinning", "0"),
                                       ("session.disable_cpu_ep_fallback", "1"),
                                       ("session.inter_op.allow_spinning", "0"),
                                       ("my.custom.key", "xyz ✓")])
def test_session_config_entries(ort, onyx, key, value):
    """add_session_config_entry then get_session_config_entry returns the str;
    adding again overwrites."""
    out = []
    for mod in (ort, onyx):
        so = mod.SessionOptions()
        so.add_session_config_entry(key, value)
        first = so.get_session_config_entry(key)
        so.add_session_config_entry(key, value + "2")
        out.append((first, type(first).__name__, so.get_session_config_entry(key)))
    assert out[1] == out[0]


def test_session_config_unknown_key(ort, onyx):
    """get_session_config_entry of a key never set raises the same class
    (ORT: RuntimeError)."""
    raises_same(lambda: ort.SessionOptions().get_session_config_entry("no.such.key"),
                lambda: onyx.SessionOptions().get_session_config_entry("no.such.key"),
                expected="RuntimeError")


def test_session_with_config_entries_runs(sessions, rng):
    """Sessions made with config entries set run normally."""
    def options(mod):
        so = mod.SessionOptions()
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "0")
        return so
    ref, got = sessions(mb.binary("Add", "float32"), options=options)
    run_both(ref, got, None, {"a": rand(rng, "float32", (2, 7)),
                              "b": rand(rng, "float32", (2, 7))})


# ------------------------------------------------------------ free dimensions


def test_free_dimension_override_by_name(sessions, rng):
    """add_free_dimension_override_by_name('batch', 2) fixes the dim in NodeArgs;
    runs with batch 2 work, batch 3 fails alike."""
    def options(mod):
        so = mod.SessionOptions()
        so.add_free_dimension_override_by_name("batch", 2)
        return so
    ref, got = sessions(mb.binary("Add", "float32"), options=options)
    assert ref.get_inputs()[0].shape == [2, 7]
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())
    x = rand(rng, "float32", (2, 7))
    run_both(ref, got, None, {"a": x, "b": x})
    y = rand(rng, "float32", (3, 7))
    raises_same(lambda: ref.run(None, {"a": y, "b": y}),
                lambda: got.run(None, {"a": y, "b": y}), expected="InvalidArgument")


def test_free_dimension_override_unknown_name(sessions):
    """An override for a dim_param the model lacks changes nothing."""
    def options(mod):
        so = mod.SessionOptions()
        so.add_free_dimension_override_by_name("no_such_dim", 4)
        return so
    ref, got = sessions(mb.binary("Add", "float32"), options=options)
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())


def test_free_dimension_override_by_denotation(sessions, rng):
    """add_free_dimension_override_by_denotation('DATA_BATCH', 5) on a model
    whose dim 0 carries that denotation."""
    def options(mod):
        so = mod.SessionOptions()
        so.add_free_dimension_override_by_denotation("DATA_BATCH", 5)
        return so
    ref, got = sessions(mb.with_denotation(), options=options)
    assert ref.get_inputs()[0].shape == [5, 7]
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())
    x = rand(rng, "float32", (5, 7))
    run_both(ref, got, None, {"a": x, "b": x})


# ------------------------------------------------------------ RunOptions

RO_FIELDS = ["log_severity_level", "log_verbosity_level", "logid", "terminate",
             "only_execute_path_to_fetches"]


@pytest.mark.parametrize("field", RO_FIELDS)
def test_run_options_defaults(ort, onyx, field):
    """A fresh RunOptions reads the same defaults. (ORT's Python RunOptions has
    `logid`, not `run_tag`.)"""
    r, g = getattr(ort.RunOptions(), field), getattr(onyx.RunOptions(), field)
    assert type(g) is type(r) and g == r


@pytest.mark.parametrize("field,value", [("log_severity_level", 3), ("log_verbosity_level", 2),
                                         ("logid", "run-42"), ("terminate", True),
                                         ("only_execute_path_to_fetches", True)])
def test_run_options_set_and_read_back(ort, onyx, field, value):
    """RunOptions fields are settable and read back equal."""
    out = []
    for mod in (ort, onyx):
        ro = mod.RunOptions()
        setattr(ro, field, value)
        out.append(getattr(ro, field))
    assert type(out[1]) is type(out[0]) and out[1] == out[0]


def test_run_with_configured_run_options(ort, onyx, sessions, rng):
    """run(…, run_options) with logid/severity set works, and a run config entry
    reads back."""
    ref, got = sessions(mb.binary("Add", "float32"))
    feed = {"a": rand(rng, "float32", (3, 7)), "b": rand(rng, "float32", (3, 7))}
    outs = []
    for mod, sess in ((ort, ref), (onyx, got)):
        ro = mod.RunOptions()
        ro.logid = "tag-1"
        ro.log_severity_level = 3
        ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
        outs.append(sess.run(None, feed, ro))
    assert_same(*outs)


def test_run_config_unknown_key(ort, onyx):
    """get_run_config_entry of an unset key raises the same class (RuntimeError)."""
    raises_same(lambda: ort.RunOptions().get_run_config_entry("nope"),
                lambda: onyx.RunOptions().get_run_config_entry("nope"),
                expected="RuntimeError")


def test_run_terminate_flag(ort, onyx, sessions, rng):
    """terminate=True makes run() raise the same class (ORT: Fail); resetting it
    to False lets the next run succeed."""
    ref, got = sessions(mb.binary("Add", "float32"))
    feed = {"a": rand(rng, "float32", (3, 7)), "b": rand(rng, "float32", (3, 7))}
    rro, gro = ort.RunOptions(), onyx.RunOptions()
    rro.terminate = gro.terminate = True
    raises_same(lambda: ref.run(None, feed, rro), lambda: got.run(None, feed, gro),
                expected="Fail")
    rro.terminate = gro.terminate = False
    assert_same(ref.run(None, feed, rro), got.run(None, feed, gro))
    np.testing.assert_allclose(got.run(None, feed, gro)[0], feed["a"] + feed["b"], rtol=1e-6)
