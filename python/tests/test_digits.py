"""The committed trained model models/digits/digits.onnx on its committed
samples: onyx's probabilities equal onnxruntime's."""

import numpy as np
import pytest

from conftest import DIGITS_DIR
from diffutil import assert_same, nodeargs, run_both

MODEL = DIGITS_DIR / "digits.onnx"


@pytest.fixture
def digits(sessions):
    return sessions(MODEL)


def test_digits_nodeargs(digits):
    """image float[batch,1,8,8] -> probabilities float[batch,10]."""
    ref, got = digits
    assert ref.get_inputs()[0].name == "image"
    assert nodeargs(got.get_inputs()) == nodeargs(ref.get_inputs())
    assert nodeargs(got.get_outputs()) == nodeargs(ref.get_outputs())


@pytest.mark.parametrize("digit", [7, 0, 3])
def test_digits_sample(digits, digit):
    """sample_<d>.npy: same probabilities (allclose), classified as <d>."""
    ref, got = digits
    x = np.load(DIGITS_DIR / f"sample_{digit}.npy")
    r, g = run_both(ref, got, None, {"image": x})
    assert int(np.argmax(g[0])) == int(np.argmax(r[0])) == digit
    np.testing.assert_allclose(g[0].sum(), 1.0, rtol=1e-5)


def test_digits_batch(digits):
    """The three samples as one batch of 3, output requested by name."""
    ref, got = digits
    x = np.concatenate([np.load(DIGITS_DIR / f"sample_{d}.npy") for d in (0, 3, 7)])
    r, g = run_both(ref, got, ["probabilities"], {"image": x})
    assert list(np.argmax(g[0], axis=1)) == [0, 3, 7]


def test_digits_modelmeta(digits):
    """Metadata of the committed model."""
    ref, got = digits
    rm, gm = ref.get_modelmeta(), got.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description",
                  "graph_description", "version", "custom_metadata_map"):
        assert_same(getattr(rm, field), getattr(gm, field), field)
