#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: formatting, lints, a release build of every crate
# (the simulated driver and NVML must exist before the end-to-end tests spawn programs on them),
# then every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== cargo build --release"
cargo build --workspace --release
echo "== cargo test --release"
cargo test --workspace --release
