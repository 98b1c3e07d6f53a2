#!/usr/bin/env python3
"""Per-call overhead of `session.run` from Python: Onyx (`import onyx`) against onnxruntime in
the same process, on a single Add of 4 floats and on a 10-input Sum. Prints microseconds per
call (the median of several rounds) and the ratio onyx / onnxruntime (below 1: onyx is faster).

    python3 scripts/bench_python.py [--calls 20000] [--rounds 7] [--threads 1]

--threads sets intra_op_num_threads on both sides (0: each runtime's default, one per core).
"""

import argparse
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper


def add_model():
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def sum10_model():
    names = [f"x{i}" for i in range(10)]
    g = helper.make_graph(
        [helper.make_node("Sum", names, ["y"])], "sum10",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def per_call_us(sess, feed, calls, rounds):
    """Median over `rounds` of the mean time of `calls` runs, in microseconds."""
    for _ in range(200):
        sess.run(None, feed)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            sess.run(None, feed)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import onnxruntime
    import onyx

    rng = np.random.default_rng(0)
    cases = {
        "Add, 2 inputs of 4 floats": (add_model(), ["a", "b"]),
        "Sum, 10 inputs of 4 floats": (sum10_model(), [f"x{i}" for i in range(10)]),
    }
    threads = f"{args.threads} intra-op thread(s)" if args.threads else "default intra-op threads"
    print(f"onnxruntime {onnxruntime.__version__}, onyx {onyx.__version__}, {threads}, "
          f"{args.calls} calls x {args.rounds} rounds")
    print("| model | onnxruntime us/call | onyx us/call | onyx / ORT |")
    print("|---|---|---|---|")
    for name, (model, inputs) in cases.items():
        feed = {n: rng.standard_normal(4).astype(np.float32) for n in inputs}
        us = {}
        for mod in (onnxruntime, onyx):
            so = mod.SessionOptions()
            so.intra_op_num_threads = args.threads
            sess = mod.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            np.testing.assert_allclose(sess.run(None, feed)[0], sum(feed.values()), rtol=1e-6)
            us[mod.__name__] = per_call_us(sess, feed, args.calls, args.rounds)
        print(f"| {name} | {us['onnxruntime']:.2f} | {us['onyx']:.2f} | {us['onyx'] / us['onnxruntime']:.2f} |")


if __name__ == "__main__":
    main()
