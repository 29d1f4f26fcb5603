#!/usr/bin/env bash
# NVIDIA's PTX assembler (ptxas), for the test that checks every PTX module the project ships: installs the
# PyPI package nvidia-cuda-nvcc-cu12 (it runs without a GPU) into TARGET_DIR/pydeps-nvcc when it is
# missing, then prints the path of ptxas. Idempotent, offline once installed, and safe to run from several
# processes at once. Needs python3 with pip the first time; fails loudly without them (never a skip).
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

if [ ! -x "$ptxas" ]; then
    mkdir -p "$target"
    exec 9>"$target/.pydeps-nvcc.lock"
    flock 9
    if [ ! -x "$ptxas" ]; then
        echo "installing $package into $deps (for ptxas)" >&2
        staging=$(mktemp -d "$target/.pydeps-nvcc.XXXXXX")
        trap 'rm -rf "$staging"' EXIT
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-input --quiet \
            --no-deps --target "$staging" "$package" >&2 || {
            echo "cannot install $package from PyPI (network or pip missing?): ptxas is needed to check the PTX" >&2
            exit 1
        }
        [ -x "$staging/nvidia/cuda_nvcc/bin/ptxas" ] || {
            echo "$package installed no executable nvidia/cuda_nvcc/bin/ptxas" >&2
            exit 1
        }
        rm -rf "$deps"
        mv "$staging" "$deps"
        trap - EXIT
    fi
fi
cd "$(dirname "$ptxas")" && echo "$(pwd)/ptxas"
