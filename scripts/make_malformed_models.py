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
