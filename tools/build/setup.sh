#!/usr/bin/env bash
# meson setup DIR [options...], with CUDA objects tracking their headers: Meson before 1.3 declares a depfile for
# CUDA objects but never asks nvcc to write it, so an edited .cuh or .h left .cu objects stale in incremental
# builds. The native file (in DIR, absolute path: Meson 1.0 has no @DIRNAME@) points Meson at nvcc-deps.
# An already configured DIR is left as it is (change options with `meson configure DIR`); one configured without this
# script gets a note, since its CUDA objects do not track their headers.
set -euo pipefail
dir=${1:?usage: tools/build/setup.sh DIR [meson setup options]}
shift
if [ -f "$dir/build.ninja" ]; then
  if grep -q "^rule cuda_COMPILER" "$dir/build.ninja" && ! grep -q nvcc-deps "$dir/build.ninja"; then
    echo "note: $dir was configured without tools/build/setup.sh: edited CUDA headers will not rebuild their" \
         "objects; rm -rf $dir to reconfigure" >&2
  fi
  exit 0
fi
mkdir -p "$dir"
here=$(cd "$(dirname "$0")" && pwd)
printf "[binaries]\ncuda = '%s/nvcc-deps'\n" "$here" >"$dir/nvcc-deps.ini"
exec meson setup "$dir" --native-file "$dir/nvcc-deps.ini" "$@"
