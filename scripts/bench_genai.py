"""Benchmarks generation, `onyx generate` against onnxruntime-genai on the same builder folder
and threads: a prompt of 128 seeded random tokens, then 128 new tokens (greedy; EOS banned
with min_length so that both make all 128), on random-weight int4 models of Qwen2.5-0.5B and
Llama-3.2-1B shapes made on demand (scripts/bench_llm_model.py builds them into
target/bench_llm).

Run: /opt/llmgen/bin/python scripts/bench_genai.py [--models qwen2.5-0.5b,llama-3.2-1b]
         [--onyx PATH | --no-cli] [--onyx-python DIR] [--threads 2] [--repeats 2] [--markdown FILE]
Needs: the /opt/llmgen venv of scripts/make_llm_models.py (torch, transformers and the builder
to make the models; onnxruntime-genai 0.18 to run them) and a release `onyx` binary
(cargo build --release -p onyx-cli).

Both read one folder whose genai_config.json sets intra_op_num_threads to --threads and the
CPU provider. Each run is a fresh process (its peak resident memory is its own): genai in a
Python child that times append_tokens (the prompt) and each generate_next_token, Onyx through
`onyx generate --json`. Reported per model, best of --repeats: time to first token, prompt
tokens/s, decode tokens/s, peak memory, and onyx/genai ratios (times below 1 and rates above 1:
Onyx is better). genai runs twice: with max_length left at the model's context length, as a
folder is shipped (its shared-buffer cache is allocated for the whole context), and with
max_length 256. Onyx's cache grows with the sequence (its shared buffer doubles as the
sequence reaches it), so max_length only caps its memory; it runs with max_length 256.

With --onyx-python DIR (a folder where the `onyx` wheel is installed, e.g. by
`pip install --target DIR`), genai's Python child also runs with `import onyx.genai as og`
instead of onnxruntime_genai (the same script, the import changed; max_length 256), reported as
"onyx.genai". --no-cli leaves `onyx generate` out.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import shutil

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import bench_llm_model as blm  # noqa: E402  (model shapes and the builder run)

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMPT = 128
NEW = 128

GENAI_CHILD = r"""
import importlib, json, resource, sys, time
import numpy as np
og = importlib.import_module(sys.argv[5])
folder, prompt, new, max_length = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model = og.Model(og.Config(folder))
params = og.GeneratorParams(model)
options = {"min_length": len(prompt) + new}
if max_length:
    options["max_length"] = max_length
params.set_search_options(**options)
generator = og.Generator(model, params)
start = time.perf_counter()
generator.append_tokens(np.array(prompt, dtype=np.int32))
prompt_done = time.perf_counter()
generator.generate_next_token()
first = time.perf_counter()
for _ in range(new - 1):
    generator.generate_next_token()
end = time.perf_counter()
print(json.dumps({
    "output_tokens": [int(t) for t in generator.get_sequence(0)][len(prompt):],
    "time_to_first_token_ms": (first - start) * 1e3,
    "prompt_tokens_per_s": len(prompt) / (prompt_done - start),
    "decode_tokens_per_s": (new - 1) / (end - first),
    "peak_host_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}))
"""


def bench_folder(model_dir, threads):
    """A folder of hard links to the model's files (Onyx reads external data only inside the
    model's own folder, so no symbolic links) with genai_config.json set to the CPU and
    `threads` intra-op threads."""
    tmp = model_dir.parent / f"{model_dir.name}-bench"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in model_dir.iterdir():
        if f.name != "genai_config.json":
            os.link(f, tmp / f.name)
    config = json.loads((model_dir / "genai_config.json").read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options["provider_options"] = []
    options["intra_op_num_threads"] = threads
    (tmp / "genai_config.json").write_text(json.dumps(config, indent=2))
    return tmp


def run_genai(folder, prompt, max_length, module="onnxruntime_genai", path=None):
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = subprocess.run([sys.executable, "-c", GENAI_CHILD, str(folder), json.dumps(prompt), str(NEW), str(max_length), module], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_onyx(onyx, folder, prompt):
    # min_length is not a CLI flag: the folder's search section carries it for Onyx.
    out = subprocess.run([str(onyx), "generate", str(folder), "--input-ids", ",".join(map(str, prompt)), "--max-length", str(PROMPT + NEW), "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(runs):
    """Best of the repeats per figure (fastest, least memory)."""
    pick = {"time_to_first_token_ms": min, "prompt_tokens_per_s": max, "decode_tokens_per_s": max, "peak_host_bytes": min}
    return {k: f([r[k] for r in runs]) for k, f in pick.items()} | {"output_tokens": runs[0]["output_tokens"]}


def bench(name, args):
    model_dir = args.cache / name
    if not (model_dir / "genai_config.json").exists():
        blm.build(name, model_dir)
    folder = bench_folder(model_dir, args.threads)
    config = json.loads((folder / "genai_config.json").read_text())
    config["search"]["min_length"] = PROMPT + NEW
    (folder / "genai_config.json").write_text(json.dumps(config, indent=2))
    vocab = config["model"]["vocab_size"]
    prompt = [int(t) for t in np.random.default_rng(0).integers(4, min(vocab, 5000), PROMPT)]
    result = {
        "genai": best([run_genai(folder, prompt, 0) for _ in range(args.repeats)]),
        "genai_256": best([run_genai(folder, prompt, PROMPT + NEW) for _ in range(args.repeats)]),
        "context_length": config["model"]["context_length"],
    }
    if not args.no_cli:
        result["onyx"] = best([run_onyx(args.onyx, folder, prompt) for _ in range(args.repeats)])
    if args.onyx_python:
        runs = [run_genai(folder, prompt, PROMPT + NEW, "onyx.genai", args.onyx_python) for _ in range(args.repeats)]
        result["onyx.genai"] = best(runs)
    g = result["genai"]["output_tokens"]
    for side in ("onyx", "onyx.genai"):
        if side in result:
            o = result[side]["output_tokens"]
            result[f"same_tokens {side}"] = next((i for i, (a, b) in enumerate(zip(o, g)) if a != b), min(len(o), len(g)))
    print(name, json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "output_tokens"} if isinstance(v, dict) else v for k, v in result.items()}), flush=True)
    return result


def table(results, threads):
    lines = [
        f"| model | figure | onyx | genai (max_length = context) | onyx/genai | genai (max_length 256) | onyx/genai |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    figures = [("time_to_first_token_ms", "time to first token", 1, "ms"), ("prompt_tokens_per_s", "prompt", 1, "tok/s"),
               ("decode_tokens_per_s", "decode", 1, "tok/s"), ("peak_host_bytes", "peak memory", 1 / 2**20, "MiB")]
    for name, r in results.items():
        g, g2 = r["genai"], r["genai_256"]
        for side in ("onyx", "onyx.genai"):
            if side not in r:
                continue
            o = r[side]
            for key, label, scale, unit in figures:
                lines.append(f"| {name} | {side}: {label} | {o[key] * scale:.1f} {unit} | {g[key] * scale:.1f} {unit} | {o[key] / g[key]:.2f} | {g2[key] * scale:.1f} {unit} | {o[key] / g2[key]:.2f} |")
            lines.append(f"| {name} | {side}: same greedy tokens | {r[f'same_tokens {side}']} of {NEW} | | | | |")
    return "\n".join(lines)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(blm.MODELS), type=lambda s: s.split(","))
    p.add_argument("--onyx", type=pathlib.Path, default=ROOT / "target/release/onyx")
    p.add_argument("--no-cli", action="store_true", help="leave `onyx generate` out")
    p.add_argument("--onyx-python", type=pathlib.Path, help="a folder where the onyx wheel is installed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cache", type=pathlib.Path, default=ROOT / "target/bench_llm")
    p.add_argument("--markdown", type=pathlib.Path)
    return p.parse_args()


def main():
    args = parse_args()
    results = {name: bench(name, args) for name in args.models}
    text = table(results, args.threads)
    print(text)
    if args.markdown:
        import onnxruntime_genai as og
        head = (f"\n### {datetime.date.today()}: generation, {platform.processor() or platform.machine()}, {args.threads} threads, "
                f"onnxruntime-genai {og.__version__}\n\nPrompt {PROMPT} random tokens, {NEW} new tokens, int4 random weights. "
                f"`/opt/llmgen/bin/python scripts/bench_genai.py --threads {args.threads}`\n\n")
        with open(args.markdown, "a") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()
