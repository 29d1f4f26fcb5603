#!/usr/bin/env bash
# Installs Tessera from this clone into a prefix (default ~/.local; --prefix /usr/local for a system
# install), building it first if needed:
#   PREFIX/bin/tessera
#   PREFIX/lib/tessera/libtessera.so, libsimcuda.so, libsimnvml.so, libsimcublas.so, simgpu/ (links)
#   PREFIX/lib/tessera/libaccelerator_tessera.so (the cluster provider library)
#   PREFIX/include/tessera/accelerator.h, accelerator_legacy.h (its two ABIs)
#   PREFIX/share/bash-completion/completions/tessera
#   PREFIX/share/zsh/site-functions/_tessera
#   PREFIX/share/fish/vendor_completions.d/tessera.fish
#   PREFIX/share/tessera/tessera.service (a systemd unit example)
# An installed tessera finds its libraries at ../lib/tessera from its own executable, from any directory.
# Re-installing over an install replaces these files (each by an atomic rename, so programs running on
# the old libraries keep them); nothing else is touched or deleted.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: tools/install.sh [--prefix DIR] [--no-build | --from DIR]

Installs Tessera (the tessera command, libtessera.so, the simulated GPU's libraries, the cluster provider
library libaccelerator_tessera.so with its headers, shell completions and a systemd unit example) into DIR.

  --prefix DIR   where to install (DIR/bin, DIR/lib/tessera, DIR/share); default: ~/.local.
                 Use --prefix /usr/local (as root) for a system install.
  --no-build     install what target/release holds, without running cargo (every file must be there)
  --from DIR     install what DIR holds instead (another build's release folder), without running cargo
  -h, --help     this help

Without --no-build it first runs `cargo build --release --workspace`, which rebuilds only what changed.
USAGE
}

fail() {
    echo "install.sh: $*" >&2
    exit 2
}

prefix=""
build=1
from=""
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help)
        usage
        exit 0
        ;;
    --prefix)
        [ $# -ge 2 ] || fail "--prefix needs a directory (e.g. --prefix /usr/local); see --help"
        prefix="$2"
        [ -n "$prefix" ] || fail "--prefix is empty; give a directory"
        shift 2
        ;;
    --prefix=*)
        prefix="${1#--prefix=}"
        [ -n "$prefix" ] || fail "--prefix is empty; give a directory"
        shift
        ;;
    --no-build)
        build=0
        shift
        ;;
    --from)
        [ $# -ge 2 ] && [ -n "$2" ] || fail "--from needs the folder holding tessera and its libraries; see --help"
        from="$2"
        build=0
        shift 2
        ;;
    *)
        fail "unknown argument '$1'; usage: tools/install.sh [--prefix DIR] [--no-build | --from DIR] (see --help)"
        ;;
    esac
done

if [ -z "$prefix" ]; then
    [ -n "${HOME:-}" ] || fail "HOME is not set; give the install directory with --prefix DIR"
    prefix="$HOME/.local"
fi
case "$prefix" in
*[[:space:]:]*)
    # The shim is preloaded by path, and LD_PRELOAD splits paths at spaces and colons.
    fail "--prefix '$prefix' contains a space or a colon, which LD_PRELOAD cannot hold; choose another directory"
    ;;
esac
if [ -e "$prefix" ] && [ ! -d "$prefix" ]; then
    fail "--prefix '$prefix' exists and is not a directory"
fi

# Absolute and without symbolic links, as the installed tessera sees its own folder.
mkdir -p "$prefix" || fail "cannot create '$prefix'"
prefix=$(cd "$prefix" && pwd -P)
cd "$(dirname "$0")/.."
repo=$(pwd)

built="${from:-$repo/target/release}"
libraries=(libtessera.so libsimcuda.so libsimnvml.so libsimcublas.so libaccelerator_tessera.so)
if [ "$build" = 1 ]; then
    echo "== cargo build --release --workspace (only what changed)"
    command -v cargo >/dev/null || fail "cargo not found: install the Rust toolchain (https://rustup.rs)"
    cargo build --release --workspace
fi
for f in tessera "${libraries[@]}"; do
    [ -f "$built/$f" ] || fail "$built/$f is missing; build with \`cargo build --release --workspace\` (or run without --no-build)"
done

bin="$prefix/bin"
lib="$prefix/lib/tessera"
share="$prefix/share"
installed=()

# Copies $1 to $2 with mode $3: into a temporary file beside it, then renamed over it, so a running
# program (the daemon, a process holding the shim) keeps the file it has open.
put() {
    local from="$1" to="$2" mode="$3"
    [ ! -d "$to" ] || fail "$to is a directory; remove it or choose another prefix"
    mkdir -p "$(dirname "$to")"
    local tmp
    tmp="$(dirname "$to")/.$(basename "$to").install.$$"
    cp "$from" "$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$to"
    installed+=("$to")
}

# Writes the output of the installed tessera with arguments "$@" to file $1, as put does.
put_output() {
    local to="$1"
    shift
    local tmp
    tmp="$(mktemp)"
    env -u TESSERA_LIB_DIR "$bin/tessera" "$@" >"$tmp"
    [ -s "$tmp" ] || fail "tessera $* printed nothing"
    put "$tmp" "$to" 0644
    rm -f "$tmp"
}

put "$built/tessera" "$bin/tessera" 0755
for f in "${libraries[@]}"; do
    put "$built/$f" "$lib/$f" 0755
done
# The simulated GPU's folder of links (libcuda.so.1 -> ../libsimcuda.so, ...), made by the installed
# tessera itself: it is also the check that it finds its libraries.
simgpu_dir=$(env -u TESSERA_LIB_DIR "$bin/tessera" simgpu libdir) || fail "the installed tessera cannot find its libraries"
[ "$simgpu_dir" = "$lib/simgpu" ] || fail "the installed tessera uses $simgpu_dir instead of $lib/simgpu"
installed+=("$simgpu_dir/")

# The provider library's headers, for hypervisors built against either of its ABIs.
for h in accelerator.h accelerator_legacy.h; do
    put "$repo/scheduler/provider/include/$h" "$prefix/include/tessera/$h" 0644
done

put_output "$share/bash-completion/completions/tessera" completions bash
put_output "$share/zsh/site-functions/_tessera" completions zsh
put_output "$share/fish/vendor_completions.d/tessera.fish" completions fish

unit=$(mktemp)
sed "s|^ExecStart=.*|ExecStart=$bin/tessera daemon|" "$repo/tools/systemd/tessera.service" >"$unit"
put "$unit" "$share/tessera/tessera.service" 0644
rm -f "$unit"

echo "== installed into $prefix:"
printf '  %s\n' "${installed[@]}"
case ":${PATH:-}:" in
*":$bin:"*) echo "Run \`tessera demo\` from anywhere." ;;
*) echo "$bin is not on PATH: add it (export PATH=\"$bin:\$PATH\"), then run \`tessera demo\`." ;;
esac
