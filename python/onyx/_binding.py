"""ONNX Runtime's IOBinding: inputs and outputs bound once, left on their device between runs."""

import ctypes

import numpy as np

from onyx import _onyx

__all__ = ["IOBinding"]


def _pointer_array(buffer_ptr, element_type, shape):
    """A numpy array over `prod(shape)` elements of `element_type` at address `buffer_ptr`
    (the caller's memory, as ONNX Runtime's bind_input/bind_output take it)."""
    dtype = np.dtype(element_type)
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if buffer_ptr == 0 and count:
        raise RuntimeError("bind: buffer_ptr is null")
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(buffer_ptr)
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)


class IOBinding:
    """Inputs and outputs bound to a session: numpy arrays, OrtValues (on the CPU or a GPU), the
    caller's memory by pointer, or a device where an output is left (`bind_output(name, "wgpu")`
    keeps it on the GPU, as an OrtValue, for the next run)."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._outputs = {}
        self._results = []

    def _check_input(self, name):
        if name not in {i.name for i in self._session.get_inputs()}:
            raise RuntimeError(f"Error when binding input: input '{name}' is not an input of the model")

    def bind_cpu_input(self, name, arr_on_cpu):
        """Binds a numpy array (read in place when contiguous) to input `name`."""
        self._check_input(name)
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        """Binds input `name` to `shape` elements of `element_type` at address `buffer_ptr` on
        the CPU."""
        self._check_input(name)
        if str(device_type).lower() != "cpu":
            raise RuntimeError(f"bind_input('{name}'): a pointer into {device_type} memory cannot be bound: "
                               "bind an OrtValue made on that device instead")
        self._inputs[name] = _pointer_array(buffer_ptr, element_type, list(shape))

    def bind_ortvalue_input(self, name, ortvalue):
        """Binds an OrtValue (on any device: a GPU tensor is read where it is)."""
        self._check_input(name)
        self._inputs[name] = ortvalue

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        """Asks for output `name` on `device_type` ('cpu', 'wgpu', also 'dml'), or written to
        `shape` elements of `element_type` at `buffer_ptr` (CPU memory)."""
        if buffer_ptr is not None:
            if str(device_type).lower() != "cpu":
                raise RuntimeError(f"bind_output('{name}'): a pointer into {device_type} memory cannot be bound")
            self._outputs[name] = _pointer_array(buffer_ptr, element_type, list(shape))
        else:
            self._outputs[name] = (str(device_type), int(device_id))

    def bind_ortvalue_output(self, name, ortvalue):
        """Writes output `name` into `ortvalue`, which then holds it."""
        self._outputs[name] = ortvalue

    def clear_binding_inputs(self):
        """Forgets the bound inputs."""
        self._inputs.clear()

    def clear_binding_outputs(self):
        """Forgets the bound outputs."""
        self._outputs.clear()
        self._results = []

    def synchronize_inputs(self):
        """Kept for ONNX Runtime compatibility: bound inputs are ready when bound."""

    def synchronize_outputs(self):
        """Kept for ONNX Runtime compatibility: reading an output waits for the work writing it."""

    def get_outputs(self):
        """The outputs of the last run, as OrtValues, in the order bound."""
        return list(self._results)

    def copy_outputs_to_cpu(self):
        """The outputs of the last run as numpy arrays."""
        return [v.numpy() for v in self._results]

    def _run(self, sess, flag):
        if not self._outputs:
            raise RuntimeError("Error in execution: the IO binding binds no output")
        pointers = {n: a for n, a in self._outputs.items() if isinstance(a, np.ndarray)}
        places = [(n, ("cpu", 0) if n in pointers else p) for n, p in self._outputs.items()]
        try:
            results = sess.run_binding(list(self._inputs.items()), places, flag)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            raise RuntimeError(f"Error in execution: {e}") from e
        for (name, _), value in zip(places, results):
            if name in pointers:
                target = pointers[name]
                produced = value.numpy()
                if produced.shape != target.shape or produced.dtype != target.dtype:
                    raise RuntimeError(f"Error in execution: output '{name}' is {produced.dtype}{list(produced.shape)}, "
                                       f"the bound buffer {target.dtype}{list(target.shape)}")
                np.copyto(target, produced)
        self._results = results
