"""Writes the small models the `run` fuzz target embeds and the seed corpora of all targets.

Run from the repository root: python3 fuzz/make_seeds.py
Needs onnx==1.22.0 and numpy. Deterministic; writes only under fuzz/:

  fuzz/models/NN_<name>.onnx   models the `run` target picks by its first byte (sorted order)
  fuzz/corpus/load/*           valid models of every kind (the loader target's seeds)
  fuzz/corpus/plan/*           the same valid models (mutated, they exercise check/infer/plan)
  fuzz/corpus/run/*            for each model, a few inputs: [model byte][input bytes...]
  (files named regress_* are kept: inputs that crashed the fuzzer once, see docs/robustness.md)

Every model takes its shape-like operands (Reshape's shape, Tile's repeats, Slice's starts,
...) as graph inputs, so fuzzed data reaches the kernels' size computations.
"""
import pathlib

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, dtype, shape):
    """A ValueInfo; strings in `shape` are free dimensions."""
    return helper.make_tensor_value_info(name, dtype, shape)


def model(name, nodes, inputs, outputs, inits=(), opset=17):
    """A model with the given graph parts (outputs untyped: Onyx infers them, and ONNX's checker
    requires shapes on every output, so it is not run here)."""
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, producer_name="onyx-fuzz", opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def out(name="y", dtype=F):
    """An output of unknown shape."""
    return helper.make_tensor_value_info(name, dtype, None)


def models():
    """(name, model) for the run target: data-dependent sizes and indices first."""
    rng = np.random.default_rng(8)
    w = numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    return [
        ("reshape", model("reshape", [helper.make_node("Reshape", ["x", "s"], ["y"])],
                          [vi("x", F, ["a", "b"]), vi("s", I64, ["r"])], [out()])),
        ("expand", model("expand", [helper.make_node("Expand", ["x", "s"], ["y"])],
                         [vi("x", F, ["a", "b"]), vi("s", I64, ["r"])], [out()])),
        ("tile", model("tile", [helper.make_node("Tile", ["x", "r"], ["y"])],
                       [vi("x", F, ["a", "b"]), vi("r", I64, [2])], [out()])),
        ("constant_of_shape", model("constant_of_shape",
                                    [helper.make_node("ConstantOfShape", ["s"], ["y"],
                                                      value=numpy_helper.from_array(np.array([1.5], np.float32)))],
                                    [vi("s", I64, ["r"])], [out()])),
        ("range", model("range", [helper.make_node("Range", ["a", "b", "c"], ["y"])],
                        [vi("a", I64, []), vi("b", I64, []), vi("c", I64, [])], [out("y", I64)])),
        ("slice", model("slice", [helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"])],
                        [vi("x", F, ["a", "b"]), vi("s", I64, ["k"]), vi("e", I64, ["k"]),
                         vi("ax", I64, ["k"]), vi("st", I64, ["k"])], [out()])),
        ("gather", model("gather", [helper.make_node("Gather", ["x", "i"], ["g"], axis=1),
                                    helper.make_node("GatherElements", ["x", "j"], ["y"], axis=0)],
                         [vi("x", F, ["a", "b"]), vi("i", I64, ["c"]), vi("j", I64, ["d", "e"])],
                         [out("g"), out()])),
        ("pad", model("pad", [helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="reflect")],
                      [vi("x", F, ["a", "b"]), vi("p", I64, [4]), vi("v", F, [])], [out()])),
        ("topk", model("topk", [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)],
                       [vi("x", F, ["a", "b"]), vi("k", I64, [1])], [out(), out("i", I64)])),
        ("onehot", model("onehot", [helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
                         [vi("i", I64, ["a"]), vi("d", I64, []), vi("v", F, [2])], [out()])),
        ("nonzero", model("nonzero", [helper.make_node("NonZero", ["x"], ["n"]),
                                      helper.make_node("Compress", ["x", "c"], ["y"], axis=0)],
                          [vi("x", F, ["a", "b"]), vi("c", B, ["k"])], [out("n", I64), out()])),
        ("resize", model("resize", [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")],
                         [vi("x", F, [1, 1, "h", "w"]), vi("s", F, [4])], [out()], opset=19)),
        ("conv_pool", model("conv_pool",
                            [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                            [vi("x", F, [1, 3, "h", "w"])], [out()], [w])),
        ("matmul_softmax", model("matmul_softmax",
                                 [helper.make_node("MatMul", ["a", "b"], ["m"]),
                                  helper.make_node("Softmax", ["m"], ["s"], axis=-1),
                                  helper.make_node("ReduceMean", ["s", "ax"], ["y"], keepdims=0)],
                                 [vi("a", F, ["n", "k"]), vi("b", F, ["k2", "m"]), vi("ax", I64, ["r"])],
                                 [out()], opset=18)),
        ("scatter_where", model("scatter_where",
                                [helper.make_node("ScatterElements", ["x", "i", "u"], ["s"], axis=1),
                                 helper.make_node("Where", ["c", "s", "x"], ["y"])],
                                [vi("x", F, ["a", "b"]), vi("i", I64, ["c1", "c2"]), vi("u", F, ["u1", "u2"]),
                                 vi("c", B, ["a", "b"])], [out()])),
        ("cast_cumsum", model("cast_cumsum",
                              [helper.make_node("Cast", ["x"], ["i"], to=I64),
                               helper.make_node("CumSum", ["i", "ax"], ["c"]),
                               helper.make_node("ArgMax", ["c"], ["y"], axis=0)],
                              [vi("x", F, ["a", "b"]), vi("ax", I64, [])], [out("y", I64)])),
    ]


def run_seeds(index, m):
    """A few inputs for model `index`: small dims, then values (see fuzz/src/lib.rs)."""
    n_inputs = len(m.graph.input)
    seeds = []
    for variant in range(3):
        rng = np.random.default_rng(1000 * index + variant)
        body = rng.integers(0, 256, 24 * n_inputs + 16, dtype=np.uint8).tobytes()
        seeds.append(bytes([index]) + body)
    return seeds


def main():
    """Writes the models and the three seed corpora (replacing earlier ones)."""
    for d in ("models", "corpus/load", "corpus/plan", "corpus/run"):
        path = ROOT / d
        path.mkdir(parents=True, exist_ok=True)
        # regress_* files are inputs the fuzzer once crashed on, kept as regression seeds.
        for old in path.iterdir():
            if not old.name.startswith("regress_"):
                old.unlink()
    valid = []
    for index, (name, m) in enumerate(models()):
        data = m.SerializeToString()
        (ROOT / "models" / f"{index:02d}_{name}.onnx").write_bytes(data)
        valid.append((name, data))
        for k, seed in enumerate(run_seeds(index, m)):
            (ROOT / "corpus/run" / f"{name}_{k}").write_bytes(seed)
    repo = ROOT.parent
    for extra in ("models/digits/digits.onnx", "models/tiny_cnn/tiny_cnn.onnx"):
        valid.append((pathlib.Path(extra).stem, (repo / extra).read_bytes()))
    for name, data in valid:
        for target in ("load", "plan"):
            (ROOT / "corpus" / target / f"{name}.onnx").write_bytes(data)
    print(f"wrote {len(models())} models and {len(valid)} valid-model seeds under {ROOT}")


if __name__ == "__main__":
    main()
