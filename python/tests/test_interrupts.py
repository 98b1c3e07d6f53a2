"""Stopping a run: RunOptions.terminate set from another thread, and Ctrl-C (SIGINT) during a
run on the main thread. onyx only: when the stop lands depends on each runtime's speed."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import model_builders as mb
from conftest import AGAINST_ITSELF, CPU

pytestmark = pytest.mark.skipif(AGAINST_ITSELF, reason="timing of onyx's own runs")


@pytest.fixture(scope="module")
def long_run(onyx, save_model):
    """A session whose run takes long enough to be stopped, the feed, and that run's time."""
    so = onyx.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onyx.InferenceSession(save_model(mb.matmul_chain()), so, providers=CPU)
    feed = {"x": np.random.default_rng(1).random((192, 192), dtype=np.float32)}
    start = time.perf_counter()
    sess.run(None, feed)
    full = time.perf_counter() - start
    assert full > 0.15, f"the chain is too quick to test a stop ({full:.3f} s)"
    return sess, feed, full


def test_terminate_from_another_thread_stops_the_run(onyx, long_run):
    """Setting RunOptions.terminate during a run makes it raise Fail before it is done; cleared,
    the same options run again."""
    sess, feed, full = long_run
    ro = onyx.RunOptions()
    timer = threading.Timer(0.03, lambda: setattr(ro, "terminate", True))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(onyx.capi.onnxruntime_pybind11_state.Fail, match="terminate"):
        sess.run(None, feed, ro)
    assert time.perf_counter() - start < full
    ro.terminate = False
    np.testing.assert_array_equal(sess.run(None, feed, ro)[0], sess.run(None, feed)[0])


def test_ctrl_c_interrupts_a_run_on_the_main_thread(onyx, long_run):
    """SIGINT during a run raises KeyboardInterrupt within a few milliseconds, not at its end,
    and leaves the run's RunOptions as they were."""
    assert threading.current_thread() is threading.main_thread()
    sess, feed, full = long_run
    ro = onyx.RunOptions()
    timer = threading.Timer(0.03, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        sess.run(None, feed, ro)
    assert time.perf_counter() - start < full
    timer.join()
    assert not ro.terminate
    assert sess.run(None, feed, ro)[0].shape == (192, 192)
