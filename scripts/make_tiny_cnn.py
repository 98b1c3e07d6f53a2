"""Writes models/tiny_cnn/tiny_cnn.onnx: a small image classifier with random (seeded) weights,
for the GPU pipeline example and its test. Not trained: the example shows the data path, not
accuracy.

  image float32 [1,3,32,32] (normalized RGB) -> logits float32 [1,10]
  Conv 3->16 3x3 pad 1, Relu, MaxPool 2x2, Conv 16->32 3x3 stride 2 pad 1, Relu,
  depthwise Conv 32 3x3 pad 1, Relu, GlobalAveragePool, Flatten, Gemm 32->10

Run: python3 scripts/make_tiny_cnn.py   (needs onnx==1.22.0 and numpy; deterministic)
"""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = pathlib.Path(__file__).resolve().parent.parent / "models" / "tiny_cnn" / "tiny_cnn.onnx"


def main():
    rng = np.random.default_rng(7)

    def weight(name, *shape):
        fan_in = int(np.prod(shape[1:]))
        data = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return numpy_helper.from_array(data, name)

    def bias(name, n):
        return numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), name)

    inits = [weight("w1", 16, 3, 3, 3), bias("b1", 16), weight("w2", 32, 16, 3, 3), bias("b2", 32),
             weight("w3", 32, 1, 3, 3), bias("b3", 32), weight("fc", 10, 32), bias("fcb", 10)]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], group=32, name="dwconv3"),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onyx")
    model.ir_version = 8
    onnx.checker.check_model(model)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
