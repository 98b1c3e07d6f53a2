"""GPU benchmark for the device machine: Onyx (cpu and wgpu EPs) against ONNX Runtime CPU, ONNX
Runtime's WebGPU EP and PyTorch CUDA eager, on the same models and inputs, in one run.

Models are exported there with torch (random weights, opset 17): torchvision classifiers (any
name `torchvision.models.get_model` takes; resnet50 and mobilenet_v2 by default) at 1x3x224x224,
transformers BertModel (bert-base config, `bert`) at 1x128 tokens.
Per model: session creation (+ first run) and p50 over --runs runs after --warmup warm-ups for
each engine; Onyx's outputs are compared with ONNX Runtime CPU's (max relative error).
With --dtypes fp32,fp16 each model is also exported in half precision (torch `model.half()` on
the GPU: fp16 weights, activations and image inputs); every engine runs that fp16 model, and
outputs are compared with ONNX Runtime CPU's outputs of the fp32 model (same weights), since
ONNX Runtime's CPU EP lacks fp16 kernels for most ops.
Prints a table of p50 latencies and ratios (onyx-wgpu / peer) and, with --markdown FILE, appends
it with date and versions.

Run on the GPU machine (see docs/gpu-machine.md for the recipe: Vulkan loader, wheels):
    python3 scripts/bench_gpu.py --onyx .bin/onyx [--models resnet50,mobilenet_v2,bert]
        [--dtypes fp32,fp16] [--runs 30] [--warmup 5] [--out DIR] [--markdown FILE] [--skip-peers]
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def p50(times):
    times = sorted(times)
    return times[round(0.5 * (len(times) - 1))]


def export(name, out_dir, dtype="fp32"):
    """Exports one model with torch (random weights, seeded: the fp16 model has the fp32 one's
    weights rounded); returns (path, {input name: array}, torch model, torch args)."""
    import torch
    half = dtype == "fp16"
    path = out_dir / (f"{name}_fp16.onnx" if half else f"{name}.onnx")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name != "bert":  # any torchvision classifier taking 224x224 images
        import torchvision
        model = torchvision.models.get_model(name, weights=None).eval()
        # Zero-initialized weights (ViT's classifier head) would make every output zero, and the
        # comparison of outputs meaningless: give them small random values.
        with torch.no_grad():
            for param in model.parameters():
                if param.dim() > 1 and not param.any():
                    param.normal_(0.0, 0.02)
        calibrate_batch_norms(model)
        torch.backends.mha.set_fastpath_enabled(False)  # ViT's fused attention has no ONNX export
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float16 if half else np.float32)
        args, names = (torch.from_numpy(x),), ["input"]
        feeds = {"input": x}
    else:
        from transformers import BertConfig, BertModel
        model = BertModel(BertConfig()).eval()
        ids = rng.integers(0, 30000, (1, 128)).astype(np.int64)
        mask = np.ones((1, 128), np.int64)
        args, names = (torch.from_numpy(ids), torch.from_numpy(mask)), ["input_ids", "attention_mask"]
        feeds = {"input_ids": ids, "attention_mask": mask}
    if half:  # torch's CPU kernels lack fp16 for some ops: trace on the GPU
        model, args = model.half().cuda(), tuple(a.cuda() for a in args)
    if not path.exists():
        with torch.no_grad():
            try:
                torch.onnx.export(model, args, str(path), input_names=names, opset_version=17, dynamo=False)
            except TypeError:
                torch.onnx.export(model, args, str(path), input_names=names, opset_version=17)
    return path, feeds, model, args


def calibrate_batch_norms(model):
    """Gives BatchNormalization layers the statistics of their inputs on random images (seeded),
    as training would. With their initial ones (mean 0, variance 1) activations shrink layer
    after layer: mobilenet_v2's outputs were ~3e-9, below f16's smallest value (6e-8), so every
    runtime's fp16 output was zero and its error against the fp32 reference 1.0."""
    import torch
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a plain average over the calibration batches
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(1)))
    model.eval()


def time_fn(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return p50(times)


def bench_ort(path, feeds, providers, warmup, runs, webgpu=False):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not webgpu:
        so.intra_op_num_threads = os.cpu_count()
    t = time.perf_counter()
    if webgpu:
        import onnxruntime_ep_webgpu as webgpu_ep
        try:
            ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
        except Exception:
            pass  # already registered
        devices = [d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name()]
        so.add_provider_for_devices(devices[:1], {})
        sess = ort.InferenceSession(str(path), so)
    else:
        sess = ort.InferenceSession(str(path), so, providers=providers)
    out = sess.run(None, feeds)
    create = (time.perf_counter() - t) * 1e3
    return time_fn(lambda: sess.run(None, feeds), warmup, runs), create, out


def bench_torch(model, args, warmup, runs):
    import torch
    model = model.cuda()
    args = tuple(a.cuda() for a in args)

    def step():
        with torch.no_grad():
            out = model(*args)
        torch.cuda.synchronize()
        return out

    out = step()
    outs = list(out.to_tuple()) if hasattr(out, "to_tuple") else [out]
    return time_fn(step, warmup, runs), [o.float().cpu().numpy() for o in outs]


def bench_onyx(onyx, path, feeds, provider, warmup, runs, work):
    files = []
    for name, arr in feeds.items():
        f = work / f"{path.stem}_{name}.npy"
        np.save(f, arr)
        files += ["--input", f"{name}={f}"]
    cmd = [str(onyx), "bench", str(path), *files, "--provider", provider, "--warmup", str(warmup),
           "--runs", str(runs), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout)[-800:])
    report = json.loads(p.stdout.strip().splitlines()[-1])
    out_dir = work / f"{path.stem}_{provider}_out"
    out_dir.mkdir(exist_ok=True)
    p = subprocess.run([str(onyx), "run", str(path), *files, "--provider", provider, "--output-dir", str(out_dir)],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout)[-800:])
    outs = sorted(out_dir.glob("*.npy"))
    return report, [np.load(o) for o in outs], [o.stem for o in outs]


def rel_err(got, want):
    got, want = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onyx", type=pathlib.Path, default=ROOT / ".bin/onyx")
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/onyx-bench"))
    ap.add_argument("--markdown", type=pathlib.Path)
    ap.add_argument("--dtypes", default="fp32", help="fp32, fp16 or fp32,fp16")
    ap.add_argument("--skip-peers", action="store_true", help="only run Onyx (and ORT CPU for the reference)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for dtype in args.dtypes.split(","):
        for name in args.models.split(","):
            try:
                rows.append(bench_model(args, name, dtype))
            except Exception as e:  # noqa: BLE001 - one model's export or reference failing ends only its row
                print(f"{name} {dtype}: {str(e)[-400:]}", file=sys.stderr)
                continue
            print(json.dumps(rows[-1]), flush=True)
    text = table(rows)
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(section(text, args.dtypes))


def bench_model(args, name, dtype):
    """One table row: every engine on one model in one precision."""
    path, feeds, model, targs = export(name, args.out, dtype)
    row = {"model": name if dtype == "fp32" else f"{name} {dtype}"}
    if dtype == "fp32":
        row["ort_cpu"], _, ref_out = bench_ort(path, feeds, ["CPUExecutionProvider"], args.warmup, args.runs)
    else:
        fp32_path, _, _, _ = export(name, args.out)
        fp32_feeds = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()}
        _, _, ref_out = bench_ort(fp32_path, fp32_feeds, ["CPUExecutionProvider"], 0, 1)
        try:
            row["ort_cpu"], _, _ = bench_ort(path, feeds, ["CPUExecutionProvider"], args.warmup, args.runs)
        except Exception as e:  # noqa: BLE001 - ORT CPU lacks many fp16 kernels
            print(f"{row['model']}: ORT CPU failed: {str(e)[:200]}", file=sys.stderr)
    if not args.skip_peers:
        try:
            row["ort_webgpu"], row["ort_webgpu_create"], out = bench_ort(path, feeds, None, args.warmup, args.runs, webgpu=True)
            row["ort_webgpu_err"] = max(rel_err(o, r) for o, r in zip(out, ref_out))
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{row['model']}: ORT WebGPU failed: {e}", file=sys.stderr)
        row["torch_cuda"], out = bench_torch(model, targs, args.warmup, args.runs)
        row["torch_cuda_err"] = max(rel_err(o, r) for o, r in zip(out, ref_out))
    for provider in ("cpu", "wgpu"):
        try:
            report, outs, _ = bench_onyx(args.onyx, path, feeds, provider, args.warmup, args.runs, args.out)
            row[f"onyx_{provider}"] = report["p50_ms"]
            row[f"onyx_{provider}_create"] = report["session_create_ms"] + report["first_run_ms"]
            row[f"onyx_{provider}_err"] = max(rel_err(o, r) for o, r in zip(outs, ref_out))
            if provider == "wgpu":
                row["onyx_wgpu_session_ms"] = report["session_create_ms"]
                row["onyx_wgpu_first_ms"] = report["first_run_ms"]
                row["onyx_wgpu_host"] = report.get("wgpu", {})
        except Exception as e:  # noqa: BLE001
            print(f"{row['model']}: onyx {provider} failed: {e}", file=sys.stderr)
    return row


def fmt(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}"


def err(row, key):
    """A relative error cell (— when that engine did not run)."""
    return fmt(row.get(key), 7) if row.get(key) is not None else "—"


def table(rows):
    head = ("| model | onyx wgpu ms | ORT WebGPU ms | torch CUDA ms | ORT CPU ms | onyx cpu ms | wgpu/webgpu | wgpu/torch "
            "| onyx wgpu create+first ms | ORT WebGPU create+first ms | wgpu rel err | cpu rel err "
            "| ORT WebGPU rel err | torch rel err |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    lines = []
    for r in rows:
        w = r.get("onyx_wgpu")
        ratio = lambda peer: fmt(w / r[peer]) if w and r.get(peer) else "—"  # noqa: E731
        lines.append(f"| {r['model']} | {fmt(w)} | {fmt(r.get('ort_webgpu'))} | {fmt(r.get('torch_cuda'))} | "
                     f"{fmt(r.get('ort_cpu'))} | {fmt(r.get('onyx_cpu'))} | {ratio('ort_webgpu')} | {ratio('torch_cuda')} | "
                     f"{fmt(r.get('onyx_wgpu_create'), 0)} | {fmt(r.get('ort_webgpu_create'), 0)} | "
                     f"{err(r, 'onyx_wgpu_err')} | "
                     f"{err(r, 'onyx_cpu_err')} | {err(r, 'ort_webgpu_err')} | {err(r, 'torch_cuda_err')} |")
    return head + "\n".join(lines) + "\n" + host_table(rows)


def host_table(rows):
    """Onyx wgpu's host side per model: session creation, first run, pipelines, recording."""
    head = ("\n| model | onyx wgpu session ms | of which device open ms | first run ms | pipelines "
            "| compile ms (all threads) | dispatches/run | host recording us/run | bind groups reused |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    lines = []
    for r in rows:
        h = r.get("onyx_wgpu_host") or {}
        if not h:
            continue
        lines.append(f"| {r['model']} | {fmt(r.get('onyx_wgpu_session_ms'), 0)} | {fmt(h.get('device_open_ms'), 0)} | "
                     f"{fmt(r.get('onyx_wgpu_first_ms'), 0)} | "
                     f"{h.get('session_pipelines', '—')} | {fmt(h.get('compile_ms'), 0)} | "
                     f"{fmt(h.get('dispatches_per_run'), 0)} | {fmt(h.get('record_us_per_run'), 0)} | "
                     f"{fmt(h.get('bind_groups_reused_percent'), 1)}% |")
    return head + "\n".join(lines) + "\n" if lines else ""


def section(text, dtypes):
    versions = []
    for mod in ("onnxruntime", "torch", "numpy"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001
            pass
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return (f"\n### GPU benchmark, {datetime.date.today()}\n\n"
            f"Machine: {gpu}, {os.cpu_count()} cores, {platform.platform()}. {', '.join(versions)}, "
            f"onnxruntime-ep-webgpu 0.4.0. Batch 1, {dtypes}, p50 of the runs after warm-ups; host inputs "
            f"and outputs for every engine. Command: `python3 scripts/bench_gpu.py --dtypes {dtypes}`.\n\n{text}")


if __name__ == "__main__":
    main()
