#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: formatting, a release build of every target linted by
# clippy (the simulated driver and NVML must exist before the end-to-end tests spawn programs on them),
# NVIDIA's cuda.h for the C test programs (the tests install it themselves too when missing), then every
# test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's heading says when it began, in seconds from the start (the stages' wall times).
stage() { echo "== [${SECONDS} s] $*"; }

# Three test threads per CPU: most end-to-end tests wait on their programs, daemons and timers, not on a
# CPU (on 2 CPUs the simulated-driver tests used 36% of both at cargo's one thread per CPU), and the tests
# that measure time run alone among those that measure or load every core, whatever the thread count
# (`common::timing_turn()`, `common::load_turn()`). On 2 CPUs the end-to-end binary took 189 s at 4
# threads and 167 s at 6; at 8 it was no faster (167 s in the one run that passed, after the flood
# test's fix; before it, the flood test and a then unshielded measurement failed).
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$((3 * $(nproc)))}"

stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo build --release --all-targets, linted by clippy as it compiles"
# clippy-driver is rustc with clippy's lints: as the compiler of the workspace's own crates (cargo's
# RUSTC_WORKSPACE_WRAPPER, what `cargo clippy` sets too; CLIPPY_ARGS carries its `-D warnings` as
# `cargo clippy -- -D warnings` passes it), one build of every target gives the verdict of `cargo clippy
# --workspace --all-targets --release -- -D warnings` and the programs the tests run, instead of a clippy
# pass that checks every dependency a second time (about 2 min on 2 CPUs). The variables stay set for
# the rest of the suite: cargo rebuilds a crate whose compiler changed.
# Without line tables: they cost a quarter of our crates' compile time (tessera-scheduler: 38 s of CPU
# against 30), change no generated code, and a failing test still names its file and line (panics carry
# their location); the release profile keeps them for what is installed and benchmarked.
export CARGO_PROFILE_RELEASE_DEBUG=false
driver=$(command -v clippy-driver) || { echo "error: clippy-driver not found: rustup component add clippy" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER="$driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
cargo build --workspace --release --all-targets
stage "NVIDIA's cuda.h for the C test programs (pip package, installed once into target/pydeps)"
./tools/cuda-headers.sh
stage "Debian tools the tests run for real: Prometheus and promtool, tmux, g++ for the hook table check (installed once)"
./tools/apt-once.sh prometheus:promtool prometheus:prometheus tmux:tmux g++:g++
stage "cargo test --release"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log" || status=$?
stage "the simulated-driver suite again, every program under the shim with no TESSERA_ setting (transparency)"
# The end-to-end test program the first pass built, run again as cargo runs it (from its package's folder):
# asking cargo for `-p cuda-tests` alone would resolve other features and build 50-odd crates again. Only the
# subjects that start programs on a bare simulated machine (`Sim::new`, the one reader of
# TESSERA_TEST_UNDER_SHIM) change under it; the others put their programs under the shim already
# (`Sim::shimmed`, a daemon's `Machine`), and running them twice would only cost time.
mapfile -t programs < <(cargo test --workspace --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "e2e" \
            and m["manifest_path"].endswith("/cuda-tests/probe/Cargo.toml"):
        print(m["executable"])')
mapfile -t subjects < <(grep -l 'Sim::new' cuda-tests/probe/tests/e2e/*.rs | xargs -n1 basename | sed 's/\.rs$/::/')
if [ "${#programs[@]}" -ne 1 ] || [ "${#subjects[@]}" -eq 0 ]; then
    echo "error: expected one end-to-end program of cuda-tests/probe and subjects using Sim::new," \
        "found ${#programs[@]} and ${#subjects[@]}" | tee -a "$log"
    status=1
fi
for exe in "${programs[@]}"; do
    echo "     Running $exe ${subjects[*]} (TESSERA_TEST_UNDER_SHIM=1)"
    (cd cuda-tests/probe && TESSERA_TEST_UNDER_SHIM=1 "$exe" "${subjects[@]}") 2>&1 | tee -a "$log" || status=$?
done
if [ "${TESSERA_TEST_TORCH:-0}" = 1 ]; then
    stage "PyTorch, unmodified (TESSERA_TEST_TORCH=1: tools/test-apps.sh)"
    ./tools/test-apps.sh 2>&1 | tee -a "$log" || status=$?
fi
if [ "${TESSERA_TEST_GLIBC:-0}" = 1 ]; then
    stage "the real-GPU check bundle built for glibc 2.31, run in Debian 11 (TESSERA_TEST_GLIBC=1: tools/test-bundle-glibc.sh)"
    ./tools/test-bundle-glibc.sh 2>&1 | tee -a "$log" || status=$?
fi
# One closing line for the whole suite, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
stage "done"
exit "$status"
