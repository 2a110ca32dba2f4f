#!/usr/bin/env bash
# The whole test suite: dependencies, the release build and its tests (CPU always; GPU cases skip without a GPU),
# then an AddressSanitizer+UBSan build of the CPU suite (-Dcuda=disabled), then the libFuzzer targets (clang) for a
# bounded time after replaying their corpus. `--quick` skips the sanitizer and fuzz builds.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
jobs=$(nproc)
[ -d build ] || meson setup build
ninja -C build -j "$jobs"
meson test -C build --print-errorlogs --num-processes "$jobs"
if [ "${1:-}" != "--quick" ]; then
  [ -d build-asan ] || meson setup build-asan -Dcuda=disabled -Dbuildtype=debugoptimized \
      -Db_sanitize=address,undefined -Db_lundef=false
  ninja -C build-asan -j "$jobs"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
      meson test -C build-asan --print-errorlogs --num-processes "$jobs"
  FUZZ_JOBS=$jobs tools/fuzz.sh "${TE_FUZZ_SECONDS:-30}"
fi
