"""Single convolution layers of the benchmark CNNs, Onyx's CPU EP against ONNX Runtime's.

Run: python3 scripts/bench_conv_layers.py --onyx PATH[,PATH...] [--layers l1,l4,...]
                                          [--threads 1] [--rounds 3] [--runs 50]
Needs: onnx, onnxruntime, numpy and one or more release `onyx` binaries (builds to compare).
Each layer is a small model (a chain of Conv + Relu with random weights, written under
target/conv_layers/). Each round runs ORT and every binary once, in random order, `--runs`
timed runs after 5 warm-ups; the table gives each engine's best per-run time over the rounds
(the least disturbed by a busy machine) and its ratio to ORT's.
"""

import argparse
import json
import pathlib
import random
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent

# name: (input channels, output channels, height = width, kernel, stride, convs in the chain)
LAYERS = {
    "l1": (64, 64, 56, 3, 1, 4),  # resnet18's stages: 4 3x3 convs each
    "l2": (128, 128, 28, 3, 1, 4),
    "l3": (256, 256, 14, 3, 1, 4),
    "l4": (512, 512, 7, 3, 1, 4),
    "s2": (64, 128, 56, 3, 2, 1),  # a strided 3x3
    "stem": (3, 64, 224, 7, 2, 1),  # resnet's stem
    "mstem": (3, 32, 224, 3, 2, 1),  # mobilenet_v2's stem
    "pw1": (32, 16, 112, 1, 1, 1),  # mobilenet_v2's pointwise convs
    "pw2": (16, 96, 112, 1, 1, 1),
    "pw3": (144, 24, 56, 1, 1, 1),
    "pw13": (96, 576, 14, 1, 1, 1),
    "pw17": (960, 320, 7, 1, 1, 1),
}


def make_layer(name: str, folder: pathlib.Path) -> pathlib.Path:
    """Writes the layer's model and input under `folder` (once) and returns its folder."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    out = folder / name
    if (out / "model.onnx").exists():
        return out
    c_in, c_out, size, k, stride, convs = LAYERS[name]
    rng = np.random.default_rng(0)
    nodes, inits, x, c, first = [], [], "x", c_in, size
    for i in range(convs):
        w = (rng.standard_normal((c_out, c, k, k)) * np.sqrt(2 / (c * k * k))).astype(np.float32)
        b = (rng.standard_normal(c_out) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        s = stride if i == 0 else 1
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[s, s]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, c = f"r{i}", c_out
        size = (size + 2 * (k // 2) - k) // s + 1
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, first, first])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(model, out / "model.onnx")
    np.save(out / "x.npy", rng.standard_normal((1, c_in, first, first)).astype(np.float32))
    return out


def ort_best_ms(layer: pathlib.Path, threads: int, runs: int) -> float:
    """ORT's best per-run time in ms (ORT_ENABLE_ALL, `threads` intra-op threads)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(layer / "model.onnx"), options, providers=["CPUExecutionProvider"])
    feeds = {"x": np.load(layer / "x.npy")}
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def onyx_best_ms(onyx: str, layer: pathlib.Path, threads: int, runs: int) -> float:
    """`onyx bench`'s best per-run time in ms on the same input."""
    out = subprocess.run(
        [onyx, "bench", str(layer / "model.onnx"), "--input", f"x={layer / 'x.npy'}", "--threads", str(threads),
         "--warmup", "5", "--runs", str(runs), "--json"],
        capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["min_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--onyx", required=True, help="comma-separated release `onyx` binaries")
    parser.add_argument("--layers", default="l1,l2,l3,l4,stem,pw1", help=f"comma-separated, of: {','.join(LAYERS)}")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--folder", type=pathlib.Path, default=ROOT / "target/conv_layers")
    args = parser.parse_args()
    binaries = args.onyx.split(",")
    for name in args.layers.split(","):
        if name not in LAYERS:
            sys.exit(f"unknown layer {name!r}: one of {', '.join(LAYERS)}")
        layer = make_layer(name, args.folder)
        best = {key: float("inf") for key in ["ort", *binaries]}
        for _ in range(args.rounds):
            order = ["ort", *binaries]
            random.shuffle(order)
            for key in order:
                ms = ort_best_ms(layer, args.threads, args.runs) if key == "ort" else onyx_best_ms(key, layer, args.threads, args.runs)
                best[key] = min(best[key], ms)
        cells = "  ".join(f"{b}: {best[b] * 1e3:.0f} us ({best[b] / best['ort']:.3f})" for b in binaries)
        print(f"{name:>6}: ort {best['ort'] * 1e3:.0f} us  {cells}", flush=True)


if __name__ == "__main__":
    main()
