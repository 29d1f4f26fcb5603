#!/usr/bin/env bash
# NVIDIA's PTX assembler (ptxas), for the test that checks every PTX module the project ships: installs the
# PyPI package nvidia-cuda-nvcc-cu12 (it runs without a GPU) into TARGET_DIR/pydeps-nvcc when it is
# missing (see tools/pip-once.sh), then prints the path of ptxas. Needs python3 with pip the first time;
# fails loudly without them (never a skip).
#
# A folder of its own rather than TARGET_DIR/pydeps: tools/cuda-headers.sh replaces that folder whole when
# its headers are missing, which would delete ptxas under a running test.
#
# Usage: tools/ptxas.sh [TARGET_DIR]    (default: the workspace's target folder)
set -euo pipefail
package="nvidia-cuda-nvcc-cu12==12.9.86"
target=${1:-"$(dirname "$0")/../target"}
deps="$target/pydeps-nvcc"
ptxas="$deps/nvidia/cuda_nvcc/bin/ptxas"

"$(dirname "$0")/pip-once.sh" "$package" "$deps" nvidia/cuda_nvcc/bin/ptxas --no-deps
[ -x "$ptxas" ] || { echo "$ptxas is not executable" >&2; exit 1; }
cd "$(dirname "$ptxas")" && echo "$(pwd)/ptxas"
