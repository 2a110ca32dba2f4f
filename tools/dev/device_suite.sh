#!/usr/bin/env bash
# Dev tool for the H200 (not used by CI): runs every GoogleTest binary of a carried build directory directly (the
# build dir's meson files hold this machine's absolute paths), then the benchmarks, writing logs under $OUT.
#   tools/dev/device_suite.sh BUILD_DIR [tests|bench|sanitize|all]
set -uo pipefail
build=${1:-build}
what=${2:-all}
out=${OUT:-/tmp/te-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export TEENGINE_LOG=error TE_TEST_DATA=$PWD/tests/data NCCL_NVLS_ENABLE=0
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  "$build"/tools/teengine/teengine info | tee "$out/info.txt"
  for t in "$build"/tests/*/*_tests; do
    name=$(basename "$t")
    if timeout 300 "$t" --gtest_brief=1 >"$out/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
    echo "$name: $r $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran' "$out/$name.log" | tr '\n' ' ')" | tee -a "$out/summary.txt"
  done
fi
if [ "$what" = sanitize ] || [ "$what" = all ]; then
  for t in "$build"/tests/quant/quant_tests "$build"/tests/ops/ops_tests "$build"/tests/comm/comm_tests; do
    [ -x "$t" ] || continue
    for tool in memcheck racecheck; do
      timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$t" --gtest_filter='*Gpu*:*GPU*:*Cuda*:*CUDA*' \
        --gtest_brief=1 >"$out/sanitize_$(basename "$t")_$tool.log" 2>&1
      echo "$(basename "$t") $tool: rc=$? $(grep -E 'ERROR SUMMARY' "$out/sanitize_$(basename "$t")_$tool.log" | tail -1)" | tee -a "$out/summary.txt"
    done
  done
fi
exit $status
