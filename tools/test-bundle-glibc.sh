#!/usr/bin/env bash
# The real-GPU check bundle on the oldest glibc the issue asks for (2.31, Debian 11 / Ubuntu 20.04), too
# slow for every run of the suite (a second build of the bundle's crates with cargo-zigbuild, about 6 min
# on 2 CPUs, and a Debian 11 root filesystem from Debian's mirror, about 1.5 min): builds the bundle with
# `tools/gpu-check-bundle.sh --glibc 2.31`, installs a minimal Debian 11 with python3 (debootstrap) into
# target/bullseye once, and runs the bundle's `run --simulated` inside it (chroot), where only glibc 2.31
# exists; every check but the applications must pass. Installs what it needs on first use: zig from
# PyPI (ziglang, into target/pydeps-zig), cargo-zigbuild from crates.io, debootstrap from Debian. Needs
# root (chroot, mounts) and the network the first time; fails loudly, never skips. tools/test-all.sh (so
# .ci/run) calls this when TESSERA_TEST_GLIBC=1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ "$(id -u)" = 0 ] || { echo "test-bundle-glibc: needs root (chroot into Debian 11)" >&2; exit 1; }

./tools/pip-once.sh "ziglang==0.17.1" target/pydeps-zig ziglang/zig
export PATH="$root/target/pydeps-zig/ziglang:$PATH"
command -v cargo-zigbuild >/dev/null || cargo install --locked cargo-zigbuild
./tools/apt-once.sh debootstrap:debootstrap

bundle=$root/target/gpu-check-glibc2.31
./tools/gpu-check-bundle.sh --glibc 2.31 "$bundle"

rootfs=$root/target/bullseye
if [ ! -x "$rootfs/usr/bin/python3" ]; then
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3 bullseye "$rootfs" http://deb.debian.org/debian
fi
chroot "$rootfs" /usr/bin/ldd --version | sed -n 1p

rm -rf "$rootfs/bundle"
cp -a "$bundle" "$rootfs/bundle"
mount -t proc proc "$rootfs/proc"
mount --bind /dev "$rootfs/dev"
trap 'umount "$rootfs/proc" "$rootfs/dev" 2>/dev/null || true' EXIT
status=0
chroot "$rootfs" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp /bundle/run --simulated || status=$?
python3 - "$rootfs/bundle/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
apps = {"torch", "cupy", "numba"}
bad = [c["name"] for c in report["checks"] if c["status"] != "PASS" and c["name"] not in apps]
if bad or report["failed"]:
    sys.exit(f"test-bundle-glibc: on glibc 2.31 these checks did not pass: {bad}")
print(f"test-bundle-glibc: the glibc 2.31 bundle ran whole on Debian 11: {report['summary']}")
PY
exit "$status"
