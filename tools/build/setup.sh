#!/usr/bin/env bash
# meson setup DIR [options...], with CUDA objects tracking their headers: Meson before 1.3 declares a depfile for
# CUDA objects but never asks nvcc to write it, so an edited .cuh or .h left .cu objects stale in incremental
# builds. The native file (in DIR, absolute path: Meson 1.0 has no @DIRNAME@) points Meson at nvcc-deps.
set -euo pipefail
dir=$1
shift
mkdir -p "$dir"
here=$(cd "$(dirname "$0")" && pwd)
printf "[binaries]\ncuda = '%s/nvcc-deps'\n" "$here" >"$dir/nvcc-deps.ini"
exec meson setup "$dir" --native-file "$dir/nvcc-deps.ini" "$@"
