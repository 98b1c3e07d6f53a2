"""ONNX Runtime's option classes: SessionOptions, RunOptions and their enums."""

import enum

from onyx import _onyx

__all__ = ["GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "SessionOptions", "RunOptions"]


class _OrtEnum(enum.IntEnum):
    """An int enum printed as ONNX Runtime prints its enums (`GraphOptimizationLevel.ORT_ENABLE_ALL`)."""

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"

    def __repr__(self):
        return f"<{type(self).__name__}.{self.name}: {int(self)}>"


class GraphOptimizationLevel(_OrtEnum):
    """How much the graph is rewritten before it runs."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(_OrtEnum):
    """Whether independent nodes may run at once (Onyx runs nodes in order either way)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(_OrtEnum):
    """The order nodes are planned in (Onyx plans one topological order either way)."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """Options of an InferenceSession, with ONNX Runtime's fields and methods.

    Onyx acts on graph_optimization_level, intra_op_num_threads, the free-dimension overrides,
    enable_profiling / profile_file_prefix and the config entry
    ``session.disable_cpu_ep_fallback``; the other fields are kept and read back, as code
    written for ONNX Runtime sets them.
    """

    def __init__(self):
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self._config = {}
        self._free_dims_by_name = []
        self._free_dims_by_denotation = []
        self._initializers = {}

    def add_session_config_entry(self, key, value):
        """Sets a session config entry (ONNX Runtime's `session.*` keys)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        """The value of a config entry set before; an unset key raises RuntimeError."""
        try:
            return self._config[key]
        except KeyError:
            raise RuntimeError(f"SessionOptions does not have configuration with key: {key}") from None

    def add_free_dimension_override_by_name(self, dim_name, dim_value):
        """Fixes the free dimension named `dim_name` (e.g. 'batch') to `dim_value`."""
        self._free_dims_by_name.append((str(dim_name), int(dim_value)))

    def add_free_dimension_override_by_denotation(self, dim_denotation, dim_value):
        """Fixes the free dimensions denoted `dim_denotation` (e.g. 'DATA_BATCH')."""
        self._free_dims_by_denotation.append((str(dim_denotation), int(dim_value)))

    def add_initializer(self, name, ort_value):
        """Replaces the model's initializer `name` by the value of an OrtValue (weights shared
        between sessions, or supplied by the application); a name the model lacks is ignored."""
        from onyx._onyx import OrtValue

        if not isinstance(ort_value, OrtValue):
            raise RuntimeError("add_initializer: the provided Python object must be an OrtValue")
        self._initializers[str(name)] = ort_value

    def add_external_initializers(self, names, ort_values):
        """`add_initializer` for each name and OrtValue (ONNX Runtime's way of supplying the
        data of initializers stored outside the model)."""
        names, ort_values = list(names), list(ort_values)
        if len(names) != len(ort_values):
            raise RuntimeError(f"add_external_initializers: {len(names)} names but {len(ort_values)} values")
        for name, value in zip(names, ort_values):
            self.add_initializer(name, value)

    def register_custom_ops_library(self, library_path):
        """Custom-op libraries are ONNX Runtime's C++ ABI: Onyx cannot load them."""
        raise NotImplementedError(f"register_custom_ops_library('{library_path}'): Onyx cannot load ONNX Runtime custom-op libraries")

    def _copy(self):
        other = SessionOptions()
        other.__dict__.update({k: (v.copy() if isinstance(v, (dict, list)) else v) for k, v in self.__dict__.items()})
        return other


class RunOptions:
    """Options of runs: ONNX Runtime's fields. Setting `terminate = True`, from any thread, stops
    the runs using these options at their next node (they raise Fail); a run also stops on
    Ctrl-C (KeyboardInterrupt) when made on the main thread."""

    def __init__(self):
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self._config = {}
        self._flag = _onyx.RunFlag()

    @property
    def terminate(self):
        """Whether runs using these options are asked to stop."""
        return self._flag.get()

    @terminate.setter
    def terminate(self, value):
        self._flag.set(bool(value))

    def add_run_config_entry(self, key, value):
        """Sets a run config entry."""
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key):
        """The value of a run config entry set before; an unset key raises RuntimeError."""
        try:
            return self._config[key]
        except KeyError:
            raise RuntimeError(f"RunOptions does not have configuration with key: {key}") from None
