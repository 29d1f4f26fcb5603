#!/usr/bin/env bash
# Installs a pinned PyPI package into a folder of its own, once: when FOLDER/CHECK (a file the package
# must provide) is missing, pip installs into a staging folder beside FOLDER, checks CHECK there, then
# swaps it in whole. A lock makes it safe for several processes at once (the test binaries call it in
# parallel); once installed it needs no network. Fails loudly, never skips. Used by tools/cuda-headers.sh,
# tools/ptxas.sh and tools/nvcc.sh.
#
# Usage: tools/pip-once.sh PACKAGE==VERSION FOLDER CHECK [more pinned packages or pip install options...]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PACKAGE==VERSION FOLDER CHECK [more pinned packages or pip options...]" >&2; exit 2; }
package=$1 folder=$2 check=$3
shift 3

if [ ! -e "$folder/$check" ]; then
    parent=$(dirname "$folder")
    mkdir -p "$parent"
    exec 9>"$folder.lock"
    flock 9
    if [ ! -e "$folder/$check" ]; then
        echo "installing $package into $folder" >&2
        staging=$(mktemp -d "$folder.XXXXXX")
        trap 'rm -rf "$staging"' EXIT
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-input --quiet \
            --target "$staging" "$@" "$package" >&2 || {
            echo "cannot install $package from PyPI into $folder (no network, or no python3 with pip?)" >&2
            exit 1
        }
        [ -e "$staging/$check" ] || {
            echo "$package installed no $check" >&2
            exit 1
        }
        rm -rf "$folder"
        mv "$staging" "$folder"
        trap - EXIT
    fi
fi
