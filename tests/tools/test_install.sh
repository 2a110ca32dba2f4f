#!/usr/bin/env bash
# Installs the build into a scratch DESTDIR, builds the examples against it through pkg-config alone, and runs them:
# the embedding contract (headers, libteengine.so with its soversion, the static YAML front end, teengine.pc).
# examples/embed always; examples/serve (teengine-serve) when cpp-httplib's pkg-config file is there.
#   test_install.sh BUILD_DIR SOURCE_DIR [SANITIZERS]   (SANITIZERS: the build's b_sanitize, e.g. address,undefined)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
san=${3:-none}
extra=()
[ "$san" != none ] && extra=(-fsanitize="$san")  # a sanitized libteengine needs a sanitized executable
dest=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2>/dev/null; rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
pc=$(dirname "$(find "$dest" -name teengine.pc | head -1)")
[ -n "$pc" ] || { echo "teengine.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$dest"
flags=$(pkg-config --cflags --libs teengine)
echo "pkg-config: $flags"
c++ -std=c++20 "${extra[@]}" "$src/examples/embed/embed.cpp" $flags -pthread -o "$dest/embed"
libdir=$(dirname "$(find "$dest" -name 'libteengine.so.0' | head -1)")
LD_LIBRARY_PATH="$libdir" "$dest/embed" "$src/models/tiny.yaml" 3 1 | tee "$dest/out.txt"
grep -q "served 3 requests" "$dest/out.txt"
# The three clients sent different inputs: their checksums differ, and each is a finite number.
[ "$(grep -c checksum "$dest/out.txt")" = 3 ]
! grep -Eq "nan|inf" "$dest/out.txt"

# Only the public API is exported: no internal (te::) symbol in libteengine.so's dynamic symbol table.
if nm -D --defined-only -C "$libdir/libteengine.so.0" | cut -d' ' -f3- \
     | grep -E '^(te::|typeinfo for te::|typeinfo name for te::|vtable for te::)' \
     | grep -v -f "$src/tests/tools/yaml_front_end_symbols.txt" | head -5 | grep .; then
  echo "libteengine.so exports internal symbols (above)"; exit 1
fi

if PKG_CONFIG_SYSROOT_DIR= pkg-config --exists cpp-httplib; then
  hl=$(PKG_CONFIG_SYSROOT_DIR= pkg-config --cflags --libs cpp-httplib)
  c++ -std=c++20 "${extra[@]}" "$src"/examples/serve/*.cpp $flags $hl -pthread -o "$dest/teengine-serve"
  LD_LIBRARY_PATH="$libdir" "$dest/teengine-serve" "$src/models/tiny.yaml" --port 0 --port-file "$dest/port" \
    2>"$dest/serve.log" &
  server=$!
  for _ in $(seq 600); do [ -s "$dest/port" ] && break; sleep 0.1; done
  port=$(cat "$dest/port")
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3
  reply=$(cat <&3)
  exec 3<&-
  grep -q "^ok" <<<"$reply" || { echo "healthz: $reply"; exit 1; }
  kill -TERM "$server"
  wait "$server" || { echo "teengine-serve exited $? after SIGTERM"; cat "$dest/serve.log"; exit 1; }
  server=""
  echo "installed teengine-serve: healthz ok, SIGTERM exit 0"
fi
echo "install test: ok"
