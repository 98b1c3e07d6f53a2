#!/usr/bin/env bash
# Runs every test of Onyx on a fresh machine: installs the Python reference tools (ONNX, ONNX
# Runtime and onnxruntime-genai compute the expected outputs), generates the test models, then one `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check onnx==1.22.0 onnxruntime==1.32.0 onnxruntime-genai==0.18.0 jinja2==3.1.6 numpy pillow==13.0.0 \
    maturin==1.16.0 pytest==9.2.0

# The wgpu tests need a Vulkan driver: on a machine without a GPU, Mesa's software one
# (lavapipe). With CI=true a wgpu test that finds no adapter fails instead of skipping.
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
    sudo_if_needed=""
    [ "$(id -u)" -ne 0 ] && sudo_if_needed="sudo"
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi

models="${ONYX_TEST_MODELS:-$PWD/target/testmodels}"
python3 scripts/make_test_models.py "$models"
python3 scripts/make_malformed_models.py "$models/malformed"
python3 scripts/make_llm_op_cases.py "$models/llm_ops"
python3 scripts/make_llm_model_refs.py "$models/llm_models"
python3 scripts/make_genai_refs.py "$models/genai"
export ONYX_TEST_MODELS="$models"

# ONNX's backend node tests (from the onnx wheel, cached in .cache/) for the conformance test,
# which writes its report to docs/conformance.md.
node_tests="$(bash scripts/fetch_node_tests.sh)"
export ONYX_NODE_TESTS="$node_tests"
export ONYX_CONFORMANCE_REPORT=docs/conformance.md
# `wgpu` runs with CPU fallback off, so its figures count only what it runs itself; `wgpu+cpu`
# runs it with the fallback, as users do, and must pass every case the CPU EP passes.
export ONYX_CONFORMANCE_PROVIDERS="${ONYX_CONFORMANCE_PROVIDERS:-cpu,wgpu,wgpu+cpu}"

# On CI (a fresh clone, built once) incremental caches only cost disk: the last CI machine ran
# out of it while linking the fuzz targets (lld died with SIGBUS on its mmapped output).
if [ "${CI:-}" = "true" ]; then
    export CARGO_INCREMENTAL=0
fi

cargo test --workspace --no-fail-fast

# The Python package (python/): built by maturin with the test build's profile and target
# folder, so it reuses what `cargo test` compiled, installed, then checked by pytest against
# the real onnxruntime package (python/tests). Run from the repository root, so that `onyx`
# is the installed package, not the source folder.
MATURIN_PEP517_ARGS="--profile dev" python3 -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps ./python
python3 -m pytest -q python/tests

# The fuzz build below has its own target folder: on CI the test build is done with, so its
# disk goes back first.
if [ "${CI:-}" = "true" ]; then
    rm -rf target/debug
fi

# Fuzzing (docs/robustness.md): each libFuzzer target (loader, planning, runs) for a short fixed
# time on its committed seed corpus, built on the stable toolchain. ONYX_FUZZ_SECONDS=0 skips.
fuzz_seconds="${ONYX_FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" -gt 0 ]; then
    bash fuzz/run.sh "$fuzz_seconds"
fi
