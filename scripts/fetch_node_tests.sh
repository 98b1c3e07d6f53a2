#!/usr/bin/env bash
# Fetches ONNX's backend node tests (onnx/backend/test/data/node: one folder per case with
# model.onnx and test_data_set_*/{input,output}_*.pb) from the onnx wheel into a cache folder
# that is not committed, and prints the folder that holds the cases.
#
#   scripts/fetch_node_tests.sh [DIR]     (default: .cache/onnx-node-tests in the repository)
#
# Idempotent: nothing is downloaded when the cases are already extracted.
set -euo pipefail
# A relative DIR is taken from the caller's folder.
dir="${1:-}"
if [[ -n "$dir" ]]; then
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
fi
cd "$(dirname "$0")/.."

ONNX_VERSION="1.22.0"
dir="${dir:-$PWD/.cache/onnx-node-tests}"
nodes="$dir/onnx-$ONNX_VERSION/onnx/backend/test/data/node"
marker="$dir/onnx-$ONNX_VERSION/.complete"

if [[ -f "$marker" && -d "$nodes" ]]; then
    echo "$nodes"
    exit 0
fi

mkdir -p "$dir/wheel"
# Any wheel of this version carries the same test data; prefer the manylinux x86_64 cp311 one
# and fall back to whatever pip picks for this machine.
if ! ls "$dir"/wheel/onnx-"$ONNX_VERSION"-*.whl >/dev/null 2>&1; then
    python3 -m pip download --quiet --disable-pip-version-check --no-deps "onnx==$ONNX_VERSION" \
        --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --python-version 3.11 \
        --implementation cp --dest "$dir/wheel" >&2 2>/dev/null \
    || python3 -m pip download --quiet --disable-pip-version-check --no-deps "onnx==$ONNX_VERSION" \
        --only-binary=:all: --dest "$dir/wheel" >&2
fi
wheel="$(ls "$dir"/wheel/onnx-"$ONNX_VERSION"-*.whl | head -n 1)"

rm -rf "$dir/onnx-$ONNX_VERSION"
mkdir -p "$dir/onnx-$ONNX_VERSION"
python3 - "$wheel" "$dir/onnx-$ONNX_VERSION" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "onnx/backend/test/data/node/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix)]
    if not names:
        sys.exit(f"{wheel} holds no {prefix}")
    z.extractall(dest, names)
EOF
touch "$marker"
echo "$nodes"
