"""Fixtures for the differential onnxruntime-vs-onyx tests.

``ort`` is the real onnxruntime (the reference); ``onyx`` is the package under
test. With ONYX_TEST_AGAINST_ITSELF=1, ``onyx`` is onnxruntime too, which
checks the suite itself (every differential test must then pass).
"""

import hashlib
import importlib
import os
import pathlib
import zlib

import numpy as np
import onnx
import pytest

AGAINST_ITSELF = os.environ.get("ONYX_TEST_AGAINST_ITSELF") == "1"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DIGITS_DIR = REPO_ROOT / "models" / "digits"
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="session")
def ort():
    """The reference: the real onnxruntime."""
    import onnxruntime
    return onnxruntime


@pytest.fixture(scope="session")
def onyx():
    """The package under test (onnxruntime itself with ONYX_TEST_AGAINST_ITSELF=1).
    A missing onyx is a failure, never a skip."""
    if AGAINST_ITSELF:
        import onnxruntime
        return onnxruntime
    try:
        return importlib.import_module("onyx")
    except ImportError as e:
        pytest.fail(f"cannot import onyx ({e}); set ONYX_TEST_AGAINST_ITSELF=1 to test "
                    "the suite against onnxruntime itself", pytrace=False)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def save_model(model_dir):
    """save_model(ModelProto) -> str path of the model written under a tmp
    directory (named by content hash, so each model is written once)."""
    def save(model):
        data = model.SerializeToString()
        path = model_dir / (hashlib.sha1(data).hexdigest()[:16] + ".onnx")
        if not path.exists():
            path.write_bytes(data)
        return str(path)
    return save


@pytest.fixture
def sessions(ort, onyx, save_model):
    """sessions(model, options=None, providers=CPU) -> (ort_session, onyx_session).

    ``model`` is a ModelProto (saved first) or a path; ``options`` is a function
    mod -> mod.SessionOptions() so that each side gets its own module's options."""
    def make(model, options=None, providers=CPU):
        path = save_model(model) if isinstance(model, onnx.ModelProto) else str(model)
        pair = []
        for mod in (ort, onyx):
            kw = {}
            if options is not None:
                kw["sess_options"] = options(mod)
            if providers is not None:
                kw["providers"] = list(providers)
            pair.append(mod.InferenceSession(path, **kw))
        return tuple(pair)
    return make


@pytest.fixture
def rng(request):
    """A numpy Generator seeded from the test's id: deterministic, per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def known_gap(reason):
    """Marks a test where Onyx knowingly differs from onnxruntime today: it must fail (strict
    xfail), so that a fix shows up as an unexpected pass and the mark is removed."""
    return pytest.mark.xfail(not AGAINST_ITSELF, reason=reason, strict=True)
