#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan), replays the committed corpus, then fuzzes each target for
# N seconds (default 60). New inputs go to build-fuzz/corpus-new/<target>; crashes to build-fuzz/crashes/<target>.
# A crash exits non-zero: turn the reproducer into a test (copy it into tests/fuzz/corpus/<target>/ and fix).
#   tools/fuzz.sh [SECONDS] [BUILD_DIR]
# With FUZZ_RUNS=N the run is deterministic instead (N inputs from seed FUZZ_SEED, default 1): what CI uses, so a
# green CI stays green for the same code.
set -euo pipefail
secs="${1:-60}"
build="${2:-build-fuzz}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" -Dfuzz=enabled -Dcuda=disabled -Dbuildtype=debugoptimized
fi
ninja -C "$build" -j"${FUZZ_JOBS:-1}" tests/fuzz/fuzz_spec tests/fuzz/fuzz_safetensors
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
for t in spec safetensors; do
  exe="$build/tests/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  new="$build/corpus-new/$t"
  crashes="$build/crashes/$t"
  mkdir -p "$new" "$crashes"
  echo "== fuzz_$t: replaying $(ls "$seeds" | wc -l) corpus files"
  "$exe" -runs=0 "$seeds"
  if [ -n "${FUZZ_RUNS:-}" ]; then
    budget=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
    echo "== fuzz_$t: $FUZZ_RUNS deterministic runs (seed ${FUZZ_SEED:-1})"
  else
    budget=(-max_total_time="$secs")
    echo "== fuzz_$t: fuzzing for ${secs}s"
  fi
  "$exe" "${budget[@]}" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$new" "$seeds"
done
echo "fuzz: no crashes"
