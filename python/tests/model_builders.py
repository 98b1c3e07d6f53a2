"""Small ONNX models built with onnx.helper for the differential tests.

Every builder returns an ``onnx.ModelProto``; the ``save_model`` fixture in
conftest.py writes it under a tmp_path_factory directory and returns its path.
Weights come from seeded numpy RNGs, sizes are deliberately awkward (7, 11, 13).
"""

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

DEFAULT_OPSET = 19
DEFAULT_IR = 9
#: (opset, ir_version) pairs that the suite exercises.
OPSET_IR = [(17, 8), (19, 9), (21, 10)]

#: numpy dtype name -> ONNX element type
ELEM = {
    "float32": T.FLOAT,
    "float64": T.DOUBLE,
    "float16": T.FLOAT16,
    "int8": T.INT8,
    "uint8": T.UINT8,
    "int16": T.INT16,
    "uint16": T.UINT16,
    "int32": T.INT32,
    "int64": T.INT64,
    "uint32": T.UINT32,
    "uint64": T.UINT64,
    "bool": T.BOOL,
    "string": T.STRING,
}

#: ONNX element type -> the string ORT writes in NodeArg.type
TYPE_STR = {
    T.FLOAT: "tensor(float)",
    T.DOUBLE: "tensor(double)",
    T.FLOAT16: "tensor(float16)",
    T.INT8: "tensor(int8)",
    T.UINT8: "tensor(uint8)",
    T.INT16: "tensor(int16)",
    T.UINT16: "tensor(uint16)",
    T.INT32: "tensor(int32)",
    T.INT64: "tensor(int64)",
    T.UINT32: "tensor(uint32)",
    T.UINT64: "tensor(uint64)",
    T.BOOL: "tensor(bool)",
    T.STRING: "tensor(string)",
}


def make_model(nodes, inputs, outputs, initializers=(), opset=DEFAULT_OPSET,
               ir=DEFAULT_IR, graph_name="g", check=True):
    """Wrap nodes/value infos into a checked ModelProto."""
    graph = h.make_graph(list(nodes), graph_name, list(inputs), list(outputs),
                         initializer=list(initializers))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)],
                         ir_version=ir)
    if check:
        onnx.checker.check_model(model)
    return model


def tvi(name, dtype, shape):
    """Tensor value info; dtype is a numpy dtype name or ONNX elem type."""
    elem = ELEM[dtype] if isinstance(dtype, str) else dtype
    return h.make_tensor_value_info(name, elem, shape)


def binary(op, dtype, shape=("batch", 7), opset=DEFAULT_OPSET, ir=DEFAULT_IR):
    """c = op(a, b) with both inputs of the given shape (symbolic 'batch')."""
    shape = list(shape)
    return make_model([h.make_node(op, ["a", "b"], ["c"])],
                      [tvi("a", dtype, shape), tvi("b", dtype, shape)],
                      [tvi("c", dtype, shape)], opset=opset, ir=ir)


def broadcast_add(dtype="float32"):
    """c[batch, 7] = a[batch, 7] + b[7]."""
    return make_model([h.make_node("Add", ["a", "b"], ["c"])],
                      [tvi("a", dtype, ["batch", 7]), tvi("b", dtype, [7])],
                      [tvi("c", dtype, ["batch", 7])])


def unary(op, dtype, shape=("batch", 7), opset=DEFAULT_OPSET, ir=DEFAULT_IR):
    """y = op(x)."""
    shape = list(shape)
    return make_model([h.make_node(op, ["x"], ["y"])], [tvi("x", dtype, shape)],
                      [tvi("y", dtype, shape)], opset=opset, ir=ir)


def matmul(dtype, k=13, n=11, seed=1, opset=DEFAULT_OPSET, ir=DEFAULT_IR):
    """y[batch, n] = x[batch, k] @ W[k, n] with W a seeded initializer."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        w = rng.uniform(-1.0, 1.0, size=(k, n)).astype(dtype)
    else:
        w = rng.integers(0, 4, size=(k, n)).astype(dtype)
    w.flat[0] = 1  # never all zeros
    return make_model([h.make_node("MatMul", ["x", "W"], ["y"])],
                      [tvi("x", dtype, ["batch", k])], [tvi("y", dtype, ["batch", n])],
                      initializers=[numpy_helper.from_array(w, "W")], opset=opset, ir=ir)


def matmul_two_inputs(dtype="float32"):
    """y = a @ b with every dim symbolic, both operands fed."""
    return make_model([h.make_node("MatMul", ["a", "b"], ["y"])],
                      [tvi("a", dtype, ["m", "k"]), tvi("b", dtype, ["k", "n"])],
                      [tvi("y", dtype, ["m", "n"])])


def cast(src, dst, opset=DEFAULT_OPSET, ir=DEFAULT_IR, shape=("n", 5)):
    """y = Cast(x, to=dst)."""
    shape = list(shape)
    return make_model([h.make_node("Cast", ["x"], ["y"], to=ELEM[dst])],
                      [tvi("x", src, shape)], [tvi("y", dst, shape)], opset=opset, ir=ir)


def identity(dtype, shape=("n",)):
    """y = Identity(x)."""
    return unary("Identity", dtype, shape)


def add_mul_two_outputs():
    """Two outputs: 'sum' = a + b and 'prod' = a * b (float32, [batch, 7])."""
    return make_model(
        [h.make_node("Add", ["a", "b"], ["sum"]), h.make_node("Mul", ["a", "b"], ["prod"])],
        [tvi("a", "float32", ["batch", 7]), tvi("b", "float32", ["batch", 7])],
        [tvi("sum", "float32", ["batch", 7]), tvi("prod", "float32", ["batch", 7])])


def scalar_add():
    """0-d float32 inputs and output."""
    return make_model([h.make_node("Add", ["a", "b"], ["c"])],
                      [tvi("a", "float32", []), tvi("b", "float32", [])],
                      [tvi("c", "float32", [])])


def mlp(seed=3, opset=DEFAULT_OPSET, ir=DEFAULT_IR):
    """x[batch,13] -> MatMul 13x17 -> Add -> Relu -> MatMul 17x5 -> Softmax."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((13, 17)).astype(np.float32) * 0.3
    b1 = rng.standard_normal(17).astype(np.float32) * 0.1
    w2 = rng.standard_normal((17, 5)).astype(np.float32) * 0.3
    nodes = [
        h.make_node("MatMul", ["x", "w1"], ["h0"]),
        h.make_node("Add", ["h0", "b1"], ["h1"]),
        h.make_node("Relu", ["h1"], ["h2"]),
        h.make_node("MatMul", ["h2", "w2"], ["logits"]),
        h.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
             numpy_helper.from_array(w2, "w2")]
    return make_model(nodes, [tvi("x", "float32", ["batch", 13])],
                      [tvi("probs", "float32", ["batch", 5])], initializers=inits,
                      opset=opset, ir=ir)


def typed_io(elem, in_shape, out_shape=None):
    """Identity whose input/output carry the given element type and shapes
    (out_shape None: the output value info has no shape at all)."""
    return make_model([h.make_node("Identity", ["x"], ["y"])],
                      [tvi("x", elem, in_shape)], [tvi("y", elem, out_shape)],
                      check=in_shape is not None and out_shape is not None)


def seq_construct():
    """s = SequenceConstruct(a[2,3], b[n,3]) -> seq(tensor(float))."""
    return make_model(
        [h.make_node("SequenceConstruct", ["a", "b"], ["s"])],
        [tvi("a", "float32", [2, 3]), tvi("b", "float32", ["n", 3])],
        [h.make_tensor_sequence_value_info("s", T.FLOAT, None)])


def seq_input():
    """Sequence input: y = SequenceAt(s, i), n = SequenceLength(s)."""
    return make_model(
        [h.make_node("SequenceAt", ["s", "i"], ["y"]),
         h.make_node("SequenceLength", ["s"], ["n"])],
        [h.make_tensor_sequence_value_info("s", T.FLOAT, None), tvi("i", "int64", [])],
        [tvi("y", "float32", None), tvi("n", "int64", [])], check=False)


def _optional_float(shape):
    return h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, shape))


def optional_input():
    """Optional graph input: has = OptionalHasElement(o), oo = Identity(o)."""
    opt = _optional_float([3])
    return make_model(
        [h.make_node("OptionalHasElement", ["o"], ["has"]),
         h.make_node("Identity", ["o"], ["oo"])],
        [h.make_value_info("o", opt)],
        [tvi("has", "bool", []), h.make_value_info("oo", opt)])


def optional_in_graph():
    """o = Optional(x); has = OptionalHasElement(o); y = OptionalGetElement(o)."""
    return make_model(
        [h.make_node("Optional", ["x"], ["o"]),
         h.make_node("OptionalHasElement", ["o"], ["has"]),
         h.make_node("OptionalGetElement", ["o"], ["y"])],
        [tvi("x", "float32", [3])],
        [tvi("has", "bool", []), tvi("y", "float32", [3])])


def empty_optional():
    """No inputs; o = Optional(type=float[2]) (empty), has = OptionalHasElement(o)."""
    return make_model(
        [h.make_node("Optional", [], ["o"], type=h.make_tensor_type_proto(T.FLOAT, [2])),
         h.make_node("OptionalHasElement", ["o"], ["has"])],
        [], [tvi("has", "bool", []), h.make_value_info("o", _optional_float([2]))])


def overridable_initializer(seed=5):
    """c = a + w where w is an initializer that is also listed as a graph input."""
    w = np.random.default_rng(seed).uniform(-2, 2, size=(2, 7)).astype(np.float32)
    return make_model([h.make_node("Add", ["a", "w"], ["c"])],
                      [tvi("a", "float32", ["batch", 7]), tvi("w", "float32", [2, 7])],
                      [tvi("c", "float32", ["batch", 7])],
                      initializers=[numpy_helper.from_array(w, "w")])


def plain_initializer(seed=5):
    """c = a + w where w is an initializer that is not a graph input."""
    w = np.random.default_rng(seed).uniform(-2, 2, size=(2, 7)).astype(np.float32)
    return make_model([h.make_node("Add", ["a", "w"], ["c"])],
                      [tvi("a", "float32", ["batch", 7])],
                      [tvi("c", "float32", ["batch", 7])],
                      initializers=[numpy_helper.from_array(w, "w")])


def with_metadata():
    """binary Add with every ModelProto metadata field set."""
    model = binary("Add", "float32")
    model.producer_name = "onyx-tests"
    model.producer_version = "0.3.1"
    model.domain = "ai.onyx.test"
    model.doc_string = "A model for metadata tests."
    model.model_version = 7
    model.graph.name = "metadata_graph"
    model.graph.doc_string = "graph doc – with non-ASCII ✓"
    h.set_model_props(model, {"author": "tests", "license": "MIT", "note": "värde ✓"})
    return model


def with_denotation():
    """binary Add whose dim 0 (dim_param 'batch') has denotation DATA_BATCH."""
    model = binary("Add", "float32")
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    return model


def unknown_op():
    """A node of an op type no runtime knows."""
    return make_model([h.make_node("NoSuchOpAnywhere", ["x"], ["y"])],
                      [tvi("x", "float32", [3])], [tvi("y", "float32", [3])], check=False)


def dangling_input():
    """A node reads a name no one produces."""
    return make_model([h.make_node("Add", ["a", "ghost"], ["c"])],
                      [tvi("a", "float32", [3])], [tvi("c", "float32", [3])], check=False)


def type_mismatch():
    """Add over float and int64 inputs: not a valid graph."""
    return make_model([h.make_node("Add", ["a", "b"], ["c"])],
                      [tvi("a", "float32", [3]), tvi("b", "int64", [3])],
                      [tvi("c", "float32", [3])], check=False)


def reshape_dynamic():
    """y = Reshape(x, s) with the target shape fed at run time."""
    return make_model([h.make_node("Reshape", ["x", "s"], ["y"])],
                      [tvi("x", "float32", ["n"]), tvi("s", "int64", [1])],
                      [tvi("y", "float32", None)], check=False)


def matmul_chain(depth=1200, n=192):
    """x @ w, `depth` times over: a run long enough (a fraction of a second) to be stopped."""
    nodes = [h.make_node("MatMul", ["x" if i == 0 else f"h{i}", "w"],
                         ["y" if i + 1 == depth else f"h{i + 1}"]) for i in range(depth)]
    return make_model(nodes, [tvi("x", "float32", (n, n))], [tvi("y", "float32", (n, n))],
                      initializers=[numpy_helper.from_array(
                          (np.random.default_rng(9).random((n, n)) * 2 / n).astype(np.float32), "w")])
