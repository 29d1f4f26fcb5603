#!/usr/bin/env bash
# NVIDIA's CUDA headers (cuda.h, cuda_runtime_api.h) and runtime (libcudart), for the C test programs in
# cuda-tests/c: installs the PyPI package of the runtime's major version into its own folder of
# TARGET_DIR when it is missing, then prints the include folder (the library is in ../lib beside it).
# 12 (the default): nvidia-cuda-runtime-cu12 into TARGET_DIR/pydeps; 13: nvidia-cuda-runtime 13.x into
# TARGET_DIR/pydeps-cu13. Idempotent and safe to run from several processes at once (the test binaries
# call it, and so does tools/test-all.sh before the tests); see tools/pip-once.sh. Needs python3 with
# pip the first time.
#
# Usage: tools/cuda-headers.sh [TARGET_DIR] [12|13]    (default: the workspace's target folder, 12)
set -euo pipefail
target=${1:-"$(dirname "$0")/../target"}
case "${2:-12}" in
    12) package="nvidia-cuda-runtime-cu12==12.9.79" deps="$target/pydeps" tree=nvidia/cuda_runtime ;;
    13) package="nvidia-cuda-runtime==13.0.96" deps="$target/pydeps-cu13" tree=nvidia/cu13 ;;
    *) echo "usage: $0 [TARGET_DIR] [12|13]: no CUDA runtime $2 here" >&2; exit 2 ;;
esac

"$(dirname "$0")/pip-once.sh" "$package" "$deps" "$tree/include/cuda.h"
cd "$deps/$tree/include" && pwd
