"""Builds tiny random-weight LLMs with onnxruntime-genai's model builder, into models/llm/.

Run (not in CI; needs torch, transformers, tokenizers and onnxruntime-genai, e.g. the /opt/llmgen
venv): /opt/llmgen/bin/python scripts/make_llm_models.py [--only ARCH[,ARCH...]]

Works offline (HF_HUB_OFFLINE=1). For each architecture in ARCHS this script:
  1. trains a small byte-level BPE tokenizer with `tokenizers` on seeded generated text;
  2. makes a seeded random-weight Hugging Face checkpoint with transformers (2 layers, hidden 64,
     intermediate 128, 4 attention heads, 2 KV heads of head_dim 16, 128 positions), saved with
     save_pretrained (safetensors) next to the tokenizer in a temporary folder;
  3. runs the builder (in this process: importing it costs more than a build) for each of its
     targets (TARGETS unless the Arch says otherwise), writing
     models/llm/<arch>-<ep>-<precision>/: model.onnx, model.onnx.data, genai_config.json and the
     tokenizer files, exactly as the builder writes them (it always saves the weights as external
     data and has no option to keep them inline);
  4. deletes the checkpoint and the builder's cache.
A target the builder refuses is skipped and listed at the end. For every folder made it prints
the size, the operators used (domain:op_type and count), the graph inputs and outputs, and how
far ORT's logits for the references' prompt are from transformers' (fp32) logits: ~1e-6 for fp32
builds, ~2e-3 for fp16, ~0.3 of max|logits| for int4 (random weights quantize badly).
The references are made by scripts/make_llm_model_refs.py (system python, onnxruntime only).
"""
import argparse
import collections
import contextlib
import dataclasses
import io
import json
import logging
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # make_llm_model_refs, for the checks
REPO = pathlib.Path(__file__).resolve().parent.parent
OUT_ROOT = REPO / "models" / "llm"
VOCAB_SIZE = 260  # not 256: the builder takes any Linear with vocab_size outputs for the LM head
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3
UNK_ID, BOS_ID, EOS_ID, PAD_ID = range(4)
INIT_STD = 0.15  # weight std: large enough that attention and logits are far from uniform
MAX_FOLDER_BYTES = 1_000_000

# (execution provider, precision) pairs, in folder order
TARGETS = [("cpu", "fp32"), ("cpu", "int4"), ("webgpu", "fp16"), ("webgpu", "int4"),
           ("dml", "fp16"), ("dml", "int4")]
# the builder's other graphs, built for one architecture: cpu fp16 (MultiHeadAttention with the
# KV heads repeated by plain ops and a 4-D additive mask), cuda fp16 and int4 (GroupQueryAttention
# and MatMulNBits with float16 I/O). Not cuda fp32: builder 0.18.0 makes an invalid graph there
# (packed com.microsoft Attention without its present outputs, "Graph output (present.0.key) does
# not exist in the graph"), so com.microsoft Attention is tested as a single op only.
OTHER_TARGETS = [("cpu", "fp16"), ("cuda", "fp16"), ("cuda", "int4")]

COMMON = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=128, vocab_size=VOCAB_SIZE,
    bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, initializer_range=INIT_STD,
    rms_norm_eps=1e-6,
)


@dataclasses.dataclass
class Arch:
    """One architecture: its transformers config and model classes and builder options."""

    name: str
    config_cls: str
    model_cls: str
    config: dict
    seed: int
    extra_options: tuple = ()  # builder --extra_options for every target
    int4_options: tuple = ()  # more options for int4 targets
    ep_options: dict = dataclasses.field(default_factory=dict)  # ep -> more options
    targets: tuple = tuple(TARGETS)  # (ep, precision) pairs to build
    note: str = ""

    def options(self, ep, precision):
        """The builder's extra options for one target."""
        return (self.extra_options + (self.int4_options if precision == "int4" else ())
                + self.ep_options.get(ep, ()))


TIED_INT4 = ("op_types_to_quantize=MatMul/Gather",)  # with shared_embeddings: GatherBlockQuantized

ARCHS = [
    Arch("llama", "LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=False), 101,
         targets=tuple(TARGETS + OTHER_TARGETS), note="plain RMSNorm/SwiGLU/RoPE decoder"),
    # without layer_types the builder ignores sliding_window (every layer full attention)
    Arch("mistral", "MistralConfig", "MistralForCausalLM",
         dict(tie_word_embeddings=False, sliding_window=5,
              layer_types=["sliding_attention", "sliding_attention"]), 102,
         note="sliding window 5 on every layer"),
    Arch("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False), 103,
         int4_options=("is_symmetric=false",),
         note="q/k/v biases; int4 asymmetric (uint4 with zero points)"),
    # webgpu: by default the q/k norms go into GroupQueryAttention (q_norm_weight/k_norm_weight),
    # which ORT's CPU EP rejects, so no reference could be made
    Arch("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(tie_word_embeddings=True), 104,
         extra_options=("shared_embeddings=true",), int4_options=TIED_INT4,
         ep_options={"webgpu": ("fuse_qk_norm_gqa=false",)},
         note="q/k RMSNorm; tied embeddings shared with the LM head"),
    Arch("phi3", "Phi3Config", "Phi3ForCausalLM",
         dict(tie_word_embeddings=False, original_max_position_embeddings=128), 105,
         note="fused qkv_proj and gate_up_proj in the checkpoint"),
    Arch("gemma2", "Gemma2Config", "Gemma2ForCausalLM",
         dict(tie_word_embeddings=True, sliding_window=4, query_pre_attn_scalar=24,
              attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
              hidden_activation="gelu_pytorch_tanh",
              layer_types=["sliding_attention", "full_attention"]), 106,
         extra_options=("shared_embeddings=true",), int4_options=TIED_INT4,
         note="sliding window 4 on layer 0, attention softcap 2, final logit softcap 3, "
              "attention scale 24^-0.5 (not head_dim^-0.5), sandwich norms, scaled embeddings"),
    # Not built: SmolLM3ForCausalLM (no_rope_layers). The builder (0.18.0) fails for cpu and
    # webgpu (KeyError 'position_ids': a NoPE layer falls back to separate RotaryEmbedding nodes,
    # which need a position_ids input those EPs do not have), and for dml it applies RoPE to the
    # NoPE layers (logits 0.2 of max |logits| away from transformers').
    # Not built, to keep the references small: GraniteForCausalLM (builds for every target; its
    # multipliers are plain Mul nodes and the GQA scale attribute, which gemma2 also has). ORT's
    # CPU reference of its webgpu int4 build was unreliable (see make_llm_model_refs.py).
    # Ernie: the float targets only (what it adds is interleaved RoPE), for the same reason.
    Arch("ernie", "Ernie4_5Config", "Ernie4_5ForCausalLM",
         dict(tie_word_embeddings=False, use_bias=False), 109,
         targets=(("cpu", "fp32"), ("webgpu", "fp16"), ("dml", "fp16")),
         note="interleaved RoPE"),
]


# ----------------------------------------------------------------------------------------------
# Tokenizer and checkpoint


WORDS = ("the a tiny model runs fast on rust and onyx reads each graph node tensor layer head "
         "key value cache token of an attention window with rotary positions quantized weights "
         "block scale zero point norm skip sum mask batch step decode prompt logits").split()


def corpus_lines(seed, n_lines=400):
    """Seeded generated text: random word sequences with some digits and punctuation."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 999)))
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ","]))
    return lines


def train_tokenizer(seed):
    """A byte-level BPE tokenizer of VOCAB_SIZE tokens, the 4 special tokens first (text with
    characters outside the corpus is not encodable: enough for model tests)."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # the alphabet is the corpus' characters only: all 256 bytes would fill the vocabulary
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(seed), trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(4))
    return tok


def save_tokenizer(tok, hf_dir):
    """tokenizer.json plus a tokenizer_config.json that AutoTokenizer loads offline."""
    tok.save(str(hf_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "model_max_length": COMMON["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def randomize(model, seed):
    """Seeded weights: matrices ~N(0, INIT_STD^2), biases ~N(0, 0.05^2), and norm weights
    perturbed by N(0, 0.1^2) around their initial value (1, or 0 for Gemma's 1 + w norms)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim >= 2:
                p.copy_(noise * INIT_STD)
            elif "norm" in name:
                p.add_(noise * 0.1)
            else:
                p.copy_(noise * 0.05)


def make_checkpoint(arch, hf_dir):
    """Writes the tokenizer and a random-weight checkpoint of `arch` into hf_dir; returns the
    transformers model."""
    save_tokenizer(train_tokenizer(arch.seed), hf_dir)
    torch.manual_seed(arch.seed)
    config_cls = getattr(transformers, arch.config_cls)
    config = config_cls(**{**COMMON, **arch.config})
    config.architectures = [arch.model_cls]
    model = getattr(transformers, arch.model_cls)(config).to(torch.float32).eval()
    randomize(model, arch.seed)
    if arch.config.get("tie_word_embeddings"):
        model.tie_weights()
    model.save_pretrained(str(hf_dir), safe_serialization=True)
    transformers.GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                                  pad_token_id=PAD_ID).save_pretrained(str(hf_dir))
    return model


def hf_deviation(hf_model, folder):
    """max |ORT logits - transformers logits| / max |transformers logits| on the references'
    prompt (ORT CPU, as make_llm_model_refs.py runs the model), or why ORT cannot run it."""
    import make_llm_model_refs as refs  # imports onnxruntime, which the builder needs anyway

    model = refs.load_model(folder.name)
    step = refs.first_step(model, "grow", 1)
    try:
        sess = refs.mtm.ort_session(model.ort_path, optimized=False)
        ours = refs.run_step(model, sess, step)["logits"].astype(np.float64)
    except Exception as e:  # ORT's InvalidArgument, NotImplemented, ...
        return f"ORT cannot run it: {refs.ort_message(e)}"
    with torch.no_grad():
        theirs = hf_model(torch.from_numpy(step.inputs["input_ids"])).logits.double().numpy()
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


# ----------------------------------------------------------------------------------------------
# Builder runs


def run_builder(hf_dir, out_dir, ep, precision, cache_dir, extra_options):
    """Runs onnxruntime-genai's builder in this process, its output captured (and printed to
    stderr, the last lines, if it fails)."""
    from onnxruntime_genai.models import builder

    log = io.StringIO()
    logging.disable(logging.INFO)  # the int4 quantizer logs every node
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            opts = builder.parse_extra_options(None, str(hf_dir), str(out_dir), precision, ep,
                                               str(cache_dir), list(extra_options) or None)
            builder.create_model(None, str(hf_dir), str(out_dir), precision, ep,
                                 str(cache_dir), **opts)
    except Exception:
        print("\n".join(log.getvalue().splitlines()[-5:]), file=sys.stderr)
        raise
    finally:
        logging.disable(logging.NOTSET)


def build_targets(arch, hf_dir, cache_dir, hf_model):
    """Builds every target of `arch`; returns ({folder made: its deviation from transformers},
    [(folder, reason) refused])."""
    made, refused = {}, []
    for ep, precision in arch.targets:
        name = f"{arch.name}-{ep}-{precision}"
        out_dir = OUT_ROOT / name
        shutil.rmtree(out_dir, ignore_errors=True)
        try:
            run_builder(hf_dir, out_dir, ep, precision, cache_dir, arch.options(ep, precision))
        except Exception as e:  # the builder raises ValueError, NotImplementedError, ...
            shutil.rmtree(out_dir, ignore_errors=True)
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            refused.append((name, reason))
            traceback.print_exc(limit=-3, file=sys.stderr)
            continue
        made[out_dir] = hf_deviation(hf_model, out_dir)
    return made, refused


# ----------------------------------------------------------------------------------------------
# Summary


def folder_size(folder):
    """Total bytes of the files in a folder."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def dims(value_info):
    """A value's shape as a list of ints and symbolic names."""
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def type_name(value_info):
    """The element type's short name, e.g. 'float16'."""
    return onnx.helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type).name


def op_histogram(model):
    """{'domain:op_type': count} over the graph and its subgraphs."""
    counts = collections.Counter()

    def visit(graph):
        for node in graph.node:
            counts[f"{node.domain or 'ai.onnx'}:{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g)
                for g in attr.graphs:
                    visit(g)

    visit(model.graph)
    return dict(sorted(counts.items()))


def describe(folder, deviation):
    """Prints a folder's size, operators, graph inputs/outputs and deviation from transformers;
    returns its size."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    size = folder_size(folder)
    files = ", ".join(f"{p.name} {p.stat().st_size}" for p in sorted(folder.iterdir()))
    print(f"\n{folder.relative_to(REPO)}: {size / 1e3:.1f} kB ({files})")
    dev = f"{deviation:.2g} of max|logits|" if isinstance(deviation, float) else deviation
    print(f"  prompt logits vs transformers (fp32): {dev}")
    print("  ops: " + ", ".join(f"{k} {v}" for k, v in op_histogram(model).items()))
    for kind, values in (("in ", model.graph.input), ("out", model.graph.output)):
        for vi in values:
            print(f"  {kind} {vi.name}: {type_name(vi)} {dims(vi)}")
    if size > MAX_FOLDER_BYTES:
        print(f"  WARNING: {size} bytes, over {MAX_FOLDER_BYTES}", file=sys.stderr)
    return size


def parse_args():
    """Command line: an optional architecture filter. Returns (the Archs, whether all)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated: "
                        + ",".join(a.name for a in ARCHS))
    args = parser.parse_args()
    wanted = [a for a in args.only.split(",") if a] or [a.name for a in ARCHS]
    unknown = set(wanted) - {a.name for a in ARCHS}
    if unknown:
        parser.error(f"unknown architecture(s) {sorted(unknown)}")
    return [a for a in ARCHS if a.name in wanted], not args.only


def main():
    """Builds every architecture's targets and prints a summary of each folder. Without --only,
    models/llm is emptied first (no folder of an architecture no longer built stays)."""
    archs, everything = parse_args()
    if everything:
        shutil.rmtree(OUT_ROOT, ignore_errors=True)
    OUT_ROOT.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    made, refused = {}, []
    for arch in archs:
        with tempfile.TemporaryDirectory(prefix=f"llm-{arch.name}-") as tmp:
            hf_dir, cache_dir = pathlib.Path(tmp) / "hf", pathlib.Path(tmp) / "cache"
            hf_dir.mkdir()
            hf_model = make_checkpoint(arch, hf_dir)
            folders, skipped = build_targets(arch, hf_dir, cache_dir, hf_model)
        made.update(folders)
        refused += skipped
        print(f"{arch.name} ({arch.note}): {len(folders)} folders "
              f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    total = sum(describe(folder, deviation) for folder, deviation in made.items())
    print(f"\n{len(made)} folders, {total / 1e6:.2f} MB, {time.perf_counter() - start:.0f} s")
    for name, reason in refused:
        print(f"refused by the builder: {name}: {reason}")


if __name__ == "__main__":
    main()
