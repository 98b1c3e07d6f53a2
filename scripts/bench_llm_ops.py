"""Benchmarks Onyx's CPU kernels of the LLM operators against ONNX Runtime's, one node at a time,
at the shapes of real models: MatMulNBits (int4, block 32, symmetric, accuracy_level 4, as
onnxruntime-genai's builder makes CPU models) at decode (M = 1) and prompt (M = 128) shapes of
Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.1-8B layers, and GroupQueryAttention decode steps and
prompts with a KV cache.

Run: python3 scripts/bench_llm_ops.py [--onyx PATH] [--threads N] [--runs 30] [--warmup 5]
                                      [--only mnb,gqa] [--rows 1,128] [--shapes qwen]
                                      [--markdown FILE]
Needs: onnx, onnxruntime, numpy, and a release `onyx` binary (cargo build --release -p onyx-cli).
Per case, in turn: ORT (ORT_ENABLE_ALL, intra_op_num_threads=N) p50 over R runs after W warm-ups,
then `onyx bench --json` on the same model and inputs; the ratio onyx/ort (below 1: Onyx is
faster) and the geometric mean per op. --markdown appends a dated section to FILE.
"""
import argparse
import datetime
import json
import math
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
MS = "com.microsoft"

# (name, K, N): the products of one decoder layer and the LM head.
MNB_SHAPES = [
    ("qwen0.5b qkv", 896, 1152),
    ("qwen0.5b o", 896, 896),
    ("qwen0.5b gate_up", 896, 9728),
    ("qwen0.5b down", 4864, 896),
    ("qwen0.5b lm_head", 896, 151936),
    ("llama1b qkv", 2048, 3072),
    ("llama1b gate_up", 2048, 16384),
    ("llama1b down", 8192, 2048),
    ("llama8b gate_up", 4096, 28672),
    ("llama8b down", 14336, 4096),
]

# (name, num_heads, kv_num_heads, head_size, past tokens, new tokens)
GQA_SHAPES = [
    ("qwen0.5b decode@128", 14, 2, 64, 128, 1),
    ("qwen0.5b decode@1024", 14, 2, 64, 1024, 1),
    ("llama1b decode@512", 32, 8, 64, 512, 1),
    ("qwen0.5b prompt 128", 14, 2, 64, 0, 128),
    ("llama1b prompt 512", 32, 8, 64, 0, 512),
]


def p50(times):
    """The median as `onyx bench` computes it: sorted[round(0.5 * (n - 1))]."""
    times = sorted(times)
    return times[round(0.5 * (len(times) - 1))]


def save(model, folder, name):
    """Writes `model` (weights in a side file when large) and returns its path."""
    path = folder / f"{name}.onnx"
    big = sum(t.ByteSize() for t in model.graph.initializer) > 1 << 30
    onnx.save_model(model, str(path), save_as_external_data=big, location=f"{name}.data")
    return path


def mnb_model(k, n, m, rng):
    """One MatMulNBits node as the builder makes it for the CPU: random int4 weights, f32 scales."""
    blocks, block = math.ceil(k / 32), 32
    b = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
    scales = (rng.standard_normal((n, blocks)) * 0.02).astype(np.float32)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain=MS, K=k, N=n, bits=4,
                            block_size=block, accuracy_level=4)
    graph = helper.make_graph([node], "mnb", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, m, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, m, n])],
                              [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model, {"A": rng.uniform(-1, 1, (1, m, k)).astype(np.float32)}


def gqa_model(hq, hkv, d, past, new, rng):
    """One GroupQueryAttention node with packed q, k, v, rotary inside, as in builder CPU models."""
    total = past + new
    max_pos = max(total, 2048)
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    angles = np.outer(np.arange(max_pos), inv)
    node = helper.make_node(
        "GroupQueryAttention",
        ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos", "sin"],
        ["out", "present_key", "present_value"], domain=MS, num_heads=hq, kv_num_heads=hkv,
        do_rotary=1, scale=1.0 / math.sqrt(d))
    width = (hq + 2 * hkv) * d
    cache = [1, hkv, past, d]
    inputs_info = [
        helper.make_tensor_value_info("qkv", TensorProto.FLOAT, [1, new, width]),
        helper.make_tensor_value_info("past_key", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("past_value", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
    ]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, new, hq * d]),
               helper.make_tensor_value_info("present_key", TensorProto.FLOAT, [1, hkv, total, d]),
               helper.make_tensor_value_info("present_value", TensorProto.FLOAT, [1, hkv, total, d])]
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
    graph = helper.make_graph([node], "gqa", inputs_info, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    feeds = {
        "qkv": rng.uniform(-1, 1, (1, new, width)).astype(np.float32),
        "past_key": rng.uniform(-1, 1, cache).astype(np.float32),
        "past_value": rng.uniform(-1, 1, cache).astype(np.float32),
        "seqlens_k": np.array([total - 1], dtype=np.int32),
        "total_sequence_length": np.array(total, dtype=np.int32),
    }
    return model, feeds


def ort_p50(path, feeds, args):
    """ORT's p50 (ms) over args.runs runs after args.warmup."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(args.warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return p50(times)


def onyx_p50(path, feeds, folder, args):
    """`onyx bench --json`'s p50 (ms) on the same inputs."""
    cmd = [str(args.onyx), "bench", str(path), "--warmup", str(args.warmup), "--runs", str(args.runs),
           "--json", "--threads", str(args.threads)]
    for name, value in feeds.items():
        file = folder / f"{path.stem}.{name}.npy"
        np.save(file, value)
        cmd += ["--input", f"{name}={file}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"onyx bench failed: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["p50_ms"]


def run_cases(args):
    """Every case: (op, name, ort ms, onyx ms)."""
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        cases = []
        if "mnb" in args.only:
            for name, k, n in MNB_SHAPES:
                if args.shapes not in name:
                    continue
                for m in args.rows:
                    cases.append(("MatMulNBits", f"{name} M={m} K={k} N={n}", lambda k=k, n=n, m=m: mnb_model(k, n, m, rng)))
        if "gqa" in args.only:
            for name, hq, hkv, d, past, new in GQA_SHAPES:
                cases.append(("GroupQueryAttention", f"{name} ({hq}/{hkv} heads, d {d})", lambda a=(hq, hkv, d, past, new): gqa_model(*a, rng)))
        for i, (op, name, make) in enumerate(cases):
            model, feeds = make()
            path = save(model, folder, f"case{i}")
            ort_ms = ort_p50(path, feeds, args)
            onyx_ms = onyx_p50(path, feeds, folder, args)
            rows.append((op, name, ort_ms, onyx_ms))
            print(f"{op:20s} {name:45s} ort {ort_ms:8.3f} ms  onyx {onyx_ms:8.3f} ms  ratio {onyx_ms / ort_ms:5.2f}", flush=True)
            for f in folder.iterdir():
                f.unlink()
    return rows


def table(rows):
    """A markdown table with a geometric mean per op."""
    lines = ["| op | shape | ORT ms | Onyx ms | onyx/ort |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {op} | {name} | {o:.3f} | {x:.3f} | {x / o:.2f} |" for op, name, o, x in rows]
    for op in sorted({r[0] for r in rows}):
        ratios = [x / o for o2, _, o, x in rows if o2 == op]
        lines.append(f"| {op} | geometric mean of {len(ratios)} | | | {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} |")
    return "\n".join(lines)


def parse_args():
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--onyx", type=pathlib.Path, default=ROOT / "target/release/onyx")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--only", default="mnb,gqa", type=lambda s: s.split(","))
    p.add_argument("--rows", default="1,128", type=lambda s: [int(m) for m in s.split(",")],
                   help="MatMulNBits' M values")
    p.add_argument("--shapes", default="", help="only the MatMulNBits shapes whose name contains this")
    p.add_argument("--markdown", type=pathlib.Path)
    return p.parse_args()


def main():
    """Runs the cases, prints the table, appends it to --markdown."""
    args = parse_args()
    rows = run_cases(args)
    text = table(rows)
    print(text)
    if args.markdown:
        head = (f"\n### {datetime.date.today()}: LLM operators, {platform.processor() or platform.machine()}, "
                f"{args.threads} threads, ONNX Runtime {ort.__version__}\n\n`python3 scripts/bench_llm_ops.py "
                f"--threads {args.threads} --runs {args.runs}`\n\n")
        with open(args.markdown, "a") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()
