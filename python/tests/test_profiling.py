"""SessionOptions.enable_profiling and InferenceSession.end_profiling against onnxruntime: a
Chrome trace file (chrome://tracing, Perfetto) of ONNX Runtime's profile format, with the same
kernel events (names, op, provider, input and output types and shapes) and run events."""

import json
import os

import numpy as np

import model_builders as mb
from diffutil import rand

KEYS = {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"}


def _profile(mod, path, prefix, feed, runs):
    so = mod.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = prefix
    sess = mod.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        sess.run(None, feed)
    return sess.end_profiling()


def _kernel(event):
    a = event["args"]
    return event["name"], a["op_name"], a["provider"], a["input_type_shape"], a["output_type_shape"]


def test_end_profiling_writes_onnx_runtimes_trace(ort, onyx, save_model, tmp_path, rng):
    path = save_model(mb.binary("Add", "float32"))
    feed = {"a": rand(rng, "float32", (2, 7)), "b": rand(rng, "float32", (2, 7))}
    traces = []
    for mod in (ort, onyx):
        prefix = str(tmp_path / f"{mod.__name__}_profile_")
        file = _profile(mod, path, prefix, feed, runs=3)
        assert file.startswith(prefix) and file.endswith(".json") and os.path.exists(file), file
        with open(file) as f:
            events = json.load(f)
        for e in events:
            assert KEYS <= set(e), e
            assert e["ph"] == "X" and isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0
        traces.append(events)
    want, got = traces
    kernels = [[_kernel(e) for e in t if e["cat"] == "Node"] for t in traces]
    assert kernels[1] == kernels[0]
    runs = [[e for e in t if e["cat"] == "Session" and e["name"] == "model_run"] for t in traces]
    assert len(runs[1]) == len(runs[0]) == 3
    assert any(e["name"] == "session_initialization" for e in got)
    # Each kernel event lies inside its run's event.
    for run, kernel in zip(runs[1], [e for e in got if e["cat"] == "Node"]):
        assert run["ts"] <= kernel["ts"] <= run["ts"] + run["dur"] + 1


def test_end_profiling_without_profiling_returns_an_empty_name(ort, onyx, save_model, rng):
    path = save_model(mb.binary("Add", "float32"))
    for mod in (ort, onyx):
        sess = mod.InferenceSession(path, providers=["CPUExecutionProvider"])
        sess.run(None, {"a": np.ones((2, 7), np.float32), "b": np.ones((2, 7), np.float32)})
        assert sess.end_profiling() == ""
