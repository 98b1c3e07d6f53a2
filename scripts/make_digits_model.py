"""Trains a small digit classifier on scikit-learn's bundled 8x8 digits and writes it as ONNX.

Writes, next to each other in models/digits/ (relative to the repository root):
  digits.onnx          the classifier: image float32 [batch,1,8,8] (pixels 0..16) ->
                       probabilities float32 [batch,10]
  sample_<digit>.npy   three correctly classified test images, float32 [1,1,8,8]
  README.md            what the model is and how it was made

Run: python3 scripts/make_digits_model.py
Needs: onnx==1.22.0, onnxruntime, numpy, scikit-learn (the data set ships with scikit-learn,
nothing is downloaded). Deterministic: the split and the training use fixed seeds.
"""
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

SEED = 0
HIDDEN = 64
PIXEL_MAX = 16.0
OPSET = 17
MIN_ACCURACY = 0.95
SAMPLE_DIGITS = (0, 3, 7)
OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "models" / "digits"


def load_split():
    """Returns (x_train, x_test, y_train, y_test) with x as float32 [n, 64] in 0..16."""
    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=SEED, stratify=y)


def train(x_train, y_train):
    """Fits an MLP with one hidden ReLU layer on pixels scaled to 0..1."""
    clf = MLPClassifier(
        hidden_layer_sizes=(HIDDEN,),
        activation="relu",
        solver="adam",
        alpha=1e-4,
        max_iter=500,
        random_state=SEED,
    )
    clf.fit(x_train / PIXEL_MAX, y_train)
    return clf


def build_model(clf, accuracy):
    """Writes the fitted MLP as Flatten -> Mul(1/16) -> Gemm -> Relu -> Gemm -> Softmax."""
    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    inits = [
        numpy_helper.from_array(np.array(1.0 / PIXEL_MAX, dtype=np.float32), "pixel_scale"),
        numpy_helper.from_array(w1, "fc1.weight"),
        numpy_helper.from_array(b1, "fc1.bias"),
        numpy_helper.from_array(w2, "fc2.weight"),
        numpy_helper.from_array(b2, "fc2.bias"),
    ]
    nodes = [
        helper.make_node("Flatten", ["image"], ["flat"], name="flatten", axis=1),
        helper.make_node("Mul", ["flat", "pixel_scale"], ["scaled"], name="scale_pixels",
                         doc_string="pixels 0..16 -> 0..1, the scaling used in training"),
        helper.make_node("Gemm", ["scaled", "fc1.weight", "fc1.bias"], ["fc1"], name="fc1"),
        helper.make_node("Relu", ["fc1"], ["hidden"], name="relu"),
        helper.make_node("Gemm", ["hidden", "fc2.weight", "fc2.bias"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        producer_name="onyx-scripts",
        producer_version="1",
        opset_imports=[helper.make_opsetid("", OPSET)],
        doc_string=(
            "Handwritten digit classifier for scikit-learn's 8x8 digits data set: an MLP "
            f"(64 -> {HIDDEN} ReLU -> 10 softmax). Input 'image' float32 [batch,1,8,8] with "
            "pixel values 0..16 as in the data set (the graph scales them by 1/16). Output "
            f"'probabilities' float32 [batch,10]. Test accuracy {accuracy:.4f} on a 25% "
            f"stratified split (random_state={SEED}). Made by scripts/make_digits_model.py."
        ),
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def ort_probabilities(model_bytes, x):
    """Runs the model with onnxruntime on x float32 [n,64] and returns [n,10]."""
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return sess.run(["probabilities"], {"image": x.reshape(-1, 1, 8, 8)})[0]


def pick_samples(x_test, y_test, predicted):
    """Returns {digit: image [1,1,8,8]} for the first correctly classified test image of each."""
    samples = {}
    for digit in SAMPLE_DIGITS:
        hits = np.flatnonzero((y_test == digit) & (predicted == digit))
        if hits.size == 0:
            sys.exit(f"no correctly classified test image of digit {digit}")
        samples[digit] = x_test[hits[0]].reshape(1, 1, 8, 8).astype(np.float32)
    return samples


def write_readme(accuracy, n_train, n_test, model_size):
    """Writes models/digits/README.md."""
    names = ", ".join(f"`sample_{d}.npy`" for d in SAMPLE_DIGITS)
    text = f"""# digits: a tiny handwritten-digit classifier

`digits.onnx` classifies the 8x8 grey-scale digit images that scikit-learn bundles
(`sklearn.datasets.load_digits`, 1797 images of the digits 0-9, originally from UCI).

- Input `image`: float32 `[batch, 1, 8, 8]`, pixel values 0..16 exactly as in the data set.
- Output `probabilities`: float32 `[batch, 10]`, softmax over the digits 0-9.
- Graph (opset {OPSET}, {model_size} bytes): Flatten -> Mul by 1/16 (the scaling used in
  training) -> Gemm 64x{HIDDEN} -> Relu -> Gemm {HIDDEN}x10 -> Softmax.
- Trained with scikit-learn's `MLPClassifier(hidden_layer_sizes=({HIDDEN},), activation="relu",
  random_state={SEED})` on {n_train} images; test accuracy **{accuracy:.4f}** on the other
  {n_test} (stratified 25% split, `random_state={SEED}`). onnxruntime's predictions on the test
  split were checked to equal scikit-learn's.
- {names}:
  float32 `[1, 1, 8, 8]` test images of those digits that the model classifies correctly
  (for demos and end-to-end tests).

Regenerate (deterministic; needs onnx 1.22, onnxruntime, numpy, scikit-learn):

    python3 scripts/make_digits_model.py
"""
    (OUT_DIR / "README.md").write_text(text)


def main():
    """Trains, checks, and writes the model, samples and README."""
    x_train, x_test, y_train, y_test = load_split()
    clf = train(x_train, y_train)
    sk_pred = clf.predict(x_test / PIXEL_MAX)
    accuracy = float(np.mean(sk_pred == y_test))
    print(f"test accuracy: {accuracy:.4f} ({len(y_test)} test images)")
    if accuracy < MIN_ACCURACY:
        sys.exit(f"accuracy {accuracy:.4f} is below {MIN_ACCURACY}")

    model = build_model(clf, accuracy)
    model_bytes = model.SerializeToString()
    probs = ort_probabilities(model_bytes, x_test)
    ort_pred = probs.argmax(axis=1)
    mismatches = int(np.sum(ort_pred != sk_pred))
    if mismatches:
        sys.exit(f"onnxruntime disagrees with scikit-learn on {mismatches} test images")
    sk_probs = clf.predict_proba(x_test / PIXEL_MAX)
    print(f"onnxruntime matches scikit-learn on all {len(y_test)} test images "
          f"(max |prob diff| {np.abs(probs - sk_probs).max():.2e})")

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "digits.onnx").write_bytes(model_bytes)
    for digit, image in pick_samples(x_test, y_test, ort_pred).items():
        np.save(OUT_DIR / f"sample_{digit}.npy", image)
    write_readme(accuracy, len(y_train), len(y_test), len(model_bytes))
    print(f"wrote {OUT_DIR} (digits.onnx: {len(model_bytes)} bytes)")


if __name__ == "__main__":
    main()
