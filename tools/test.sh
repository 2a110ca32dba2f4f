#!/usr/bin/env bash
# The whole test suite: dependencies, the release build and its tests (CPU always; GPU cases skip without a GPU),
# then an AddressSanitizer+UBSan build of the CPU suite (-Dcuda=disabled), a ThreadSanitizer build of the
# concurrency tests (the local communicator's rank threads, concurrent Engine::forward, dynamic batching), then the
# libFuzzer targets (clang; tools/fuzz.sh) for a fixed number of inputs each after replaying their corpus. `--quick`
# skips the sanitizer and fuzz builds.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
phase() { echo "test.sh: $1 after $(( $(date +%s) - t0 )) s"; }
tools/install-deps.sh
jobs=$(nproc)
tools/build/setup.sh build  # configures once; notes a build/ made without header tracking
ninja -C build -j "$jobs"
meson test -C build --print-errorlogs --num-processes "$jobs"
phase "release build and tests"
if [ "${1:-}" != "--quick" ]; then
  # Sanitizer builds compile each target as one unity file: half the compile time on CI's 2 cores (test helpers in
  # anonymous namespaces therefore carry file-specific names). -O1 with line tables only (-g1): reports keep their
  # file:line stacks, and the build is a third shorter than with -O2 -g.
  [ -d build-asan ] || meson setup build-asan -Dcuda=disabled -Doptimization=1 -Ddebug=false -Dcpp_args=-g1 \
      --unity on -Db_sanitize=address,undefined -Db_lundef=false
  ninja -C build-asan -j "$jobs"
  # The multi-process parity runs, the dropped-reduction sweep and the server's load-generator run (minutes of model
  # compute) run in the release build only; the Gloo communicator, the store, the launcher's faults and the server's
  # request handling stay under the sanitizers.
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
      GTEST_FILTER='-*LaunchParity*:*ParityMutation*:Serve.LoadGeneratorAt64Clients' \
      meson test -C build-asan --print-errorlogs --num-processes "$jobs"
  phase "ASan+UBSan build and tests"
  [ -d build-tsan ] || meson setup build-tsan -Dcuda=disabled -Dbuildtype=debugoptimized --unity on \
      -Db_sanitize=thread -Db_lundef=false
  ninja -C build-tsan -j "$jobs" tests/models/models_tests tests/comm/comm_tests
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 TEENGINE_LOG=error
  build-tsan/tests/models/models_tests --gtest_brief=1 \
      --gtest_filter='EngineApi.ConcurrentForward*:*Parity*none*:*BatchingExact.ConcurrentCallers*/none:Batching.*-*ParityMutation*'
  build-tsan/tests/comm/comm_tests --gtest_brief=1 --gtest_filter='*Local*:*Timeout*:*Abort*:*SeedRegression*'
  phase "ThreadSanitizer build and tests"
  # The parser and output-path targets; the forward target needs the whole library built again with clang's
  # instrumentation (a quarter of an hour on 2 cores), so CI leaves it to tools/fuzz.sh: its corpus, every hostile
  # request, is replayed by models_tests in the release and ASan+UBSan builds above.
  FUZZ_JOBS=$jobs FUZZ_RUNS=${TE_FUZZ_RUNS:-60000} FUZZ_TARGETS="spec safetensors safetensors_file set output_set" \
      tools/fuzz.sh
  phase "fuzzing"
fi

