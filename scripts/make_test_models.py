"""Generates end-to-end test models with seeded random weights and ONNX Runtime reference outputs
(Pillow's for ImageDecoder, which ONNX Runtime's CPU EP lacks).

Run: python3 scripts/make_test_models.py OUTDIR [--only CASE[,CASE...]]
Needs: onnx==1.22.0, onnxruntime, numpy, pillow. Deterministic (fixed seeds, ORT with graph
optimizations disabled and one thread). Writes only under OUTDIR:

  OUTDIR/<case>/model.onnx                 (if_true and if_false share if_model/model.onnx)
  OUTDIR/<case>/inputs/<file>.npy          one per graph input
  OUTDIR/<case>/outputs/<file>.npy         one per graph output, computed by ONNX Runtime
  OUTDIR/manifest.json                     list of cases, see `manifest_entry`

<file> is the value name with every character outside [A-Za-z0-9._-] replaced by '_'. All
paths in the manifest are relative to OUTDIR. A case passes when for every output
|actual - expected| <= atol + rtol * |expected| elementwise (numpy.allclose semantics),
with integer and bool outputs compared exactly.
"""
import argparse
import dataclasses
import json
import math
import pathlib
import re
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import AttributeProto, TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "onyx-scripts"
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5


# ----------------------------------------------------------------------------------------------
# Graph building helpers


class GraphBuilder:
    """Collects nodes and initializers; names outputs the way torch.onnx.export does."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []
        self.counter = 0

    def init(self, name, array):
        """Adds an initializer and returns its name."""
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, name=None, n_out=1, domain=None, **attrs):
        """Adds a node; returns its output name (or a list of names when n_out > 1)."""
        if name is None:
            self.counter += 1
            name = f"/{op_type}_{self.counter}"
        outputs = [f"{name}_output_{i}" for i in range(n_out)]
        node = helper.make_node(op_type, list(inputs), outputs, name=name, domain=domain, **attrs)
        self.nodes.append(node)
        return outputs[0] if n_out == 1 else outputs

    def op_to(self, op_type, inputs, output, name=None, **attrs):
        """Adds a node writing the given output name (a graph output) and returns it."""
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [output], name=name or f"/{op_type}_{output}",
                             **attrs)
        )
        return output

    def const(self, array, name=None):
        """Adds a Constant node holding `array` and returns its output name."""
        self.counter += 1
        name = name or f"/Constant_{self.counter}"
        tensor = numpy_helper.from_array(np.asarray(array), name + "_value")
        return self.op("Constant", [], name=name, value=tensor)

    def i64(self, values, name=None):
        """A Constant int64 tensor (a python int gives a scalar)."""
        return self.const(np.array(values, dtype=np.int64), name)

    def f32(self, values, name=None):
        """A Constant float32 tensor (a python float gives a scalar)."""
        return self.const(np.array(values, dtype=np.float32), name)

    def model(self, graph_name, inputs, outputs, doc, functions=(), extra_opsets=()):
        """Builds, checks and returns the ModelProto."""
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs,
                                  initializer=self.initializers)
        return make_model(graph, doc, functions, extra_opsets)


def make_model(graph, doc, functions=(), extra_opsets=()):
    """Wraps a graph in a checked opset-17 ModelProto."""
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, producer_name=PRODUCER, producer_version="1",
                              opset_imports=opsets, doc_string=doc, functions=list(functions))
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def f32_info(name, shape):
    """A float32 ValueInfo."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def torch_scope(prefix):
    """'encoder.layer.0.attention' -> '/encoder/layer.0/attention', torch's node-name scopes."""
    return "/" + re.sub(r"\.(?!\d)", "/", prefix)


def he_normal(rng, shape, fan_in):
    """He-initialized float32 weights: N(0, 2 / fan_in)."""
    return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)


def lecun_normal(rng, shape, fan_in):
    """LeCun-initialized float32 weights: N(0, 1 / fan_in)."""
    return (rng.standard_normal(shape) * math.sqrt(1.0 / fan_in)).astype(np.float32)


def uniform(rng, shape, lo, hi):
    """float32 uniform values in [lo, hi)."""
    return rng.uniform(lo, hi, shape).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Cases


@dataclasses.dataclass
class Case:
    """One end-to-end test case: a model, its inputs, and how closely outputs must match."""

    name: str
    model: onnx.ModelProto
    inputs: dict
    description: str
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    model_dir: str = ""  # folder of the model file; the case name when empty
    external_data: bool = False
    reference: dict = None  # expected outputs from another reference than ONNX Runtime


def resnet18_case():
    """ResNet-18 with unfolded BatchNormalization on a 224x224 image."""
    rng = np.random.default_rng(1018)
    b = GraphBuilder(rng)

    def conv_bn(x, cin, cout, k, stride, prefix, gamma=(0.8, 1.2)):
        w = b.init(f"{prefix}.conv.weight", he_normal(rng, (cout, cin, k, k), cin * k * k))
        y = b.op("Conv", [x, w], f"/{prefix}/conv/Conv", kernel_shape=[k, k],
                 strides=[stride, stride], pads=[k // 2] * 4, dilations=[1, 1], group=1)
        params = [
            b.init(f"{prefix}.bn.weight", uniform(rng, cout, *gamma)),
            b.init(f"{prefix}.bn.bias", (rng.standard_normal(cout) * 0.1).astype(np.float32)),
            b.init(f"{prefix}.bn.running_mean",
                   (rng.standard_normal(cout) * 0.1).astype(np.float32)),
            b.init(f"{prefix}.bn.running_var", uniform(rng, cout, 0.8, 1.2)),
        ]
        return b.op("BatchNormalization", [y] + params, f"/{prefix}/bn/BatchNormalization",
                    epsilon=1e-5, momentum=0.9)

    def basic_block(x, cin, cout, stride, prefix):
        y = b.op("Relu", [conv_bn(x, cin, cout, 3, stride, f"{prefix}.1")], f"/{prefix}/relu/Relu")
        # a small gamma on the last BN of the residual branch keeps activations O(1) with depth
        y = conv_bn(y, cout, cout, 3, 1, f"{prefix}.2", gamma=(0.2, 0.4))
        if stride != 1 or cin != cout:
            x = conv_bn(x, cin, cout, 1, stride, f"{prefix}.downsample", gamma=(0.5, 0.8))
        y = b.op("Add", [y, x], f"/{prefix}/Add")
        return b.op("Relu", [y], f"/{prefix}/relu_1/Relu")

    x = conv_bn("input", 3, 64, 7, 2, "stem")
    x = b.op("Relu", [x], "/relu/Relu")
    x = b.op("MaxPool", [x], "/maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512], start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = basic_block(x, cin, cout, stride, f"layer{stage}.{block}")
            cin = cout
    x = b.op("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    x = b.op("Flatten", [x], "/Flatten", axis=1)
    fc_w = b.init("fc.weight", lecun_normal(rng, (1000, 512), 512) * 2.0)
    fc_b = b.init("fc.bias", (rng.standard_normal(1000) * 0.1).astype(np.float32))
    b.op_to("Gemm", [x, fc_w, fc_b], "logits", "/fc/Gemm", alpha=1.0, beta=1.0, transB=1)
    model = b.model("resnet18", [f32_info("input", [1, 3, 224, 224])],
                    [f32_info("logits", [1, 1000])],
                    "ResNet-18 shaped CNN, random weights, separate BatchNormalization nodes")
    inputs = {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    return Case("resnet18", model, inputs,
                "ResNet-18 (Conv+BatchNormalization unfolded, MaxPool, 8 BasicBlocks with 1x1 "
                "downsample, GlobalAveragePool, Flatten, Gemm to 1000), seeded He-init weights, "
                "random N(0,1) input [1,3,224,224].")


BERT_VOCAB, BERT_HIDDEN, BERT_HEADS, BERT_LAYERS = 1000, 384, 6, 4
BERT_FFN, BERT_MAX_POS = 1536, 512


class BertBuilder:
    """Builds a BERT encoder node by node with torch.onnx.export-like names and patterns."""

    def __init__(self, rng):
        self.rng = rng
        self.b = GraphBuilder(rng)

    def linear(self, x, fan_in, fan_out, prefix, scale=1.0):
        """MatMul by a [fan_in, fan_out] weight then Add bias, as torch exports nn.Linear on 3D."""
        b = self.b
        w = b.init(f"{prefix}.weight", lecun_normal(self.rng, (fan_in, fan_out), fan_in) * scale)
        bias = b.init(f"{prefix}.bias",
                      (self.rng.standard_normal(fan_out) * 0.05).astype(np.float32))
        y = b.op("MatMul", [x, w], f"{torch_scope(prefix)}/MatMul")
        return b.op("Add", [bias, y], f"{torch_scope(prefix)}/Add")

    def ln_params(self, prefix):
        """LayerNorm gamma and beta initializers."""
        gamma = (1.0 + 0.1 * self.rng.standard_normal(BERT_HIDDEN)).astype(np.float32)
        beta = (0.1 * self.rng.standard_normal(BERT_HIDDEN)).astype(np.float32)
        return self.b.init(f"{prefix}.weight", gamma), self.b.init(f"{prefix}.bias", beta)

    def layer_norm(self, x, prefix, decomposed):
        """LayerNormalization, or the ReduceMean/Sub/Pow/... pattern older exporters write."""
        b = self.b
        gamma, beta = self.ln_params(prefix)
        p = torch_scope(prefix)
        if not decomposed:
            return b.op("LayerNormalization", [x, gamma, beta], f"{p}/LayerNormalization",
                        axis=-1, epsilon=1e-12)
        mean = b.op("ReduceMean", [x], f"{p}/ReduceMean", axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean], f"{p}/Sub")
        sq = b.op("Pow", [d, b.f32(2.0, f"{p}/Constant")], f"{p}/Pow")
        var = b.op("ReduceMean", [sq], f"{p}/ReduceMean_1", axes=[-1], keepdims=1)
        var = b.op("Add", [var, b.f32(1e-12, f"{p}/Constant_1")], f"{p}/Add")
        std = b.op("Sqrt", [var], f"{p}/Sqrt")
        y = b.op("Div", [d, std], f"{p}/Div")
        y = b.op("Mul", [y, gamma], f"{p}/Mul")
        return b.op("Add", [y, beta], f"{p}/Add_1")

    def dims(self, x, p, indices):
        """Shape(x) -> Gather each index -> Unsqueeze: the 1-D pieces torch concats for Reshape."""
        b = self.b
        shape = b.op("Shape", [x], f"{p}/Shape")
        out = []
        for i in indices:
            g = b.op("Gather", [shape, b.i64(i, f"{p}/Constant_g{i}")], f"{p}/Gather_{i}", axis=0)
            out.append(b.op("Unsqueeze", [g, b.i64([0], f"{p}/Constant_u{i}")],
                            f"{p}/Unsqueeze_{i}"))
        return out

    def split_heads(self, x, p):
        """[b, s, 384] -> Reshape [b, s, 6, 64] through a Shape/Gather/Unsqueeze/Concat chain."""
        b = self.b
        batch, seq = self.dims(x, p, [0, 1])
        shape = b.op("Concat", [batch, seq, b.i64([BERT_HEADS], f"{p}/Constant_h"),
                                b.i64([BERT_HIDDEN // BERT_HEADS], f"{p}/Constant_d")],
                     f"{p}/Concat", axis=0)
        return b.op("Reshape", [x, shape], f"{p}/Reshape")

    def attention(self, x, mask, prefix):
        """Multi-head self-attention with the additive mask; returns the output projection."""
        b = self.b
        p = torch_scope(prefix)
        q = self.split_heads(self.linear(x, BERT_HIDDEN, BERT_HIDDEN, f"{prefix}.self.query"),
                             f"{p}/self/q")
        k = self.split_heads(self.linear(x, BERT_HIDDEN, BERT_HIDDEN, f"{prefix}.self.key"),
                             f"{p}/self/k")
        v = self.split_heads(self.linear(x, BERT_HIDDEN, BERT_HIDDEN, f"{prefix}.self.value"),
                             f"{p}/self/v")
        q = b.op("Transpose", [q], f"{p}/self/Transpose", perm=[0, 2, 1, 3])
        kt = b.op("Transpose", [k], f"{p}/self/Transpose_1", perm=[0, 2, 3, 1])
        v = b.op("Transpose", [v], f"{p}/self/Transpose_2", perm=[0, 2, 1, 3])
        scores = b.op("MatMul", [q, kt], f"{p}/self/MatMul")
        head_dim = BERT_HIDDEN // BERT_HEADS
        scores = b.op("Div", [scores, b.f32(math.sqrt(head_dim), f"{p}/self/Constant_sqrt")],
                      f"{p}/self/Div")
        scores = b.op("Add", [scores, mask], f"{p}/self/Add")
        probs = b.op("Softmax", [scores], f"{p}/self/Softmax", axis=-1)
        ctx = b.op("MatMul", [probs, v], f"{p}/self/MatMul_1")
        ctx = b.op("Transpose", [ctx], f"{p}/self/Transpose_3", perm=[0, 2, 1, 3])
        batch, seq = self.dims(ctx, f"{p}/self/out", [0, 1])
        shape = b.op("Concat", [batch, seq, b.i64([BERT_HIDDEN], f"{p}/self/Constant_all")],
                     f"{p}/self/Concat_out", axis=0)
        ctx = b.op("Reshape", [ctx, shape], f"{p}/self/Reshape_out")
        return self.linear(ctx, BERT_HIDDEN, BERT_HIDDEN, f"{prefix}.output.dense")

    def gelu(self, x, p):
        """x * 0.5 * (1 + Erf(x / sqrt(2))) as torch exports exact GELU."""
        b = self.b
        y = b.op("Div", [x, b.f32(math.sqrt(2.0), f"{p}/Constant")], f"{p}/Div")
        y = b.op("Erf", [y], f"{p}/Erf")
        y = b.op("Add", [y, b.f32(1.0, f"{p}/Constant_1")], f"{p}/Add")
        y = b.op("Mul", [x, y], f"{p}/Mul")
        return b.op("Mul", [y, b.f32(0.5, f"{p}/Constant_2")], f"{p}/Mul_1")

    def encoder_layer(self, x, mask, i):
        """Attention + residual + LayerNorm, FFN + residual + LayerNorm."""
        b = self.b
        prefix = f"encoder.layer.{i}"
        p = torch_scope(prefix)
        decomposed = i % 2 == 0
        attn = self.attention(x, mask, f"{prefix}.attention")
        x = b.op("Add", [attn, x], f"{p}/attention/output/Add_residual")
        x = self.layer_norm(x, f"{prefix}.attention.output.LayerNorm", decomposed)
        h = self.linear(x, BERT_HIDDEN, BERT_FFN, f"{prefix}.intermediate.dense")
        h = self.gelu(h, f"{p}/intermediate/intermediate_act_fn")
        h = self.linear(h, BERT_FFN, BERT_HIDDEN, f"{prefix}.output.dense")
        x = b.op("Add", [h, x], f"{p}/output/Add_residual")
        return self.layer_norm(x, f"{prefix}.output.LayerNorm", decomposed)

    def embeddings(self):
        """word + position (Shape->Gather->Unsqueeze->Slice of position_ids) + token type 0."""
        b, rng = self.b, self.rng
        word = b.init("embeddings.word_embeddings.weight",
                      rng.standard_normal((BERT_VOCAB, BERT_HIDDEN)).astype(np.float32))
        pos = b.init("embeddings.position_embeddings.weight",
                     (0.5 * rng.standard_normal((BERT_MAX_POS, BERT_HIDDEN))).astype(np.float32))
        tok = b.init("embeddings.token_type_embeddings.weight",
                     (0.5 * rng.standard_normal((2, BERT_HIDDEN))).astype(np.float32))
        pos_ids = b.init("embeddings.position_ids",
                         np.arange(BERT_MAX_POS, dtype=np.int64).reshape(1, BERT_MAX_POS))
        p = "/embeddings"
        ids_shape = b.op("Shape", ["input_ids"], f"{p}/Shape")
        seq = b.op("Gather", [ids_shape, b.i64(1, f"{p}/Constant")], f"{p}/Gather", axis=0)
        seq_1d = b.op("Unsqueeze", [seq, b.i64([0], f"{p}/Constant_1")], f"{p}/Unsqueeze")
        positions = b.op("Slice", [pos_ids, b.i64([0], f"{p}/Constant_2"), seq_1d,
                                   b.i64([1], f"{p}/Constant_3"), b.i64([1], f"{p}/Constant_4")],
                         f"{p}/Slice")
        token_types = b.op("ConstantOfShape", [ids_shape], f"{p}/ConstantOfShape",
                           value=numpy_helper.from_array(np.zeros(1, np.int64), "zero"))
        e = b.op("Gather", [word, "input_ids"], f"{p}/word_embeddings/Gather")
        t = b.op("Gather", [tok, token_types], f"{p}/token_type_embeddings/Gather")
        e = b.op("Add", [e, t], f"{p}/Add")
        e = b.op("Add", [e, b.op("Gather", [pos, positions], f"{p}/position_embeddings/Gather")],
                 f"{p}/Add_1")
        return self.layer_norm(e, "embeddings.LayerNorm", decomposed=False)

    def extended_mask(self):
        """(1 - Cast(Unsqueeze(Unsqueeze(mask)))) * -10000, shape [b, 1, 1, s]."""
        b = self.b
        m = b.op("Unsqueeze", ["attention_mask", b.i64([1], "/Constant_m1")], "/Unsqueeze")
        m = b.op("Unsqueeze", [m, b.i64([2], "/Constant_m2")], "/Unsqueeze_1")
        m = b.op("Cast", [m], "/Cast", to=TensorProto.FLOAT)
        m = b.op("Sub", [b.f32(1.0, "/Constant_m3"), m], "/Sub")
        return b.op("Mul", [m, b.f32(-10000.0, "/Constant_m4")], "/Mul")

    def build(self):
        """The whole model."""
        b = self.b
        mask = self.extended_mask()
        x = self.embeddings()
        for i in range(BERT_LAYERS):
            x = self.encoder_layer(x, mask, i)
        b.op_to("Identity", [x], "last_hidden_state", "/Identity_last")
        first = b.op("Gather", ["last_hidden_state", b.i64(0, "/pooler/Constant")],
                     "/pooler/Gather", axis=1)
        w = b.init("pooler.dense.weight",
                   lecun_normal(self.rng, (BERT_HIDDEN, BERT_HIDDEN), BERT_HIDDEN))
        bias = b.init("pooler.dense.bias",
                      (0.05 * self.rng.standard_normal(BERT_HIDDEN)).astype(np.float32))
        pooled = b.op("Gemm", [first, w, bias], "/pooler/dense/Gemm", alpha=1.0, beta=1.0,
                      transB=1)
        b.op_to("Tanh", [pooled], "pooler_output", "/pooler/activation/Tanh")
        i64 = TensorProto.INT64
        return b.model(
            "bert4",
            [helper.make_tensor_value_info("input_ids", i64, ["batch", "sequence"]),
             helper.make_tensor_value_info("attention_mask", i64, ["batch", "sequence"])],
            [f32_info("last_hidden_state", ["batch", "sequence", BERT_HIDDEN]),
             f32_info("pooler_output", ["batch", BERT_HIDDEN])],
            "BERT-style encoder (4 layers, hidden 384, 6 heads) with random weights, written "
            "with the node patterns torch.onnx.export produces")


def bert4_case():
    """BERT-style 4-layer encoder run with batch 1, sequence 128."""
    rng = np.random.default_rng(4004)
    model = BertBuilder(rng).build()
    seq = 128
    ids = rng.integers(0, BERT_VOCAB, (1, seq), dtype=np.int64)
    mask = np.ones((1, seq), dtype=np.int64)
    mask[0, 101:] = 0  # padding at the end
    mask[0, [7, 40, 77]] = 0  # and a few masked tokens inside
    return Case("bert4", model, {"input_ids": ids, "attention_mask": mask},
                "BERT-style encoder as torch.onnx.export writes it (Shape/Gather/Unsqueeze/Concat "
                "reshapes, additive -10000 mask, exact Erf GELU, LayerNormalization in the "
                "embeddings and layers 1,3, the decomposed ReduceMean/Pow/Sqrt pattern in 0,2), "
                "vocab 1000, hidden 384, 6 heads, 4 layers, FFN 1536, pooler; batch 1, seq 128 "
                "with 30 masked positions.")


def mobilenet_block_case():
    """Three MobileNetV2 inverted residual blocks, then a classifier head."""
    rng = np.random.default_rng(2002)
    b = GraphBuilder(rng)
    relu6_min = b.init("relu6.min", np.array(0.0, dtype=np.float32))
    relu6_max = b.init("relu6.max", np.array(6.0, dtype=np.float32))

    def conv(x, cin, cout, k, stride, group, prefix):
        fan_in = cin // group * k * k
        w = b.init(f"{prefix}.weight", he_normal(rng, (cout, cin // group, k, k), fan_in))
        bias = b.init(f"{prefix}.bias", (0.1 * rng.standard_normal(cout)).astype(np.float32))
        return b.op("Conv", [x, w, bias], f"/{prefix}/Conv", kernel_shape=[k, k],
                    strides=[stride, stride], pads=[k // 2] * 4, group=group)

    def relu6(x, prefix):
        return b.op("Clip", [x, relu6_min, relu6_max], f"/{prefix}/Clip")

    def inverted_residual(x, cin, cout, stride, expand, prefix):
        hidden = cin * expand
        y = relu6(conv(x, cin, hidden, 1, 1, 1, f"{prefix}.expand"), f"{prefix}.expand")
        y = relu6(conv(y, hidden, hidden, 3, stride, hidden, f"{prefix}.dw"), f"{prefix}.dw")
        y = conv(y, hidden, cout, 1, 1, 1, f"{prefix}.project")
        if stride == 1 and cin == cout:
            y = b.op("Add", [x, y], f"/{prefix}/Add")
        return y

    x = inverted_residual("input", 32, 32, 1, 6, "block0")
    x = inverted_residual(x, 32, 48, 2, 6, "block1")
    x = inverted_residual(x, 48, 48, 1, 6, "block2")
    x = b.op("GlobalAveragePool", [x], "/GlobalAveragePool")
    x = b.op("Flatten", [x], "/Flatten", axis=1)
    w = b.init("classifier.weight", lecun_normal(rng, (100, 48), 48))
    bias = b.init("classifier.bias", (0.1 * rng.standard_normal(100)).astype(np.float32))
    b.op_to("Gemm", [x, w, bias], "logits", "/classifier/Gemm", transB=1)
    model = b.model("mobilenet_block", [f32_info("input", [1, 32, 55, 55])],
                    [f32_info("logits", [1, 100])],
                    "MobileNetV2 inverted residual blocks with random weights")
    inputs = {"input": (1.5 * rng.standard_normal((1, 32, 55, 55))).astype(np.float32)}
    return Case("mobilenet_block", model, inputs,
                "MobileNetV2 inverted residual blocks on [1,32,55,55]: 1x1 Conv, Clip(0,6) with "
                "min/max inputs, depthwise 3x3 Conv (group=channels, stride 1 and 2), 1x1 Conv, "
                "residual Add; GlobalAveragePool, Flatten, Gemm to 100.")


def ops_mix_case():
    """Many op kinds on odd shapes, with several outputs."""
    rng = np.random.default_rng(3003)
    b = GraphBuilder(rng)
    # ConvTranspose [1,3,7,9] -> [1,4,14,17]
    wct = b.init("ct.weight", he_normal(rng, (3, 4, 3, 3), 27))
    bct = b.init("ct.bias", (0.1 * rng.standard_normal(4)).astype(np.float32))
    ct = b.op("ConvTranspose", ["x", wct, bct], "/ConvTranspose", strides=[2, 2],
              pads=[1, 1, 1, 1], output_padding=[1, 0], kernel_shape=[3, 3])
    ct = b.op("LeakyRelu", [ct], "/LeakyRelu", alpha=0.13)
    ap1 = b.op("AveragePool", [ct], "/AveragePool_excl", kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1], count_include_pad=0)  # [1,4,7,9]
    ap2 = b.op("AveragePool", [ct], "/AveragePool_incl", kernel_shape=[3, 2], strides=[1, 1],
               pads=[1, 1, 1, 1], count_include_pad=1)  # [1,4,14,18]
    up = b.op("Resize", [ap1, "", b.f32([1.0, 1.0, 2.0, 2.0])], "/Resize", mode="linear",
              coordinate_transformation_mode="half_pixel")  # [1,4,14,18]
    cat = b.op("Concat", [up, ap2], "/Concat", axis=1)  # [1,8,14,18]
    s1, s2, s3 = b.op("Split", [cat, b.i64([1, 3, 4])], "/Split", n_out=3, axis=1)
    # Where on a fixed selector (never on computed comparisons: those could flip on rounding)
    selector = b.init("where.selector", rng.standard_normal((3, 1, 18)) > 0)
    wide = b.op("Expand", [b.op("Sigmoid", [s1]), b.i64([2, 3, 1, 1])], "/Expand")  # [2,3,14,18]
    wh = b.op("Where", [selector, wide, b.op("Tanh", [s2])], "/Where")  # [2,3,14,18]
    g = b.op("Gather", [wh, b.i64([-1, 0, -3, 2, 5])], "/Gather_neg", axis=3)  # [2,3,14,5]
    rmax = b.op("ReduceMax", [g], "/ReduceMax", axes=[2], keepdims=0)  # [2,3,5]
    b.op_to("LogSoftmax", [rmax], "log_softmax/out:0", "/LogSoftmax", axis=1)
    # Transpose, ReduceSum with axes input, Range added on the last axis
    tr = b.op("Transpose", [s3], "/Transpose", perm=[0, 3, 1, 2])  # [1,18,4,14]
    rsum = b.op("ReduceSum", [tr, b.i64([-1])], "/ReduceSum", keepdims=0)  # [1,18,4]
    width = b.op("Gather", [b.op("Shape", ["x"], "/Shape_x"), b.i64(3)], "/Gather_w", axis=0)
    rng_i = b.op("Range", [b.i64(1), width, b.i64(2)], "/Range")  # [1,3,5,7]
    rng_f = b.op("Cast", [rng_i], "/Cast_range", to=TensorProto.FLOAT)
    b.op_to("Add", [rsum, rng_f], "reduce_sum", "/Add_range")
    # Pad reflect, Slice with negative steps, Flatten, ConstantOfShape
    pd = b.op("Pad", ["x", b.i64([0, 0, 2, 1, 0, 0, 1, 3])], "/Pad", mode="reflect")  # [1,3,10,13]
    sl = b.op("Slice", [pd, b.i64([-1, 11]), b.i64([-1000, 0]), b.i64([2, 3]), b.i64([-2, -3])],
              "/Slice")  # [1,3,5,4]
    fl = b.op("Flatten", [sl], "/Flatten", axis=2)  # [3,20]
    quarter = b.op("ConstantOfShape", [b.op("Shape", [fl])], "/ConstantOfShape",
                   value=numpy_helper.from_array(np.array([0.25], np.float32), "v"))
    b.op_to("Mul", [fl, quarter], "sliced_flat", "/Mul_quarter")
    # Cast to int64 and back (of x*3: a single rounding, so truncation is exact everywhere)
    x3 = b.op("Mul", ["x", b.f32(3.0)], "/Mul_3")
    xi = b.op("Cast", [x3], "/Cast_i64", to=TensorProto.INT64)
    xf = b.op("Cast", [xi], "/Cast_f32", to=TensorProto.FLOAT)
    e = b.op("Add", [b.op("Erf", ["x"], "/Erf"), xf], "/Add_erf")  # [1,3,7,9]
    e = b.op("Squeeze", [e, b.i64([0])], "/Squeeze")  # [3,7,9]
    b.op_to("Unsqueeze", [e, b.i64([1])], "cast_mix", "/Unsqueeze")  # [3,1,7,9]
    # MatMul with batch broadcasting, Sqrt(Abs), Exp(Clip), variadic Max/Min
    wmm = b.init("mm.weight", lecun_normal(rng, (3, 6, 4), 6))
    mm = b.op("MatMul", ["y", wmm], "/MatMul")  # [2,1,5,6] x [3,6,4] -> [2,3,5,4]
    sq = b.op("Sqrt", [b.op("Abs", [mm], "/Abs")], "/Sqrt")
    ex = b.op("Exp", [b.op("Clip", [mm, b.f32(-3.0), b.f32(0.7)], "/Clip")], "/Exp")
    row = b.const(uniform(rng, 4, 0.2, 0.9), "/Constant_row")
    col = b.const(uniform(rng, (5, 1), 0.5, 1.5), "/Constant_col")
    mx = b.op("Max", [sq, row, mm], "/Max")
    b.op_to("Min", [ex, col, mx], "matmul_mix", "/Min")
    model = b.model(
        "ops_mix",
        [f32_info("x", [1, 3, 7, 9]), f32_info("y", [2, 1, 5, 6])],
        [f32_info("log_softmax/out:0", [2, 3, 5]), f32_info("reduce_sum", [1, 18, 4]),
         f32_info("sliced_flat", [3, 20]), f32_info("cast_mix", [3, 1, 7, 9]),
         f32_info("matmul_mix", [2, 3, 5, 4])],
        "Many op kinds on odd shapes")
    inputs = {
        "x": rng.standard_normal((1, 3, 7, 9)).astype(np.float32),
        "y": rng.standard_normal((2, 1, 5, 6)).astype(np.float32),
    }
    return Case("ops_mix", model, inputs,
                "ConvTranspose (stride 2, output_padding), LeakyRelu, AveragePool "
                "(count_include_pad 0 and 1), Resize linear half_pixel x2, Concat, Split 1/3/4, "
                "Expand, Where, Gather with negative indices, ReduceMax/ReduceSum keepdims 0, "
                "LogSoftmax, Sigmoid, Tanh, Transpose, Shape, Range, Cast int64<->float, Erf, "
                "Squeeze/Unsqueeze, Pad reflect, Slice with negative steps, Flatten, "
                "ConstantOfShape, Constant, MatMul with batch broadcasting, Sqrt(Abs), "
                "Exp(Clip), variadic Max/Min. Output 'log_softmax/out:0' tests file-name "
                "sanitizing.")


def if_model_cases():
    """An If whose branches read outer-scope values; one case per branch, one shared model."""
    rng = np.random.default_rng(5005)
    b = GraphBuilder(rng)
    bias = b.init("bias", uniform(rng, (1, 5), -1.0, 1.0))
    scale = b.init("scale", uniform(rng, (3, 1), 0.5, 2.0))
    a = b.op("Relu", ["x"], "/Relu")  # an outer-scope value computed before the If
    then_graph = helper.make_graph(
        [helper.make_node("Add", [a, "y"], ["then_sum"], name="/then/Add"),
         helper.make_node("Add", ["then_sum", bias], ["then_out"], name="/then/Add_bias")],
        "then_branch", [], [f32_info("then_out", [3, 5])])
    else_graph = helper.make_graph(
        [helper.make_node("Mul", [a, "y"], ["else_prod"], name="/else/Mul"),
         helper.make_node("Mul", ["else_prod", scale], ["else_out"], name="/else/Mul_scale")],
        "else_branch", [], [f32_info("else_out", [3, 5])])
    chosen = b.op("If", ["cond"], "/If", then_branch=then_graph, else_branch=else_graph)
    b.op_to("Sub", [chosen, "x"], "z", "/Sub")
    model = b.model(
        "if_model",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         f32_info("x", [3, 5]), f32_info("y", [3, 5])],
        [f32_info("z", [3, 5])],
        "If whose branches read outer-scope values: then z = relu(x)+y+bias-x, "
        "else z = relu(x)*y*scale-x")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = rng.standard_normal((3, 5)).astype(np.float32)
    cases = []
    for flag in (True, False):
        branch = "then (Add)" if flag else "else (Mul)"
        cases.append(Case(
            f"if_{str(flag).lower()}", model, {"cond": np.array(flag), "x": x, "y": y},
            f"If with cond={flag} (bool scalar input) taking the {branch} branch, which reads "
            "the outer-scope node output /Relu_output_0, the input y and an outer initializer. "
            "Both cases share if_model/model.onnx.",
            model_dir="if_model"))
    return cases


def external_data_case():
    """A small MatMul/Add model whose weights live in weights.bin next to it."""
    rng = np.random.default_rng(6006)
    b = GraphBuilder(rng)
    w = b.init("w", lecun_normal(rng, (37, 23), 37))
    bias = b.init("b", (0.1 * rng.standard_normal(23)).astype(np.float32))
    mm = b.op("MatMul", ["x", w], "/MatMul")
    b.op_to("Add", [mm, bias], "y", "/Add")
    model = b.model("external_data", [f32_info("x", [5, 37])], [f32_info("y", [5, 23])],
                    "MatMul + Add with weights stored as external data in weights.bin")
    inputs = {"x": rng.standard_normal((5, 37)).astype(np.float32)}
    return Case("external_data", model, inputs,
                "MatMul [5,37]x[37,23] + Add; both initializers are external data in "
                "weights.bin (one file, size_threshold 0) beside model.onnx.",
                external_data=True)


def function_model_case():
    """A model-local function with an attribute reference, called twice (plus once by default)."""
    rng = np.random.default_rng(7007)
    alpha_ref = helper.make_attribute_ref("alpha", AttributeProto.FLOAT)
    const_node = helper.make_node("Constant", [], ["alpha_value"], name="alpha_const")
    const_node.attribute.append(helper.make_attribute_ref("value_float", AttributeProto.FLOAT,
                                                          ref_attr_name="alpha"))
    leaky = helper.make_node("LeakyRelu", ["s"], ["leaky"], name="leaky")
    leaky.attribute.append(alpha_ref)
    fn = helper.make_function(
        "custom.fn", "ScaledAddLeaky", ["X", "Y"], ["Z"],
        [const_node,
         helper.make_node("Mul", ["X", "alpha_value"], ["scaled"], name="scale"),
         helper.make_node("Add", ["scaled", "Y"], ["s"], name="add"),
         leaky,
         helper.make_node("Tanh", ["leaky"], ["Z"], name="tanh")],
        opset_imports=[helper.make_opsetid("", OPSET)],
        attribute_protos=[helper.make_attribute("alpha", 0.25)],
        doc_string="Z = Tanh(LeakyRelu(X * alpha + Y, alpha)), alpha defaults to 0.25")
    b = GraphBuilder(rng)
    h1 = b.op("ScaledAddLeaky", ["x", "y"], "/fn_call_1", domain="custom.fn", alpha=0.7)
    h2 = b.op("ScaledAddLeaky", [h1, "y"], "/fn_call_2", domain="custom.fn", alpha=-0.3)
    b.op_to("ScaledAddLeaky", [h2, "x"], "z", "/fn_call_default", domain="custom.fn")
    model = b.model("function_model", [f32_info("x", [4, 11]), f32_info("y", [4, 11])],
                    [f32_info("z", [4, 11])],
                    "Calls the model-local function custom.fn.ScaledAddLeaky three times",
                    functions=[fn], extra_opsets=[("custom.fn", 1)])
    inputs = {
        "x": rng.standard_normal((4, 11)).astype(np.float32),
        "y": rng.standard_normal((4, 11)).astype(np.float32),
    }
    return Case("function_model", model, inputs,
                "Model-local FunctionProto custom.fn.ScaledAddLeaky (Constant value_float and "
                "LeakyRelu alpha both reference the function attribute 'alpha', default 0.25) "
                "called with alpha=0.7, alpha=-0.3 and once without alpha (default).")


MOBILENET_V2_SETTING = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]  # t, c, n, s


def mobilenet_v2_case():
    """Full MobileNetV2 (torchvision layout) with unfolded BatchNormalization on 224x224."""
    rng = np.random.default_rng(2020)
    b = GraphBuilder(rng)
    relu6_min = b.init("relu6.min", np.array(0.0, dtype=np.float32))
    relu6_max = b.init("relu6.max", np.array(6.0, dtype=np.float32))

    def conv_bn(x, cin, cout, k, stride, group, prefix, act=True, gamma=(0.8, 1.2)):
        """torchvision's Conv2dNormActivation: Conv (no bias), BatchNormalization, ReLU6."""
        w = b.init(f"{prefix}.0.weight",
                   he_normal(rng, (cout, cin // group, k, k), cin // group * k * k))
        p = torch_scope(prefix)
        y = b.op("Conv", [x, w], f"{p}/{prefix}.0/Conv", kernel_shape=[k, k],
                 strides=[stride, stride], pads=[k // 2] * 4, dilations=[1, 1], group=group)
        params = [
            b.init(f"{prefix}.1.weight", uniform(rng, cout, *gamma)),
            b.init(f"{prefix}.1.bias", (rng.standard_normal(cout) * 0.1).astype(np.float32)),
            b.init(f"{prefix}.1.running_mean",
                   (rng.standard_normal(cout) * 0.1).astype(np.float32)),
            b.init(f"{prefix}.1.running_var", uniform(rng, cout, 0.8, 1.2)),
        ]
        y = b.op("BatchNormalization", [y] + params, f"{p}/{prefix}.1/BatchNormalization",
                 epsilon=1e-5, momentum=0.9)
        return b.op("Clip", [y, relu6_min, relu6_max], f"{p}/{prefix}.2/Clip") if act else y

    def inverted_residual(x, cin, cout, stride, expand, prefix):
        hidden, layer = cin * expand, 0
        y = x
        if expand != 1:
            y = conv_bn(y, cin, hidden, 1, 1, 1, f"{prefix}.conv.0")
            layer = 1
        y = conv_bn(y, hidden, hidden, 3, stride, hidden, f"{prefix}.conv.{layer}")
        residual = stride == 1 and cin == cout
        # the projection's BN gets a small gamma on residual blocks: activations stay O(1)
        y = conv_bn(y, hidden, cout, 1, 1, 1, f"{prefix}.conv.{layer + 1}", act=False,
                    gamma=(0.2, 0.4) if residual else (0.8, 1.2))
        return b.op("Add", [x, y], f"{torch_scope(prefix)}/Add") if residual else y

    x = conv_bn("input", 3, 32, 3, 2, 1, "features.0")
    cin, index = 32, 1
    for t, c, n, s in MOBILENET_V2_SETTING:
        for i in range(n):
            x = inverted_residual(x, cin, c, s if i == 0 else 1, t, f"features.{index}")
            cin, index = c, index + 1
    x = conv_bn(x, cin, 1280, 1, 1, 1, f"features.{index}")
    x = b.op("GlobalAveragePool", [x], "/GlobalAveragePool")
    x = b.op("Flatten", [x], "/Flatten", axis=1)
    w = b.init("classifier.1.weight", lecun_normal(rng, (1000, 1280), 1280))
    bias = b.init("classifier.1.bias", (0.1 * rng.standard_normal(1000)).astype(np.float32))
    b.op_to("Gemm", [x, w, bias], "logits", "/classifier/classifier.1/Gemm", alpha=1.0,
            beta=1.0, transB=1)
    model = b.model("mobilenet_v2", [f32_info("input", [1, 3, 224, 224])],
                    [f32_info("logits", [1, 1000])],
                    "MobileNetV2 (torchvision layout), random weights, separate "
                    "BatchNormalization nodes")
    inputs = {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    return Case("mobilenet_v2", model, inputs,
                "Full MobileNetV2 as torchvision lays it out: Conv 3x3/2 to 32, the 17 inverted "
                "residual blocks of the paper's t,c,n,s table (1x1 expand, depthwise 3x3, 1x1 "
                "project, residual Add), Conv 1x1 to 1280, every Conv (no bias) followed by an "
                "unfolded BatchNormalization and Clip(0,6) with min/max inputs (none after the "
                "projections), GlobalAveragePool, Flatten, Gemm to 1000; seeded He-init "
                "weights, random N(0,1) input [1,3,224,224].")


def image_decoder_cases():
    """ImageDecoder on JPEG and JPEG 2000 files that Pillow writes, against Pillow's decoding
    (ONNX's reference decoder, libjpeg-turbo and OpenJPEG; ONNX Runtime's CPU EP has no
    ImageDecoder): every chroma subsampling Pillow writes, sequential and progressive, restart
    intervals, gray, sizes that are not whole blocks or MCUs."""
    import io
    from PIL import Image

    rng = np.random.default_rng(2020)

    def picture(w, h):
        """Smooth colour gradients with noise: large and small DCT coefficients alike."""
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        base = np.stack([128 + 100 * np.sin(x / 5 + c) * np.cos(y / 7 - c) for c in range(3)], axis=-1)
        return np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)

    variants = [
        ("jpeg_420", (37, 23), "RGB", "JPEG", dict(quality=90), "RGB"),
        ("jpeg_422_bgr", (41, 17), "RGB", "JPEG", dict(quality=75, subsampling=1), "BGR"),
        ("jpeg_444", (16, 9), "RGB", "JPEG", dict(quality=95, subsampling=0), "RGB"),
        ("jpeg_progressive", (53, 29), "RGB", "JPEG", dict(quality=85, progressive=True), "RGB"),
        ("jpeg_progressive_444_gray_out", (31, 45), "RGB", "JPEG",
         dict(quality=60, progressive=True, subsampling=0, optimize=True), "Grayscale"),
        ("jpeg_restart", (70, 34), "RGB", "JPEG", dict(quality=80, restart_marker_blocks=3), "RGB"),
        ("jpeg_restart_progressive", (45, 38), "RGB", "JPEG",
         dict(quality=70, progressive=True, restart_marker_rows=1), "RGB"),
        ("jpeg_gray_source", (29, 31), "L", "JPEG", dict(quality=85), "RGB"),
        ("jpeg_large", (211, 157), "RGB", "JPEG", dict(quality=92, progressive=True), "RGB"),
        ("jpeg2000_rgb", (23, 19), "RGB", "JPEG2000", dict(), "BGR"),
        ("jpeg2000_gray", (17, 12), "L", "JPEG2000", dict(irreversible=False), "RGB"),
    ]
    cases = []
    for name, (w, h), mode, fmt, options, pixel_format in variants:
        image = Image.fromarray(picture(w, h)).convert(mode)
        buf = io.BytesIO()
        image.save(buf, fmt, **options)
        encoded = np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()
        decoded = Image.open(io.BytesIO(encoded.tobytes())).convert("RGB")
        if pixel_format == "Grayscale":
            expected = np.array(decoded.convert("L"))[:, :, None]
        else:
            expected = np.array(decoded)
            if pixel_format == "BGR":
                expected = expected[:, :, ::-1]
        node = helper.make_node("ImageDecoder", ["encoded"], ["image"], name="/ImageDecoder",
                                pixel_format=pixel_format)
        graph = helper.make_graph(
            [node], "image_decoder",
            [helper.make_tensor_value_info("encoded", TensorProto.UINT8, ["bytes"])],
            [helper.make_tensor_value_info("image", TensorProto.UINT8, ["h", "w", "c"])])
        model = helper.make_model(graph, producer_name=PRODUCER, producer_version="1",
                                  opset_imports=[helper.make_opsetid("", 20)])
        model.ir_version = 9
        onnx.checker.check_model(model, full_check=True)
        cases.append(Case(
            f"image_decoder_{name}", model, {"encoded": encoded},
            f"ImageDecoder ({pixel_format}) of a {w}x{h} {mode} {fmt} file written by Pillow "
            f"with {options}; expected pixels are Pillow's decoding.",
            rtol=0, atol=0, reference={"image": np.ascontiguousarray(expected)}))
    return cases


ALL_CASES = {
    "resnet18": lambda: [resnet18_case()],
    "bert4": lambda: [bert4_case()],
    "mobilenet_block": lambda: [mobilenet_block_case()],
    "ops_mix": lambda: [ops_mix_case()],
    "if_model": if_model_cases,
    "external_data": lambda: [external_data_case()],
    "function_model": lambda: [function_model_case()],
    "mobilenet_v2": lambda: [mobilenet_v2_case()],
    "image_decoder": image_decoder_cases,
}


# ----------------------------------------------------------------------------------------------
# Writing and reference outputs


def file_name(value_name):
    """The .npy file name for a value: every char outside [A-Za-z0-9._-] becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", value_name) + ".npy"


def write_model(case, outdir):
    """Saves the case's model (once per model_dir) and returns its path relative to outdir."""
    rel = pathlib.PurePosixPath(case.model_dir or case.name) / "model.onnx"
    path = outdir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if case.external_data:
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    else:
        onnx.save_model(case.model, str(path))
    return rel


def ort_session(path, optimized):
    """An ONNX Runtime CPU session: the plain graph on one thread, or ORT's optimized default."""
    opts = ort.SessionOptions()
    if optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    else:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run_reference(path, inputs, optimized=False):
    """Returns {output name: array} from ONNX Runtime."""
    sess = ort_session(path, optimized)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def tolerance_use(expected, actual, rtol, atol):
    """max over elements of |actual - expected| / (atol + rtol |expected|): <= 1 passes."""
    if expected.dtype.kind != "f":
        return 0.0 if np.array_equal(expected, actual) else math.inf
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    return float(np.max(np.abs(a - e) / (atol + rtol * np.abs(e))))


def save_values(case_dir, kind, values, outdir):
    """Writes each value as <case_dir>/<kind>/<file>.npy; returns {name: path under outdir}."""
    folder = outdir / case_dir / kind
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, array in values.items():
        np.save(folder / file_name(name), np.array(array, order="C"))  # keeps 0-d arrays 0-d
        files[name] = str(pathlib.PurePosixPath(case_dir) / kind / file_name(name))
    return files


def manifest_entry(case, model_rel, input_files, output_files):
    """One manifest record."""
    return {
        "name": case.name,
        "model": str(model_rel),
        "inputs": input_files,
        "outputs": output_files,
        "rtol": case.rtol,
        "atol": case.atol,
        "description": case.description,
    }


def generate(case, outdir):
    """Writes one case and returns (manifest entry, tolerance use of ORT's optimized run)."""
    model_rel = write_model(case, outdir)
    if case.reference is not None:
        outputs, use = case.reference, 0.0
    else:
        outputs = run_reference(outdir / model_rel, case.inputs)
        optimized = run_reference(outdir / model_rel, case.inputs, optimized=True)
        use = max(tolerance_use(outputs[n], optimized[n], case.rtol, case.atol) for n in outputs)
    inputs_files = save_values(case.name, "inputs", case.inputs, outdir)
    output_files = save_values(case.name, "outputs", outputs, outdir)
    return manifest_entry(case, model_rel, inputs_files, output_files), use, outputs


def describe(outputs):
    """A short summary of output shapes and magnitudes."""
    parts = []
    for name, a in outputs.items():
        mag = f"absmax {np.abs(a).max():.3g} std {a.astype(np.float64).std():.3g}" \
            if a.dtype.kind == "f" else ""
        parts.append(f"{name}{list(a.shape)} {mag}")
    return "; ".join(parts)


def parse_args():
    """Command line: OUTDIR and an optional case filter."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--only", default="",
                        help="comma-separated model groups: " + ",".join(ALL_CASES))
    args = parser.parse_args()
    wanted = [c for c in args.only.split(",") if c] or list(ALL_CASES)
    unknown = [c for c in wanted if c not in ALL_CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {list(ALL_CASES)}")
    return args.outdir, wanted


def main():
    """Builds every case, writes it with its reference outputs, and writes the manifest."""
    outdir, wanted = parse_args()
    outdir.mkdir(parents=True, exist_ok=True)
    manifest = []
    worst = 0.0
    for group in wanted:
        start = time.perf_counter()
        for case in ALL_CASES[group]():
            entry, use, outputs = generate(case, outdir)
            manifest.append(entry)
            worst = max(worst, use)
            print(f"{case.name:16s} {time.perf_counter() - start:5.2f}s  ORT-optimized uses "
                  f"{use:.3f} of the tolerance  {describe(outputs)}")
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(manifest)} cases to {outdir}")
    if worst > 0.5:
        print(f"warning: ORT's optimized graph uses {worst:.2f} of a tolerance", file=sys.stderr)


if __name__ == "__main__":
    main()
