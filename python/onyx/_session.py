"""ONNX Runtime's InferenceSession, NodeArg and ModelMetadata over Onyx's native session."""

import json
import os
import threading
import time
import warnings

from onyx import _onyx
from onyx._binding import IOBinding
from onyx._options import SessionOptions

__all__ = ["InferenceSession", "NodeArg", "ModelMetadata", "get_available_providers"]

_CPU = "CPUExecutionProvider"


def get_available_providers():
    """The execution providers of this build, as ONNX Runtime names them, best first."""
    return _onyx.available_providers()


class NodeArg:
    """An input or output of a model: its name, type (`tensor(float)`, `seq(tensor(int64))`...)
    and shape (ints, dimension names as str, None where unknown)."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, name, type, shape):
        self.name = name
        self.type = type
        self.shape = shape

    def __str__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"

    __repr__ = __str__


class ModelMetadata:
    """The model's metadata: producer, graph name and description, domain, version, and the
    `metadata_props` as `custom_metadata_map`."""

    def __init__(self, fields):
        self.producer_name = fields["producer_name"]
        self.graph_name = fields["graph_name"]
        self.domain = fields["domain"]
        self.description = fields["description"]
        self.graph_description = fields["graph_description"]
        self.version = fields["version"]
        self.custom_metadata_map = fields["custom_metadata_map"]


def _flag(run_options):
    """The native terminate flag of a RunOptions (None: a run of its own)."""
    return run_options._flag if run_options is not None else None


def _normalize_providers(providers, provider_options):
    """(name, options) pairs from ONNX Runtime's two provider arguments; names this build lacks
    are dropped with ONNX Runtime's warning."""
    if providers is None:
        return [(_CPU, {})]
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
    available = get_available_providers()
    pairs = []
    for i, p in enumerate(providers):
        if isinstance(p, tuple):
            if len(p) != 2 or not isinstance(p[1], dict):
                raise ValueError("Only (provider name, options dict) tuples are accepted in 'providers'.")
            name, options = p
        elif isinstance(p, str):
            name, options = p, (provider_options[i] if provider_options is not None else {})
        else:
            raise ValueError("'providers' must contain provider names or (name, options) tuples.")
        if name not in available:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names."
                f"Available providers: '{', '.join(available)}'"
            )
            continue
        pairs.append((name, {str(k): str(v) for k, v in options.items()}))
    if not pairs:
        pairs = [(_CPU, {})]
    return pairs


class InferenceSession:
    """A model loaded on execution providers, run with numpy arrays (ONNX Runtime's
    `InferenceSession`).

    `path_or_bytes` is a path (str or os.PathLike) or the bytes of a model; `providers` lists
    ONNX Runtime's provider names (`CPUExecutionProvider`, `WgpuExecutionProvider`, and
    `DmlExecutionProvider` / `WebGpuExecutionProvider`, which run on Onyx's wgpu EP), optionally
    as (name, options) tuples. Runs release the GIL; one session may run on several threads.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        if isinstance(path_or_bytes, bytes) and not path_or_bytes:
            raise _onyx.InvalidArgument("No graph was found in the protobuf: the model bytes are empty.")
        if isinstance(path_or_bytes, (str, bytes)):
            self._model = path_or_bytes
        elif isinstance(path_or_bytes, os.PathLike):
            self._model = os.fspath(path_or_bytes)
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError(f"sess_options: expected an onyx.SessionOptions, found {type(sess_options).__name__}")
        self._sess_options = (sess_options or SessionOptions())._copy()
        self._profile = []
        self._profile_start_ns = time.time_ns()
        self._create(_normalize_providers(providers, provider_options))
        self._event("Session", "session_initialization", self._profile_start_ns, time.time_ns())

    def _create(self, providers):
        so = self._sess_options
        if not -1 <= int(so.log_severity_level) <= 4:
            raise RuntimeError(f"Invalid session log severity level: {so.log_severity_level} (expected -1 to 4).")
        fallback = so._config.get("session.disable_cpu_ep_fallback", "0") != "1"
        self._sess = _onyx.Session(
            self._model,
            [(name, list(options.items())) for name, options in providers],
            optimization_level=int(so.graph_optimization_level),
            intra_threads=int(so.intra_op_num_threads),
            free_dims_by_name=so._free_dims_by_name,
            free_dims_by_denotation=so._free_dims_by_denotation,
            cpu_fallback=fallback,
            initializers=list(so._initializers.items()),
        )
        names = [name for name, _ in providers]
        if _CPU not in names and fallback:
            providers = providers + [(_CPU, {})]
        self._providers = providers
        self._inputs = [NodeArg(*a) for a in self._sess.inputs()]
        self._outputs = [NodeArg(*a) for a in self._sess.outputs()]
        self._required = [i.name for i in self._inputs if not i.type.startswith("optional")]

    # ---- metadata

    def get_inputs(self):
        """The inputs a caller feeds, as NodeArgs."""
        return list(self._inputs)

    def get_outputs(self):
        """The outputs, as NodeArgs."""
        return list(self._outputs)

    def get_overridable_initializers(self):
        """Graph inputs that have a default value (an initializer), as NodeArgs."""
        return [NodeArg(*a) for a in self._sess.overridable_initializers()]

    def get_modelmeta(self):
        """The model's metadata."""
        return ModelMetadata(self._sess.metadata())

    def get_providers(self):
        """The session's providers, best first (CPU last, for the nodes others cannot run)."""
        return [name for name, _ in self._providers]

    def get_provider_options(self):
        """Each provider's options, as strings."""
        return {name: dict(options) for name, options in self._providers}

    def set_providers(self, providers=None, provider_options=None):
        """Recreates the session on other providers."""
        self._create(_normalize_providers(providers, provider_options))

    def get_session_options(self):
        """The options the session was made with."""
        return self._sess_options

    def disable_fallback(self):
        """Kept for ONNX Runtime compatibility: Onyx never retries a failed run on other providers."""

    def enable_fallback(self):
        """Kept for ONNX Runtime compatibility (see disable_fallback)."""

    # ---- runs

    def _check_run(self, output_names, input_feed, run_options):
        if output_names is not None:
            if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
                raise TypeError("run(): output_names must be a list of str or None")
            output_names = list(output_names)
        names = input_feed.keys()
        missing = [n for n in self._required if n not in names]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({list(names)}).")
        if run_options is not None and run_options.terminate:
            raise _onyx.Fail("Exiting due to terminate flag being set to true.")
        return output_names or None

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model: `output_names` (None for all) from `input_feed`, a dict of input name
        to numpy array (any dtype and layout), list, OrtValue or None (an absent optional).
        Returns a list of numpy arrays (lists for sequences, dicts for maps)."""
        output_names = self._check_run(output_names, input_feed, run_options)
        if self._sess_options.enable_profiling:
            start = time.time_ns()
            outputs, times = self._sess.run_profiled(output_names, input_feed)
            self._record(start, time.time_ns(), times)
            return outputs
        return self._sess.run(output_names, input_feed, _flag(run_options))

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """`run` with OrtValues in and out."""
        output_names = self._check_run(output_names, input_dict_ort_values, run_options)
        return self._sess.run_values(output_names, input_dict_ort_values, _flag(run_options))

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """Runs on another thread and calls `callback(outputs, user_data, error_message)`
        (outputs `[]` and a message on failure, else the outputs and '')."""

        def work():
            try:
                outputs = self.run(output_names, input_feed, run_options)
            except Exception as e:  # reported to the callback, as ONNX Runtime does
                callback([], user_data, str(e))
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, daemon=True).start()

    def io_binding(self):
        """A new IOBinding for this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        """Runs with the inputs and outputs bound in `iobinding`."""
        if run_options is not None and run_options.terminate:
            raise _onyx.Fail("Exiting due to terminate flag being set to true.")
        iobinding._run(self._sess, _flag(run_options))

    # ---- profiling

    def _event(self, category, name, start_ns, end_ns, args=None):
        """Appends a Chrome-trace event of ONNX Runtime's profile format (times in us)."""
        if not self._sess_options.enable_profiling:
            return
        self._profile.append({
            "cat": category, "pid": os.getpid(), "tid": threading.get_ident() % (1 << 31),
            "dur": round((end_ns - start_ns) / 1000), "ts": round((start_ns - self._profile_start_ns) / 1000),
            "ph": "X", "name": name, "args": args or {},
        })

    def _record(self, start_ns, end_ns, times):
        """The events of one profiled run: each kernel call, then the run (`model_run`)."""
        at = start_ns
        for index, (node, op, provider, (inputs, outputs), us) in enumerate(times):
            done = at + round(us * 1000)
            self._event("Node", f"{node or f'{op}_{index}'}_kernel_time", at, done, {
                "op_name": op, "provider": self._provider_name(provider), "node_index": str(index),
                "input_type_shape": [{t: s} for t, s in inputs],
                "output_type_shape": [{t: s} for t, s in outputs],
            })
            at = done
        self._event("Session", "model_run", start_ns, end_ns)

    def _provider_name(self, onyx_name):
        """ONNX Runtime's name for an Onyx provider: the one the session was given."""
        if onyx_name == "cpu":
            return _CPU
        gpu = [name for name, _ in self._providers if name != _CPU]
        return gpu[0] if gpu else "WgpuExecutionProvider"

    def end_profiling(self):
        """Writes the profile of the runs so far as a Chrome trace (chrome://tracing, Perfetto)
        and returns its file name; '' when profiling is off."""
        if not self._sess_options.enable_profiling:
            return ""
        now = time.time()
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now))
        path = f"{self._sess_options.profile_file_prefix}{stamp}_{int(now * 1000) % 1000:03d}.json"
        with open(path, "w") as f:
            json.dump(self._profile, f)
        self._profile = []
        return path

    def get_profiling_start_time_ns(self):
        """When profiling started (the session's creation), in ns since the epoch."""
        return self._profile_start_ns
