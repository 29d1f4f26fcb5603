#!/usr/bin/env bash
# NVIDIA's CUDA headers (cuda.h), for the C test programs in cuda-tests/c: installs the PyPI package
# nvidia-cuda-runtime-cu12 into TARGET_DIR/pydeps when it is missing, then prints the include folder.
# Idempotent and safe to run from several processes at once (the test binaries call it, and so does
# tools/test-all.sh before the tests). Needs python3 with pip; fails loudly without them.
#
# Usage: tools/cuda-headers.sh [TARGET_DIR]    (default: the workspace's target folder)
set -euo pipefail
package="nvidia-cuda-runtime-cu12==12.9.79"
target=${1:-"$(dirname "$0")/../target"}
deps="$target/pydeps"
include="$deps/nvidia/cuda_runtime/include"

if [ ! -f "$include/cuda.h" ]; then
    mkdir -p "$target"
    exec 9>"$target/.pydeps.lock"
    flock 9
    if [ ! -f "$include/cuda.h" ]; then
        echo "installing $package into $deps (for cuda.h)" >&2
        staging=$(mktemp -d "$target/.pydeps.XXXXXX")
        trap 'rm -rf "$staging"' EXIT
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-input --quiet \
            --target "$staging" "$package" >&2
        [ -f "$staging/nvidia/cuda_runtime/include/cuda.h" ] || {
            echo "$package installed no nvidia/cuda_runtime/include/cuda.h" >&2
            exit 1
        }
        rm -rf "$deps"
        mv "$staging" "$deps"
        trap - EXIT
    fi
fi
cd "$include" && pwd
