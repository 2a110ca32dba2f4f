#!/usr/bin/env bash
# Dev tool (not used by CI): builds what a device call runs into build-dev/ (CUDA on; Gloo off, since the device
# machine has no libgloo) and packs the executables, stripped, into build-dev/pack.txz — small enough for the device
# tool's `carry` (64 MiB), unlike the build folder with its objects. On the device machine:
#   tar xJf build-dev/pack.txz -C build-dev && tools/dev/device_suite.sh build-dev tests bench
# (device_suite.sh runs the binaries directly: meson's files hold this machine's paths). An argument names another
# build folder (an existing one keeps the options it was configured with).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-dev}
tools/build/setup.sh "$dir" -Dcuda=enabled -Dgloo=disabled -Dbuildtype=release
ninja -C "$dir" -j "$(nproc)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Every executable the build made (the CLI, the GoogleTest binaries, the example server, the benchmark helpers) and
# the shared library the examples link.
while IFS= read -r f; do
  rel=${f#"$dir"/}
  mkdir -p "$stage/$(dirname "$rel")"
  strip --strip-unneeded -o "$stage/$rel" "$f"
done < <(find "$dir" -type f \( -perm -u+x -o -name 'libteengine.so*' \) -not -path '*.p/*' -not -path '*/meson-*' \
           -not -name '*.py' -not -name '*.sh' -not -name '*.txz')
find "$dir" -maxdepth 1 -type l -name 'libteengine.so*' -exec cp -P {} "$stage/" \;  # its soname links
# Shared libraries the device machine lacks (the example server's HTTP library and its compression libraries), in
# lib/ (device_suite.sh puts it last on the library path, so the machine's own copies win).
mkdir -p "$stage/lib"
for l in libcpp-httplib.so.0.11 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
  f=$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')
  if [ -n "$f" ]; then cp -L "$f" "$stage/lib/$l"; fi
done
tar cJf "$dir/pack.txz" -C "$stage" .
echo "device_pack: $(du -h "$dir/pack.txz" | cut -f1) in $dir/pack.txz ($(tar tJf "$dir/pack.txz" | grep -vc '/$') files)"
