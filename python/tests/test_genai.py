"""onyx.genai against the real onnxruntime_genai (0.18) on the tiny builder folders of
models/llm/: the same calls give the same tokens, texts, shapes, options and error classes.

genai runs every folder on its CPU EP (its providers cleared); onyx runs the CPU folders on its
CPU EP and, in test_gpu_folders_*, the dml/webgpu folders on its wgpu EP.
"""

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from conftest import AGAINST_ITSELF, REPO_ROOT, known_gap

LLM = REPO_ROOT / "models" / "llm"
CPU_FOLDERS = ["llama-cpu-fp32", "llama-cpu-int4", "qwen3-cpu-fp32", "phi3-cpu-int4", "gemma2-cpu-fp32",
               "mistral-cpu-int4"]
# Texts whose every character the tiny vocabularies hold (genai's tokenizer gives -1 for a byte
# outside them where Hugging Face's drops it).
TEXTS = ["onyx runs rotary heads", "the cache of quantized heads", "a longer prompt here", ""]
# A chat template in the style of the common ones, written with the characters the tiny
# vocabularies hold (lower case, digits, space and ",.?!"; ChatML's "<|im_start|>" would encode
# to unknown bytes).
CHAT_TEMPLATE = ("{% for m in messages %}{{ m.role }}, {{ m.content }}. {% endfor %}"
                 "{% if add_generation_prompt %}assistant, {% endif %}")


@pytest.fixture(scope="session")
def og():
    """The reference: the real onnxruntime_genai."""
    import onnxruntime_genai
    return onnxruntime_genai


@pytest.fixture(scope="session")
def oxg(og):
    """onyx.genai (onnxruntime_genai itself with ONYX_TEST_AGAINST_ITSELF=1)."""
    if AGAINST_ITSELF:
        return og
    import onyx.genai
    return onyx.genai


_models = {}


def model(mod, folder, providers=None):
    """`folder`'s model under `mod`, on the CPU unless `providers` (genai names) are given;
    cached per module, folder and providers."""
    key = (mod.__name__, folder, tuple(providers or ()))
    if key not in _models:
        config = mod.Config(str(LLM / folder))
        config.clear_providers()
        for p in providers or ():
            config.append_provider(p)
        _models[key] = mod.Model(config)
    return _models[key]


def prompt_ids(rng, vocab, n):
    """Seeded random token ids past the special ones."""
    return rng.integers(4, vocab, size=n).astype(np.int32)


def prompted(mod, m, prompt, **options):
    """A generator of `m` with search `options`, `prompt` appended."""
    params = mod.GeneratorParams(m)
    params.set_search_options(**options)
    gen = mod.Generator(m, params)
    gen.append_tokens(prompt)
    return gen


def generate(mod, m, prompt, **options):
    gen = prompted(mod, m, prompt, **options)
    while not gen.is_done():
        gen.generate_next_token()
    return gen


def raises_same(og_call, oxg_call):
    """Both calls raise, and the same class."""
    with pytest.raises(Exception) as want:
        og_call()
    with pytest.raises(Exception) as got:
        oxg_call()
    assert type(got.value) is type(want.value), f"{got.value!r} vs genai's {want.value!r}"
    return got.value


OPTIONS = [
    {"max_length": 24},
    {"max_length": 28, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2},
    {"max_length": 20, "min_length": 18},
    {"max_length": 22, "do_sample": True, "top_k": 1},
]


@pytest.mark.parametrize("folder", CPU_FOLDERS)
def test_sequences_and_logits_match_genai(og, oxg, folder, rng):
    want_model, got_model = model(og, folder), model(oxg, folder)
    vocab = json.loads((LLM / folder / "genai_config.json").read_text())["model"]["vocab_size"]
    for options in OPTIONS:
        prompt = prompt_ids(rng, vocab, 7)
        want, got = generate(og, want_model, prompt, **options), generate(oxg, got_model, prompt, **options)
        np.testing.assert_array_equal(got.get_sequence(0), want.get_sequence(0), err_msg=str(options))
        assert got.get_sequence(0).dtype == np.int32
        assert got.token_count() == want.token_count()
        np.testing.assert_array_equal(got.get_next_tokens(), want.get_next_tokens())
    # The prompt step's logits.
    prompt = prompt_ids(rng, vocab, 5)
    pair = []
    for mod, m in ((og, want_model), (oxg, got_model)):
        pair.append(prompted(mod, m, prompt, max_length=16))
    want, got = (g.get_logits() for g in pair)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    # genai's logits output holds every position of the prompt; onyx's the last one (below).
    np.testing.assert_allclose(pair[1].get_output("logits")[:, -1:], pair[0].get_output("logits")[:, -1:],
                               rtol=1e-3, atol=1e-4)


def prompt_logits(mod, config):
    gen = prompted(mod, mod.Model(config), np.array([5, 6, 7, 8], np.int32), max_length=16)
    return gen.get_output("logits")


@known_gap("the logits output of a prompt step holds its last position only, unless "
           "Config.all_position_logits is set (the language-model head of every position is "
           "the largest product of a prompt step)")
def test_the_logits_output_holds_every_prompt_position_by_default(og, oxg):
    want, got = (prompt_logits(mod, mod.Config(str(LLM / "llama-cpu-fp32"))) for mod in (og, oxg))
    assert got.shape == want.shape


@pytest.mark.skipif(AGAINST_ITSELF, reason="an onyx option")
def test_all_position_logits_gives_genais_logits_output(og, oxg):
    config = oxg.Config(str(LLM / "llama-cpu-fp32"))
    assert config.all_position_logits is False
    config.all_position_logits = True
    want, got = prompt_logits(og, og.Config(str(LLM / "llama-cpu-fp32"))), prompt_logits(oxg, config)
    assert got.shape == want.shape == (1, 4, 260)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("folder", ["llama-cpu-fp32", "qwen3-cpu-int4"])
def test_beam_search_matches_genai(og, oxg, folder, rng):
    vocab = json.loads((LLM / folder / "genai_config.json").read_text())["model"]["vocab_size"]
    prompt = prompt_ids(rng, vocab, 6)
    options = {"max_length": 20, "num_beams": 3, "num_return_sequences": 2}
    want, got = generate(og, model(og, folder), prompt, **options), generate(oxg, model(oxg, folder), prompt, **options)
    for i in range(2):
        np.testing.assert_array_equal(got.get_sequence(i), want.get_sequence(i), err_msg=f"sequence {i}")


def test_tokenizer_matches_genai(og, oxg):
    want_tok, got_tok = og.Tokenizer(model(og, "llama-cpu-fp32")), oxg.Tokenizer(model(oxg, "llama-cpu-fp32"))
    for text in TEXTS:
        want, got = want_tok.encode(text), got_tok.encode(text)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want, err_msg=text)
        assert got_tok.decode(got) == want_tok.decode(want)
        assert got_tok.decode(list(got)) == want_tok.decode(list(want))
        stream, joined = got_tok.create_stream(), ""
        for t in got:
            joined += stream.decode(int(t))
        assert joined == want_tok.decode(want)
    want, got = want_tok.encode_batch(TEXTS[:3]), got_tok.encode_batch(TEXTS[:3])
    assert got.shape() == want.shape()
    np.testing.assert_array_equal(got.as_numpy(), want.as_numpy())
    assert got_tok.decode_batch(got) == want_tok.decode_batch(want)
    for attr in ("bos_token_id", "eos_token_ids", "pad_token_id"):
        assert list(np.atleast_1d(getattr(got_tok, attr))) == list(np.atleast_1d(getattr(want_tok, attr))), attr
    assert got_tok.to_token_id("the") == want_tok.to_token_id("the")
    # A tokenizer from a folder path, as genai allows.
    assert list(oxg.Tokenizer(str(LLM / "llama-cpu-fp32")).encode(TEXTS[0])) == list(want_tok.encode(TEXTS[0]))


def test_a_chat_loop_as_model_chat_writes_it(og, oxg):
    """The loop of genai's model-chat example: template, encode, append, stream, turn after
    turn on one generator."""
    transcripts = []
    for mod in (og, oxg):
        config = mod.Config(str(LLM / "qwen2-cpu-fp32"))
        config.clear_providers()
        config.overlay(json.dumps({"search": {"max_length": 128}}))
        m = mod.Model(config)
        tokenizer = mod.Tokenizer(m)
        stream = tokenizer.create_stream()
        params = mod.GeneratorParams(m)
        params.set_search_options(max_length=128, repetition_penalty=1.1)
        gen = mod.Generator(m, params)
        text = []
        for turn, question in enumerate(["onyx runs", "the cache of heads"]):
            messages = json.dumps([{"role": "user", "content": question}])
            prompt = tokenizer.apply_chat_template(messages=messages, template_str=CHAT_TEMPLATE, add_generation_prompt=True)
            text.append(prompt)
            gen.append_tokens(tokenizer.encode(prompt))
            for _ in range(12 + 4 * turn):
                if gen.is_done():
                    break
                gen.generate_next_token()
                text.append(stream.decode(int(gen.get_next_tokens()[0])))
        transcripts.append(("".join(text), list(gen.get_sequence(0))))
    assert transcripts[1] == transcripts[0]


def test_search_options_read_back_as_genai_gives_them(og, oxg):
    pair = [mod.GeneratorParams(model(mod, "llama-cpu-fp32")) for mod in (og, oxg)]
    assert pair[1].get_search_options() == pair[0].get_search_options()
    for p in pair:
        p.set_search_options(max_length=40, do_sample=True, top_k=3, top_p=0.5, temperature=0.75, random_seed=7)
    assert pair[1].get_search_options() == pair[0].get_search_options()


def test_config_overlay_and_providers(og, oxg):
    got = []
    for mod in (og, oxg):
        config = mod.Config(str(LLM / "llama-dml-int4"))
        config.clear_providers()
        config.overlay(json.dumps({"search": {"max_length": 21, "top_k": 4}}))
        m = mod.Model(config)
        got.append(mod.GeneratorParams(m).get_search_options())
        assert m.type == "llama" and m.device_type == "CPU"
    assert got[1] == got[0]
    config = oxg.Config(str(LLM / "llama-cpu-fp32"))
    raises_same(lambda: og.Config(str(LLM / "llama-cpu-fp32")).overlay("{"), lambda: config.overlay("{"))


@pytest.mark.skipif(AGAINST_ITSELF, reason="genai's CPU build has no GPU provider")
@pytest.mark.parametrize("folder", ["llama-webgpu-fp16", "qwen3-dml-int4"])
def test_gpu_folders_on_wgpu_match_genai_on_the_cpu(og, oxg, folder, rng):
    """onyx on its wgpu EP (lavapipe in CI) against genai on its CPU EP."""
    provider = "webgpu" if "webgpu" in folder else "dml"
    got_model = model(oxg, folder, [provider])
    assert got_model.device_type == ("WebGPU" if provider == "webgpu" else "DML")
    vocab = json.loads((LLM / folder / "genai_config.json").read_text())["model"]["vocab_size"]
    prompt = prompt_ids(rng, vocab, 6)
    want, got = generate(og, model(og, folder), prompt, max_length=18), generate(oxg, got_model, prompt, max_length=18)
    np.testing.assert_array_equal(got.get_sequence(0), want.get_sequence(0))
    # A cache output comes back from the GPU as numpy, as genai gives it.
    assert got.get_output("present.0.key").dtype == want.get_output("present.0.key").dtype


def test_rewind_then_regenerate_matches_genai(og, oxg, rng):
    prompt = prompt_ids(rng, 260, 6)
    seqs = []
    for mod in (og, oxg):
        gen = prompted(mod, model(mod, "llama-cpu-fp32"), prompt, max_length=24)
        for _ in range(8):
            gen.generate_next_token()
        gen.rewind_to(9)
        gen.append_tokens(np.array([40, 41], dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
        seqs.append(list(gen.get_sequence(0)))
    assert seqs[1] == seqs[0]


def test_set_logits_steers_the_next_token(og, oxg, rng):
    prompt = prompt_ids(rng, 260, 5)
    seqs = []
    for mod in (og, oxg):
        gen = prompted(mod, model(mod, "llama-cpu-fp32"), prompt, max_length=12)
        logits = np.zeros((1, 260), np.float32)
        logits[0, 77] = 5.0
        gen.set_logits(logits)
        gen.generate_next_token()
        gen.generate_next_token()
        # Not computed for the newest token: both refuse.
        with pytest.raises(RuntimeError):
            gen.set_logits(logits)
        with pytest.raises(RuntimeError):
            gen.append_tokens(np.array([9], np.int32))
            gen.set_logits(np.zeros((1, 259), np.float32))
        seqs.append(list(gen.get_sequence(0)))
    assert seqs[1] == seqs[0] and seqs[0][5] == 77


def test_terminate_session_stops_runs_until_cleared(og, oxg):
    for mod in (og, oxg):
        m = model(mod, "llama-cpu-fp32")
        params = mod.GeneratorParams(m)
        params.set_search_options(max_length=16)
        gen = mod.Generator(m, params)
        gen.set_runtime_option("terminate_session", "1")
        with pytest.raises(RuntimeError):
            gen.append_tokens(np.array([5, 6, 7], np.int32))
        gen.set_runtime_option("terminate_session", "0")
        gen.append_tokens(np.array([5, 6, 7], np.int32))
        gen.generate_next_token()
        assert gen.token_count() == 4


def test_bad_calls_raise_genai_classes(og, oxg):
    pair = [model(og, "llama-cpu-fp32"), model(oxg, "llama-cpu-fp32")]

    def params(mod, m, **options):
        p = mod.GeneratorParams(m)
        p.set_search_options(**options)
        return p

    raises_same(lambda: og.Model("/nonexistent/folder"), lambda: oxg.Model("/nonexistent/folder"))
    raises_same(lambda: og.Config("/nonexistent/folder"), lambda: oxg.Config("/nonexistent/folder"))
    raises_same(lambda: params(og, pair[0], bogus=1), lambda: params(oxg, pair[1], bogus=1))
    raises_same(lambda: params(og, pair[0], max_length="x"), lambda: params(oxg, pair[1], max_length="x"))
    gens = [generate(mod, m, np.array([5, 6, 7], np.int32), max_length=8) for mod, m in zip((og, oxg), pair)]
    raises_same(gens[0].generate_next_token, gens[1].generate_next_token)
    raises_same(lambda: gens[0].append_tokens(np.array([9], np.int32)),
                lambda: gens[1].append_tokens(np.array([9], np.int32)))
    raises_same(lambda: gens[0].get_output("nope"), lambda: gens[1].get_output("nope"))
    raises_same(lambda: og.Tokenizer(pair[0]).apply_chat_template("[]"),
                lambda: oxg.Tokenizer(pair[1]).apply_chat_template("[]"))


@pytest.mark.skipif(AGAINST_ITSELF, reason="onyx's own messages")
def test_onyx_errors_name_what_was_expected(oxg):
    m = model(oxg, "llama-cpu-fp32")
    gen = oxg.Generator(m, oxg.GeneratorParams(m))
    with pytest.raises(RuntimeError, match="outside the vocabulary of 260"):
        gen.append_tokens(np.array([5, 999], np.int32))
    with pytest.raises(RuntimeError, match="expected integers"):
        gen.append_tokens(np.array([1.5]))
    tokenizer = oxg.Tokenizer(m)
    with pytest.raises(RuntimeError, match="one prompt"):
        gen.append_tokens(tokenizer.encode_batch(TEXTS[:2]))
    with pytest.raises(RuntimeError, match="not supported by Onyx yet"):
        oxg.GeneratorParams(m).set_guidance("json_schema", "{}")
    with pytest.raises(RuntimeError, match="unknown runtime option"):
        gen.set_runtime_option("nope", "1")
    gen.set_runtime_option("terminate_session", "1")
    with pytest.raises(RuntimeError, match="terminated: terminate_session"):
        gen.append_tokens(np.array([5, 6], np.int32))
    assert gen.token_count() == 0, "a stopped run appends nothing"
    with pytest.raises(RuntimeError, match="unknown provider 'tpu'"):
        oxg.Config(str(LLM / "llama-cpu-fp32")).append_provider("tpu")
    with pytest.raises(RuntimeError, match="search.max_length"):
        oxg.Config(str(LLM / "llama-cpu-fp32")).overlay('{"search": {"max_length": "long"}}')


@pytest.mark.skipif(AGAINST_ITSELF, reason="genai 0.18 does not promise thread safety")
def test_threads_share_one_model(oxg, rng):
    m = model(oxg, "qwen3-cpu-int4")
    prompts = [prompt_ids(rng, 260, 4 + i) for i in range(4)]
    alone = [list(generate(oxg, m, p, max_length=20).get_sequence(0)) for p in prompts]
    together = [None] * len(prompts)

    def work(i):
        together[i] = list(generate(oxg, m, prompts[i], max_length=20).get_sequence(0))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


@pytest.mark.skipif(AGAINST_ITSELF, reason="onyx's own behaviour")
def test_ctrl_c_interrupts_a_generation_loop(oxg):
    """SIGINT during a loop of generate_next_token calls raises KeyboardInterrupt in the loop
    (a signal is never swallowed or turned into a RuntimeError)."""
    m = model(oxg, "llama-cpu-fp32")
    params = oxg.GeneratorParams(m)
    params.set_search_options(max_length=128)
    gen = oxg.Generator(m, params)
    gen.append_tokens(np.array([5, 6, 7], np.int32))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    deadline = time.monotonic() + 20
    with pytest.raises(KeyboardInterrupt):
        while time.monotonic() < deadline:
            if gen.is_done():
                gen.rewind_to(3)
            gen.generate_next_token()
    timer.cancel()
    gen.rewind_to(3)
    gen.generate_next_token()  # the generator goes on after the interrupt
    assert gen.token_count() == 4
