"""Single matrix products on the GPU: Onyx's wgpu kernels against cuBLAS (through torch).

Run (on the GPU machine, recipe in docs/gpu-machine.md):
    python3 scripts/bench_gemm.py --onyx .bin/onyx [--dtypes fp32,fp16] [--products 128x768x2304,...]
Needs: onnx, numpy and a release `onyx` binary; torch with CUDA for the cuBLAS column (left
empty without it). Each product `MxKxN` is a model of one MatMul (input A `[M, K]`, B a
random initializer `[K, N]`), written under target/gemm_products/. Onyx's figure is the GPU
time per run from `onyx bench --profile` (after 200 timed runs; the mean over its profiled
runs of the timestamps around each of the product's dispatches: split-K's slices and sum
pass together, the gaps between dispatches left out). Nothing else runs between two runs,
so B can stay in the GPU's L2 cache, where a model's other kernels evict its weights: bert's
FFN-up slice kernel measured 21 us here and 29 us inside bert (2026-11-29). cuBLAS's is one
product of a CUDA graph of 100, best of 5 replays (TF32 off; fp16 with torch's default
reduced-precision reductions). The ratio is cuBLAS's time over Onyx's: Onyx's speed as a
fraction of cuBLAS's.
"""

import argparse
import json
import pathlib
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The products of bert-base at sequence 128 (QKV, FFN up, FFN down, output projection), the
# same at ViT-B/16's 197 tokens, and one large square product.
PRODUCTS = "128x768x2304,128x768x3072,128x3072x768,128x768x768,197x768x2304,197x768x3072,197x3072x768,2048x2048x2048"

DTYPES = {"fp32": (np.float32, 1), "fp16": (np.float16, 10)}


def make_product(m: int, k: int, n: int, dtype: str, folder: pathlib.Path) -> pathlib.Path:
    """Writes the product's model under `folder` (once) and returns its path."""
    import onnx
    from onnx import helper, numpy_helper

    path = folder / f"matmul_{m}x{k}x{n}_{dtype}.onnx"
    if path.exists():
        return path
    np_type, onnx_type = DTYPES[dtype]
    rng = np.random.default_rng(0)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np_type)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], path.stem,
        [helper.make_tensor_value_info("a", onnx_type, [m, k])],
        [helper.make_tensor_value_info("y", onnx_type, [m, n])],
        [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def onyx_gpu_us(onyx: str, path: pathlib.Path) -> tuple[float, str]:
    """Onyx's GPU time per run in us (`--profile`'s own runs, after the timed ones) and the
    kernels it ran."""
    run = subprocess.run(
        [onyx, "bench", str(path), "--provider", "wgpu", "--warmup", "50", "--runs", "200", "--profile", "--json"],
        capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        sys.exit(f"onyx bench {path.name} failed:\n{run.stderr[-2000:]}")
    profile = json.loads(run.stdout.strip().splitlines()[-1])["profile"]
    kernels = ", ".join(sorted({k["kernel"].split("/", 2)[-1] for k in profile["kernels"]}))
    return profile["gpu_us_per_run"], kernels


def cublas_us(m: int, k: int, n: int, dtype: str) -> float | None:
    """cuBLAS's time per product in us, or None without torch and CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch_type = {"fp32": torch.float32, "fp16": torch.float16}[dtype]
    a = torch.randn(m, k, device="cuda", dtype=torch_type)
    b = torch.randn(k, n, device="cuda", dtype=torch_type)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(100):
            a @ b
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / 100)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--onyx", required=True, help="a release `onyx` binary")
    parser.add_argument("--products", default=PRODUCTS, help="comma-separated MxKxN")
    parser.add_argument("--dtypes", default="fp32,fp16")
    parser.add_argument("--folder", type=pathlib.Path, default=ROOT / "target/gemm_products")
    args = parser.parse_args()
    print("| product (M x K x N) | dtype | Onyx GPU us | Onyx TFLOP/s | cuBLAS us | cuBLAS/Onyx | Onyx kernels |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for dtype in args.dtypes.split(","):
        if dtype not in DTYPES:
            sys.exit(f"unknown dtype {dtype!r}: one of {', '.join(DTYPES)}")
        for product in args.products.split(","):
            m, k, n = (int(d) for d in product.split("x"))
            onyx_us, kernels = onyx_gpu_us(args.onyx, make_product(m, k, n, dtype, args.folder))
            peer = cublas_us(m, k, n, dtype)
            tflops = 2 * m * k * n / onyx_us / 1e6
            peer_cells = f"{peer:.1f} | {peer / onyx_us:.2f}" if peer else "- | -"
            print(f"| {m} x {k} x {n} | {dtype} | {onyx_us:.1f} | {tflops:.1f} | {peer_cells} | {kernels} |", flush=True)


if __name__ == "__main__":
    main()
