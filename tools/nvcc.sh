#!/usr/bin/env bash
# NVIDIA's CUDA compiler driver, nvcc (CUDA 13.0, with its front end cicc, the crt headers and the
# runtime's headers and static library: all from PyPI, and all running without a GPU), for the test
# that builds a CUDA program as people do (cuda-tests/cu, built by
# cuda-tests/probe/tests/e2e/cudart.rs): installs them into TARGET_DIR/pydeps-nvcc13 when missing (see
# tools/pip-once.sh; about 250 MB), then prints the path of nvcc. nvcc also needs g++ as its host
# compiler (tools/test-all.sh installs it). Needs python3 with pip the first time; fails loudly without
# them (never a skip).
#
# A folder of its own, as tools/ptxas.sh has, for the same reason.
#
# Usage: tools/nvcc.sh [TARGET_DIR]    (default: the workspace's target folder)
set -euo pipefail
target=${1:-"$(dirname "$0")/../target"}
deps="$target/pydeps-nvcc13"
nvcc="$deps/nvidia/cu13/bin/nvcc"

"$(dirname "$0")/pip-once.sh" "nvidia-cuda-nvcc==13.0.88" "$deps" nvidia/cu13/bin/nvcc \
    "nvidia-nvvm==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-cuda-runtime==13.0.96"
[ -x "$nvcc" ] || { echo "$nvcc is not executable" >&2; exit 1; }
cd "$(dirname "$nvcc")" && echo "$(pwd)/nvcc"
