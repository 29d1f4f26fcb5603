#!/usr/bin/env bash
# Builds the real-GPU check bundle (issue 32): a folder of at most 48 MiB that runs on a GPU host with
# only the NVIDIA driver, glibc and python3 (no Rust, no compiler, no network):
#   OUTDIR/run                     the check: OUTDIR/run [--simulated] [--only NAME,...] [--out DIR]
#   OUTDIR/bin/gpu-check           what run runs (cuda-tests/probe/src/gpu_check)
#   OUTDIR/bin/tessera, OUTDIR/lib/tessera/...   Tessera as tools/install.sh installs it (the shim, the
#                                  provider library, the simulated driver for --simulated)
#   OUTDIR/bin/cuda-probe          the test client the hardware tests run (simgpu-probe)
#   OUTDIR/progs/direct, overhead  C programs on NVIDIA's cuda.h, linked to libcuda.so.1
#   OUTDIR/kernels/*.ptx, OUTDIR/apps/*.py   the PTX kernels and the application scripts
#   OUTDIR/COMMIT                  the commit it was built from
# Every binary is stripped. See docs/real-hardware.md for running it and reading report.json.
#
# Usage: tools/gpu-check-bundle.sh [--no-build] OUTDIR
#   --no-build   bundle what target/release holds, without running cargo (the test suite's build)
# OUTDIR must not exist, or be an earlier bundle (it is replaced). Exit status 2 on a bad argument.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
limit=$((48 << 20))

fail() {
    echo "gpu-check-bundle: $*" >&2
    exit 2
}

build=1
out=""
for arg in "$@"; do
    case "$arg" in
    --no-build) build=0 ;;
    -*) fail "unknown option '$arg' (usage: tools/gpu-check-bundle.sh [--no-build] OUTDIR)" ;;
    *) [ -z "$out" ] || fail "one OUTDIR only (got '$out' and '$arg')"; out=$arg ;;
    esac
done
[ -n "$out" ] || fail "give the folder to make (usage: tools/gpu-check-bundle.sh [--no-build] OUTDIR)"
if [ -e "$out" ]; then
    [ -f "$out/run" ] && [ -f "$out/COMMIT" ] || fail "$out exists and is not a bundle; give a new folder"
    rm -rf "$out"
fi

cd "$root"
if [ "$build" = 1 ]; then
    cargo build --release --workspace
fi
release=$root/target/release
for built in tessera libtessera.so simgpu-probe gpu-check; do
    [ -f "$release/$built" ] || fail "target/release/$built is missing: build first (without --no-build)"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
./tools/install.sh --no-build --prefix "$out" >/dev/null
install -m 755 "$release/simgpu-probe" "$out/bin/cuda-probe"
install -m 755 "$release/gpu-check" "$out/bin/gpu-check"

# The C programs, linked to libcuda.so.1 by name: on the GPU host the loader finds NVIDIA's.
include=$(./tools/cuda-headers.sh "$root/target")
mkdir -p "$out/progs"
cc() {
    local source=$1 name=$2 kernels=$3
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror -pthread -I"$include" -I"$root/cuda-tests/c" \
        -DTESSERA_KERNELS_DIR="\"$kernels\"" -o "$out/progs/$name" "$source" \
        -L"$out/lib/tessera/simgpu" -l:libcuda.so.1 -ldl
}
cc cuda-tests/c/direct.c direct "$root/cuda-tests/kernels"
cc benches/c/overhead.c overhead "$root/tools/kernels"

mkdir -p "$out/kernels" "$out/apps"
cp cuda-tests/kernels/*.ptx tools/kernels/*.ptx "$out/kernels/"
cp cuda-tests/apps/*.py "$out/apps/"
cat >"$out/run" <<'RUN'
#!/bin/sh
# Tessera's real-GPU check: PASS/FAIL/SKIP per check, report.json, a one-line summary.
# Usage: ./run [--simulated] [--only NAME,...] [--out DIR]    (./run --help)
exec "$(dirname "$0")/bin/gpu-check" "$@"
RUN
chmod 755 "$out/run"
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain 2>/dev/null)" ] || commit="$commit (with uncommitted changes)"
echo "$commit" >"$out/COMMIT"

find "$out/bin" "$out/progs" "$out/lib" -type f \( -perm -u+x -o -name '*.so' \) -exec strip --strip-unneeded {} +
size=$(find "$out" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
[ "$size" -le "$limit" ] || { echo "gpu-check-bundle: $out is $size bytes, over the 48 MiB limit" >&2; exit 1; }
glibc=$(find "$out/bin" "$out/progs" "$out/lib" -type f -exec objdump -T {} + 2>/dev/null \
    | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
echo "gpu-check-bundle: $out: $size bytes (limit $limit), needs ${glibc:-GLIBC_?} or newer, commit $commit"
