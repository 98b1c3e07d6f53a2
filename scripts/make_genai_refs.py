"""Generation references from onnxruntime-genai for the tiny LLMs of models/llm/ (made by
scripts/make_llm_models.py), for Onyx's generation tests (crates/onyx/tests/genai.rs).

Run: python3 scripts/make_genai_refs.py OUTDIR
Needs: onnxruntime-genai (written against 0.18.0, CPU), jinja2 (3.1.6), numpy. Deterministic. Writes
OUTDIR/manifest.json, a list of records:

  {"op": "generate", "folder": "models/llm/<name>", "name": ..., "prompt_ids": [...],
   "prompt_text": str or null, "options": {genai search options}, "sequence": [...],
   "gaps": [...]}
      genai's whole sequence (prompt included, a generated EOS not: genai leaves it out) for
      that prompt and options, run on the CPU
      (genai's provider list cleared). Greedy from token ids (two seeded random prompts), from
      a text prompt (encoded by genai's tokenizer), with repetition_penalty,
      no_repeat_ngram_size and min_length, and top_k = 1 sampling.
  {"op": "beam", ..., "sequences": [[...], ...]}
      Beam search (num_beams 4, and 3 with length_penalty 0.6 without early stopping): genai's
      returned sequences, best first.
      A folder where genai itself fails (llama-cpu-fp16 in 0.18) has no records; the script
      says so.
  {"op": "tokenize", "folder": ..., "text": str, "ids": [...], "decoded": str}
      genai's tokenizer on texts with accents, CJK, emoji, whitespace runs and special tokens.
      Only texts every character of which the tiny vocabulary holds are kept (genai's tokenizer
      gives -1 for a byte outside it where Hugging Face's drops it; the models' tokenizers are
      trained on a small corpus): the byte-level folder below covers the rest.

  {"op": "chat", "template": str, "messages": JSON text, "tools": JSON text or null,
   "add_generation_prompt": bool, "rendered": str (or "error"), "genai_rendered": str (or
   "genai_error")}
      Chat templates in the styles of ChatML, Llama 3, Gemma and Phi-3 with llama-cpu-fp32's
      special tokens, rendered by Jinja2 set up as transformers sets it up (the reference:
      models' templates are written for it), and by genai's apply_chat_template, for
      comparison: genai 0.18 keeps the whitespace around block tags that transformers trims.

The byte-level folder OUTDIR/bytes_tokenizer is llama-cpu-fp32's model with a tokenizer.json
written here whose vocabulary holds all 256 bytes (GPT-2's byte-to-character map) plus merges,
so that every text encodes; its "tokenize" records name that folder (relative to OUTDIR, with
"in_outdir": true).
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime_genai as og

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models" / "llm"
MAX_LENGTH = 32

TEXTS = [
    "onyx runs rotary heads",
    "the cache of quantized heads",
    "  two  spaces\tand a tab\nnew line",
    "<s>special</s> tokens <pad> inside",
    "héllo café naïve façade",
    "日本語のテキスト 中文",
    "emoji 😀🚀 and 👍🏽 skin tone",
    "mixed: ascii, ünïcödé, 한국어, العربية",
    "",
]

# Chat templates in the styles of the common model families (written here, not copied from a
# model), with the features Hugging Face templates use: trimmed blocks, loop variables,
# namespace(), Python string methods, filters, tojson, raise_exception, special tokens.
CHAT_TEMPLATES = {
    "chatml_tools": (
        "{% if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
        "Tools:\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|im_end|>\n"
        "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
        "{% for message in messages %}\n"
        "  {% if message.role != 'system' or loop.first == false %}\n"
        "<|im_start|>{{ message.role }}\n{{ message.content | trim }}<|im_end|>\n"
        "  {% endif %}\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "header_blocks": (
        "{{ bos_token }}{% set ns = namespace(system='') %}"
        "{% for message in messages %}{% if message['role'] == 'system' %}{% set ns.system = message['content'].strip() %}{% endif %}{% endfor %}"
        "{% if ns.system %}<|start_header_id|>system<|end_header_id|>\n\n{{ ns.system }}<|eot_id|>{% endif %}"
        "{% for message in messages if message['role'] != 'system' %}"
        "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    "alternating_roles": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
        "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    ),
    "tagged_turns": (
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '<|end|>\n' }}"
        "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + '<|end|>\n' }}"
        "{% else %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
    ),
}

CHATS = {
    "one_turn": [{"role": "user", "content": "Hello, who are you?"}],
    "system_multi_turn": [
        {"role": "system", "content": "  You are terse.  "},
        {"role": "user", "content": "héllo 日本 😀"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "  Again?\n"},
    ],
    "alternating": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ],
}

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

OPTION_SETS = {
    "greedy": {},
    "penalties": {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_length": 20},
    "top_k_1": {"do_sample": True, "top_k": 1, "temperature": 0.7},
    "beam4": {"num_beams": 4, "num_return_sequences": 4},
    "beam3_lp": {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.6, "early_stopping": False},
}


def cpu_model(folder):
    config = og.Config(str(folder))
    config.clear_providers()
    return og.Model(config)


def processed(logits, sequence, options, eos):
    """The last logits as genai's search sees them (penalties, no-repeat n-grams, min_length)."""
    logits = logits.astype(np.float64)
    penalty = options.get("repetition_penalty", 1.0)
    for t in set(sequence):
        logits[t] = logits[t] * penalty if logits[t] < 0 else logits[t] / penalty
    n = options.get("no_repeat_ngram_size", 0)
    if n and len(sequence) + 1 >= n:
        prefix = sequence[len(sequence) + 1 - n:]
        for i in range(len(sequence) - n + 1):
            if sequence[i:i + n - 1] == prefix:
                logits[sequence[i + n - 1]] = -np.inf
    if len(sequence) < options.get("min_length", 0):
        logits[eos] = -np.inf
    return logits


def generate(model, prompt, options, eos):
    """genai's sequence, and per chosen token the gap between the two largest (processed)
    logits relative to the largest magnitude: a runtime whose logits differ slightly may
    choose the other token where the gap is tiny."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=MAX_LENGTH, **options)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array(prompt, dtype=np.int32))
    gaps = []
    if options.get("num_beams", 1) > 1:
        while not generator.is_done():
            generator.generate_next_token()
        return [[int(t) for t in generator.get_sequence(i)] for i in range(options["num_return_sequences"])], None
    while not generator.is_done():
        sequence = [int(t) for t in generator.get_sequence(0)]
        generator.generate_next_token()
        logits = processed(np.array(generator.get_output("logits"))[0, -1], sequence, options, eos)
        top = np.sort(logits[np.isfinite(logits)])[-2:]
        gaps.append(float((top[1] - top[0]) / max(np.abs(logits[np.isfinite(logits)]).max(), 1e-30)))
    return [int(t) for t in generator.get_sequence(0)], gaps


def tokenize_records(tokenizer, folder_name, in_outdir=False):
    records = []
    for text in TEXTS:
        ids = [int(t) for t in tokenizer.encode(text)]
        if any(t < 0 for t in ids):
            continue
        records.append({"op": "tokenize", "folder": folder_name, "in_outdir": in_outdir, "text": text, "ids": ids, "decoded": tokenizer.decode(np.array(ids, dtype=np.int32))})
    return records


def transformers_environment():
    """A Jinja environment set up as transformers sets up its chat templates' (blocks trimmed
    and left-stripped, loop controls, Python's json.dumps as tojson, raise_exception)."""
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def chat_records(tokenizer):
    """Each template for each chat (both values of add_generation_prompt, with and without
    tools) rendered as transformers renders it ("rendered", or "error"), and by genai
    ("genai_rendered", or "genai_error"); the special tokens are llama-cpu-fp32's."""
    from jinja2.exceptions import TemplateError
    env = transformers_environment()
    records = []
    for template_name, template in CHAT_TEMPLATES.items():
        for chat_name, messages in CHATS.items():
            for add_generation_prompt in (True, False):
                for tools in ([None, TOOLS] if template_name == "chatml_tools" else [None]):
                    record = {"op": "chat", "template": template, "name": f"{template_name}/{chat_name}/{add_generation_prompt}/{tools is not None}", "messages": json.dumps(messages, ensure_ascii=False), "tools": json.dumps(tools) if tools else None, "add_generation_prompt": add_generation_prompt}
                    try:
                        record["rendered"] = env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
                    except TemplateError as e:
                        record["error"] = str(e)
                    try:
                        kwargs = {"template_str": template, "add_generation_prompt": add_generation_prompt}
                        if tools:
                            kwargs["tools"] = record["tools"]
                        record["genai_rendered"] = tokenizer.apply_chat_template(record["messages"], **kwargs)
                    except RuntimeError as e:
                        record["genai_error"] = str(e)
                    records.append(record)
    return records


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_bytes_tokenizer(out):
    """llama-cpu-fp32 with a byte-level BPE tokenizer whose vocabulary holds every byte."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(MODELS / "llama-cpu-fp32", out)
    special = ["<unk>", "<s>", "</s>", "<pad>"]
    alphabet = sorted(bytes_to_unicode().values())
    vocab = {t: i for i, t in enumerate(special + alphabet)}
    m = bytes_to_unicode()
    e_acute, nichi = [m[b] for b in "é".encode()], [m[b] for b in "日".encode()]
    # Merges into words, a two-byte and a three-byte character.
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("o", "n"), ("y", "x"), ("on", "yx"), (e_acute[0], e_acute[1]), (nichi[0], nichi[1]), (nichi[0] + nichi[1], nichi[2])]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    merges = [list(pair) for pair in merges]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True} for i, t in enumerate(special)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        # As the models' tokenizers (genai 0.18's tokenizer does not apply a post-processor's
        # BOS template where transformers does; that difference is not tested here).
        "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1))


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(42)
    records = []
    seen_tokenizers = set()
    for folder in sorted(p for p in MODELS.iterdir() if (p / "genai_config.json").exists()):
        name = f"models/llm/{folder.name}"
        model = cpu_model(folder)
        tokenizer = og.Tokenizer(model)
        genai_config = json.loads((folder / "genai_config.json").read_text())["model"]
        vocab, eos = genai_config["vocab_size"], genai_config["eos_token_id"]
        prompts = [("ids7", [int(t) for t in rng.integers(4, vocab, 7)], None), ("ids12", [int(t) for t in rng.integers(4, vocab, 12)], None)]
        text = "onyx runs the cache"
        text_ids = [int(t) for t in tokenizer.encode(text)]
        if all(t >= 0 for t in text_ids):
            prompts.append(("text", text_ids, text))
        for prompt_name, ids, prompt_text in prompts:
            sets = OPTION_SETS if prompt_name == "ids7" else {"greedy": {}}
            for option_name, options in sets.items():
                try:
                    sequence, gaps = generate(model, ids, options, eos)
                    if gaps is None:  # beam search: every returned sequence, best first
                        records.append({"op": "beam", "folder": name, "name": f"{folder.name}/{prompt_name}/{option_name}", "prompt_ids": ids, "options": options, "sequences": sequence})
                        continue
                except RuntimeError as e:
                    # genai 0.18 fails on llama-cpu-fp16 (MultiHeadAttention) at the first
                    # decode step: ORT's "Shape mismatch attempting to re-use buffer".
                    print(f"skipped {folder.name}/{prompt_name}/{option_name}: genai failed: {str(e)[:160]}")
                    continue
                records.append({"op": "generate", "folder": name, "name": f"{folder.name}/{prompt_name}/{option_name}", "prompt_ids": ids, "prompt_text": prompt_text, "options": options, "sequence": sequence, "gaps": gaps})
        tokenizer_json = (folder / "tokenizer.json").read_text()
        if tokenizer_json not in seen_tokenizers:
            seen_tokenizers.add(tokenizer_json)
            records.extend(tokenize_records(tokenizer, name))
    records.extend(chat_records(og.Tokenizer(cpu_model(MODELS / "llama-cpu-fp32"))))
    bytes_dir = out / "bytes_tokenizer"
    write_bytes_tokenizer(bytes_dir)
    records.extend(tokenize_records(og.Tokenizer(cpu_model(bytes_dir)), "bytes_tokenizer", in_outdir=True))
    (out / "manifest.json").write_text(json.dumps(records, ensure_ascii=False, indent=1))
    counts = {}
    for r in records:
        counts[r["op"]] = counts.get(r["op"], 0) + 1
    print(f"wrote {out / 'manifest.json'}: {counts}")


if __name__ == "__main__":
    main()
