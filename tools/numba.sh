#!/usr/bin/env bash
# NVIDIA's numba-cuda (with its CUDA 12 dependencies: cuda-bindings, NVVM, nvJitLink, NVRTC), for the test
# that runs unmodified @cuda.jit programs on the simulated driver and under the shim: a virtual
# environment in TARGET_DIR/venv-numba, made once (as a user would install it: numba finds NVIDIA's
# libraries in its site-packages), then prints its python. A lock makes it safe for several processes at
# once. Needs python3 with venv and pip, and the network, the first time (about 800 MB); fails loudly,
# never skips.
#
# Usage: tools/numba.sh [TARGET_DIR]    (default: the workspace's target folder)
set -euo pipefail
package="numba-cuda[cu12]==0.30.4"
target=${1:-"$(dirname "$0")/../target"}
venv="$target/venv-numba"

if [ ! -e "$venv/installed" ]; then
    mkdir -p "$target"
    exec 9>"$venv.lock"
    flock 9
    if [ ! -e "$venv/installed" ]; then
        echo "installing $package into $venv" >&2
        rm -rf "$venv"
        python3 -m venv "$venv" >&2 || { echo "cannot make a virtual environment (apt-get install python3-venv)" >&2; exit 1; }
        PIP_ROOT_USER_ACTION=ignore "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
            --quiet "$package" >&2 || {
            echo "cannot install $package from PyPI into $venv (no network?)" >&2
            exit 1
        }
        touch "$venv/installed"
    fi
fi
echo "$(cd "$venv" && pwd)/bin/python"
