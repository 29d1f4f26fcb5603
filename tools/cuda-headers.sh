#!/usr/bin/env bash
# NVIDIA's CUDA headers (cuda.h), for the C test programs in cuda-tests/c: installs the PyPI package
# nvidia-cuda-runtime-cu12 into TARGET_DIR/pydeps when it is missing, then prints the include folder.
# Idempotent and safe to run from several processes at once (the test binaries call it, and so does
# tools/test-all.sh before the tests); see tools/pip-once.sh. Needs python3 with pip the first time.
#
# Usage: tools/cuda-headers.sh [TARGET_DIR]    (default: the workspace's target folder)
set -euo pipefail
package="nvidia-cuda-runtime-cu12==12.9.79"
target=${1:-"$(dirname "$0")/../target"}
deps="$target/pydeps"
include="$deps/nvidia/cuda_runtime/include"

"$(dirname "$0")/pip-once.sh" "$package" "$deps" nvidia/cuda_runtime/include/cuda.h
cd "$include" && pwd
