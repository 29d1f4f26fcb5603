#!/usr/bin/env bash
# The applications too big for every run of the suite: PyTorch (its CUDA 12 build and NVIDIA's libraries,
# about 4 GB from PyPI, installed once per machine by tools/app-venv.sh), run
# unmodified on the simulated driver and under the shim by the end-to-end tests the suite lists as
# ignored (cuda-tests/probe/tests/e2e/torch.rs). tools/test-all.sh (so .ci/run) calls this when
# TESSERA_TEST_TORCH=1. Needs the workspace built (cargo build --workspace --release) and the network the
# first time; fails loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release
./tools/app-venv.sh torch > /dev/null
cd cuda-tests/probe
cargo test --release --test e2e -- --ignored --test-threads 1 torch::
