#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan), replays the committed corpus, then fuzzes each target for
# N seconds (default 60). New inputs go to build-fuzz/corpus-new/<target>; crashes to build-fuzz/crashes/<target>.
# A crash exits non-zero: turn the reproducer into a test (copy it into tests/fuzz/corpus/<target>/ and fix).
#   tools/fuzz.sh [SECONDS] [BUILD_DIR]
# With FUZZ_RUNS=N the run is deterministic instead (N inputs from seed FUZZ_SEED, default 1): what CI uses, so a
# green CI stays green for the same code. FUZZ_TARGETS narrows the list.
# Targets (tests/fuzz/fuzz_entries.h): spec (YAML), safetensors (the reader on bytes), safetensors_file (the reader
# on a file, inputs up to 4 MiB), set (--set arguments), output_set (the CLI's output paths, written and fsynced in a
# scratch directory), forward (Engine::forward, train_step and stage on arbitrary HostTensors of up to 4 KiB).
# The slower targets take a share of FUZZ_RUNS, so that each takes under a minute on CI's 2 cores: safetensors_file
# a hundredth (40 ms a run), output_set and forward a fifteenth, set a third.
set -euo pipefail
secs="${1:-60}"
build="${2:-build-fuzz}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Everything is built with coverage and the sanitizers, libteengine too: the forward target reaches the engine
# through it, so its code must report memory errors and undefined behaviour and guide the fuzzer.
sanitize=(-Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link)
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" -Dfuzz=enabled -Dcuda=disabled -Dbuildtype=debugoptimized "${sanitize[@]}"
else
  meson configure "$build" "${sanitize[@]}" >/dev/null  # a build dir made before these flags
fi
read -r -a targets <<<"${FUZZ_TARGETS:-spec safetensors safetensors_file set output_set forward}"
ninja -C "$build" -j"${FUZZ_JOBS:-1}" "${targets[@]/#/tests/fuzz/fuzz_}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  new="$build/corpus-new/$t"
  crashes="$build/crashes/$t"
  mkdir -p "$new" "$crashes"
  case $t in
    safetensors_file) max_len=4194304 ;;  # the large headers of sharded checkpoints
    forward) max_len=4096 ;;              # up to 64 tokens of the fuzzed engines' 16 features
    *) max_len=65536 ;;
  esac
  echo "== fuzz_$t: replaying $(ls "$seeds" | wc -l) corpus files"
  "$exe" -runs=0 -max_len=$max_len -artifact_prefix="$crashes/" "$seeds"
  if [ -n "${FUZZ_RUNS:-}" ]; then
    runs=$FUZZ_RUNS
    case $t in
      safetensors_file) runs=$(( FUZZ_RUNS / 100 )) ;;
      output_set | forward) runs=$(( FUZZ_RUNS / 15 )) ;;
      set) runs=$(( FUZZ_RUNS / 3 )) ;;
    esac
    budget=(-runs="$runs" -seed="${FUZZ_SEED:-1}")
    echo "== fuzz_$t: $runs deterministic runs (seed ${FUZZ_SEED:-1})"
  else
    budget=(-max_total_time="$secs")
    echo "== fuzz_$t: fuzzing for ${secs}s"
  fi
  "$exe" "${budget[@]}" -max_len=$max_len -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$new" "$seeds"
done
echo "fuzz: no crashes"
