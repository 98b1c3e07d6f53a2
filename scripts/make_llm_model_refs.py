"""Generates step-by-step test cases with ONNX Runtime CPU references for the tiny LLMs in
models/llm/ (made by scripts/make_llm_models.py with onnxruntime-genai's model builder).

Run: python3 scripts/make_llm_model_refs.py OUTDIR [--only FOLDER[,FOLDER...]]
Needs: onnx==1.22.0, onnxruntime (written against 1.32.0), numpy. Deterministic (fixed seeds, ORT
with graph optimizations disabled and one thread). Writes only under OUTDIR, in the layout of
make_test_models.py:

  OUTDIR/<folder>_<cache>_<step>/inputs/<file>.npy     the step's inputs
  OUTDIR/<folder>_<cache>_<step>/outputs/<file>.npy    logits and present.*, computed by ORT
  OUTDIR/manifest.json                                 list of records, see below

where <folder> is a folder of models/llm and <cache> is "grow" or "shared". Every model is run
as onnxruntime-genai runs it: a prompt of PROMPT_LEN seeded random token ids (batch 1, step 0),
then DECODE_STEPS steps of one token each, the argmax of the previous step's last logits (steps
1..4), in both cache forms; plus a batch-2 prompt with right padding, attention_mask
[[1]*7, [1]*5 + [0, 0]], with the growing cache (sequence <folder>_grow_batch2, step 0), except
where ORT rejects it (models with windowed layers: "seqlens_k[1] = 4 is too small for
sequence_length 7"). Inputs: input_ids,
attention_mask (ones over the total length: genai passes the mask of the whole sequence, and the
models take total_sequence_length from its shape), position_ids where the model has that input
(DML builds; genai's values: 0.. per row, 0 on padding), and the KV cache:

  grow    past_key_values.* is the previous step's present.* ([B, Hkv, 0, D] at the prompt), and
          present = past + new tokens.
  shared  past_key_values.i.key and present.i.key (and .value) are bound with io_binding to ONE
          OrtValue, as genai does with past_present_share_buffer (builds that set it): buffers
          of capacity CAPACITY, zero beyond the valid length at the prompt. The record lists the
          pairs in "share": a runtime reproduces the outputs only when it writes its cache in
          place. The inputs are the buffers before the run, the outputs the buffers after it.

Layers whose cache is windowed (GroupQueryAttention sliding_window_cache=1, which the builder
emits for sliding-window layers of CPU builds, cache dims named *_sliding_length) keep a
fixed-capacity cache in both forms, window_size in the grow form (every element written once
the prompt has filled it) and window_size + WINDOW_SLACK in the shared form; ORT evicts the
oldest positions itself.

Manifest records (make_test_models.py's fields plus): "op": "model", "sequence", "step",
"feed": {input: output} naming the inputs that are the previous step's outputs (a test can feed
its OWN presents), "share" (shared form only), and "model" is the path of model.onnx relative to
the repository root (not to OUTDIR). Every other path is relative to OUTDIR. A file identical
byte for byte to one already written (a past that is the previous step's present, the zero
buffers of a prompt, the same input_ids for another build) is written once: the record names the
earlier file, which may lie in another case's folder.

Tolerances: fp32 rtol 1e-4, atol 1e-4; int4 with fp32 I/O (MatMulNBits accuracy_level 4: int8
activations) rtol 1e-3, atol 1e-3 * max|logits|; float16 I/O (int4 or not) rtol 2e-3,
atol 2e-3 * max|logits| (max|logits| of the step). Where ORT's own optimized graph deviates more
from the reference than that (or, for models with int8 activations, ORT's float path for
MatMulNBits: see `tolerances`), both are widened to 1.5 times the deviation, for the whole
sequence; where it deviates by more than UNRELIABLE * max|logits|, the sequence is not written.

Every reference is checked: two sessions give bitwise identical outputs over the whole sequence;
every output element is finite and written by ORT (the grow form is rerun with outputs bound to
NaN-filled buffers, which must come back bitwise equal; the shared form's logits are bound to a
NaN-filled buffer).
"""
import argparse
import atexit
import dataclasses
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import make_test_models as mtm  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
MODELS = REPO / "models" / "llm"
PROMPT_LEN = 7
DECODE_STEPS = 4
PAD_ROW_VALID = 5  # valid tokens of the second row of the batch-2 prompt
CAPACITY = 16  # shared-buffer capacity of a full-attention layer's cache
WINDOW_SLACK = 2  # shared-buffer positions beyond the window of a windowed layer's cache
SEED = 2024
# a reference ORT's optimized graph contradicts by more than this share of max |logits| is not
# written. Seen with a Granite webgpu int4 build (float16, MatMulNBits accuracy_level 4; no
# longer built): ORT 1.32's unoptimized session gave logits ~1x max|logits| away from both its
# optimized session and a session with prepacking disabled, which agreed with each other, and
# changed when an intermediate (a down_proj MatMulNBits output) was made a graph output.
UNRELIABLE = 0.1
# (cache form, batch) of each sequence: the batch-2 padded prompt only with the growing cache
SEQUENCES = (("grow", 1), ("shared", 1), ("grow", 2))
ONNX_TO_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
              onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


# ----------------------------------------------------------------------------------------------
# Models


@dataclasses.dataclass
class LlmModel:
    """What the cases need to know about one builder output folder."""

    folder: str
    path: pathlib.Path
    input_types: dict  # graph input name -> numpy dtype
    caches: list  # (past input, present output) pairs in graph input order
    windows: dict  # past input -> window size, for windowed (sliding_window_cache) layers
    kv_heads: dict  # past input -> its number of KV heads
    head_size: int
    vocab: int
    io_dtype: type
    int4: bool  # MatMulNBits / GatherBlockQuantized weights
    producer: str
    share_buffer: bool  # genai_config's past_present_share_buffer
    ort_path: pathlib.Path  # the model ORT's sessions load (see ort_model_path)

    @property
    def rel_path(self):
        """model.onnx relative to the repository root."""
        return str(self.path.relative_to(REPO).as_posix())

    def cache_shape(self, past, batch):
        """[B, Hkv, 0, D] of a past input (capacity 0: the grow form's empty past)."""
        return [batch, self.kv_heads[past], 0, self.head_size]


def load_model(folder):
    """Reads a folder's model.onnx (without its weights) and genai_config.json."""
    path = MODELS / folder / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    genai = json.loads((MODELS / folder / "genai_config.json").read_text())
    decoder = genai["model"]["decoder"]
    inputs = {vi.name: vi for vi in model.graph.input}
    outputs = {vi.name: vi for vi in model.graph.output}
    caches = [(n, "present." + n[len("past_key_values."):]) for n in inputs
              if n.startswith("past_key_values.")]
    assert all(p in outputs for _, p in caches), folder
    window = decoder.get("sliding_window", {}).get("window_size")
    windows = {past: window for past, _ in caches
               if "sliding" in inputs[past].type.tensor_type.shape.dim[2].dim_param}
    nodes = list(model.graph.node)
    info = LlmModel(
        folder=folder, path=path,
        input_types={n: ONNX_TO_NP[vi.type.tensor_type.elem_type] for n, vi in inputs.items()},
        caches=caches, windows=windows,
        kv_heads={p: inputs[p].type.tensor_type.shape.dim[1].dim_value for p, _ in caches},
        head_size=decoder["head_size"],
        vocab=outputs["logits"].type.tensor_type.shape.dim[2].dim_value,
        io_dtype=ONNX_TO_NP[outputs["logits"].type.tensor_type.elem_type],
        int4=any(n.op_type in ("MatMulNBits", "GatherBlockQuantized") for n in nodes),
        producer=f"{model.producer_name} {model.producer_version}",
        share_buffer=genai["search"].get("past_present_share_buffer", False),
        ort_path=ort_model_path(model, path))
    return info


ORT_MODELS = pathlib.Path(tempfile.mkdtemp(prefix="llm-refs-"))
atexit.register(shutil.rmtree, ORT_MODELS, True)


def ort_model_path(model, path):
    """The model without its value_info, in a temporary folder beside a copy of its weights. ORT
    plans buffer reuse by the declared shapes, and the builder declares some wrong (cpu fp16
    builds: the repeated keys as [batch_size, sequence_length, 64] where they hold the whole
    sequence), which fails ORT's decode steps ("Shape mismatch attempting to re-use buffer").
    Declared shapes are hints: the outputs do not depend on them."""
    folder = ORT_MODELS / path.parent.name
    folder.mkdir()
    for data in path.parent.glob("*.data"):
        shutil.copyfile(data, folder / data.name)  # ORT refuses a link out of the folder
    del model.graph.value_info[:]
    onnx.save(model, str(folder / path.name))
    return folder / path.name


def base_tolerance(model, max_logit):
    """(rtol, atol) of a step from the model's precision and the step's max |logits|."""
    if model.io_dtype == np.float16:
        return 2e-3, 2e-3 * max_logit
    if model.int4:
        return 1e-3, 1e-3 * max_logit
    return 1e-4, 1e-4


# ----------------------------------------------------------------------------------------------
# Step inputs


@dataclasses.dataclass
class Step:
    """One run of a model: its inputs, the cache pairs bound to one buffer, its outputs."""

    inputs: dict
    share: list  # (past, present) pairs bound to one OrtValue; empty in the grow form
    feed: dict  # input -> output of the previous step it is
    outputs: dict = None


def prompt_ids(model, batch):
    """Seeded random prompt token ids (the special tokens 0..3 excluded), [batch, PROMPT_LEN];
    the same for every build of a vocabulary size."""
    rng = np.random.default_rng(SEED)
    ids = rng.integers(4, model.vocab, (batch, PROMPT_LEN))
    return ids.astype(model.input_types["input_ids"])


def prompt_mask(batch):
    """All ones for batch 1; the second row right-padded for batch 2."""
    mask = np.ones((batch, PROMPT_LEN), np.int64)
    if batch == 2:
        mask[1, PAD_ROW_VALID:] = 0
    return mask


def position_ids(mask, new_tokens):
    """genai's position ids for the last new_tokens of each row: the count of valid tokens before
    each one, 0 on padding."""
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 0)
    return positions[:, -new_tokens:]


def cache_buffers(model, form, batch):
    """The prompt step's past values: empty (grow) or zero-filled capacity buffers (shared), a
    windowed layer's at its fixed capacity in both forms."""
    past = {}
    for name, _ in model.caches:
        shape = model.cache_shape(name, batch)
        if name in model.windows:
            shape[2] = model.windows[name] + (WINDOW_SLACK if form == "shared" else 0)
        elif form == "shared":
            shape[2] = CAPACITY
        past[name] = np.zeros(shape, model.input_types[name])
    return past


def first_step(model, form, batch):
    """The prompt step's inputs."""
    mask = prompt_mask(batch)
    inputs = {"input_ids": prompt_ids(model, batch),
              "attention_mask": mask.astype(model.input_types["attention_mask"])}
    if "position_ids" in model.input_types:
        inputs["position_ids"] = position_ids(mask, PROMPT_LEN).astype(
            model.input_types["position_ids"])
    inputs.update(cache_buffers(model, form, batch))
    share = list(model.caches) if form == "shared" else []
    return Step(inputs, share, {})


def next_step(model, prev):
    """A decode step after `prev` (batch 1): its argmax token, the mask one longer, and the
    previous presents as pasts."""
    token = prev.outputs["logits"][:, -1].astype(np.float32).argmax(-1)[:, None]
    mask = np.concatenate([prev.inputs["attention_mask"],
                           np.ones((token.shape[0], 1), prev.inputs["attention_mask"].dtype)], 1)
    inputs = {"input_ids": token.astype(model.input_types["input_ids"]), "attention_mask": mask}
    if "position_ids" in model.input_types:
        inputs["position_ids"] = position_ids(mask, 1).astype(model.input_types["position_ids"])
    feed = dict(model.caches)
    for past, present in feed.items():
        inputs[past] = prev.outputs[present]
    return Step(inputs, prev.share, feed)


# ----------------------------------------------------------------------------------------------
# ORT runs


class BadReference(Exception):
    """A reference failed one of its checks."""


def output_template(model, sess, inputs):
    """Arrays shaped like the outputs not bound to a shared buffer (logits only)."""
    batch, seq = inputs["input_ids"].shape
    names = [o.name for o in sess.get_outputs() if not o.name.startswith("present.")]
    assert names == ["logits"], names
    return {"logits": np.empty((batch, seq, model.vocab), model.io_dtype)}


def bound_run(sess, inputs, like, share, fill):
    """An io_binding run: each (past, present) pair of `share` bound to ONE OrtValue holding a
    copy of the past; every other output bound to a buffer shaped as in `like`, filled with
    `fill`. Returns copies of the outputs in session order."""
    binding = sess.io_binding()
    buffers = {}  # the numpy memory behind each OrtValue; must outlive the run
    shared_inputs = set()
    for past, present in share:
        buffers[present] = np.array(inputs[past], copy=True)
        value = ort.OrtValue.ortvalue_from_numpy(buffers[present])
        binding.bind_ortvalue_input(past, value)
        binding.bind_ortvalue_output(present, value)
        shared_inputs.add(past)
    for name, array in inputs.items():
        if name not in shared_inputs:
            binding.bind_cpu_input(name, array)
    for o in sess.get_outputs():
        if o.name not in buffers:
            buffers[o.name] = np.full(like[o.name].shape, fill, like[o.name].dtype)
            binding.bind_ortvalue_output(o.name, ort.OrtValue.ortvalue_from_numpy(buffers[o.name]))
    sess.run_with_iobinding(binding)
    return {o.name: buffers[o.name].copy() for o in sess.get_outputs()}


def run_step(model, sess, step, check_writes=False):
    """ORT's outputs of one step. The grow form is a plain run, with check_writes rerun with
    NaN-filled output buffers (must agree bitwise); the shared form is an io_binding run."""
    if step.share:
        return bound_run(sess, step.inputs, output_template(model, sess, step.inputs),
                         step.share, np.nan)
    names = [o.name for o in sess.get_outputs()]
    outputs = dict(zip(names, sess.run(names, step.inputs)))
    if check_writes:
        again = bound_run(sess, step.inputs, outputs, (), np.nan)
        for name, array in outputs.items():
            if again[name].tobytes() != array.tobytes():
                raise BadReference(f"{name}: ORT leaves elements unwritten")
    return outputs


def run_sequence(model, sess, form, batch, check_writes=False):
    """Runs the prompt and (batch 1) the decode steps; returns the Steps with their outputs."""
    step = first_step(model, form, batch)
    steps = []
    for k in range(1 + (DECODE_STEPS if batch == 1 else 0)):
        if k:
            step = next_step(model, steps[-1])
        step.outputs = run_step(model, sess, step, check_writes)
        steps.append(step)
    return steps


def check_sequence(steps, again):
    """Two sessions' runs agree bitwise, and every output is finite."""
    for k, (a, b) in enumerate(zip(steps, again)):
        for name, array in a.outputs.items():
            if array.tobytes() != b.outputs[name].tobytes():
                raise BadReference(f"step {k} {name}: two ORT sessions disagree")
            if not np.isfinite(array.astype(np.float32)).all():
                raise BadReference(f"step {k} {name}: not finite")


def int8_activations(model):
    """Whether a MatMulNBits of the model quantizes its activations to int8 (accuracy_level 4)."""
    graph = onnx.load(str(model.path), load_external_data=False).graph
    return any(n.op_type == "MatMulNBits" and any(a.name == "accuracy_level" and a.i == 4
                                                   for a in n.attribute) for n in graph.node)


def float_path_session(model):
    """ORT computing MatMulNBits in float (prepacking off: its int8 path needs packed weights)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(str(model.ort_path), opts, providers=["CPUExecutionProvider"])


def tolerances(model, steps, optimized, sensitivity=None):
    """Per-step (rtol, atol), widened for the whole sequence where ORT's optimized graph (run on
    the same inputs) deviates more; returns them, the optimized run's largest use of the base
    tolerances, and its largest |logits| deviation relative to max |logits|.

    `sensitivity`, for models whose products quantize activations to int8 (accuracy_level 4):
    ORT's float path. There one rounding flip of an activation (a summation order of another
    kernel, a half rounding) moves an int8 activation by a step and the logits by percents
    (ORT's own float and int8 paths differ by up to 3% of max |logits| on these models), so an
    implementation of the same arithmetic that does not reproduce each kernel's summation
    order bit for bit cannot be held to the base tolerance: it is widened to fit ORT's float
    path too (how far an exact product lands). The single-node cases of
    make_llm_op_cases.py hold MatMulNBits itself to 1e-3."""
    base = [base_tolerance(model, float(np.abs(s.outputs["logits"].astype(np.float64)).max()))
            for s in steps]
    use = deviation = 0.0
    for step, (rtol, atol) in zip(steps, base):
        opt = run_step(model, optimized, step)
        for name, expected in step.outputs.items():
            use = max(use, mtm.tolerance_use(expected, opt[name], rtol, atol))
        if sensitivity is not None:
            exact = run_step(model, sensitivity, step)
            use = max(use, mtm.tolerance_use(step.outputs["logits"], exact["logits"], rtol, atol))
        logits = step.outputs["logits"].astype(np.float64)
        deviation = max(deviation, float(np.abs(opt["logits"] - logits).max()
                                         / np.abs(logits).max()))
    scale = 1.5 * use if use > 1.0 else 1.0
    return [(rtol * scale, atol * scale) for rtol, atol in base], use, deviation


# ----------------------------------------------------------------------------------------------
# Writing


def describe(model, form, batch, k, steps, step):
    """The record's description (the module doc has the details)."""
    total = step.inputs["attention_mask"].shape[1]
    if batch == 2:
        what = f"batch-2 prompt of {PROMPT_LEN}, row 1 right-padded after {PAD_ROW_VALID}"
    elif k == 0:
        what = f"prompt of {PROMPT_LEN} random tokens"
    else:
        what = f"decode step {k}/{len(steps) - 1}, total length {total}"
    if form == "grow":
        cache = "growing KV cache"
    else:
        cache = f"KV cache shared in place (capacity {CAPACITY})"
    if model.windows:
        slack = WINDOW_SLACK if form == "shared" else 0
        cache += "; windowed layers' cache capacity " + ", ".join(
            sorted({str(w + slack) for w in model.windows.values()}))
    return f"{model.folder} (onnxruntime-genai builder, random weights): {what}; {cache}."


def write_sequence(model, form, batch, steps, tols, outdir):
    """Writes the steps' inputs and outputs; returns their manifest records."""
    sequence = f"{model.folder}_{form}" + ("_batch2" if batch == 2 else "")
    records = []
    for k, (step, (rtol, atol)) in enumerate(zip(steps, tols)):
        name = f"{sequence}_{k}"
        case = mtm.Case(name, None, step.inputs, describe(model, form, batch, k, steps, step),
                        rtol=float(f"{rtol:.3g}"), atol=float(f"{atol:.3g}"))
        input_files = mtm.save_values(name, "inputs", step.inputs, outdir)
        output_files = mtm.save_values(name, "outputs", step.outputs, outdir)
        record = mtm.manifest_entry(case, model.rel_path, input_files, output_files)
        record.update(op="model", sequence=sequence, step=k, feed=dict(step.feed))
        if step.share:
            record["share"] = [list(pair) for pair in step.share]
        records.append(record)
    return records


def deduplicate(records, outdir):
    """Deletes every .npy file identical to one written before it and points its records at
    the first; removes the folders left empty. Returns the bytes saved."""
    first, moved, saved = {}, {}, 0  # digest -> file kept; deleted file -> file kept
    for record in records:
        for kind in ("inputs", "outputs"):
            for name, rel in record[kind].items():
                if rel in moved:  # a file named twice, already replaced
                    record[kind][name] = moved[rel]
                    continue
                path = outdir / rel
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                if first.setdefault(digest, rel) != rel:
                    saved += path.stat().st_size
                    path.unlink()
                    moved[rel] = record[kind][name] = first[digest]
    for folder in sorted(outdir.glob("*/*"), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    for folder in outdir.glob("*"):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return saved


def ort_message(error):
    """The first line of ORT's status message."""
    return str(error).split("Status Message:")[-1].strip().splitlines()[0][:200]


def generate(model, outdir):
    """All sequences of one folder; returns (records, [(sequence, optimized use)], [(sequence,
    why skipped)]). A batch-2 padded prompt ORT rejects is skipped, and so is a sequence whose
    reference is unreliable; any other failure raises."""
    plain = mtm.ort_session(model.ort_path, optimized=False)
    plain2 = mtm.ort_session(model.ort_path, optimized=False)
    optimized = mtm.ort_session(model.ort_path, optimized=True)
    sensitivity = float_path_session(model) if int8_activations(model) else None
    records, notes, skipped = [], [], []
    for form, batch in SEQUENCES:
        sequence = f"{model.folder}_{form}" + ("_batch2" if batch == 2 else "")
        if form == "shared" and not model.share_buffer:
            skipped.append((sequence, "genai does not share the cache buffers of this build"))
            continue
        try:
            steps = run_sequence(model, plain, form, batch, check_writes=True)
        except BadReference:
            raise
        except Exception as e:  # ORT raises InvalidArgument, Fail, ... (plain Exceptions)
            if batch == 1:
                raise
            skipped.append((sequence, f"ORT rejects it: {ort_message(e)}"))
            continue
        check_sequence(steps, run_sequence(model, plain2, form, batch))
        tols, use, deviation = tolerances(model, steps, optimized, sensitivity)
        if deviation > UNRELIABLE:
            skipped.append((sequence, f"unreliable: ORT's optimized graph gives logits "
                                      f"{deviation:.2f} of max|logits| away"))
            continue
        records += write_sequence(model, form, batch, steps, tols, outdir)
        notes.append((sequence, use))
    return records, notes, skipped


def parse_args():
    """Command line: OUTDIR and an optional folder filter."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--only", default="", help="comma-separated folders of models/llm")
    args = parser.parse_args()
    folders = sorted(p.name for p in MODELS.iterdir() if (p / "model.onnx").exists())
    wanted = [f for f in args.only.split(",") if f] or folders
    unknown = set(wanted) - set(folders)
    if unknown:
        parser.error(f"unknown folder(s) {sorted(unknown)}; known: {folders}")
    return args.outdir, wanted


def main():
    """Generates, checks and writes every folder's cases, then the manifest."""
    outdir, folders = parse_args()
    outdir.mkdir(parents=True, exist_ok=True)
    ort.set_default_logger_severity(4)  # the batch-2 prompts ORT rejects would log errors
    start = time.perf_counter()
    manifest, skipped, worst = [], [], 0.0
    for folder in folders:
        model = load_model(folder)
        records, notes, folder_skipped = generate(model, outdir)
        manifest += records
        skipped += folder_skipped
        if not records:
            print(f"{folder:24s}  0 cases")
            continue
        use = max(u for _, u in notes)
        worst = max(worst, use)
        widened = [seq for seq, u in notes if u > 1.0]
        print(f"{folder:24s} {len(records):2d} cases  rtol {records[0]['rtol']:g} "
              f"atol(step 0) {records[0]['atol']:.3g}  ORT-optimized use {use:.3f}"
              + (f"  widened: {widened}" if widened else ""))
    saved = deduplicate(manifest, outdir)
    lines = ",\n".join(json.dumps(record) for record in manifest)  # one record a line
    (outdir / "manifest.json").write_text(f"[\n{lines}\n]\n")
    size = sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file())
    print(f"wrote {len(manifest)} cases of {len(folders)} models to {outdir}: {size / 1e6:.2f} MB "
          f"({saved / 1e6:.2f} MB of identical files shared), "
          f"{time.perf_counter() - start:.1f} s; largest ORT-optimized use of a base tolerance "
          f"{worst:.3f}")
    for sequence, why in skipped:
        print(f"skipped {sequence}: {why}")


if __name__ == "__main__":
    main()
