"""Benchmarks whole LLM forward passes, Onyx against ONNX Runtime on the same builder model,
inputs and threads: a 128-token prompt step and a decode step in the middle of 64 decode steps
after it (past 160), on random-weight int4 models of real shapes made on demand with
onnxruntime-genai's model builder (cpu target, its defaults: MatMulNBits block 32 at
accuracy_level 4, GroupQueryAttention).

Run: /opt/llmgen/bin/python scripts/bench_llm_model.py [--models qwen2.5-0.5b,llama-3.2-1b]
         [--onyx PATH] [--threads 2] [--cache DIR] [--markdown FILE]
Needs: torch, transformers, tokenizers, onnxruntime-genai (the builder) and onnxruntime, numpy
(the /opt/llmgen venv of scripts/make_llm_models.py), and a release `onyx` binary
(cargo build --release -p onyx-cli).

The models are built once into --cache (default target/bench_llm/<model>: a 0.5B model is
~0.4 GB there, 1B ~0.9 GB; the float checkpoint is made in a temporary folder and deleted).
Each step is timed as scripts/bench_llm_ops.py times a node: ORT (ORT_ENABLE_ALL,
intra_op_num_threads = N) p50 over R runs after W warm-ups, then `onyx bench --json` on the
same model and the same .npy inputs. Inputs follow the growing-cache form onnxruntime-genai
feeds: input_ids (seeded random ids), attention_mask of ones over the total length, and the
past cache (empty for the prompt; seeded random values for the decode step). A decode step's
time is the mean cost of the 64 steps: attention grows linearly with the past and the rest
does not depend on it. Prints ms, tokens/s and onyx/ort per step (below 1: Onyx is faster).
"""
import argparse
import datetime
import json
import pathlib
import platform
import shutil
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import bench_llm_ops as ops  # noqa: E402  (ORT and onyx timing)

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMPT = 128
DECODE_STEPS = 64
DECODE_PAST = PROMPT + DECODE_STEPS // 2

# Hugging Face configs of the real models (weights random: the cost does not depend on them)
MODELS = {
    "qwen2.5-0.5b": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768, vocab_size=151936,
        tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6)),
    "llama-3.2-1b": ("LlamaConfig", "LlamaForCausalLM", dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, vocab_size=128256,
        tie_word_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5)),
}


def build(name, out_dir):
    """Makes the random-weight checkpoint and runs the builder (int4, cpu) into out_dir."""
    import torch
    import transformers

    import make_llm_models as mlm  # the tokenizer and the in-process builder run

    config_cls, model_cls, config = MODELS[name]
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        hf_dir, cache_dir = pathlib.Path(tmp) / "hf", pathlib.Path(tmp) / "cache"
        hf_dir.mkdir()
        mlm.save_tokenizer(mlm.train_tokenizer(0), hf_dir)
        torch.manual_seed(0)
        cfg = getattr(transformers, config_cls)(bos_token_id=1, eos_token_id=2, **config)
        cfg.architectures = [model_cls]
        model = getattr(transformers, model_cls)(cfg).to(torch.float32).eval()
        model.save_pretrained(str(hf_dir), safe_serialization=True)
        del model
        print(f"{name}: checkpoint made, running the builder (int4, cpu)", flush=True)
        mlm.run_builder(hf_dir, out_dir, "cpu", "int4", cache_dir, ())


def feeds(model_path, past_len, new_tokens, rng):
    """The step's inputs in the growing-cache form, by the graph's input names and types."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    decoder = json.loads((model_path.parent / "genai_config.json").read_text())["model"]["decoder"]
    out = {}
    vocab = next(o for o in graph.output if o.name == "logits").type.tensor_type.shape.dim[2].dim_value
    for vi in graph.input:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if vi.name == "input_ids":
            out[vi.name] = rng.integers(4, vocab, (1, new_tokens)).astype(dtype)
        elif vi.name == "attention_mask":
            out[vi.name] = np.ones((1, past_len + new_tokens), dtype)
        elif vi.name == "position_ids":
            out[vi.name] = np.arange(past_len, past_len + new_tokens, dtype=dtype)[None]
        elif vi.name.startswith("past_key_values."):
            shape = (1, decoder["num_key_value_heads"], past_len, decoder["head_size"])
            out[vi.name] = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            raise SystemExit(f"{model_path}: unexpected input {vi.name}")
    return out


def bench(name, args):
    """[(step, tokens, ort ms, onyx ms)] of one model."""
    folder = args.cache / name
    model_path = folder / "model.onnx"
    if not model_path.exists():
        shutil.rmtree(folder, ignore_errors=True)
        build(name, folder)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for step, past, new, runs, warmup in (("prompt", 0, PROMPT, args.prompt_runs, 1),
                                              ("decode", DECODE_PAST, 1, args.runs, 3)):
            inputs = feeds(model_path, past, new, rng)
            timing = argparse.Namespace(threads=args.threads, runs=runs, warmup=warmup, onyx=args.onyx)
            ort_ms = ops.ort_p50(model_path, inputs, timing)
            onyx_ms = ops.onyx_p50(model_path, inputs, tmp, timing)
            rows.append((step, new, ort_ms, onyx_ms))
            print(f"{name:14s} {step:7s} ort {ort_ms:9.2f} ms ({new * 1e3 / ort_ms:7.1f} tok/s)  "
                  f"onyx {onyx_ms:9.2f} ms ({new * 1e3 / onyx_ms:7.1f} tok/s)  ratio {onyx_ms / ort_ms:5.2f}",
                  flush=True)
    return rows


def table(results):
    """A markdown table of every model's steps."""
    lines = ["| model | step | ORT ms | ORT tok/s | Onyx ms | Onyx tok/s | onyx/ort |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, rows in results.items():
        for step, n, o, x in rows:
            what = f"prompt {PROMPT}" if step == "prompt" else f"decode (past {DECODE_PAST})"
            lines.append(f"| {name} int4 | {what} | {o:.1f} | {n * 1e3 / o:.1f} | {x:.1f} | {n * 1e3 / x:.1f} | {x / o:.2f} |")
    return "\n".join(lines)


def parse_args():
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","))
    p.add_argument("--onyx", type=pathlib.Path, default=ROOT / "target/release/onyx")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=10, help="timed decode steps")
    p.add_argument("--prompt-runs", type=int, default=3, help="timed prompt steps")
    p.add_argument("--cache", type=pathlib.Path, default=ROOT / "target/bench_llm")
    p.add_argument("--markdown", type=pathlib.Path)
    args = p.parse_args()
    unknown = set(args.models) - set(MODELS)
    if unknown:
        p.error(f"unknown models {sorted(unknown)}; known: {list(MODELS)}")
    return args


def main():
    """Builds what is missing, times every step, prints the table, appends it to --markdown."""
    args = parse_args()
    results = {name: bench(name, args) for name in args.models}
    text = table(results)
    print(text)
    if args.markdown:
        head = (f"\n### {datetime.date.today()}: LLM models, {platform.processor() or platform.machine()}, "
                f"{args.threads} threads, ONNX Runtime {ort.__version__}\n\n`/opt/llmgen/bin/python scripts/bench_llm_model.py "
                f"--threads {args.threads}`\n\n")
        with open(args.markdown, "a") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()
