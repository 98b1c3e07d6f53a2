"""Non-tensor values: sequences come back as Python lists of arrays, empty
optionals as None, exactly as onnxruntime returns them."""

import numpy as np

import model_builders as mb
from diffutil import rand, run_both


def test_sequence_construct_output(sessions, rng):
    """A seq(tensor(float)) output is a Python list of numpy arrays."""
    ref, got = sessions(mb.seq_construct())
    r, _ = run_both(ref, got, None, {"a": rand(rng, "float32", (2, 3)),
                                     "b": rand(rng, "float32", (5, 3))})
    assert type(r[0]) is list and len(r[0]) == 2 and type(r[0][0]) is np.ndarray


def test_sequence_construct_empty_member(sessions, rng):
    """A sequence member may have a zero dim."""
    ref, got = sessions(mb.seq_construct())
    run_both(ref, got, None, {"a": rand(rng, "float32", (2, 3)),
                              "b": np.zeros((0, 3), np.float32)})


def test_sequence_input_as_list(sessions, rng):
    """A sequence input is fed as a Python list of arrays (SequenceAt/Length)."""
    ref, got = sessions(mb.seq_input())
    seq = [rand(rng, "float32", (2, 3)), rand(rng, "float32", (4,)),
           rand(rng, "float32", (1, 1, 2))]
    for i in (0, 2, -1):
        run_both(ref, got, None, {"s": seq, "i": np.array(i, np.int64)})


def test_optional_input_present(sessions, rng):
    """An optional input fed a tensor: has=True, the tensor passes through."""
    ref, got = sessions(mb.optional_input())
    r, _ = run_both(ref, got, None, {"o": rand(rng, "float32", (3,))})
    assert bool(r[0]) is True


def test_optional_input_none(sessions):
    """An optional input fed None: has=False and the optional output is None."""
    ref, got = sessions(mb.optional_input())
    r, _ = run_both(ref, got, None, {"o": None})
    assert r[1] is None


def test_optional_input_omitted(sessions):
    """An optional input left out of the feed counts as empty."""
    ref, got = sessions(mb.optional_input())
    r, _ = run_both(ref, got, None, {})
    assert r[1] is None


def test_optional_built_in_graph(sessions, rng):
    """Optional -> OptionalHasElement / OptionalGetElement inside the graph."""
    ref, got = sessions(mb.optional_in_graph())
    run_both(ref, got, None, {"x": rand(rng, "float32", (3,))})


def test_empty_optional_output(sessions):
    """An empty Optional output is returned as None (and has=False)."""
    ref, got = sessions(mb.empty_optional())
    r, _ = run_both(ref, got, None, {})
    assert r[1] is None and r[0].dtype == np.bool_
    run_both(ref, got, ["o"], {})
