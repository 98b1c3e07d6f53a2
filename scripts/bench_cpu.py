"""Benchmarks Onyx's CPU EP against ONNX Runtime's CPU EP on resnet18, mobilenet_v2 and bert4.

Run: python3 scripts/bench_cpu.py [--models DIR] [--onyx PATH] [--threads N] [--runs 30]
                                  [--warmup 5] [--rounds 1] [--markdown FILE]
Needs: onnxruntime, numpy, and a release `onyx` binary (cargo build --release -p onyx-cli).
Test models missing from DIR are generated with scripts/make_test_models.py. Per model, in turn:
ORT (ORT_ENABLE_ALL, intra_op_num_threads=N) session creation and p50 over R runs after W
warm-ups; `onyx bench --json` on the same inputs (with --rounds, both again in turn, and the
medians over rounds reported); `onyx run` once, its outputs compared with
ORT's (max relative error as the end-to-end tests measure it; MISMATCH if outside the case's
rtol/atol). --markdown appends a dated section with the machine and the table to FILE.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ["resnet18", "mobilenet_v2", "bert4"]
TIMEOUT_S = 1800


def p50(times):
    """The median as `onyx bench` computes it: sorted[round(0.5 * (n - 1))]."""
    times = sorted(times)
    return times[round(0.5 * (len(times) - 1))]


def ensure_models(models_dir):
    """Generates the missing cases, keeping the other entries of an existing manifest."""
    path = models_dir / "manifest.json"
    old = json.loads(path.read_text()) if path.exists() else []
    have = {c["name"] for c in old if (models_dir / c["model"]).exists()}
    missing = [m for m in MODELS if m not in have]
    if missing:
        print(f"generating {','.join(missing)} in {models_dir}", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "scripts/make_test_models.py"), str(models_dir),
                        "--only", ",".join(missing)], check=True, stdout=sys.stderr)
        new = json.loads(path.read_text())
        names = {c["name"] for c in new}
        path.write_text(json.dumps([c for c in old if c["name"] not in names] + new, indent=2)
                        + "\n")
    return {c["name"]: c for c in json.loads(path.read_text())}


def onyx_cmd(args, sub, model, inputs, *extra):
    """An `onyx SUB MODEL --input NAME=FILE ... --threads N ...` command line."""
    cmd = [str(args.onyx), sub, str(model)]
    for name, file in inputs.items():
        cmd += ["--input", f"{name}={file}"]
    return cmd + ["--threads", str(args.threads), *map(str, extra)]


def run_onyx(cmd):
    """Runs onyx; returns its stdout or raises RuntimeError with the end of its stderr."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {TIMEOUT_S}s: {shlex.join(cmd)}") from None
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip())[-500:]
        raise RuntimeError(f"exit {p.returncode}: {shlex.join(cmd)}\n{tail}")
    return p.stdout


ORT_PEAK_SCRIPT = """
import sys, numpy as np, onnxruntime as ort
model, threads, *inputs = sys.argv[1:]
opts = ort.SessionOptions()
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
opts.intra_op_num_threads = int(threads)
sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
feeds = {n: np.load(f) for n, f in (i.split("=", 1) for i in inputs)}
for _ in range(3):
    sess.run(None, feeds)
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def ort_peak_mib(args, model, inputs):
    """Peak resident memory (VmHWM) of a fresh process that loads `model` in ONNX Runtime's CPU
    EP (its arena included) and runs it 3 times: the figure onyx bench's peak host memory is
    compared with. None where /proc is missing."""
    cmd = [sys.executable, "-c", ORT_PEAK_SCRIPT, str(model), str(args.threads),
           *(f"{n}={f}" for n, f in inputs.items())]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    try:
        return int(p.stdout.strip().splitlines()[-1]) / 1024
    except (ValueError, IndexError):
        return None


def max_rel_err(got, want):
    """max |got - want| / max(|want|, 1e-3 max|want|), as crates/onyx/tests/models.rs measures."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = max(np.abs(want).max(initial=0.0), 1e-12)
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3 * scale), initial=0.0))


def bench_model(args, models_dir, case):
    """One table row: ORT, then onyx bench, then onyx run checked against ORT's outputs."""
    model = models_dir / case["model"]
    inputs = {n: models_dir / f for n, f in case["inputs"].items()}
    feeds = {n: np.load(f) for n, f in inputs.items()}
    row = {"model": case["name"]}

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = args.threads
    start = time.perf_counter()
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    row["ort_session_ms"] = (time.perf_counter() - start) * 1e3
    names = [o.name for o in sess.get_outputs()]

    def ort_round():
        for _ in range(args.warmup):
            sess.run(names, feeds)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            sess.run(names, feeds)
            times.append((time.perf_counter() - start) * 1e3)
        return p50(times)

    def onyx_round():
        out = run_onyx(onyx_cmd(args, "bench", model, inputs, "--warmup", args.warmup,
                                "--runs", args.runs, "--json"))
        return json.loads(out.strip().splitlines()[-1])

    # Rounds alternate which engine goes first, so that both see the machine's slow phases.
    ort_p50s, onyx_p50s = [], []
    try:
        for r in range(args.rounds):
            if r % 2 == 0:
                ort_p50s.append(ort_round())
            report = onyx_round()
            onyx_p50s.append(report["p50_ms"])
            if r % 2 == 1:
                ort_p50s.append(ort_round())
        row["onyx_session_ms"] = report["session_create_ms"]
        row["onyx_peak_mib"] = report["peak_host_bytes"] / 2**20
    except (RuntimeError, ValueError, KeyError, IndexError) as e:
        row["ort_p50_ms"] = statistics.median(ort_p50s) if ort_p50s else float("nan")
        row["error"] = f"onyx bench: {e}"
        return row
    row["ort_p50_ms"] = statistics.median(ort_p50s)
    row["onyx_p50_ms"] = statistics.median(onyx_p50s)
    row["ratio"] = statistics.median(o / t for o, t in zip(onyx_p50s, ort_p50s))
    expected = dict(zip(names, sess.run(names, feeds)))
    del sess
    row["ort_peak_mib"] = ort_peak_mib(args, model, inputs)
    with tempfile.TemporaryDirectory(prefix="onyx-bench-") as tmp:
        try:
            run_onyx(onyx_cmd(args, "run", model, inputs, "--output-dir", tmp))
        except RuntimeError as e:
            row["error"] = f"onyx run: {e}"
            return row
        worst, ok = 0.0, True
        rtol, atol = case.get("rtol", 1e-4), case.get("atol", 1e-5)
        for name, want in expected.items():
            path = pathlib.Path(tmp) / pathlib.Path(case["outputs"][name]).name
            if not path.exists():
                row["error"] = f"onyx run wrote no {path.name}"
                return row
            got = np.load(path)
            if got.shape != want.shape or got.dtype != want.dtype:
                row["error"] = f"output {name}: got {got.dtype}{list(got.shape)}, " \
                               f"want {want.dtype}{list(want.shape)}"
                return row
            worst = max(worst, max_rel_err(got, want))
            ok &= bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
        row["max_rel_err"], row["ok"] = worst, ok
    return row


HEADER = ["model", "ORT p50 ms", "Onyx p50 ms", "ratio onyx/ort", "ORT session ms",
          "Onyx session ms", "ORT peak host MiB", "Onyx peak host MiB", "Onyx max rel err vs ORT"]


def cells(row):
    """The table cells of one row."""
    if "error" in row:
        stage, _, detail = row["error"].partition(": ")
        last = detail.strip().splitlines()[-1] if detail.strip() else ""  # onyx's error line
        note = f"{stage}: {last}" if last else stage
        return [row["model"], f"{row['ort_p50_ms']:.2f}", "error", "",
                f"{row['ort_session_ms']:.1f}", "", "", "", note[:80]]
    err = f"{row['max_rel_err']:.2e}" + ("" if row["ok"] else " MISMATCH")
    ort_peak = "" if row.get("ort_peak_mib") is None else f"{row['ort_peak_mib']:.0f}"
    return [row["model"], f"{row['ort_p50_ms']:.2f}", f"{row['onyx_p50_ms']:.2f}",
            f"{row['ratio']:.2f}", f"{row['ort_session_ms']:.1f}",
            f"{row['onyx_session_ms']:.1f}", ort_peak, f"{row['onyx_peak_mib']:.0f}", err]


def table(rows):
    """A markdown table, columns padded so it also reads as plain text."""
    grid = [HEADER] + [cells(r) for r in rows]
    widths = [max(len(r[i]) for r in grid) for i in range(len(HEADER))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(grid[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in grid[1:]])


def git_commit():
    """The short HEAD commit, '-dirty' when tracked files differ from it (reads only)."""
    git = ["git", "--no-optional-locks", "-C", str(ROOT)]
    try:
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def markdown_section(args, text):
    """The dated section --markdown appends."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    command = shlex.join(["python3", os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    return (f"\n## CPU benchmark {now}\n\n"
            f"- machine: {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores\n"
            f"- onnxruntime {ort.__version__} (CPUExecutionProvider, ORT_ENABLE_ALL), "
            f"onyx {git_commit()}\n"
            f"- threads {args.threads}, warmup {args.warmup}, runs {args.runs}, rounds {args.rounds}; "
            "p50 latency (median over rounds; ratio: median of the rounds' ratios)\n"
            f"- command: `{command}`\n\n{text}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=pathlib.Path, default=ROOT / "target/testmodels",
                        help="folder of the test models (made by scripts/make_test_models.py when missing)")
    parser.add_argument("--only", help="comma-separated model names to run (default: all three)")
    parser.add_argument("--onyx", type=pathlib.Path, default=ROOT / "target/release/onyx",
                        help="the onyx binary (a release build)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both engines")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per model")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of both engines, alternating which goes first; the table "
                             "gives medians over rounds (a noisy machine needs several)")
    parser.add_argument("--markdown", type=pathlib.Path, help="append the table to this file")
    args = parser.parse_args()
    if args.runs < 1 or args.warmup < 0 or args.threads < 1 or args.rounds < 1:
        parser.error("need --runs >= 1, --warmup >= 0, --threads >= 1, --rounds >= 1")
    if not (args.onyx.is_file() and os.access(args.onyx, os.X_OK)):
        sys.exit(f"error: no onyx binary at {args.onyx}: build it with "
                 "`cargo build --release -p onyx-cli` or pass --onyx PATH")
    only = args.only.split(",") if args.only else MODELS
    if unknown := [m for m in only if m not in MODELS]:
        parser.error(f"--only: unknown model(s) {unknown}; known: {MODELS}")
    cases = ensure_models(args.models)
    rows = []
    for name in only:
        print(f"{name}...", file=sys.stderr, flush=True)
        rows.append(bench_model(args, args.models, cases[name]))
    text = table(rows)
    print(text)
    failed = [r for r in rows if "error" in r or not r["ok"]]
    for r in failed:
        print(f"{r['model']}: {r.get('error', 'outputs differ from ORT beyond rtol/atol')}",
              file=sys.stderr)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(markdown_section(args, text))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
