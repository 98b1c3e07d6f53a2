"""One session used from several Python threads, and run_async with a
callback: results equal the single-threaded (and onnxruntime's) results."""

import threading

import numpy as np
import pytest

import model_builders as mb
from diffutil import assert_same, rand

THREADS = 4
RUNS_PER_THREAD = 20


def test_threads_share_one_session(sessions, rng):
    """4 threads x 20 runs on one session, each with its own random input (batch
    sizes vary): every result equals that input's single-threaded result, which
    equals onnxruntime's."""
    ref, got = sessions(mb.mlp())
    inputs = [[rand(rng, "float32", (1 + (t + i) % 4, 13)) for i in range(RUNS_PER_THREAD)]
              for t in range(THREADS)]
    expected_ref = [[ref.run(None, {"x": x})[0] for x in xs] for xs in inputs]
    expected_got = [[got.run(None, {"x": x})[0] for x in xs] for xs in inputs]
    assert_same(expected_ref, expected_got, "single-threaded")

    results = [[None] * RUNS_PER_THREAD for _ in range(THREADS)]
    errors = []
    barrier = threading.Barrier(THREADS)

    def work(t):
        try:
            barrier.wait()
            for i, x in enumerate(inputs[t]):
                results[t][i] = got.run(None, {"x": x})[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    for t in range(THREADS):
        for i in range(RUNS_PER_THREAD):
            np.testing.assert_array_equal(results[t][i], expected_got[t][i],
                                          err_msg=f"thread {t} run {i}")


def test_threads_one_session_each(ort, onyx, save_model, rng):
    """Sessions made and run concurrently in 4 threads agree with onnxruntime."""
    path = save_model(mb.matmul("float32"))
    xs = [rand(rng, "float32", (3, 13)) for _ in range(THREADS)]
    expected = [ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                .run(None, {"x": x}) for x in xs]
    results, errors = [None] * THREADS, []

    def work(t):
        try:
            sess = onyx.InferenceSession(path, providers=["CPUExecutionProvider"])
            results[t] = [sess.run(None, {"x": xs[t]}) for _ in range(5)]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    for t in range(THREADS):
        for r in results[t]:
            assert_same(expected[t], r, f"thread {t}")


def _run_async(sess, names, feed, user_data, timeout=30):
    """run_async and wait for the callback; returns what it was called with."""
    done = threading.Event()
    seen = {}

    def callback(outputs, data, err):
        seen.update(outputs=outputs, user_data=data, err=err,
                    thread=threading.current_thread())
        done.set()

    assert sess.run_async(names, feed, callback, user_data) is None
    assert done.wait(timeout), "run_async callback was never called"
    return seen


def _require_run_async(ort):
    if not hasattr(ort.InferenceSession, "run_async"):
        pytest.skip("this onnxruntime has no run_async")


@pytest.mark.parametrize("names", [None, ["prod"], ["prod", "sum"]])
def test_run_async_callback(ort, sessions, rng, names):
    """run_async(names, feed, callback, user_data): the callback receives
    (outputs as a list of arrays, the very user_data object, err == '')."""
    _require_run_async(ort)
    ref, got = sessions(mb.add_mul_two_outputs())
    feed = {"a": rand(rng, "float32", (3, 7)), "b": rand(rng, "float32", (3, 7))}
    token = object()
    r = _run_async(ref, names, feed, token)
    g = _run_async(got, names, feed, token)
    assert_same(r["outputs"], g["outputs"], "callback outputs")
    assert_same(ref.run(names, feed), g["outputs"], "callback outputs vs run()")
    assert r["user_data"] is token and g["user_data"] is token
    assert type(g["err"]) is type(r["err"]) and g["err"] == r["err"] == ""


def test_run_async_error_goes_to_callback(ort, sessions, rng):
    """A failing run_async (float64 for a float input) reports through the
    callback: empty outputs and a non-empty err string, like ORT."""
    _require_run_async(ort)
    ref, got = sessions(mb.add_mul_two_outputs())
    a = rand(rng, "float32", (3, 7))
    feed = {"a": a.astype(np.float64), "b": a}
    r = _run_async(ref, None, feed, "ud")
    g = _run_async(got, None, feed, "ud")
    assert r["err"] and type(r["err"]) is str
    assert type(g["err"]) is str and g["err"]
    assert_same(r["outputs"], g["outputs"], "callback outputs on error")
    assert g["user_data"] == "ud"


def test_run_async_many_in_flight(ort, sessions, rng):
    """8 run_async calls in flight at once each get their own result."""
    _require_run_async(ort)
    ref, got = sessions(mb.mlp())
    xs = [rand(rng, "float32", (2, 13)) for _ in range(8)]
    events = [threading.Event() for _ in xs]
    outs = [None] * len(xs)

    def callback(outputs, i, err):
        outs[i] = (outputs, err)
        events[i].set()

    for i, x in enumerate(xs):
        got.run_async(None, {"x": x}, callback, i)
    for i, x in enumerate(xs):
        assert events[i].wait(30)
        assert outs[i][1] == ""
        assert_same(ref.run(None, {"x": x}), outs[i][0], f"run_async #{i}")
