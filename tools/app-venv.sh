#!/usr/bin/env bash
# A virtual environment holding one of the CUDA applications the tests run unmodified on the simulated
# driver and under the shim, installed from PyPI as a user would (each finds NVIDIA's libraries in its
# own site-packages): made once in TARGET_DIR/venv-APP, then its python is printed. A lock makes it safe
# for several processes at once. Needs python3 with venv and pip, and the network, the first time;
# fails loudly, never skips.
#
#   numba   numba-cuda with its CUDA 12 dependencies (NVVM, nvJitLink, NVRTC), about 800 MB
#   cupy    CuPy for CUDA 12 with its toolkit libraries (NVRTC for its kernels), about 700 MB
#   torch   PyTorch for CUDA 12 with NVIDIA's libraries (cuBLAS, cuDNN, NCCL ...), about 4 GB: only
#           tools/test-apps.sh runs it
#
# Usage: tools/app-venv.sh APP [TARGET_DIR]    (default: the workspace's target folder)
set -euo pipefail
case "${1:-}" in
    numba) packages=("numba-cuda[cu12]==0.30.4") ;;
    cupy) packages=("cupy-cuda12x[ctk]==14.2.0") ;;
    torch) packages=("torch==2.10.0" "numpy<3") ;;
    *) echo "usage: $0 numba|cupy|torch [TARGET_DIR]" >&2; exit 2 ;;
esac
target=${2:-"$(dirname "$0")/../target"}
venv="$target/venv-$1"

if [ ! -e "$venv/installed" ]; then
    mkdir -p "$target"
    exec 9>"$venv.lock"
    flock 9
    if [ ! -e "$venv/installed" ]; then
        echo "installing ${packages[*]} into $venv" >&2
        rm -rf "$venv"
        python3 -m venv "$venv" >&2 || { echo "cannot make a virtual environment (apt-get install python3-venv)" >&2; exit 1; }
        PIP_ROOT_USER_ACTION=ignore "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
            --quiet "${packages[@]}" >&2 || {
            echo "cannot install ${packages[*]} from PyPI into $venv (no network?)" >&2
            exit 1
        }
        touch "$venv/installed"
    fi
fi
echo "$(cd "$venv" && pwd)/bin/python"
