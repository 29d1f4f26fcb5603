#!/usr/bin/env bash
# Installs Debian packages the tests need (a real Prometheus server and promtool, tmux), once: for each
# PACKAGE:COMMAND pair whose COMMAND is not on the PATH, apt-get installs PACKAGE (after one
# `apt-get update`). A lock makes it safe for several test processes at once. Fails loudly, never skips:
# a test that needs a tool must find it or fail naming it.
#
# Usage: tools/apt-once.sh PACKAGE:COMMAND [PACKAGE:COMMAND ...]
#   e.g. tools/apt-once.sh prometheus:promtool tmux:tmux
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PACKAGE:COMMAND [PACKAGE:COMMAND ...]" >&2; exit 2; }

missing() {
    local wanted=()
    for pair in "$@"; do
        command -v "${pair#*:}" >/dev/null 2>&1 || wanted+=("${pair%%:*}")
    done
    printf "%s\n" "${wanted[@]:-}" | sort -u | tr "\n" " " | sed "s/ *$//"
}

[ -n "$(missing "$@")" ] || exit 0
exec 9>"${TMPDIR:-/tmp}/tessera-apt-once.lock"
flock 9
wanted=$(missing "$@")
[ -n "$wanted" ] || exit 0
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing Debian packages: $wanted" >&2
export DEBIAN_FRONTEND=noninteractive
# No service is started by the package's scripts: the tests start their own servers on loopback ports.
${SUDO:-} env RUNLEVEL=1 apt-get update -qq >&2 || { echo "apt-get update failed (no network?)" >&2; exit 1; }
# shellcheck disable=SC2086
${SUDO:-} env RUNLEVEL=1 apt-get install -y -qq --no-install-recommends $wanted >&2 || {
    echo "cannot install $wanted with apt-get (no network, or not root?)" >&2
    exit 1
}
still=$(missing "$@")
[ -z "$still" ] || { echo "apt-get installed $wanted but these are still missing: $still" >&2; exit 1; }
