#!/usr/bin/env bash
# Runs every test of Onyx on a fresh machine: installs the Python reference tools (ONNX and
# ONNX Runtime compute the expected outputs), generates the test models, then one `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check onnx==1.22.0 onnxruntime==1.32.0 numpy

models="${ONYX_TEST_MODELS:-$PWD/target/testmodels}"
python3 scripts/make_test_models.py "$models"
python3 scripts/make_malformed_models.py "$models/malformed"
export ONYX_TEST_MODELS="$models"

cargo test --workspace --no-fail-fast
