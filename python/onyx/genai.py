"""onnxruntime-genai's Python API on Onyx: `import onyx.genai as og`.

Code written for `onnxruntime_genai` runs with the import changed: `Config` (clear_providers,
append_provider, set_provider_option, overlay), `Model`, `Tokenizer` (encode, decode,
encode_batch, decode_batch, apply_chat_template, create_stream), `TokenizerStream`,
`GeneratorParams` (set_search_options, get_search_options), `Generator` (append_tokens,
generate_next_token, is_done, get_next_tokens, get_sequence, get_logits, set_logits,
get_output, rewind_to, set_runtime_option) and `Tensor`, on onnxruntime-genai's model folders.
Providers `dml`, `webgpu` and `cuda` run on Onyx's wgpu EP (any GPU), `cpu` on its CPU EP.
Errors are RuntimeErrors, as genai raises them; Ctrl-C during a model run raises
KeyboardInterrupt.
"""

from onyx import _onyx

_native = _onyx.genai

Config = _native.Config
Model = _native.Model
Tokenizer = _native.Tokenizer
TokenizerStream = _native.TokenizerStream
GeneratorParams = _native.GeneratorParams
Generator = _native.Generator
Tensor = _native.Tensor

__version__ = _onyx.__version__

__all__ = [
    "Config", "Model", "Tokenizer", "TokenizerStream", "GeneratorParams", "Generator", "Tensor",
    "is_cuda_available", "is_dml_available", "is_webgpu_available", "set_log_options", "__version__",
]

# genai's log options; Onyx reports through exceptions, so they are checked and have no effect.
_LOG_OPTIONS = {
    "enabled", "ansi_tags", "warning", "generate_next_token", "append_next_tokens", "hit_eos",
    "hit_max_length", "model_input_values", "model_output_shapes", "model_output_values",
    "model_logits", "ort_lib",
}


def set_log_options(**options):
    """Accepts genai's log options (Onyx does not log generation; an unknown key is an error)."""
    for key in options:
        if key not in _LOG_OPTIONS:
            raise RuntimeError(f"set_log_options: unknown option '{key}'")


def _gpu_available():
    from onyx import get_available_providers

    return "WgpuExecutionProvider" in get_available_providers()


def is_cuda_available():
    """False: Onyx has no CUDA EP yet (`cuda` folders run on the wgpu EP)."""
    return False


def is_dml_available():
    """Whether `dml` folders can run on a GPU here (through Onyx's wgpu EP)."""
    return _gpu_available()


def is_webgpu_available():
    """Whether `webgpu` folders can run on a GPU here (through Onyx's wgpu EP)."""
    return _gpu_available()
