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
# Usage: tools/gpu-check-bundle.sh [--no-build] [--glibc VERSION] OUTDIR
#   --no-build   bundle what target/release holds, without running cargo (the test suite's build)
#   --glibc V    build every binary for glibc V or newer (e.g. 2.31) instead of this machine's: with
#                cargo-zigbuild and zig as the linker and C compiler (cargo install cargo-zigbuild;
#                pip install ziglang, then zig on PATH), into target/glibcV; with --no-build, take them
#                from there
# OUTDIR must not exist, or be an earlier bundle (it is replaced). Exit status 2 on a bad argument.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
limit=$((48 << 20))

fail() {
    echo "gpu-check-bundle: $*" >&2
    exit 2
}

usage="usage: tools/gpu-check-bundle.sh [--no-build] [--glibc VERSION] OUTDIR"
build=1
glibc=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --no-build) build=0 ;;
    --glibc)
        [ $# -ge 2 ] || fail "--glibc needs a version, e.g. --glibc 2.31 ($usage)"
        glibc=$2
        shift
        ;;
    -*) fail "unknown option '$1' ($usage)" ;;
    *) [ -z "$out" ] || fail "one OUTDIR only (got '$out' and '$1')"; out=$1 ;;
    esac
    shift
done
[ -n "$out" ] || fail "give the folder to make ($usage)"
# Relative to where the script was run from, not to the clone it moves into below.
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
case "$glibc" in
"" | 2.[0-9][0-9]) ;;
*) fail "--glibc '$glibc' is not a glibc version like 2.31" ;;
esac
if [ -e "$out" ]; then
    [ -f "$out/run" ] && [ -f "$out/COMMIT" ] || fail "$out exists and is not a bundle; give a new folder"
    rm -rf "$out"
fi

cd "$root"
# What the bundle holds is built by cargo for this machine (target/release), or with --glibc by
# cargo-zigbuild for that glibc (target/glibcV/...), and laid out by tools/install.sh from there.
release=$root/target/release
compiler=(gcc)
if [ -z "$glibc" ] && [ "$build" = 1 ]; then
    cargo build --release --workspace
fi
if [ -n "$glibc" ]; then
    command -v cargo-zigbuild >/dev/null && command -v zig >/dev/null \
        || fail "--glibc needs cargo-zigbuild (cargo install cargo-zigbuild) and zig on PATH (pip install ziglang)"
    if [ "$build" = 1 ]; then
        cargo zigbuild --release --target "x86_64-unknown-linux-gnu.$glibc" --target-dir "target/glibc$glibc" \
            -p tessera-tools -p tessera-shim -p tessera-provider -p cuda-tests -p simcuda -p simnvml -p simcublas \
            --bins --lib
    fi
    release=$root/target/glibc$glibc/x86_64-unknown-linux-gnu/release
    compiler=(zig cc -target "x86_64-linux-gnu.$glibc")
fi
for built in tessera libtessera.so libaccelerator_tessera.so libsimcuda.so libsimnvml.so simgpu-probe gpu-check; do
    [ -f "$release/$built" ] || fail "$release/$built is missing: build first (without --no-build)"
done

mkdir -p "$out"
./tools/install.sh --from "$release" --prefix "$out" >/dev/null
install -m 755 "$release/simgpu-probe" "$out/bin/cuda-probe"
install -m 755 "$release/gpu-check" "$out/bin/gpu-check"

# The C programs, linked to libcuda.so.1 by name: on the GPU host the loader finds NVIDIA's.
include=$(./tools/cuda-headers.sh "$root/target")
mkdir -p "$out/progs"
cc() {
    local source=$1 name=$2 kernels=$3
    "${compiler[@]}" -std=gnu11 -O2 -Wall -Wextra -Werror -pthread -I"$include" -I"$root/cuda-tests/c" \
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
needs=$(find "$out/bin" "$out/progs" "$out/lib" -type f -exec objdump -T {} + 2>/dev/null \
    | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
if [ -n "$glibc" ] && [ "$(printf '%s\n' "GLIBC_$glibc" "$needs" | sort -V | tail -n 1)" != "GLIBC_$glibc" ]; then
    echo "gpu-check-bundle: $out needs $needs, newer than the glibc $glibc asked for" >&2
    exit 1
fi
echo "gpu-check-bundle: $out: $size bytes (limit $limit), needs ${needs:-GLIBC_?} or newer, commit $commit"
