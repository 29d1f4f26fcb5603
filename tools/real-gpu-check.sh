#!/usr/bin/env bash
# Runs the end-to-end tests that assert only what any CUDA driver does (cuda-tests/probe/tests/e2e/hardware.rs:
# the shipped kernels computing their results, spin timing on %globaltimer, memory quotas, a directly
# linked C program's calls landing in the shim, `tessera run`) against this machine's NVIDIA driver instead
# of the simulated one, then reports each test's result and a summary. Builds first if needed.
#
# The real driver is detected, never assumed: the kernel module's /proc/driver/nvidia/version must exist,
# and the system's libcuda.so.1 (from the loader cache, `ldconfig -p`) must not be the simulated driver of
# this build tree. Without a driver it says so, runs nothing and exits 2.
#
# Usage: tools/real-gpu-check.sh [--detect]    (--detect: only report the driver found, run nothing)
# Exit status: 0 every test passed (or, with --detect, a driver was found); 1 a test or the build failed;
# 2 no NVIDIA driver on this machine; 64 a bad argument.
# For this script's own test only: TESSERA_TEST_NVIDIA_VERSION_FILE replaces /proc/driver/nvidia/version,
# TESSERA_TEST_LIBCUDA the library path the loader cache gives.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version_file=${TESSERA_TEST_NVIDIA_VERSION_FILE:-/proc/driver/nvidia/version}
detect_only=false
case "${1:-}" in
    "") ;;
    --detect) detect_only=true ;;
    *) echo "real-gpu-check: unknown argument '$1' (usage: tools/real-gpu-check.sh [--detect])" >&2; exit 64 ;;
esac

no_driver() {
    echo "real-gpu-check: no NVIDIA driver on this machine: $1" >&2
    echo "real-gpu-check: nothing was run (the tests run on the simulated driver with tools/test-all.sh)" >&2
    exit 2
}

if [ ! -r "$version_file" ]; then
    no_driver "$version_file does not exist (the nvidia kernel module is not loaded)"
fi
if [ -n "${TESSERA_TEST_LIBCUDA:-}" ]; then
    libcuda=$TESSERA_TEST_LIBCUDA
else
    ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
    libcuda=$("$ldconfig" -p 2>/dev/null | awk '$1 == "libcuda.so.1" { print $NF; exit }' || true)
fi
if [ -z "$libcuda" ]; then
    no_driver "the system has no libcuda.so.1 (ldconfig -p lists none)"
fi
if [ ! -e "$libcuda" ]; then
    no_driver "$libcuda (libcuda.so.1) does not exist"
fi
if grep -qa simgpu_marker "$libcuda"; then
    no_driver "$libcuda is Tessera's simulated driver, not NVIDIA's"
fi

driver_version=$(head -n 1 "$version_file")
echo "real-gpu-check: NVIDIA driver: $driver_version"
echo "real-gpu-check: libcuda.so.1: $libcuda"
if $detect_only; then
    exit 0
fi

# A shell set up for the simulated GPU (`eval "$(tessera simgpu env)"`) must not put its libcuda.so.1 ahead
# of the system's: folders holding the simulated one are dropped from LD_LIBRARY_PATH.
kept=()
IFS=: read -r -a folders <<<"${LD_LIBRARY_PATH:-}"
for folder in "${folders[@]}"; do
    if [ -n "$folder" ] && [ -e "$folder/libcuda.so.1" ] && grep -qa simgpu_marker "$folder/libcuda.so.1"; then
        echo "real-gpu-check: leaving $folder out of LD_LIBRARY_PATH (it holds the simulated driver)"
        continue
    fi
    [ -n "$folder" ] && kept+=("$folder")
done
LD_LIBRARY_PATH=$(IFS=:; echo "${kept[*]:-}")
export LD_LIBRARY_PATH
for name in $(compgen -e); do
    case $name in SIMGPU_*) unset "$name" ;; esac
done

cd "$root"
log="$root/target/real-gpu-check.log"
mkdir -p "$root/target"
echo "real-gpu-check: building (cargo build --release --workspace)"
if ! cargo build --release --workspace >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "real-gpu-check: the build failed (full output in $log)" >&2
    exit 1
fi
echo "real-gpu-check: running cuda-tests/probe/tests/e2e/hardware.rs on the real driver (output in $log)"
status=0
TESSERA_TEST_DRIVER=real cargo test --release -p cuda-tests --test e2e hardware:: -- --test-threads=1 >>"$log" 2>&1 ||
    status=$?

passed=0
failed=0
while read -r _ name _ result; do
    case $result in
        ok) passed=$((passed + 1)); echo "PASS  $name" ;;
        FAILED) failed=$((failed + 1)); echo "FAIL  $name" ;;
        *) echo "${result^^}  $name" ;;
    esac
done < <(grep -E '^test [A-Za-z0-9_:]+ \.\.\. ' "$log")

echo "real-gpu-check: $passed passed, $failed failed on NVIDIA driver: $driver_version"
if [ "$failed" -gt 0 ] || [ "$status" -ne 0 ] || [ "$passed" -eq 0 ]; then
    [ "$failed" -gt 0 ] || echo "real-gpu-check: cargo test exited with status $status; see $log" >&2
    exit 1
fi
