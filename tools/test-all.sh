#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: formatting, lints, a release build of every crate
# (the simulated driver and NVML must exist before the end-to-end tests spawn programs on them), NVIDIA's
# cuda.h for the C test programs (the tests install it themselves too when missing), then every test of
# the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== cargo build --release"
cargo build --workspace --release
echo "== NVIDIA's cuda.h for the C test programs (pip package, installed once into target/pydeps)"
./tools/cuda-headers.sh
echo "== Debian tools the tests run for real: Prometheus and promtool, tmux (installed once)"
./tools/apt-once.sh prometheus:promtool prometheus:prometheus tmux:tmux
echo "== cargo test --release"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log" || status=$?
echo "== the simulated-driver suite again, every program under the shim with no TESSERA_ setting (transparency)"
TESSERA_TEST_UNDER_SHIM=1 cargo test --release --no-fail-fast -p cuda-tests 2>&1 | tee -a "$log" || status=$?
# One closing line for the whole suite, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
