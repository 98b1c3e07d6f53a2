"""Writes small malformed ONNX models for error tests, with the error each must give.

Run: python3 scripts/make_malformed_models.py OUTDIR
Needs: onnx==1.22.0, numpy (onnxruntime optional: when installed, the script checks that it
rejects every file too). Writes only under OUTDIR:

  OUTDIR/<case>.onnx (or OUTDIR/<case>/model.onnx where the case needs a folder of its own)
  OUTDIR/outside.bin         a valid weights file the external-data cases try to escape to
  OUTDIR/malformed.json      list of {"file", "expect", "stage", "description"}

"file" is relative to OUTDIR. "expect" is a substring the error message must contain;
"stage" is "load" (the file must be rejected when the model is loaded / the session built)
or "run". Deterministic, except that the absolute-path case stores OUTDIR's absolute path.
"""
import json
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
# A PNG signature and IHDR chunk. As protobuf, bytes 0-1 are the key of an unknown fixed64 field
# (skipped with bytes 2-9); byte 10 is 0x00, a key no message may hold, so the bytes cannot
# decode as a ModelProto by accident.
PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x02"


def f32_info(name, shape):
    """A float32 ValueInfo."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def model_of(nodes, inputs, outputs, initializers=(), opset=OPSET, name="malformed"):
    """A ModelProto around the given graph parts, NOT checked (most are invalid on purpose)."""
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, producer_name="onyx-scripts", producer_version="1",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def valid_model():
    """y = x @ w + b with a [16,16] weight: the base the truncated case cuts in half."""
    rng = np.random.default_rng(9009)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    model = model_of(
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
         helper.make_node("Add", ["xw", "b"], ["y"], name="add")],
        [f32_info("x", [2, 16])], [f32_info("y", [2, 16])], [w, b], name="valid")
    onnx.checker.check_model(model, full_check=True)
    return model


def truncated():
    """The first half of a valid model: the cut lands inside the graph's length-delimited field."""
    data = valid_model().SerializeToString()
    return data[: len(data) // 2]


def not_onnx():
    """A PNG-like header followed by seeded random bytes."""
    return PNG_HEAD + np.random.default_rng(9010).integers(0, 256, 200, dtype=np.uint8).tobytes()


def unknown_op():
    """A node of the op type Frobnicate, which no ONNX domain defines."""
    return model_of([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")],
                    [f32_info("x", [2, 3])], [f32_info("y", [2, 3])])


def cycle():
    """Two Add nodes feeding each other."""
    return model_of(
        [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
         helper.make_node("Add", ["a", "x"], ["b"], name="add_b")],
        [f32_info("x", [2, 3])], [f32_info("b", [2, 3])])


def missing_initializer():
    """A node reads 'missing_weight', which no input, initializer or node defines."""
    return model_of([helper.make_node("MatMul", ["x", "missing_weight"], ["y"], name="matmul")],
                    [f32_info("x", [2, 3])], [f32_info("y", [2, 4])])


def duplicate_output():
    """Two nodes both produce the value 'dup'."""
    return model_of(
        [helper.make_node("Relu", ["x"], ["dup"], name="relu"),
         helper.make_node("Neg", ["x"], ["dup"], name="neg"),
         helper.make_node("Abs", ["dup"], ["y"], name="abs")],
        [f32_info("x", [2, 3])], [f32_info("y", [2, 3])])


def external_weight_model(location):
    """y = x @ w with w [4,4] float32 stored externally at `location` (not checked)."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    return model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
                    [f32_info("x", [2, 4])], [f32_info("y", [2, 4])], [w])


def raw_data_wrong_size():
    """Initializer 'bad_weight' declared float [3,4] (48 bytes) with 40 bytes of raw_data."""
    w = TensorProto(name="bad_weight", data_type=TensorProto.FLOAT, dims=[3, 4],
                    raw_data=np.arange(1, 11, dtype=np.float32).tobytes())
    return model_of([helper.make_node("MatMul", ["x", "bad_weight"], ["y"], name="matmul")],
                    [f32_info("x", [2, 3])], [f32_info("y", [2, 4])], [w])


def attribute_wrong_type():
    """Conv whose 'group' attribute is the float 1.0 instead of an int."""
    w = numpy_helper.from_array(np.full((2, 3, 3, 3), 0.1, dtype=np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], group=1.0)
    return model_of([conv], [f32_info("x", [1, 3, 5, 5])], [f32_info("y", [1, 2, 5, 5])], [w])


def opset_99():
    """A plain Relu model importing the default domain at version 99."""
    return model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                    [f32_info("x", [2, 3])], [f32_info("y", [2, 3])], opset=99)


def flipped_bytes():
    """A valid model whose first key byte 0x08 (field 1, varint) is flipped to 0x0f (wire type 7,
    which protobuf does not define)."""
    data = bytearray(valid_model().SerializeToString())
    assert data[0] == 0x08
    data[0] ^= 0x07
    return bytes(data)


def inserted_bytes():
    """Three 0xff bytes inserted after the first field: they start a key whose varint runs into
    the next field, giving a field number with an undefined wire type."""
    data = valid_model().SerializeToString()
    return data[:2] + b"\xff\xff\xff" + data[2:]


def unknown_domain():
    """A Relu node in the domain com.example.nowhere, which the model imports."""
    model = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu", domain="com.example.nowhere")],
                     [f32_info("x", [2, 3])], [f32_info("y", [2, 3])])
    model.opset_import.append(helper.make_opsetid("com.example.nowhere", 1))
    return model


def dangling_output():
    """The graph declares an output 'never_made' that no node produces."""
    return model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                    [f32_info("x", [2, 3])], [f32_info("y", [2, 3]), f32_info("never_made", [2, 3])])


def negative_dim():
    """Graph input 'x' declared with the dim -3."""
    return model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                    [f32_info("x", [-3, 4])], [f32_info("y", [3, 4])])


def negative_initializer_dim():
    """Initializer 'neg_weight' with dims [-1, 4] and 16 bytes of data."""
    w = TensorProto(name="neg_weight", data_type=TensorProto.FLOAT, dims=[-1, 4],
                    raw_data=np.zeros(4, np.float32).tobytes())
    return model_of([helper.make_node("Add", ["x", "neg_weight"], ["y"], name="add")],
                    [f32_info("x", [1, 4])], [f32_info("y", [1, 4])], [w])


def enormous_initializer_dims():
    """Initializer 'big_weight' of dims [2^40, 2^40] (2^80 elements) with 16 bytes of data."""
    w = TensorProto(name="big_weight", data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 40],
                    raw_data=np.zeros(4, np.float32).tobytes())
    return model_of([helper.make_node("Add", ["x", "big_weight"], ["y"], name="add")],
                    [f32_info("x", [1, 4])], [f32_info("y", [1, 4])], [w])


def enormous_input_dims():
    """Graph input 'x' declared float [2^40, 2^40]: Relu's output would take 2^82 bytes, over
    the session's max_tensor_bytes, which refuses it before anything is allocated."""
    return model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                    [f32_info("x", [1 << 40, 1 << 40])], [f32_info("y", [1 << 40, 1 << 40])])


def constant_of_shape_huge():
    """ConstantOfShape 'fill' of the constant shape [2^40]: 4 TiB of floats."""
    shape = numpy_helper.from_array(np.array([1 << 40], np.int64), "shape")
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill",
                            value=numpy_helper.from_array(np.array([1.0], np.float32)))
    return model_of([node], [], [f32_info("y", [1 << 40])], [shape])


def float_data_wrong_count():
    """Initializer 'short_weight' declared float [3,4] with 5 values in float_data."""
    w = TensorProto(name="short_weight", data_type=TensorProto.FLOAT, dims=[3, 4],
                    float_data=[1.0, 2.0, 3.0, 4.0, 5.0])
    return model_of([helper.make_node("MatMul", ["x", "short_weight"], ["y"], name="matmul")],
                    [f32_info("x", [2, 3])], [f32_info("y", [2, 4])], [w])


def invalid_dtype():
    """Initializer 'odd_weight' whose data_type is 99, which ONNX does not define."""
    w = TensorProto(name="odd_weight", data_type=99, dims=[2], raw_data=b"\0" * 8)
    return model_of([helper.make_node("Add", ["x", "odd_weight"], ["y"], name="add")],
                    [f32_info("x", [2])], [f32_info("y", [2])], [w])


def invalid_input_dtype():
    """Graph input 'x' whose elem_type is 77."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    x.type.tensor_type.elem_type = 77
    return model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [f32_info("y", [2])])


def conv_zero_stride():
    """Conv 'conv' with strides [0, 0]."""
    w = numpy_helper.from_array(np.full((2, 3, 3, 3), 0.1, dtype=np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=[0, 0])
    return model_of([conv], [f32_info("x", [1, 3, 5, 5])], [f32_info("y", [1, 2, 3, 3])], [w])


def conv_absurd_kernel():
    """Conv 'conv' whose kernel_shape attribute is [2^40, 2^40] (the weight is 3x3)."""
    w = numpy_helper.from_array(np.full((2, 3, 3, 3), 0.1, dtype=np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[1 << 40, 1 << 40])
    return model_of([conv], [f32_info("x", [1, 3, 5, 5])], [f32_info("y", [1, 2, 3, 3])], [w])


def absurd_group():
    """Conv 'conv' with group = 2^40."""
    w = numpy_helper.from_array(np.full((2, 3, 3, 3), 0.1, dtype=np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=1 << 40)
    return model_of([conv], [f32_info("x", [1, 3, 5, 5])], [f32_info("y", [1, 2, 3, 3])], [w])


def varint(n):
    """Protobuf base-128 varint."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field (bytes, string or message)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def if_node(name, inner_graph, else_graph, output):
    """NodeProto bytes of If `name` whose then-branch is the GraphProto bytes `inner_graph`."""
    def graph_attr(attr_name, graph):
        # AttributeProto: name = 1, g = 6, type = 20 (GRAPH = 5).
        return field(1, attr_name.encode()) + field(6, graph) + varint(20 << 3) + varint(5)
    # NodeProto: input = 1, output = 2, name = 3, op_type = 4, attribute = 5.
    return (field(1, b"c") + field(2, output.encode()) + field(3, name.encode()) + field(4, b"If")
            + field(5, graph_attr("then_branch", inner_graph)) + field(5, graph_attr("else_branch", else_graph)))


def deep_nesting(depth=70):
    """`depth` If nodes nested in each other's then-branch (each else-branch passes x through),
    serialized by hand: Python's protobuf refuses messages nested this deep."""
    def leaf(name, out):
        g = helper.make_graph([helper.make_node("Identity", ["x"], [out], name=name)], name, [],
                              [f32_info(out, [2])])
        return g.SerializeToString()
    graph = leaf("g0", "y0")
    for d in range(1, depth + 1):
        out = f"y{d}"
        node = if_node(f"if{d}", graph, leaf(f"e{d}", f"e{d}"), out)
        # GraphProto: node = 1, name = 2, output = 12.
        graph = field(1, node) + field(2, f"g{d}".encode()) + field(12, f32_info(out, [2]).SerializeToString())
    top = model_of([], [f32_info("x", [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [])
    inputs = b"".join(field(11, i.SerializeToString()) for i in top.graph.input)
    top.ClearField("graph")
    # ModelProto: graph = 7.
    return top.SerializeToString() + field(7, graph + inputs)


def type_mismatch():
    """Add 'add' of a float and an int64 input."""
    return model_of([helper.make_node("Add", ["x", "i"], ["y"], name="add")],
                    [f32_info("x", [2]), helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                    [f32_info("y", [2])])


def external_model(location, offset=0, length=64):
    """external_weight_model with a given offset and length."""
    model = external_weight_model(location)
    entries = model.graph.initializer[0].external_data
    entries[1].value, entries[2].value = str(offset), str(length)
    return model


def cases(outdir):
    """(file, contents: bytes or ModelProto, expect, description) for every case."""
    absolute = str((outdir / "outside.bin").resolve())
    return [
        ("truncated.onnx", truncated(), "decode",
         "the first half of a valid model: a protobuf field runs past the end of the file"),
        ("not_onnx.onnx", not_onnx(), "decode",
         "a PNG header and random bytes, not a protobuf message"),
        ("empty.onnx", b"", "empty",
         "a 0-byte file (decodes as an empty ModelProto: no graph)"),
        ("unknown_op.onnx", unknown_op(), "Frobnicate",
         "a node of op type Frobnicate in the default domain"),
        ("cycle.onnx", cycle(), "cycle",
         "Add nodes add_a and add_b read each other's outputs"),
        ("missing_initializer.onnx", missing_initializer(), "missing_weight",
         "MatMul reads 'missing_weight', which no input, initializer or node defines"),
        ("duplicate_output.onnx", duplicate_output(), "produced twice",
         "nodes relu and neg both produce the value 'dup'"),
        ("external_parent/model.onnx", external_weight_model("../outside.bin"), "outside",
         "external data location '../outside.bin' leaves the model's folder (the file exists "
         "and is valid, so only the path check can reject it)"),
        ("external_absolute/model.onnx", external_weight_model(absolute), "outside",
         "external data location is an absolute path (to the existing valid outside.bin)"),
        ("raw_data_size.onnx", raw_data_wrong_size(), "bad_weight",
         "initializer 'bad_weight' is float [3,4] (48 bytes) but has 40 bytes of raw_data"),
        ("attribute_type.onnx", attribute_wrong_type(), "group",
         "Conv attribute 'group' is a float (1.0), the spec says int"),
        ("opset_99.onnx", opset_99(), "version 99",
         "the model imports the default ONNX domain at opset version 99"),
        ("flipped_bytes.onnx", flipped_bytes(), "decode",
         "a valid model whose first key byte has bits flipped into an undefined wire type"),
        ("inserted_bytes.onnx", inserted_bytes(), "decode",
         "a valid model with three 0xff bytes inserted after its first field"),
        ("unknown_domain.onnx", unknown_domain(), "com.example.nowhere",
         "a node in the domain com.example.nowhere"),
        ("dangling_output.onnx", dangling_output(), "never_made",
         "the graph output 'never_made' is produced by no node"),
        ("negative_dim.onnx", negative_dim(), "-3",
         "graph input 'x' has the dim -3"),
        ("negative_initializer_dim.onnx", negative_initializer_dim(), "neg_weight",
         "initializer 'neg_weight' has dims [-1, 4]"),
        ("enormous_initializer_dims.onnx", enormous_initializer_dims(), "big_weight",
         "initializer 'big_weight' has dims [2^40, 2^40] and 16 bytes of data"),
        ("enormous_input_dims.onnx", enormous_input_dims(), "max_tensor_bytes",
         "input 'x' is float [2^40, 2^40]: Relu's output is over the tensor size limit"),
        ("constant_of_shape_huge.onnx", constant_of_shape_huge(), "max_tensor_bytes",
         "ConstantOfShape of the constant shape [2^40]: 4 TiB, over the tensor size limit"),
        ("float_data_count.onnx", float_data_wrong_count(), "short_weight",
         "initializer 'short_weight' is float [3,4] with 5 values in float_data"),
        ("invalid_dtype.onnx", invalid_dtype(), "99",
         "initializer 'odd_weight' has data_type 99"),
        ("invalid_input_dtype.onnx", invalid_input_dtype(), "77",
         "graph input 'x' has elem_type 77"),
        ("conv_zero_stride.onnx", conv_zero_stride(), "strides",
         "Conv with strides [0, 0]"),
        ("conv_absurd_kernel.onnx", conv_absurd_kernel(), "kernel_shape",
         "Conv with kernel_shape [2^40, 2^40]"),
        ("conv_absurd_group.onnx", absurd_group(), "group",
         "Conv with group 2^40"),
        ("deep_nesting.onnx", deep_nesting(), "recursion limit",
         "70 If nodes nested in each other's then-branches: the protobuf decoder's recursion "
         "limit (100 messages, 3 per If level) refuses it before the IR's 64-level limit"),
        ("type_mismatch.onnx", type_mismatch(), "add",
         "Add of a float and an int64 tensor"),
        ("external_symlink/model.onnx", external_weight_model("link.bin"), "outside",
         "external data 'link.bin' is a symlink (made by main) to ../outside.bin"),
        ("external_offset/model.onnx", external_model("weights.bin", offset=1000), "weights.bin",
         "external data offset 1000 is past the end of the 64-byte weights.bin"),
        ("external_length/model.onnx", external_model("weights.bin", offset=32, length=64), "weights.bin",
         "external data of 64 bytes at offset 32 runs past the end of the 64-byte weights.bin"),
        ("external_missing/model.onnx", external_weight_model("nowhere.bin"), "nowhere.bin",
         "external data file nowhere.bin does not exist"),
    ]


def ort_rejects(path):
    """onnxruntime's error message for the file, or None if it loads (or ORT is missing)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime not installed: not checked"
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # ORT raises several exception types; any rejection is fine
        return str(err).splitlines()[0][:150]
    return None


def main():
    """Writes every malformed file and malformed.json."""
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = pathlib.Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    weights = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    (outdir / "outside.bin").write_bytes(weights.tobytes())
    for folder in ("external_offset", "external_length"):
        (outdir / folder).mkdir(parents=True, exist_ok=True)
        (outdir / folder / "weights.bin").write_bytes(weights.tobytes())
    link = outdir / "external_symlink" / "link.bin"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to("../outside.bin")
    entries = []
    accepted = []
    for file, contents, expect, description in cases(outdir):
        path = outdir / file
        path.parent.mkdir(parents=True, exist_ok=True)
        data = contents if isinstance(contents, bytes) else contents.SerializeToString()
        path.write_bytes(data)
        entries.append({"file": file, "expect": expect, "stage": "load",
                        "description": description})
        ort_message = ort_rejects(path)
        print(f"{file:30s} expect {expect!r:18s} onnxruntime: {ort_message or 'ACCEPTED'}")
        if ort_message is None:
            accepted.append(file)
    (outdir / "malformed.json").write_text(json.dumps(entries, indent=2) + "\n")
    print(f"wrote {len(entries)} malformed models to {outdir}")
    if accepted:
        print(f"note: onnxruntime accepts {accepted}", file=sys.stderr)


if __name__ == "__main__":
    main()
