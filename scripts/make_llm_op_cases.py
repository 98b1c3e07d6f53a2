"""Generates single-operator test cases for the LLM operators of onnxruntime-genai's models, with
ONNX Runtime CPU reference outputs.

Run: python3 scripts/make_llm_op_cases.py OUTDIR [--only OP[,OP...]]
Needs: onnx==1.22.0, onnxruntime (written against 1.32.0), numpy. Deterministic (fixed seeds, ORT
with graph optimizations disabled and one thread). Writes only under OUTDIR, in the layout of
make_test_models.py:

  OUTDIR/<case>/model.onnx                 one node; opsets ("", 17) and ("com.microsoft", 1)
  OUTDIR/<case>/inputs/<file>.npy          one per graph input (the activations)
  OUTDIR/<case>/outputs/<file>.npy         one per graph output, computed by ONNX Runtime
  OUTDIR/manifest.json                     list of records as in make_test_models.py plus "op"

Weight-like tensors (quantized weights, scales, zero points, g_idx, bias, norm gammas, rotary
caches, attention sinks) are initializers; everything a model computes at run time (activations,
KV caches, seqlens_k, total_sequence_length, position_ids, attention_bias) is a graph input.
OP in --only is a short group name (sln, skip_sln, mnb, gbq, rope, gqa, mha, attention) or an
operator type.

Every reference is checked before it is written:
  * two ORT sessions give bitwise identical outputs;
  * every output element is written by ORT: the node is run again with its outputs bound to
    buffers pre-filled with 0 and with NaN, and both runs must agree bitwise (an element ORT does
    not write keeps the fill);
  * ORT agrees, within the case's tolerance, with an independent float64 numpy reference of the
    operator (this also checks this script's weight packing and its reading of the schemas).
A variant ORT's CPU EP rejects, or whose ORT result contradicts the operator's documented
semantics, is skipped and listed at the end of the run. Known ones (ORT 1.32.0, CPU EP; the
MatMulNBits and GroupQueryAttention ones and one RotaryEmbedding one are built as probes):
  MatMulNBits          bits=3 (only 2, 4, 8); bits=8 with float zero points; g_idx with bits=8;
                       g_idx with bits=2 (runs, but reads unset memory: results vary and are
                       wrong); g_idx with uint8 zero points and bits=4 (runs, but ignores the
                       zero points: 8 is used)
  GroupQueryAttention  bfloat16; head_size not a multiple of 8 (16 with do_rotary=1);
                       a multi-token chunk after a past with batch_size > 1 (without
                       query_seqlens); num_heads not a multiple of kv_num_heads
  RotaryEmbedding      odd head_size with full rotation (leaves elements unwritten);
                       rotary_embedding_dim without num_heads; position_ids [1, S];
                       the scale attribute is accepted but ignored (no case written)
  SimplifiedLayerNormalization  inv_std_var with axis != -1 (ORT's shape inference rejects it)
  SkipSimplifiedLayerNormalization  4-D input; skip of shape [H] or [1, 1, H]; the "mean"
                       output is written as zeros (not a mean), so no case requests it
  GatherBlockQuantized bfloat16 scales
"""
import argparse
import dataclasses
import json
import math
import pathlib
import shutil
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import make_test_models as mtm  # noqa: E402

MS = "com.microsoft"
OPSETS = [("", mtm.OPSET), (MS, 1)]
FP32_TOL = (1e-4, 1e-5)
FP16_TOL = (2e-3, 2e-3)
NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint8): TensorProto.UINT8,
}

ort.set_default_logger_severity(4)  # rejected probe variants would otherwise log errors


# ----------------------------------------------------------------------------------------------
# Cases and one-node models


@dataclasses.dataclass
class OpCase(mtm.Case):
    """A single-node case: make_test_models' Case plus the operator and reference checks."""

    op: str = ""
    # (input, output) pairs bound to one OrtValue in an io_binding run (KV cache buffer sharing)
    share: tuple = ()
    expected: dict = None  # float64 numpy reference per output name, checked against ORT
    expected_plain: dict = None  # with `share`: the reference of a plain run, if different
    probe_only: bool = False  # only asks whether ORT accepts the model (types numpy lacks)


def value_info(name, array_or_type, shape=None):
    """A ValueInfo from an array (its type and shape) or from a numpy dtype (shape unknown)."""
    if isinstance(array_or_type, np.ndarray):
        return helper.make_tensor_value_info(name, NP_TO_ONNX[array_or_type.dtype],
                                             list(array_or_type.shape))
    return helper.make_tensor_value_info(name, NP_TO_ONNX[np.dtype(array_or_type)], shape)


def initializer(name, value):
    """An initializer from an array or a ready TensorProto (int4/uint4 data)."""
    if isinstance(value, onnx.TensorProto):
        value.name = name
        return value
    return numpy_helper.from_array(np.asarray(value), name)


def one_node_model(op, domain, node_inputs, outputs, inputs, inits, attrs, doc):
    """A one-node ModelProto; outputs lists (name, numpy dtype) in node order, name "" for an
    omitted optional output (shapes are set once ORT has run the model).

    node_inputs lists the node's inputs in schema order, "" for an omitted optional one; each is
    a graph input (in `inputs`) or an initializer (in `inits`)."""
    node = helper.make_node(op, list(node_inputs), [n for n, _ in outputs], name=f"/{op}",
                            domain=domain, **attrs)
    graph = helper.make_graph(
        [node], op,
        [value_info(n, a) for n, a in inputs.items()],
        [value_info(n, t) for n, t in outputs if n],
        initializer=[initializer(n, v) for n, v in inits.items()])
    model = helper.make_model(graph, producer_name=mtm.PRODUCER, producer_version="1",
                              opset_imports=[helper.make_opsetid(d, v) for d, v in OPSETS],
                              doc_string=doc)
    model.ir_version = mtm.IR_VERSION
    return model


def node_case(name, op, node_inputs, outputs, inputs, inits, attrs, description, tol,
              expected=None, domain=MS, share=(), probe_only=False, expected_plain=None):
    """Builds an OpCase; `outputs`: a dict {name: dtype} or (name, dtype) pairs in node order
    with name "" for an omitted optional output."""
    outputs = list(outputs.items()) if isinstance(outputs, dict) else list(outputs)
    while outputs and not outputs[-1][0]:
        outputs.pop()
    model = one_node_model(op, domain, node_inputs, outputs, inputs, inits, attrs, description)
    return OpCase(name, model, inputs, description, rtol=tol[0], atol=tol[1], op=op,
                  share=tuple(share), expected=expected, probe_only=probe_only,
                  expected_plain=expected_plain)


def check_model(model):
    """onnx's full check; ops onnx has no schema for in the default domain (ORT registers
    SimplifiedLayerNormalization there) are checked as if they were in com.microsoft."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.domain == "" and not onnx.defs.has(node.op_type):
            node.domain = MS
    onnx.checker.check_model(copy, full_check=True)


def set_output_shapes(model, outputs):
    """Writes the shapes ORT produced into the graph's output ValueInfos."""
    for vi in model.graph.output:
        shape = vi.type.tensor_type.shape
        shape.Clear()
        for d in outputs[vi.name].shape:
            shape.dim.add().dim_value = d


def rand(rng, shape, dtype=np.float32, lo=-1.0, hi=1.0):
    """Uniform values in [lo, hi) as `dtype`."""
    return rng.uniform(lo, hi, shape).astype(dtype)


def fp_tol(dtype):
    """The default tolerance of a float type."""
    return FP16_TOL if np.dtype(dtype) == np.float16 else FP32_TOL


def dt_name(dtype):
    """'fp32' or 'fp16'."""
    return "fp16" if np.dtype(dtype) == np.float16 else "fp32"


# ----------------------------------------------------------------------------------------------
# ORT reference runs and checks


class Rejected(Exception):
    """ORT's CPU EP does not accept a variant, or computes something other than its schema."""


def session(model_bytes):
    """A session on a model not yet saved, with mtm.ort_session's plain options: no graph
    optimizations, one thread (probes; the references come from mtm.ort_session itself)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def plain_run(sess, inputs):
    """{output name: array} from InferenceSession.run."""
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def bound_run(sess, inputs, like, fill=None, share=()):
    """Runs with io_binding. Outputs are bound to buffers shaped as in `like` and pre-filled with
    `fill`; each (input, output) pair in `share` is bound to ONE OrtValue holding a copy of the
    input, so ORT sees past and present as the same buffer. Returns copies of the outputs."""
    binding = sess.io_binding()
    buffers = {}  # the numpy memory behind each OrtValue; must outlive the run
    shared_out = {o: i for i, o in share}
    for i, _ in share:
        buffers[i] = np.array(inputs[i], copy=True)
        binding.bind_ortvalue_input(i, ort.OrtValue.ortvalue_from_numpy(buffers[i]))
    for name, array in inputs.items():
        if name not in buffers:
            binding.bind_cpu_input(name, array)
    for name, array in like.items():
        if name in shared_out:
            buf = buffers[shared_out[name]]
            assert buf.shape == array.shape, f"{name}: shared buffer {buf.shape} vs {array.shape}"
        else:
            value = fill if array.dtype.kind == "f" or fill == 0 else 0x5A
            buf = buffers[name] = np.full(array.shape, value, array.dtype)
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(buf))
    sess.run_with_iobinding(binding)
    return {name: buffers[shared_out.get(name, name)].copy() for name in like}


def bitwise_equal(a, b):
    """Same shape, dtype and bytes."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def check_references(path, inputs, share):
    """ORT's outputs of a plain run of the saved model, and with `share` those of the
    shared-buffer io_binding run; raises Rejected if ORT is not deterministic or leaves output
    elements unwritten."""
    sess = mtm.ort_session(path, optimized=False)
    plain = plain_run(sess, inputs)
    again = plain_run(mtm.ort_session(path, optimized=False), inputs)
    for name in plain:
        if not bitwise_equal(plain[name], again[name]):
            raise Rejected(f"{name}: two ORT sessions disagree")
    zero_fill = bound_run(sess, inputs, plain, 0)
    nan_fill = bound_run(sess, inputs, plain, np.nan)
    for name in plain:
        a, b = zero_fill[name], nan_fill[name]
        unwritten = (a.view(np.uint8) != b.view(np.uint8)).reshape(a.shape + (-1,)).any(-1)
        if unwritten.any():
            raise Rejected(f"{name}: ORT leaves {int(unwritten.sum())} elements unwritten")
        if not bitwise_equal(a, plain[name]):
            raise Rejected(f"{name}: io_binding run differs from the plain run")
    shared = None
    if share:
        shared = bound_run(sess, inputs, plain, 0, share)
        shared2 = bound_run(mtm.ort_session(path, optimized=False), inputs, plain, 0, share)
        for name in plain:
            if not bitwise_equal(shared[name], shared2[name]):
                raise Rejected(f"{name}: shared-buffer runs disagree")
    return plain, shared


def check_expected(case, outputs, reference=None):
    """Max tolerance use of ORT's outputs against the numpy reference; Rejected above 1."""
    worst = 0.0
    for name, expected in (reference or case.expected or {}).items():
        actual = outputs[name]
        if expected.shape != actual.shape:
            raise Rejected(f"{name}: ORT shape {actual.shape}, numpy reference {expected.shape}")
        use = mtm.tolerance_use(np.asarray(expected, np.float64), actual, case.rtol, case.atol)
        if not use <= 1.0:
            raise Rejected(f"{name}: ORT differs from the numpy reference ({use:.3g} of the "
                           f"tolerance)")
        worst = max(worst, use)
    return worst


def probe(case):
    """Creates (and for a normal case runs) an ORT session; raises Rejected with ORT's words."""
    try:
        sess = session(case.model.SerializeToString())
        return None if case.probe_only else plain_run(sess, case.inputs)
    except Exception as e:  # ORT raises Fail, InvalidArgument, NotImplemented, ...
        text = str(e)
        text = text.split("Status Message:")[-1].split("was false.")[-1].strip()
        raise Rejected(text.splitlines()[0][:160]) from None


def write_case(case, model_rel, outputs, outdir, description=None, shared=False):
    """Saves inputs and outputs; returns the manifest record. With `shared`, the record's
    "share" lists the (input, output) pairs the reference bound to one buffer: a runtime
    reproduces those outputs only when it writes the cache in place."""
    if description:
        case = dataclasses.replace(case, description=description)
    input_files = mtm.save_values(case.name, "inputs", case.inputs, outdir)
    output_files = mtm.save_values(case.name, "outputs", outputs, outdir)
    entry = mtm.manifest_entry(case, model_rel, input_files, output_files)
    entry["op"] = case.op
    if shared:
        entry["share"] = [list(pair) for pair in case.share]
    return entry


def generate(case, outdir):
    """Checks and writes one case; returns ([manifest records], numpy-reference tolerance use).

    A shared-buffer case whose io_binding reference differs from the plain run's is written as
    two cases sharing one model: <name> (io_binding reference) and <name>_plainrun."""
    first = probe(case)
    if case.probe_only:
        raise Rejected("ORT accepts it, but numpy cannot hold its inputs (not generated)")
    set_output_shapes(case.model, first)
    check_model(case.model)
    model_rel = pathlib.PurePosixPath(case.name) / "model.onnx"
    (outdir / model_rel).parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(case.model, str(outdir / model_rel))
    try:
        plain, shared = check_references(outdir / model_rel, case.inputs, case.share)
        use = check_expected(case, shared if shared is not None else plain)
    except Rejected:
        shutil.rmtree(outdir / case.name)
        raise
    if shared is None:
        return [write_case(case, model_rel, plain, outdir)], use
    same = all(bitwise_equal(shared[n], plain[n]) for n in plain)
    if same:
        text = (case.description + " Reference from an io_binding run binding past_key/present_key"
                " (and past_value/present_value) to one OrtValue; a plain run gives bitwise the"
                " same outputs.")
        return [write_case(case, model_rel, shared, outdir, text, shared=True)], use
    use = max(use, check_expected(case, plain, case.expected_plain))
    entries = [write_case(case, model_rel, shared, outdir, case.description + (
        " Reference from an io_binding run binding past and present to one OrtValue (ORT's "
        f"shared-buffer path); it differs from a plain run's, see {case.name}_plainrun."),
        shared=True)]
    plain_case = dataclasses.replace(case, name=case.name + "_plainrun")
    entries.append(write_case(plain_case, model_rel, plain, outdir, case.description + (
        " Reference from a plain run (past and present distinct buffers); differs from the "
        "io_binding shared-buffer run of the same model.")))
    return entries, use


# ----------------------------------------------------------------------------------------------
# SimplifiedLayerNormalization (default domain) and com.microsoft SkipSimplifiedLayerNormalization


def rms_norm(x, gamma, eps, axis=-1):
    """float64 RMS normalization over the axes from `axis` on: (y, inv_std_var)."""
    x = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return x * inv * gamma.astype(np.float64), inv


def sln_case(shape, dtype, eps, seed, axis=-1, inv_std=True, gamma_dtype=None):
    """One SimplifiedLayerNormalization case (gamma as an initializer)."""
    rng = np.random.default_rng(seed)
    gamma_dtype = gamma_dtype or dtype
    x = (rng.standard_normal(shape) * 1.5).astype(dtype)
    gamma = rand(rng, shape[axis:], gamma_dtype, 0.5, 1.5)
    y, inv = rms_norm(x, gamma, eps, axis)
    outputs = {"Y": gamma_dtype}
    expected = {"Y": y}
    if inv_std:
        outputs["inv_std_var"] = np.float32
        expected["inv_std_var"] = inv
    dims = "x".join(map(str, shape))
    name = f"sln_{len(shape)}d_{dims}_{dt_name(dtype)}"
    if gamma_dtype != dtype:
        name += f"_scale{dt_name(gamma_dtype)}"
    if axis != -1:
        name += f"_axis{axis}"
    if not inv_std:
        name += "_yonly"
    text = (f"SimplifiedLayerNormalization (default domain, as ORT registers it), X {dims} "
            f"{dt_name(dtype)} ~N(0, 1.5^2), scale {dt_name(gamma_dtype)} in [0.5, 1.5) "
            f"(initializer), axis {axis}, epsilon {eps:g}"
            + ("; outputs Y and inv_std_var (float32)." if inv_std else "; output Y only."))
    return node_case(name, "SimplifiedLayerNormalization", ["X", "scale"], outputs, {"X": x},
                     {"scale": gamma}, dict(axis=axis, epsilon=eps), text, fp_tol(gamma_dtype),
                     expected, domain="")


def sln_cases():
    """SimplifiedLayerNormalization: 2-D and 3-D, fp32 and fp16, odd hidden sizes."""
    return [
        sln_case((3, 7), np.float32, 1e-5, 101),
        sln_case((2, 3, 37), np.float32, 1e-6, 102),
        sln_case((1, 896), np.float32, 1e-6, 103),
        sln_case((5, 33), np.float16, 1e-5, 104),
        sln_case((2, 3, 37), np.float16, 1e-6, 105),
        sln_case((3, 33), np.float32, 1e-5, 107, gamma_dtype=np.float16),
        sln_case((2, 3, 37), np.float32, 1e-5, 108, axis=1, inv_std=False),
    ]


def skip_sln_case(shape, skip_shape, dtype, bias, outputs, seed, eps=1e-6):
    """One SkipSimplifiedLayerNormalization case; outputs is a subset of
    ("output", "inv_std_var", "input_skip_bias_sum")."""
    rng = np.random.default_rng(seed)
    hidden = shape[-1]
    x = rand(rng, shape, dtype, -2, 2)
    skip = rand(rng, skip_shape, dtype, -2, 2)
    gamma = rand(rng, hidden, dtype, 0.5, 1.5)
    inits = {"gamma": gamma}
    node_inputs = ["input", "skip", "gamma"]
    total = x.astype(np.float64) + skip.astype(np.float64)
    if bias:
        inits["bias"] = rand(rng, hidden, dtype, -0.5, 0.5)
        node_inputs.append("bias")
        total = total + inits["bias"].astype(np.float64)
    y, inv = rms_norm(total, gamma, eps)
    refs = {"output": y, "inv_std_var": inv, "input_skip_bias_sum": total}
    types = {"output": dtype, "mean": np.float32, "inv_std_var": np.float32,
             "input_skip_bias_sum": dtype}
    node_outputs = [(n if n in outputs else "", t) for n, t in types.items()]
    dims = "x".join(map(str, shape))
    sdims = "x".join(map(str, skip_shape))
    form = "same" if skip_shape == shape else f"skip{sdims}"
    short = {"output": "y", "inv_std_var": "inv", "input_skip_bias_sum": "sum"}
    name = (f"skip_sln_{dims}_{form}_{'bias' if bias else 'nobias'}_"
            f"{''.join(short[o][0] for o in outputs)}_{dt_name(dtype)}")
    text = (f"com.microsoft SkipSimplifiedLayerNormalization, input {dims} and skip {sdims} "
            f"{dt_name(dtype)} in [-2, 2), gamma in [0.5, 1.5)"
            + (", bias in [-0.5, 0.5)" if bias else ", no bias")
            + f" (initializers), epsilon {eps:g}; outputs {', '.join(outputs)}"
            + " (inv_std_var float32, shape [..., 1]).")
    return node_case(name, "SkipSimplifiedLayerNormalization", node_inputs, node_outputs,
                     {"input": x, "skip": skip}, inits, dict(epsilon=eps), text, fp_tol(dtype),
                     {n: refs[n] for n in outputs})


def skip_sln_cases():
    """SkipSimplifiedLayerNormalization: 3-D and 2-D, broadcast skip, with and without bias."""
    all3 = ("output", "inv_std_var", "input_skip_bias_sum")
    return [
        skip_sln_case((2, 3, 37), (2, 3, 37), np.float32, False, ("output",), 201),
        skip_sln_case((2, 3, 37), (2, 3, 37), np.float32, True, all3, 202),
        skip_sln_case((5, 33), (5, 33), np.float32, True, ("output", "input_skip_bias_sum"), 203),
        skip_sln_case((7, 896), (7, 896), np.float32, False, ("output", "input_skip_bias_sum"),
                      204),
        skip_sln_case((2, 3, 37), (1, 3, 37), np.float32, True, all3, 205),
        skip_sln_case((2, 3, 37), (3, 37), np.float32, False, ("output", "inv_std_var"), 206),
        skip_sln_case((2, 3, 37), (2, 3, 37), np.float16, True, all3, 207),
        skip_sln_case((2, 5, 33), (5, 33), np.float16, True, ("output", "input_skip_bias_sum"),
                      209),
    ]


# ----------------------------------------------------------------------------------------------
# MatMulNBits


def pack_bits(values, bits):
    """Packs the last axis of integer `values` (< 2**bits) into uint8, low bits first."""
    per = 8 // bits
    pad = (-values.shape[-1]) % per
    v = np.concatenate([values, np.zeros(values.shape[:-1] + (pad,), values.dtype)], axis=-1)
    v = v.astype(np.uint8).reshape(values.shape[:-1] + (-1, per))
    out = np.zeros(v.shape[:-1], np.uint8)
    for i in range(per):
        out |= (v[..., i] << (bits * i)).astype(np.uint8)
    return out


def quantize_blocks(w, bits, block, symmetric):
    """Block-quantizes rows of w [rows, K] along K: (q [rows, k_blocks, block] int, scale
    [rows, k_blocks] float32, zero point [rows, k_blocks] int). The padding of the last block
    quantizes 0. Asymmetric: scale = (max - min) / (2^bits - 1) over the block (min <= 0 <= max);
    symmetric: scale = amax / 2^(bits - 1), zero point 2^(bits - 1)."""
    rows, k = w.shape
    k_blocks = -(-k // block)
    padded = np.zeros((rows, k_blocks * block), np.float64)
    padded[:, :k] = w
    blocks = padded.reshape(rows, k_blocks, block)
    qmax = 2 ** bits - 1
    if symmetric:
        scale = np.abs(blocks).max(-1) / 2 ** (bits - 1)
        zp = np.full((rows, k_blocks), 2 ** (bits - 1), np.int64)
    else:
        lo, hi = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)
        scale = (hi - lo) / qmax
        zp = np.clip(np.round(-lo / np.where(scale == 0, 1, scale)), 0, qmax).astype(np.int64)
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    q = np.clip(np.round(blocks / scale[..., None]) + zp[..., None], 0, qmax).astype(np.int64)
    return q, scale, zp


def mnb_case(bits, block, k, n, a_shape, zp_kind, acc, dtype, seed, bias=False, g_idx=False,
             scales_2d=False):
    """One MatMulNBits case. zp_kind: "sym" (no zero_points), "u8" (packed uint8) or "float"
    (same type as A, with a fractional part). g_idx: a random permutation-like block map."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1, 1, (n, k))  # the logical weight, transposed: [N, K]
    group = np.arange(k) // block  # the block (scale and zero point) of each column of K
    if g_idx:  # act-order: a shuffled map, still block_size columns a group
        group = rng.permutation(group)
    order = np.argsort(group, kind="stable")  # makes each group's columns contiguous
    q_sorted, scale, zp = quantize_blocks(w[:, order], bits, block, zp_kind == "sym")
    k_blocks = q_sorted.shape[1]
    q = np.empty((n, k), np.int64)  # the codes, at their own column positions
    q[:, order] = q_sorted.reshape(n, -1)[:, :k]
    padded = np.repeat(zp[:, -1:], k_blocks * block, axis=1)  # the last block pads with its zp
    padded[:, :k] = q
    scale_t = scale.astype(dtype)
    inits = {"B": pack_bits(padded.reshape(n, k_blocks, block), bits),  # [N, k_blocks, blob]
             "scales": scale_t if scales_2d else scale_t.reshape(-1)}
    node_inputs = ["A", "B", "scales"]
    zp_used = zp.astype(np.float64)
    if zp_kind == "u8":
        inits["zero_points"] = pack_bits(zp, bits)  # [N, ceil(k_blocks * bits / 8)]
        node_inputs.append("zero_points")
    elif zp_kind == "float":
        zp_f = (zp + rng.uniform(-0.5, 0.5, zp.shape)).astype(dtype)
        inits["zero_points"] = zp_f
        zp_used = zp_f.astype(np.float64)
        node_inputs.append("zero_points")
    if g_idx:
        inits["g_idx"] = group.astype(np.int32)
        node_inputs += [""] * (4 - len(node_inputs)) + ["g_idx"]
    rows = np.arange(n)[:, None]
    deq = (q - zp_used[rows, group]) * scale_t.astype(np.float64)[rows, group]
    a = rand(rng, a_shape + (k,), dtype)
    y = a.astype(np.float64) @ deq.T
    if bias:
        inits["bias"] = rand(rng, n, dtype)
        node_inputs += [""] * (5 - len(node_inputs)) + ["bias"]
        y = y + inits["bias"].astype(np.float64)
    m_desc = "x".join(map(str, a_shape))
    name = (f"mnb_q{bits}_b{block}_k{k}_n{n}_m{m_desc}_{zp_kind}"
            + ("_gidx" if g_idx else "") + ("_bias" if bias else "")
            + ("_scales2d" if scales_2d else "") + f"_acc{acc}_{dt_name(dtype)}")
    ymax = float(np.abs(y).max())
    if acc == 0:
        tol = (1e-4, 1e-5 * k) if dtype == np.float32 else (2e-3, round_up(max(2e-3, 1e-3 * ymax)))
        text_tol = ""
    else:
        tol = None  # set from ORT's deviation below
        text_tol = (" accuracy_level 4 lets ORT quantize A to int8 per block; atol covers both "
                    "that and an exact product.")
    text = (f"com.microsoft MatMulNBits bits={bits} block_size={block} K={k} N={n}, A "
            f"{m_desc}x{k} {dt_name(dtype)} in [-1, 1); W in [-1, 1) quantized per block of K "
            + {"sym": "symmetrically (no zero_points: 2^(bits-1))",
               "u8": "asymmetrically, zero points packed uint8 [N, ceil(k_blocks*bits/8)]",
               "float": f"asymmetrically, float zero points ({dt_name(dtype)}, fractional) "
                        "[N, k_blocks]"}[zp_kind]
            + f"; B [N, {k_blocks}, {block * bits // 8}] uint8 low bits first, scales "
            + ("[N, k_blocks]" if scales_2d else "[N*k_blocks]")
            + (", g_idx [K] int32 (a shuffled block map: column k uses block g_idx[k])"
               if g_idx else "") + (", bias [N]" if bias else "")
            + f"; accuracy_level {acc}." + text_tol)
    case = node_case(name, "MatMulNBits", node_inputs, {"Y": dtype}, {"A": a}, inits,
                     dict(K=k, N=n, bits=bits, block_size=block, accuracy_level=acc), text,
                     tol or (1e-3, 1e-3), {"Y": y})
    if tol is None:
        case = acc4_tolerance(case, y)
    return case


def acc4_tolerance(case, exact):
    """accuracy_level 4: rtol 1e-3, atol max(1e-3 max|y|, 1.25 max|ORT - exact|), 2 digits."""
    try:
        ours = probe(case)["Y"].astype(np.float64)
    except Rejected:
        return case  # reported when the case is generated
    case.atol = round_up(max(1e-3 * float(np.abs(exact).max()),
                             1.25 * float(np.abs(ours - exact).max())))
    case.rtol = 1e-3
    return case


def round_up(x):
    """x rounded up to two significant digits."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.ceil(x / unit - 1e-9) * unit:.2g}")


def mnb_cases():
    """MatMulNBits: bits 2/4/8, block 16..512, K not a multiple of the block, odd N, M 1/5/33,
    2-D and 3-D A, symmetric / uint8 / float zero points, g_idx, bias, accuracy 0 and 4."""
    f32, f16 = np.float32, np.float16
    c = [
        # 4 bits
        mnb_case(4, 32, 200, 37, (1,), "sym", 0, f32, 301),
        mnb_case(4, 32, 200, 37, (5,), "u8", 0, f32, 302),
        mnb_case(4, 16, 77, 129, (33,), "u8", 4, f32, 303),
        mnb_case(4, 128, 300, 37, (5,), "sym", 4, f32, 305),
        mnb_case(4, 256, 300, 19, (1,), "u8", 0, f32, 306),
        mnb_case(4, 32, 200, 37, (2, 3), "u8", 4, f32, 307, bias=True),
        mnb_case(4, 32, 200, 37, (5,), "float", 0, f32, 308),
        mnb_case(4, 32, 200, 37, (5,), "sym", 0, f32, 310, g_idx=True),
        mnb_case(4, 32, 200, 37, (1,), "float", 0, f32, 311, g_idx=True),
        mnb_case(4, 32, 200, 37, (5,), "u8", 0, f32, 312, scales_2d=True),
        mnb_case(4, 32, 200, 37, (1,), "u8", 4, f16, 313),
        mnb_case(4, 16, 77, 129, (33,), "sym", 0, f16, 314),
        mnb_case(4, 64, 200, 37, (2, 3), "u8", 0, f16, 315, bias=True),
        mnb_case(4, 32, 200, 37, (5,), "float", 4, f16, 316),
        # The builder's CPU form (symmetric, block 32, accuracy 4), whole and partial steps of 4 blocks.
        mnb_case(4, 32, 200, 37, (3,), "sym", 4, f32, 317),
        mnb_case(4, 32, 520, 41, (1,), "sym", 4, f32, 318),
        # 8 bits
        mnb_case(8, 32, 200, 37, (1,), "u8", 4, f32, 321),
        mnb_case(8, 16, 77, 129, (5,), "sym", 0, f32, 322),
        mnb_case(8, 128, 300, 37, (33,), "u8", 0, f32, 323),
        mnb_case(8, 64, 200, 37, (1,), "sym", 4, f16, 324),
        mnb_case(8, 256, 300, 19, (2, 3), "u8", 4, f32, 325, bias=True),
        # blocks over 256 (ORT treats them as 256-blocks sharing a scale)
        mnb_case(8, 512, 600, 19, (3,), "u8", 4, f32, 326),
        mnb_case(4, 512, 700, 21, (1,), "sym", 4, f32, 327),
        mnb_case(4, 512, 700, 21, (4,), "u8", 0, f32, 328),
        # 2 bits
        mnb_case(2, 32, 200, 37, (5,), "u8", 0, f32, 331),
        mnb_case(2, 16, 77, 37, (1,), "sym", 4, f32, 332),
        mnb_case(2, 64, 200, 37, (1,), "float", 0, f16, 333),
        mnb_case(2, 128, 300, 19, (5,), "u8", 4, f16, 334),
        # probes of variants ORT 1.32 CPU rejects or gets wrong (skipped, listed at the end)
        mnb_case(3, 32, 200, 37, (1,), "u8", 0, f32, 341),
        mnb_case(8, 32, 200, 37, (1,), "float", 0, f32, 342),
        mnb_case(8, 32, 200, 37, (1,), "sym", 0, f32, 343, g_idx=True),
        mnb_case(4, 32, 200, 37, (1,), "u8", 0, f32, 344, g_idx=True),
        mnb_case(2, 32, 200, 37, (1,), "sym", 0, f32, 345, g_idx=True),
    ]
    return c


# ----------------------------------------------------------------------------------------------
# GatherBlockQuantized


def int4_tensor(values, signed):
    """An INT4/UINT4 TensorProto (onnx packs two values a byte, low nibble first)."""
    kind = TensorProto.INT4 if signed else TensorProto.UINT4
    return helper.make_tensor("", kind, list(values.shape), values.reshape(-1).tolist())


def gbq_case(storage, bits, block, rows, k, zero_points, scale_dtype, index_dtype, seed,
             indices=None):
    """One GatherBlockQuantized case, gather_axis 0 and quantize_axis last. storage: "uint8"
    (bits packed along the last axis, low bits first), "uint4" or "int4" (onnx 4-bit types)."""
    rng = np.random.default_rng(seed)
    table = rng.uniform(-1, 1, (rows, k))
    q, scale, zp = quantize_blocks(table, bits, block, not zero_points)
    k_blocks = q.shape[1]
    q = q.reshape(rows, -1)[:, :k]
    if storage == "int4":  # signed: shift the unsigned codes into [-8, 7]
        q, zp = q - 8, zp - 8
    if not zero_points:  # the default zero point: 2^(bits-1) for uint8, 0 for (u)int4
        zp = np.full_like(zp, 2 ** (bits - 1) if storage == "uint8" else 0)
        if storage == "uint4":  # symmetric codes would need 8: use the unsigned code range
            q = np.clip(np.round(table / scale.repeat(block, 1)[:, :k]), 0, 15).astype(np.int64)
    scale_t = scale.astype(scale_dtype)
    if storage == "uint8":
        data = pack_bits(q, bits)
        zp_t = pack_bits(zp, bits) if zero_points else None
    else:
        data = int4_tensor(q, storage == "int4")
        zp_t = int4_tensor(zp, storage == "int4") if zero_points else None
    if indices is None:
        indices = rng.integers(0, rows, (2, 3))
    indices = np.asarray(indices).astype(index_dtype)
    deq = (q - zp.repeat(block, 1)[:, :k]) * scale_t.astype(np.float64).repeat(block, 1)[:, :k]
    expected = deq[indices % rows]
    inits = {"data": data, "scales": scale_t}
    node_inputs = ["data", "indices", "scales"]
    if zero_points:
        inits["zero_points"] = zp_t
        node_inputs.append("zero_points")
    kind = f"u8q{bits}" if storage == "uint8" else storage
    neg = "_negidx" if (indices < 0).any() else ""
    name = (f"gbq_{kind}_b{block}_{rows}x{k}_{'zp' if zero_points else 'nozp'}_"
            f"{dt_name(scale_dtype)}_{np.dtype(index_dtype).name}{neg}")
    stored = (f"uint8 [{rows}, {data.shape[1]}] ({bits} bits packed low first)"
              if storage == "uint8" else f"{storage} [{rows}, {k}]")
    text = (f"com.microsoft GatherBlockQuantized, data {stored} quantized along the last axis in "
            f"blocks of {block} (k_blocks {k_blocks}), scales {dt_name(scale_dtype)} "
            f"[{rows}, {k_blocks}], "
            + ("zero points " + ("uint8 packed per row" if storage == "uint8" else storage)
               if zero_points else "default zero points")
            + f"; indices {list(indices.shape)} {np.dtype(index_dtype).name}"
            + (" with negative values" if neg else "") + "; gather_axis 0, quantize_axis 1.")
    return node_case(name, "GatherBlockQuantized", node_inputs, {"output": scale_dtype},
                     {"indices": indices}, inits,
                     dict(bits=bits, block_size=block, gather_axis=0, quantize_axis=1), text,
                     fp_tol(scale_dtype), {"output": expected})


def gbq_cases():
    """GatherBlockQuantized: uint8-packed 2/4/8 bits and the int4/uint4 types."""
    f32, f16, i64, i32 = np.float32, np.float16, np.int64, np.int32
    return [
        gbq_case("uint8", 4, 32, 11, 200, True, f32, i64, 401),
        gbq_case("uint8", 4, 16, 11, 90, False, f32, i32, 402),
        gbq_case("uint8", 4, 64, 13, 200, True, f16, i64, 403),
        gbq_case("uint8", 4, 128, 7, 300, False, f16, i32, 404),
        gbq_case("uint8", 4, 32, 11, 200, True, f32, i64, 405, indices=[[-1, 3, -11], [0, 10, -5]]),
        gbq_case("uint8", 8, 32, 11, 77, True, f32, i64, 406),
        gbq_case("uint8", 8, 16, 11, 77, False, f16, i32, 407),
        gbq_case("uint8", 2, 32, 11, 200, True, f32, i64, 408),
        gbq_case("uint4", 4, 32, 11, 200, True, f32, i64, 409),
        gbq_case("uint4", 4, 64, 11, 200, False, f16, i32, 410),
        gbq_case("int4", 4, 32, 11, 200, True, f32, i32, 411),
        gbq_case("int4", 4, 16, 11, 90, False, f16, i64, 412),
    ]


# ----------------------------------------------------------------------------------------------
# RotaryEmbedding


def rotary_caches(max_pos, half, dtype, base=10000.0):
    """cos and sin caches [max_pos, half] of the usual inverse-frequency schedule."""
    inv_freq = 1.0 / base ** (np.arange(half) / half)
    angles = np.arange(max_pos)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def rope(x, pos, cos, sin, interleaved, rot):
    """float64 rotary embedding of the first `rot` channels of x [..., S, D]; pos [..., S]."""
    x = x.astype(np.float64)
    half = rot // 2
    c = cos.astype(np.float64)[pos][..., :half]
    s = sin.astype(np.float64)[pos][..., :half]
    y = x.copy()
    if interleaved:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
        y[..., 0:rot:2], y[..., 1:rot:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        x1, x2 = x[..., :half], x[..., half:rot]
        y[..., :half], y[..., half:rot] = x1 * c - x2 * s, x1 * s + x2 * c
    return y


def rope_case(layout, batch, seq, heads, head_size, rot, interleaved, pos_kind, dtype, seed,
              num_heads_attr=True):
    """One com.microsoft RotaryEmbedding case. layout "3d" [B,S,H*D] or "4d" [B,H,S,D];
    pos_kind "bs" (position_ids [B,S]), "offset" (position_ids [1]: offset + s) or "scalar" (the
    offset as a 0-d tensor, which ORT accepts too)."""
    rng = np.random.default_rng(seed)
    max_pos = 24
    cos, sin = rotary_caches(max_pos, rot // 2, dtype)
    if layout == "3d":
        x = rand(rng, (batch, seq, heads * head_size), dtype)
        bhsd = x.reshape(batch, seq, heads, head_size).transpose(0, 2, 1, 3)
    else:
        x = rand(rng, (batch, heads, seq, head_size), dtype)
        bhsd = x
    if pos_kind == "bs":
        pos = np.stack([rng.permutation(max_pos)[:seq] for _ in range(batch)]).astype(np.int64)
        pos_full = pos
    else:
        pos = np.array([max_pos - seq - 3], np.int64)
        pos_full = np.broadcast_to(pos[0] + np.arange(seq), (batch, seq))
        if pos_kind == "scalar":
            pos = pos.reshape(())
    y = rope(bhsd, pos_full[:, None, :], cos, sin, interleaved, rot)
    if layout == "3d":
        y = y.transpose(0, 2, 1, 3).reshape(x.shape)
    attrs = dict(interleaved=interleaved)
    if rot != head_size:
        attrs["rotary_embedding_dim"] = rot
    if num_heads_attr:
        attrs["num_heads"] = heads
    name = (f"rope_{layout}_h{heads}_d{head_size}_rot{rot}_{'il' if interleaved else 'half'}_"
            f"{ {'bs': 'pos', 'offset': 'offset', 'scalar': 'scalaroffset'}[pos_kind]}"
            + ("" if num_heads_attr else "_nonumheads") + f"_s{seq}_{dt_name(dtype)}")
    form = "[B,S,H*D]" if layout == "3d" else "[B,H,S,D]"
    pairs = "interleaved (pairs 2i, 2i+1)" if interleaved else "as halves"
    text = (f"com.microsoft RotaryEmbedding, input {form} {list(x.shape)} {dt_name(dtype)} in "
            f"[-1, 1), {heads} heads of {head_size}, rotating {rot} channels {pairs}; "
            f"position_ids "
            + ("[B,S] int64 (shuffled positions)" if pos_kind == "bs"
               else f"{list(pos.shape)} = {int(pos.reshape(-1)[0])} (positions offset + s)")
            + f"; cos/sin caches [{max_pos}, {rot // 2}] (initializers)"
            + ("; num_heads attribute omitted (inferred from the cache)." if not num_heads_attr
               else "."))
    return node_case(name, "RotaryEmbedding",
                     ["input", "position_ids", "cos_cache", "sin_cache"], {"output": dtype},
                     {"input": x, "position_ids": pos}, {"cos_cache": cos, "sin_cache": sin},
                     attrs, text, fp_tol(dtype), {"output": y})


def rope_cases():
    """RotaryEmbedding: 3-D and 4-D, halves and interleaved, full and partial rotation."""
    f32, f16 = np.float32, np.float16
    return [
        rope_case("3d", 2, 5, 3, 10, 10, 0, "bs", f32, 501),
        rope_case("3d", 2, 5, 3, 10, 10, 1, "bs", f32, 502),
        rope_case("3d", 2, 5, 3, 10, 6, 0, "bs", f32, 503),
        rope_case("3d", 2, 5, 3, 10, 6, 1, "offset", f32, 504),
        rope_case("3d", 2, 5, 3, 10, 10, 0, "bs", f32, 505, num_heads_attr=False),
        rope_case("3d", 3, 1, 4, 8, 8, 0, "bs", f32, 506),
        rope_case("4d", 2, 5, 3, 10, 10, 1, "offset", f32, 508),
        rope_case("4d", 2, 5, 3, 10, 6, 1, "bs", f32, 509),
        rope_case("4d", 1, 7, 2, 14, 4, 0, "offset", f32, 510),
        rope_case("3d", 2, 5, 3, 10, 10, 1, "bs", f16, 511),
        rope_case("3d", 2, 5, 3, 10, 6, 0, "scalar", f16, 512),
        rope_case("4d", 2, 5, 3, 10, 6, 1, "bs", f16, 513),
        # probe: partial rotation without num_heads
        rope_case("4d", 2, 5, 3, 10, 6, 0, "bs", f32, 515, num_heads_attr=False),
    ]


# ----------------------------------------------------------------------------------------------
# GroupQueryAttention


GQA_INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
              "total_sequence_length", "cos_cache", "sin_cache", "position_ids", "attention_bias",
              "head_sink"]
GQA_WEIGHTS = ("cos_cache", "sin_cache", "head_sink")


def gqa_expected(t, hq, hkv, attrs, keep_buffer=False):
    """float64 reference of ORT's CPU GroupQueryAttention, from the arrays in `t`.

    The first prompt is S == total_sequence_length: every row starts at position 0 and row b has
    seqlens_k[b] + 1 valid tokens; its padding rows s attend keys [0, min(s, seqlens_k[b])].
    Otherwise row b holds seqlens_k[b] + 1 - S past tokens and query token s sits at that plus s.
    present = past with the new keys/values written at their positions; after a row's valid
    length a plain run writes zeros, while the shared buffer (keep_buffer) keeps what it held."""
    if hq % hkv:
        return {}  # not a valid GQA node (a probe)
    f64 = {n: (None if t.get(n) is None else t[n].astype(np.float64)) for n in GQA_INPUTS}
    q = f64["query"]
    batch, seq, _ = q.shape
    if f64["key"] is None:
        d = q.shape[2] // (hq + 2 * hkv)
        q, k, v = q[..., :hq * d], q[..., hq * d:(hq + hkv) * d], q[..., (hq + hkv) * d:]
    else:
        d = q.shape[2] // hq
        k, v = f64["key"], f64["value"]
    q = q.reshape(batch, seq, hq, d).transpose(0, 2, 1, 3)
    k = k.reshape(batch, seq, hkv, d).transpose(0, 2, 1, 3)
    v = v.reshape(batch, seq, hkv, d).transpose(0, 2, 1, 3)
    seqlens = t["seqlens_k"].astype(np.int64)
    total = int(t["total_sequence_length"])
    first_prompt = seq == total
    past_len = np.zeros(batch, np.int64) if first_prompt else seqlens + 1 - seq
    if attrs.get("do_rotary", 0):
        pos = past_len[:, None] + np.arange(seq)[None, :]
        if t.get("position_ids") is not None:
            pos = t["position_ids"].astype(np.int64)
            if first_prompt:  # ORT reads only the first element in the first prompt
                pos = np.broadcast_to(pos[0, 0] + np.arange(seq), (batch, seq))
        rot = 2 * t["cos_cache"].shape[1]
        il = attrs.get("rotary_interleaved", 0)
        q = rope(q, pos[:, None, :], t["cos_cache"], t["sin_cache"], il, rot)
        k = rope(k, pos[:, None, :], t["cos_cache"], t["sin_cache"], il, rot)
    buffer = 0 if f64["past_key"] is None else f64["past_key"].shape[2]
    present_len = max(buffer, total)
    pk = np.zeros((batch, hkv, present_len, d))
    pv = np.zeros((batch, hkv, present_len, d))
    if keep_buffer:
        pk[:, :, :buffer], pv[:, :, :buffer] = f64["past_key"], f64["past_value"]
    for b in range(batch):
        keep = int(past_len[b])
        if keep:
            pk[b, :, :keep] = f64["past_key"][b, :, :keep]
            pv[b, :, :keep] = f64["past_value"][b, :, :keep]
        pk[b, :, keep:keep + seq], pv[b, :, keep:keep + seq] = k[b], v[b]
    scale = attrs.get("scale", 0.0) or 1.0 / math.sqrt(d)
    window, softcap = attrs.get("local_window_size", -1), attrs.get("softcap", 0.0)
    causal = attrs.get("causal", 1)
    bias, sink = f64["attention_bias"], f64["head_sink"]
    out = np.zeros((batch, hq, seq, d))
    qk = np.zeros((batch, hq, seq, total))
    group = hq // hkv
    for b in range(batch):
        valid = int(seqlens[b]) + 1
        for h in range(hq):
            keys, values = pk[b, h // group], pv[b, h // group]
            for s in range(seq):
                p = int(past_len[b]) + s
                last = min(p, valid - 1) if causal else valid - 1
                n = last + 1
                score = keys[:n] @ q[b, h, s] * scale
                if softcap:
                    score = softcap * np.tanh(score / softcap)
                if bias is not None:
                    score = score + bias[b % bias.shape[0], h % bias.shape[1], s, :n]
                live = np.arange(n) > p - window if window > 0 else np.ones(n, bool)
                if attrs.get("qk_output", 0) == 1:
                    qk[b, h, s, :n] = np.where(live, score, 0.0)
                x = np.where(live, score, -np.inf)
                top = x.max()
                extra = None
                if sink is not None:
                    extra = sink[h]
                elif attrs.get("smooth_softmax", 0) == 1:
                    extra = 0.0
                if extra is not None:
                    top = max(top, extra)
                e = np.exp(x - top)
                probs = e / (e.sum() + (0.0 if extra is None else math.exp(extra - top)))
                if attrs.get("qk_output", 0) == 2:
                    qk[b, h, s, :n] = probs
                out[b, h, s] = probs @ values[:n]
    result = {"output": out.transpose(0, 2, 1, 3).reshape(batch, seq, hq * d),
              "present_key": pk, "present_value": pv}
    if attrs.get("qk_output", 0):
        result["output_qk"] = qk
    return result


@dataclasses.dataclass
class GqaShape:
    """Where a GQA call sits in a generation: batch, new tokens and past tokens per row."""

    phase: str  # "prompt", "decode" or "chunk"
    seq: int  # new tokens S
    past: tuple  # valid past tokens per row (all 0 in a prompt)
    valid: tuple = ()  # prompt only: valid tokens per row (right padding after them)

    @property
    def batch(self):
        return len(self.past)

    def seqlens_k(self):
        """seqlens_k: total tokens per row minus one."""
        if self.phase == "prompt":
            return [n - 1 for n in self.valid]
        return [p + self.seq - 1 for p in self.past]

    def total(self):
        """total_sequence_length: the longest row (S itself in a first prompt)."""
        return max(self.seqlens_k()) + 1


PROMPT = GqaShape("prompt", 7, (0, 0), (7, 5))
DECODE = GqaShape("decode", 1, (6, 3))
CHUNK = GqaShape("chunk", 3, (5,))
# No padding with a local window: ORT's padding rows of a windowed first prompt depend on its
# kernel path (fp32 windows them from the row's position, fp16 and qk_output from its last key).
PROMPT9 = GqaShape("prompt", 9, (0, 0), (9, 9))
DECODE9 = GqaShape("decode", 1, (8, 5))
CHUNK9 = GqaShape("chunk", 3, (6,))


def gqa_case(name, shape, hq, hkv, d, dtype=np.float32, cache="grow", capacity=16,
             packed=False, rotary=None, position_ids=None, bias_shape=None, head_sink=False,
             qk_scale=1.0, junk=False, seed=0, desc="", **attrs):
    """One GroupQueryAttention case.

    cache: "none" (prompt without past inputs), "empty" (past [B,Hkv,0,D]), "grow" (past
    [B,Hkv,max past,D], present grows by S) or "shared" (past buffer of `capacity` rows; the
    reference binds past and present to one OrtValue). rotary: None or (rot_dim, interleaved);
    position_ids: None or a function (shape) -> [B,S] int64. qk_scale multiplies q and k.
    junk: the past buffers hold random values (not zeros) after each row's valid length."""
    rng = np.random.default_rng(seed)
    batch, seq = shape.batch, shape.seq
    t = {}
    if packed:
        t["query"] = rand(rng, (batch, seq, (hq + 2 * hkv) * d), dtype)
        if qk_scale != 1.0:
            t["query"][..., :(hq + hkv) * d] *= qk_scale
    else:
        t["query"] = rand(rng, (batch, seq, hq * d), dtype) * dtype(qk_scale)
        t["key"] = rand(rng, (batch, seq, hkv * d), dtype) * dtype(qk_scale)
        t["value"] = rand(rng, (batch, seq, hkv * d), dtype)
    if cache != "none":
        rows = {"empty": 0, "grow": max(shape.past), "shared": capacity}[cache]
        for n in ("past_key", "past_value"):
            past = np.zeros((batch, hkv, rows, d), dtype)
            if junk:
                past = rand(rng, past.shape, dtype, 2, 3)
            for b, p in enumerate(shape.past):
                past[b, :, :p] = rand(rng, (hkv, p, d), dtype) * dtype(
                    qk_scale if n == "past_key" else 1.0)
            t[n] = past
    t["seqlens_k"] = np.array(shape.seqlens_k(), np.int32)
    t["total_sequence_length"] = np.array(shape.total(), np.int32)
    if rotary:
        rot, interleaved = rotary
        t["cos_cache"], t["sin_cache"] = rotary_caches(32, rot // 2, dtype)
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    if position_ids is not None:
        t["position_ids"] = np.asarray(position_ids(shape), np.int64)
    if bias_shape is not None:
        t["attention_bias"] = rand(rng, bias_shape(shape), dtype)
    if head_sink:
        t["head_sink"] = np.linspace(-1.0, 2.0, hq).astype(dtype)
    last = max(i for i, n in enumerate(GQA_INPUTS) if n in t)
    node_inputs = [n if n in t else "" for n in GQA_INPUTS[:last + 1]]
    inputs = {n: a for n, a in t.items() if n not in GQA_WEIGHTS}
    inits = {n: a for n, a in t.items() if n in GQA_WEIGHTS}
    outputs = {"output": dtype, "present_key": dtype, "present_value": dtype}
    if attrs.get("qk_output", 0):
        outputs["output_qk"] = dtype
    share = (("past_key", "present_key"), ("past_value", "present_value")) \
        if cache == "shared" else ()
    all_attrs = dict(num_heads=hq, kv_num_heads=hkv, **attrs)
    text = gqa_description(shape, hq, hkv, d, dtype, cache, capacity, packed, rotary,
                           dict(t, junk=True) if junk else t, all_attrs, qk_scale) + desc
    return node_case(f"gqa_{name}", "GroupQueryAttention", node_inputs, outputs, inputs, inits,
                     all_attrs, text, fp_tol(dtype),
                     gqa_expected(t, hq, hkv, all_attrs, keep_buffer=bool(share)), share=share,
                     expected_plain=gqa_expected(t, hq, hkv, all_attrs) if share else None)


def gqa_description(shape, hq, hkv, d, dtype, cache, capacity, packed, rotary, t, attrs,
                    qk_scale):
    """A sentence or two saying what a GQA case holds."""
    if shape.phase == "prompt":
        phase = (f"first prompt S = total_sequence_length = {shape.seq}, batch {shape.batch} "
                 + (f"right-padded to valid lengths {list(shape.valid)} (a padding row s "
                    f"attends keys 0..min(s, seqlens_k))" if min(shape.valid) < shape.seq
                    else "without padding"))
    elif shape.phase == "decode":
        phase = f"decode S=1 after pasts of {list(shape.past)} tokens"
    else:
        phase = f"a prompt chunk S={shape.seq} after a past of {list(shape.past)} tokens"
    cache_text = {
        "none": "no past inputs",
        "empty": "empty past [B,Hkv,0,D]",
        "grow": f"growing cache: past [B,Hkv,{max(shape.past)},D] -> present "
                f"[B,Hkv,{shape.total()},D] (zeros past a row's valid length)",
        "shared": f"shared buffer: past of capacity {capacity} ("
                  + ("random values in [2, 3)" if "junk" in t else "zeros")
                  + f" past the valid rows), present [B,Hkv,{capacity},D]",
    }[cache]
    parts = [f"com.microsoft GroupQueryAttention {dt_name(dtype)}, num_heads {hq}, kv_num_heads "
             f"{hkv}, head_size {d}; {phase}; seqlens_k {t['seqlens_k'].tolist()}, "
             f"total_sequence_length {int(t['total_sequence_length'])} (graph inputs); "
             f"{cache_text}; " + ("packed QKV (key/value omitted)" if packed else
                                  "separate query/key/value") + " in [-1, 1)"]
    if qk_scale != 1.0:
        parts.append(f"q and k (and past keys) scaled by {qk_scale:g}")
    if rotary:
        parts.append(f"do_rotary with cos/sin caches [32, {rotary[0] // 2}] (rotating "
                     f"{rotary[0]} of {d} channels), rotary_interleaved {rotary[1]}")
    if "position_ids" in t:
        parts.append(f"position_ids {t['position_ids'].tolist()}")
    if "attention_bias" in t:
        parts.append(f"attention_bias {list(t['attention_bias'].shape)}")
    if "head_sink" in t:
        parts.append(f"head_sink {np.round(t['head_sink'].astype(np.float64), 3).tolist()}")
    for key in ("local_window_size", "softcap", "smooth_softmax", "scale", "qk_output",
                "causal"):
        if key in attrs:
            parts.append(f"{key} {attrs[key]:g}")
    return "; ".join(parts) + "."


def bias_full(shape):
    """attention_bias [B, 1, S, total_sequence_length]: one bias a row, broadcast over heads."""
    return (shape.batch, 1, shape.seq, shape.total())


def gqa_cases():
    """GroupQueryAttention: prompt / decode / chunk, growing and shared caches, packed QKV,
    rotary, local window, softcap, smooth softmax, scale, attention_bias, head_sink, output_qk,
    causal 0, fp32 and fp16."""
    f16 = np.float16
    rot16 = (16, 0)
    same_rows = lambda s: np.broadcast_to(2 + np.arange(s.seq), (s.batch, s.seq))  # noqa: E731
    later = lambda s: np.array([[9 + i for i in range(s.seq)], [4 + i for i in range(s.seq)]][
        :s.batch])  # noqa: E731
    c = [
        # phases and cache forms
        gqa_case("prompt_nopast_h4k2_d24", PROMPT, 4, 2, 24, cache="none", seed=601),
        gqa_case("prompt_emptypast_h4k2_d24", PROMPT, 4, 2, 24, cache="empty", seed=602),
        gqa_case("prompt_nopast_h2k2_d40", PROMPT, 2, 2, 40, cache="none", seed=603),
        gqa_case("prompt_shared_h4k2_d24", PROMPT, 4, 2, 24, cache="shared", seed=605),
        gqa_case("decode_grow_h4k2_d24", DECODE, 4, 2, 24, seed=606),
        gqa_case("decode_shared_h4k2_d24", DECODE, 4, 2, 24, cache="shared", seed=607),
        gqa_case("decode_grow_h8k1_d40", DECODE, 8, 1, 40, seed=608),
        gqa_case("decode_shared_h6k3_d8", DECODE, 6, 3, 8, cache="shared", seed=609),
        gqa_case("decode_shared_junk_h4k2_d24", DECODE, 4, 2, 24, cache="shared", junk=True,
                 seed=662, desc=" Both runs leave the junk out of the attention; the shared "
                                "buffer keeps it in present, a plain run writes zeros there."),
        gqa_case("decode_grow_h3k1_d24_b1", GqaShape("decode", 1, (11,)), 3, 1, 24, seed=610),
        gqa_case("chunk_grow_h4k2_d24", CHUNK, 4, 2, 24, seed=611),
        gqa_case("chunk_shared_h4k2_d24", CHUNK, 4, 2, 24, cache="shared", seed=612),
        # packed QKV
        gqa_case("prompt_packed_h4k2_d24", PROMPT, 4, 2, 24, cache="none", packed=True, seed=614),
        gqa_case("decode_packed_shared_h4k2_d24", DECODE, 4, 2, 24, cache="shared", packed=True,
                 seed=615),
        gqa_case("chunk_packed_h6k3_d8", CHUNK, 6, 3, 8, packed=True, seed=616),
        # rotary
        gqa_case("prompt_rot_h4k2_d16", PROMPT, 4, 2, 16, cache="none", rotary=rot16, seed=617),
        gqa_case("decode_rot_h4k2_d16", DECODE, 4, 2, 16, rotary=rot16, seed=619),
        gqa_case("decode_shared_rot_il_h4k2_d16", DECODE, 4, 2, 16, cache="shared",
                 rotary=(16, 1), seed=620),
        gqa_case("chunk_rot_h4k2_d48", CHUNK, 4, 2, 48, rotary=(48, 0), seed=621),
        gqa_case("chunk_shared_rot_il_h2k1_d16", CHUNK, 2, 1, 16, cache="shared", rotary=(16, 1),
                 seed=622),
        gqa_case("prompt_rot_partial_h4k2_d48", PROMPT, 4, 2, 48, cache="none", rotary=(16, 0),
                 seed=623),
        gqa_case("decode_rot_partial_il_h4k2_d48", DECODE, 4, 2, 48, rotary=(32, 1), seed=624),
        gqa_case("prompt_packed_rot_il_h4k2_d16", PROMPT, 4, 2, 16, cache="none", packed=True,
                 rotary=(16, 1), seed=626),
        gqa_case("decode_rot_posids_h4k2_d16", DECODE, 4, 2, 16, rotary=rot16,
                 position_ids=later, seed=627,
                 desc=" position_ids differ from the implicit past-length positions."),
        gqa_case("prompt_rot_posids_h4k2_d16", PROMPT, 4, 2, 16, cache="none", rotary=rot16,
                 position_ids=same_rows, seed=628,
                 desc=" Every row holds the same positions 2.. (ORT reads only position_ids[0,0] "
                      "in a first prompt)."),
        gqa_case("chunk_rot_posids_h4k2_d16", CHUNK, 4, 2, 16, rotary=rot16,
                 position_ids=lambda s: np.array([[7, 9, 12]]), seed=629),
        # local window
        gqa_case("prompt_window3_h4k2_d24", PROMPT9, 4, 2, 24, cache="none", local_window_size=3,
                 seed=630),
        gqa_case("decode_window3_h4k2_d24", DECODE9, 4, 2, 24, local_window_size=3, seed=631),
        gqa_case("chunk_window3_h4k2_d24", CHUNK9, 4, 2, 24, local_window_size=3, seed=632),
        gqa_case("decode_shared_window3_h4k2_d24", DECODE9, 4, 2, 24, cache="shared",
                 local_window_size=3, seed=633),
        # softcap, smooth softmax, scale
        gqa_case("prompt_softcap5_h4k2_d24", PROMPT, 4, 2, 24, cache="none", softcap=5.0,
                 qk_scale=4.0, seed=634),
        gqa_case("decode_softcap5_h4k2_d24", DECODE, 4, 2, 24, softcap=5.0, qk_scale=4.0,
                 seed=635),
        gqa_case("prompt_smooth_h4k2_d24", PROMPT, 4, 2, 24, cache="none", smooth_softmax=1,
                 seed=636),
        gqa_case("decode_smooth_h4k2_d24", DECODE, 4, 2, 24, smooth_softmax=1, seed=637),
        gqa_case("prompt_scale_h4k2_d24", PROMPT, 4, 2, 24, cache="none", scale=0.7, seed=638),
        # attention_bias and head_sink
        gqa_case("prompt_bias_h4k2_d24", PROMPT, 4, 2, 24, cache="none",
                 bias_shape=lambda s: (s.batch, 4, s.seq, s.total()), seed=640),
        gqa_case("prompt_bias_bcast_h4k2_d24", PROMPT, 4, 2, 24, cache="none",
                 bias_shape=lambda s: (1, 1, s.seq, s.total()), seed=641),
        gqa_case("decode_bias_h4k2_d24", DECODE, 4, 2, 24, bias_shape=bias_full, seed=642),
        gqa_case("chunk_bias_h4k2_d24", CHUNK, 4, 2, 24,
                 bias_shape=lambda s: (1, 4, s.seq, s.total()), seed=643),
        gqa_case("prompt_sink_h4k2_d24", PROMPT, 4, 2, 24, cache="none", head_sink=True,
                 seed=644),
        gqa_case("decode_sink_h4k2_d24", DECODE, 4, 2, 24, head_sink=True, seed=645),
        # output_qk
        gqa_case("prompt_qk1_h4k2_d24", PROMPT, 4, 2, 24, cache="none", qk_output=1, seed=646,
                 desc=" output_qk holds the scaled scores before softmax, 0 where masked."),
        gqa_case("decode_qk2_h4k2_d24", DECODE, 4, 2, 24, qk_output=2, seed=647,
                 desc=" output_qk holds the softmax probabilities, 0 where masked."),
        gqa_case("prompt_window3_qk1_h4k2_d24", PROMPT9, 4, 2, 24, cache="none",
                 local_window_size=3, qk_output=1, seed=648,
                 desc=" output_qk is 0 outside the causal window."),
        gqa_case("prompt_softcap_bias_qk1_h4k2_d24", PROMPT, 4, 2, 24, cache="none",
                 softcap=5.0, qk_scale=4.0, bias_shape=bias_full, qk_output=1, seed=649,
                 desc=" output_qk is softcap(scale q.k) + attention_bias."),
        # non-causal
        gqa_case("prompt_noncausal_h4k2_d24", PROMPT, 4, 2, 24, cache="none", causal=0, seed=650,
                 desc=" causal 0: every query row attends all valid keys of its row."),
        # fp16
        gqa_case("prompt_nopast_h4k2_d24_fp16", PROMPT, 4, 2, 24, f16, cache="none", seed=651),
        gqa_case("decode_grow_h4k2_d24_fp16", DECODE, 4, 2, 24, f16, seed=652),
        gqa_case("decode_shared_rot_h4k2_d16_fp16", DECODE, 4, 2, 16, f16, cache="shared",
                 rotary=rot16, seed=653),
        gqa_case("chunk_grow_h4k2_d24_fp16", CHUNK, 4, 2, 24, f16, seed=654),
        gqa_case("prompt_packed_rot_il_h4k2_d16_fp16", PROMPT, 4, 2, 16, f16, cache="none",
                 packed=True, rotary=(16, 1), seed=655),
        gqa_case("decode_softcap5_h8k1_d24_fp16", DECODE, 8, 1, 24, f16, softcap=5.0,
                 qk_scale=4.0, seed=656),
        gqa_case("prompt_window3_h4k2_d24_fp16", PROMPT9, 4, 2, 24, f16, cache="none",
                 local_window_size=3, seed=657),
        gqa_case("decode_sink_h4k2_d24_fp16", DECODE, 4, 2, 24, f16, head_sink=True, seed=658),
        # model-like combinations
        gqa_case("decode_shared_rot_window3_softcap_h4k2_d16", DECODE9, 4, 2, 16,
                 cache="shared", rotary=rot16, local_window_size=3, softcap=5.0, qk_scale=4.0,
                 seed=659, desc=" Gemma-like."),
        gqa_case("decode_shared_packed_rot_h8k2_d16_fp16", DECODE, 8, 2, 16, f16, cache="shared",
                 packed=True, rotary=rot16, seed=660, desc=" Phi-3-like."),
        gqa_case("chunk_shared_packed_rot_sink_window3_h4k2_d16", CHUNK9, 4, 2, 16,
                 cache="shared", packed=True, rotary=rot16, head_sink=True, local_window_size=3,
                 seed=661, desc=" gpt-oss-like."),
        # probes of shapes ORT 1.32 CPU rejects (skipped, listed at the end)
        gqa_case("probe_d20", DECODE, 4, 2, 20, seed=670),
        gqa_case("probe_rot_d24", DECODE, 4, 2, 24, rotary=(24, 0), seed=671),
        gqa_case("probe_chunk_b2", GqaShape("chunk", 3, (5, 4)), 4, 2, 24, seed=672),
        gqa_case("probe_h4k3", DECODE, 4, 3, 24, seed=673),
        gqa_bf16_probe(),
    ]
    return c


def gqa_bf16_probe():
    """A bfloat16 GQA model, only to ask ORT whether its CPU EP has a kernel for it."""
    case = gqa_case("probe_bf16", DECODE, 4, 2, 24, seed=674)
    for vi in list(case.model.graph.input) + list(case.model.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.BFLOAT16
    case.probe_only = True
    return case


# ----------------------------------------------------------------------------------------------
# Driver



# ----------------------------------------------------------------------------------------------
# com.microsoft MultiHeadAttention and Attention (ORT's CPU kernels are float only: float16
# nodes run between the casts ORT inserts, so float16 cases check that path)

MHA_INPUTS = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key",
              "past_value", "past_sequence_length"]
ATTN_INPUTS = ["input", "weights", "bias", "mask_index", "past", "attention_bias"]
F32_LOWEST = float(np.finfo(np.float32).min)


def key_keep(mask, batch, seq, total):
    """[B, S, T] bool: the keys a key mask keeps (ORT's forms: [B] and [3B+2] key counts, [2B]
    counts then first keys, [B, T] and [B, S, T] with > 0 keeping, [B, 1] no mask)."""
    keep = np.ones((batch, seq, total), bool)
    if mask is None:
        return keep
    j = np.arange(total)
    if mask.ndim == 1:
        for b in range(batch):
            keep[b] = j < mask[b]
            if mask.shape[0] == 2 * batch:
                keep[b] &= j >= mask[batch + b]
    elif mask.shape[-1] == 1:
        pass
    elif mask.ndim == 2:
        keep[:] = (mask > 0)[:, None, :]
    else:
        keep[:] = mask > 0
    return keep


def attention_expected(q, k, v, scale, bias, keep, causal, past, filter_value):
    """float64 reference of both ops' core: q [B,N,S,H], k [B,N,T,H], v [B,N,T,Hv]; returns
    (output [B,S,N*Hv], scores [B,N,S,T] before the softmax)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    batch, heads, seq, _ = q.shape
    total = k.shape[2]
    s = scale * q @ k.transpose(0, 1, 3, 2)
    if bias is not None:
        s = s + bias.astype(np.float64)
    add = np.where(keep[:, None], 0.0, float(filter_value))
    if causal and seq > 1:  # ORT: rows 0..S-2 only, the last query sees every key
        for i in range(seq - 1):
            add[:, :, i, past + i + 1:] = F32_LOWEST
    s = s + add
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
    return y, s


def to_bnsh(x, heads):
    """[B, S, N*H] -> [B, N, S, H]."""
    b, s, d = x.shape
    return x.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


def mha_case(name, batch, seq, kv_seq, heads, head, v_head=None, dtype=np.float32, past=0,
             kv_bnsh=False, bias=False, mask=None, attn_bias=None, capacity=None, qk=False,
             seed=0, **attrs):
    """One MultiHeadAttention case. mask: None, "counts", "counts3", "rows", "full"; attn_bias:
    None or its [b, n] dims; capacity: a shared past buffer of that many rows with
    past_sequence_length = past."""
    rng = np.random.default_rng(seed)
    v_head = v_head or head
    d, dv = heads * head, heads * v_head
    total = past + kv_seq
    t = {"query": rand(rng, (batch, seq, d), dtype)}
    if kv_bnsh:
        t["key"] = rand(rng, (batch, heads, kv_seq, head), dtype)
        t["value"] = rand(rng, (batch, heads, kv_seq, head), dtype)
    else:
        t["key"] = rand(rng, (batch, kv_seq, d), dtype)
        t["value"] = rand(rng, (batch, kv_seq, dv), dtype)
    if bias:
        t["bias"] = rand(rng, (2 * d + dv,), dtype, -0.5, 0.5)
    if mask == "counts":
        t["key_padding_mask"] = np.array([total - 1 - b % 2 for b in range(batch)], np.int32)
    elif mask == "counts3":
        t["key_padding_mask"] = np.array([total - b for b in range(batch)] + [0] * (2 * batch + 2),
                                         np.int32)
    elif mask == "rows":
        m = np.ones((batch, total), np.int32)
        m[:, 1::3] = 0
        m[0, -1] = 2  # > 0 keeps
        t["key_padding_mask"] = m
    elif mask == "full":
        t["key_padding_mask"] = (rng.uniform(size=(batch, seq, total)) > 0.3).astype(np.int32)
        t["key_padding_mask"][..., 0] = 1
    if attn_bias is not None:
        t["attention_bias"] = rand(rng, (*attn_bias, seq, total), dtype, -2, 2)
    rows = capacity or past
    if past or capacity:
        t["past_key"] = rand(rng, (batch, heads, rows, head), dtype)
        t["past_value"] = rand(rng, (batch, heads, rows, head), dtype)
    if capacity:
        t["past_sequence_length"] = np.array(past, np.int32)
    f = lambda a: a.astype(np.float64)  # noqa: E731
    q = to_bnsh(f(t["query"]) + (f(t["bias"][:d]) if bias else 0), heads)
    if kv_bnsh:
        k_new, v_new = f(t["key"]), f(t["value"])
    else:
        k_new = to_bnsh(f(t["key"]) + (f(t["bias"][d:2 * d]) if bias else 0), heads)
        v_new = to_bnsh(f(t["value"]) + (f(t["bias"][2 * d:]) if bias else 0), heads)
    k_all = np.concatenate([f(t["past_key"])[:, :, :past], k_new], 2) if rows else k_new
    v_all = np.concatenate([f(t["past_value"])[:, :, :past], v_new], 2) if rows else v_new
    keep = key_keep(t.get("key_padding_mask"), batch, seq, total)
    scale = attrs.get("scale", 0.0) or 1 / math.sqrt(head)
    y, scores = attention_expected(q, k_all, v_all, scale, t.get("attention_bias"), keep,
                                   attrs.get("unidirectional", 0), past,
                                   attrs.get("mask_filter_value", -10000.0))
    expected = {"output": y}
    outputs = [("output", dtype)]
    if rows or qk:
        pk, pv = k_all, v_all
        if capacity:
            pk, pv = f(t["past_key"]).copy(), f(t["past_value"]).copy()
            pk[:, :, past:total], pv[:, :, past:total] = k_new, v_new
        outputs += [("present_key", dtype), ("present_value", dtype)]
        expected.update(present_key=pk, present_value=pv)
    if qk:
        outputs.append(("qk", dtype))
        expected["qk"] = scores
    last = max(i for i, n in enumerate(MHA_INPUTS) if n in t)
    node_inputs = [n if n in t else "" for n in MHA_INPUTS[:last + 1]]
    text = (f"MultiHeadAttention {dt_name(dtype)}: batch {batch}, {seq} queries, {kv_seq} new keys"
            f"{' (BNSH)' if kv_bnsh else ''}, {heads} heads of {head} (values {v_head}), "
            f"past {past}{f' in a buffer of {capacity}' if capacity else ''}, bias {bias}, "
            f"key_padding_mask {mask}, attention_bias {attn_bias}, attrs {attrs}; inputs U(-1, 1).")
    return node_case(f"mha_{name}", "MultiHeadAttention", node_inputs, outputs, t, {},
                     dict(num_heads=heads, **attrs), text, fp_tol(dtype), expected)


def mha_cases():
    """MultiHeadAttention: self and cross attention, 3-D and BNSH keys, q/k/v biases, every key
    mask form, attention_bias, past/present (growing and a shared buffer), causal with a past,
    the qk output, scale, mask_filter_value, fp32 and fp16."""
    f16 = np.float16
    return [
        mha_case("self_h3d7", 2, 5, 5, 3, 7, seed=1501),
        mha_case("bias_counts_vhead5", 2, 4, 4, 3, 8, v_head=5, bias=True, mask="counts",
                 seed=1502),
        mha_case("cross_rows_bias1n", 2, 3, 6, 2, 8, mask="rows", attn_bias=(1, 2), seed=1503),
        mha_case("cross_bnsh_qbias", 2, 3, 7, 2, 6, kv_bnsh=True, bias=True, seed=1504),
        mha_case("bnsh_bias_b1_fp16", 2, 4, 9, 4, 16, kv_bnsh=True, attn_bias=(2, 1), dtype=f16,
                 seed=1505),
        mha_case("past_causal_full_qk", 2, 3, 3, 2, 8, past=4, mask="full", qk=True,
                 unidirectional=1, seed=1506),
        mha_case("decode_counts3", 3, 1, 1, 4, 8, past=6, mask="counts3", seed=1507),
        mha_case("shared_buffer", 2, 2, 2, 2, 8, past=4, capacity=10, mask="rows",
                 unidirectional=1, seed=1508),
        mha_case("scale_filter", 2, 3, 5, 2, 12, mask="counts", scale=0.3,
                 mask_filter_value=-30.0, seed=1509),
        mha_case("past_causal_fp16", 1, 4, 4, 2, 24, past=3, dtype=f16, unidirectional=1,
                 attn_bias=(1, 1), seed=1510),
        # S != L with causal: ORT bars keys only for rows 0..S-2, offset by the past
        mha_case("causal_cross_quirk", 2, 3, 5, 2, 8, unidirectional=1, seed=1511),
    ]


def attention_case(name, batch, seq, hidden, heads, sizes=None, dtype=np.float32, past=0,
                   bias=True, mask=None, attn_bias=None, seed=0, **attrs):
    """One com.microsoft Attention case: input [B, S, hidden], weights [hidden, q + k + v]
    (sizes: qkv_hidden_sizes, default 3 x (8 * heads)). mask: None, "counts", "range",
    "counts3", "rows", "full", "dummy"."""
    rng = np.random.default_rng(seed)
    q_size, k_size, v_size = sizes or (8 * heads,) * 3
    head, v_head = q_size // heads, v_size // heads
    total = past + seq
    t = {"input": rand(rng, (batch, seq, hidden), dtype)}
    w = {"weights": rand(rng, (hidden, q_size + k_size + v_size), dtype, -0.5, 0.5)}
    if bias:
        w["bias"] = rand(rng, (q_size + k_size + v_size,), dtype, -0.3, 0.3)
    if mask == "counts":
        t["mask_index"] = np.array([total - b % 3 for b in range(batch)], np.int32)
    elif mask == "range":
        t["mask_index"] = np.array([total - b for b in range(batch)] + [b for b in range(batch)],
                                   np.int32)
    elif mask == "counts3":
        t["mask_index"] = np.array([total - 1] * batch + [0] * (2 * batch + 2), np.int32)
    elif mask == "rows":
        m = np.ones((batch, total), np.int32)
        m[-1, :2] = 0
        t["mask_index"] = m
    elif mask == "full":
        t["mask_index"] = (rng.uniform(size=(batch, seq, total)) > 0.25).astype(np.int32)
        t["mask_index"][..., -1] = 1
    elif mask == "dummy":
        t["mask_index"] = np.ones((batch, 1), np.int32)
    if past:
        t["past"] = rand(rng, (2, batch, heads, past, head), dtype)
    if attn_bias is not None:
        t["attention_bias"] = rand(rng, (*attn_bias, seq, total), dtype, -2, 2)
    f = lambda a: a.astype(np.float64)  # noqa: E731
    qkv = f(t["input"]) @ f(w["weights"]) + (f(w["bias"]) if bias else 0)
    q = to_bnsh(qkv[..., :q_size], heads)
    k = to_bnsh(qkv[..., q_size:q_size + k_size], heads)
    v = to_bnsh(qkv[..., q_size + k_size:], heads)
    if past:
        k = np.concatenate([f(t["past"][0]), k], 2)
        v = np.concatenate([f(t["past"][1]), v], 2)
    keep = key_keep(t.get("mask_index"), batch, seq, total)
    scale = attrs.get("scale", 0.0) or 1 / math.sqrt(head)
    y, _ = attention_expected(q, k, v, scale, t.get("attention_bias"), keep,
                              attrs.get("unidirectional", 0), past,
                              attrs.get("mask_filter_value", -10000.0))
    expected = {"output": y}
    outputs = [("output", dtype)]
    if v_head == head:
        outputs.append(("present", dtype))
        expected["present"] = np.stack([k, v])
    if sizes:
        attrs["qkv_hidden_sizes"] = list(sizes)
    all_inputs = {**t, **w}
    last = max(i for i, n in enumerate(ATTN_INPUTS) if n in all_inputs)
    node_inputs = [n if n in all_inputs else "" for n in ATTN_INPUTS[:last + 1]]
    text = (f"Attention {dt_name(dtype)}: input {batch}x{seq}x{hidden}, {heads} heads, q/k/v "
            f"sizes {(q_size, k_size, v_size)}, weights U(-0.5, 0.5) and bias {bias} "
            f"(initializers), past {past}, mask_index {mask}, attention_bias {attn_bias}, "
            f"attrs {attrs}.")
    tol = fp_tol(dtype)
    return node_case(f"attention_{name}", "Attention", node_inputs, outputs, t, w,
                     dict(num_heads=heads, **attrs), text, tol, expected)


def attention_cases():
    """Attention: the fused projection with and without bias, qkv_hidden_sizes with another value
    size, every mask_index form, attention_bias, a past with a prompt chunk and a decode step,
    causal, scale, mask_filter_value, fp32 and fp16."""
    return [
        attention_case("plain_h3", 2, 5, 12, 3, seed=1601),
        attention_case("sizes_v9_range_causal", 2, 4, 10, 3, sizes=(12, 12, 9), mask="range",
                       unidirectional=1, seed=1602),
        attention_case("decode_past_rows", 2, 1, 16, 2, past=5, mask="rows", seed=1603),
        attention_case("full_bias_filter", 2, 3, 8, 2, mask="full", attn_bias=(1, 2),
                       mask_filter_value=-50.0, seed=1604),
        attention_case("chunk_past_counts_causal", 3, 3, 16, 4, past=4, mask="counts",
                       unidirectional=1, bias=False, seed=1605),
        attention_case("counts3_fp16", 2, 4, 24, 2, dtype=np.float16, mask="counts3", seed=1606),
        attention_case("dummy_mask_scale", 1, 6, 8, 2, mask="dummy", scale=0.2, seed=1607),
    ]


GROUPS = {
    "sln": ("SimplifiedLayerNormalization", sln_cases),
    "skip_sln": ("SkipSimplifiedLayerNormalization", skip_sln_cases),
    "mnb": ("MatMulNBits", mnb_cases),
    "gbq": ("GatherBlockQuantized", gbq_cases),
    "rope": ("RotaryEmbedding", rope_cases),
    "gqa": ("GroupQueryAttention", gqa_cases),
    "mha": ("MultiHeadAttention", mha_cases),
    "attention": ("Attention", attention_cases),
}


def parse_args():
    """Command line: OUTDIR and an optional operator filter."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--only", default="",
                        help="comma-separated groups or op types: " + ",".join(GROUPS))
    args = parser.parse_args()
    by_op = {op.lower(): key for key, (op, _) in GROUPS.items()}
    wanted = []
    for item in [c for c in args.only.split(",") if c] or list(GROUPS):
        key = item if item in GROUPS else by_op.get(item.lower())
        if key is None:
            parser.error(f"unknown op {item!r}; known: {list(GROUPS)} or their op types")
        wanted.append(key)
    return args.outdir, wanted


def main():
    """Builds every case, checks and writes it, and writes the manifest."""
    outdir, wanted = parse_args()
    outdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    manifest, skipped, counts = [], [], {}
    worst = 0.0
    for group in wanted:
        op, build = GROUPS[group]
        for case in build():
            try:
                entries, use = generate(case, outdir)
            except Rejected as e:
                skipped.append(f"{case.name}: {e}")
                continue
            manifest += entries
            counts[op] = counts.get(op, 0) + len(entries)
            worst = max(worst, use)
            for entry in entries:
                print(f"{entry['name']:52s} numpy-reference use {use:.3f}  "
                      f"rtol {entry['rtol']:g} atol {entry['atol']:g}")
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    size = sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file())
    print(f"wrote {len(manifest)} cases to {outdir} ({size / 1e6:.2f} MB, "
          f"{time.perf_counter() - start:.1f} s): "
          + ", ".join(f"{op} {n}" for op, n in counts.items()))
    print(f"largest use of a tolerance by ORT against the float64 numpy references: {worst:.3f}")
    if skipped:
        print(f"skipped {len(skipped)} variants ORT's CPU EP rejects or computes differently:")
        for line in skipped:
            print("  " + line)


if __name__ == "__main__":
    main()
