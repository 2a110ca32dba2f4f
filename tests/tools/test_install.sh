#!/usr/bin/env bash
# Installs the build into a scratch DESTDIR, builds examples/serve against it through pkg-config alone, and runs it:
# the embedding contract (headers, libteengine.so with its soversion, the static YAML front end, teengine.pc).
#   test_install.sh BUILD_DIR SOURCE_DIR [SANITIZERS]   (SANITIZERS: the build's b_sanitize, e.g. address,undefined)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
san=${3:-none}
extra=()
[ "$san" != none ] && extra=(-fsanitize="$san")  # a sanitized libteengine needs a sanitized executable
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
pc=$(dirname "$(find "$dest" -name teengine.pc | head -1)")
[ -n "$pc" ] || { echo "teengine.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$dest"
flags=$(pkg-config --cflags --libs teengine)
echo "pkg-config: $flags"
c++ -std=c++20 "${extra[@]}" "$src/examples/serve/serve.cpp" $flags -pthread -o "$dest/serve"
libdir=$(dirname "$(find "$dest" -name 'libteengine.so.0' | head -1)")
LD_LIBRARY_PATH="$libdir" "$dest/serve" "$src/models/tiny.yaml" 3 1 | tee "$dest/out.txt"
grep -q "served 3 requests" "$dest/out.txt"
# The three clients sent different inputs: their checksums differ, and each is a finite number.
[ "$(grep -c checksum "$dest/out.txt")" = 3 ]
! grep -Eq "nan|inf" "$dest/out.txt"
echo "install test: ok"
