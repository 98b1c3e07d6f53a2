#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer on the stable toolchain (coverage instrumentation
# through stable -C flags, no sanitizer; cargo-fuzz is not needed) and runs each for SECONDS
# (default 20) on a copy of its committed seed corpus. Usage: fuzz/run.sh [SECONDS] [TARGET...]
# New inputs go to target/fuzz/corpus/<target>; a crash is saved to target/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(load plan run)

export CARGO_TARGET_DIR="$PWD/target/fuzz"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros.
host="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --manifest-path fuzz/Cargo.toml --release --bins --target "$host"
bin="$CARGO_TARGET_DIR/$host/release"

mkdir -p target/fuzz/artifacts
for t in "${targets[@]}"; do
    corpus="target/fuzz/corpus/$t"
    mkdir -p "$corpus"
    echo "fuzz: $t for ${seconds}s"
    # rss_limit: the sessions' limits (256 MiB a run) keep every run far below it.
    log="target/fuzz/$t.log"
    if ! "$bin/$t" "$corpus" "fuzz/corpus/$t" \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
        -artifact_prefix="target/fuzz/artifacts/$t-" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 80 "$log"
        echo "fuzz: $t failed (crash, leak, timeout or out of memory): see target/fuzz/artifacts/"
        exit 1
    fi
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done)" "$log" || tail -n 5 "$log"
done
