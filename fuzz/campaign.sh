#!/usr/bin/env bash
# A longer fuzzing campaign: every target at once, each with JOBS libFuzzer processes (-fork),
# for SECONDS, on the committed seeds. Usage: fuzz/campaign.sh SECONDS JOBS [BIN_DIR] [OUT_DIR]
# BIN_DIR holds the targets built by fuzz/run.sh (default target/fuzz/<host>/release); results
# (logs, new corpus, crashes) go to OUT_DIR (default target/fuzz/campaign). Prints, per target,
# the executions and the crashes found.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:?seconds}"
jobs="${2:?jobs}"
bin="${3:-target/fuzz/$(rustc -vV | sed -n 's/^host: //p')/release}"
out="${4:-target/fuzz/campaign}"
mkdir -p "$out"
for t in load plan run; do
    mkdir -p "$out/corpus/$t" "$out/artifacts"
    "$bin/$t" "$out/corpus/$t" "fuzz/corpus/$t" -fork="$jobs" -ignore_crashes=1 \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
        -artifact_prefix="$out/artifacts/$t-" >"$out/$t.log" 2>&1 &
done
wait
for t in load plan run; do
    # -fork prints cumulative "#<runs>: ... exec/s: ... crashes: N" status lines.
    last="$(grep -E '^#[0-9]+' "$out/$t.log" | tail -n 1)"
    echo "$t: $last"
    echo "$t: $(ls "$out/corpus/$t" | wc -l) corpus files, $(ls "$out/artifacts" | grep -c "^$t-" || true) crash/timeout/oom artifacts"
done
