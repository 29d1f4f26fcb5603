#!/usr/bin/env bash
# A virtual environment holding one of the CUDA applications the tests run unmodified on the simulated
# driver and under the shim, installed from PyPI as a user would (each finds NVIDIA's libraries in its
# own site-packages): made once per machine, then its python is printed. Like pip's own cache it lives
# outside the clone (DIR, default ~/.cache/tessera/app-venvs), so a fresh clone does not install 1.5 GB
# again; its name carries a hash of the packages, so a change of version makes a new one. A lock makes
# it safe for several processes at once. Needs python3 with venv and pip, and the network, the first
# time; fails loudly, never skips.
#
#   numba   numba-cuda with its CUDA 12 dependencies (NVVM, nvJitLink, NVRTC), about 800 MB
#   cupy    CuPy for CUDA 12 with the toolkit parts its kernels need (NVRTC, the runtime's headers),
#           about 400 MB (its [ctk] extra would add cuBLAS, cuFFT, cuSOLVER ...: 2.9 GB no test uses)
#   numba13 numba-cuda with its CUDA 13 dependencies (cuda-bindings 13, the 13.0 toolkit's parts)
#   cupy13  CuPy for CUDA 13 with NVRTC 13.0 and the runtime's headers
#   torch   PyTorch for CUDA 12 with NVIDIA's libraries (cuBLAS, cuDNN, NCCL ...), about 4 GB: only
#           tools/test-apps.sh runs it
#
# Usage: tools/app-venv.sh numba|cupy|numba13|cupy13|torch [DIR]
set -euo pipefail
case "${1:-}" in
    numba) packages=("numba-cuda[cu12]==0.30.4") ;;
    cupy) packages=("cupy-cuda12x==14.2.0" "nvidia-cuda-nvrtc-cu12==12.9.86" "nvidia-cuda-runtime-cu12==12.9.79") ;;
    numba13) packages=("numba-cuda[cu13]==0.30.4" "cuda-toolkit[cccl,cudart,nvrtc,nvvm]==13.0.2") ;;
    cupy13) packages=("cupy-cuda13x==14.2.0" "nvidia-cuda-nvrtc==13.0.88" "nvidia-cuda-runtime==13.0.96") ;;
    torch) packages=("torch==2.10.0" "numpy<3") ;;
    *) echo "usage: $0 numba|cupy|numba13|cupy13|torch [DIR]" >&2; exit 2 ;;
esac
dir=${2:-"${XDG_CACHE_HOME:-$HOME/.cache}/tessera/app-venvs"}
hash=$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-12)
venv="$dir/$1-$hash"

if [ ! -e "$venv/installed" ]; then
    mkdir -p "$dir"
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
