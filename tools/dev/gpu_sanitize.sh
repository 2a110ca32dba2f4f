#!/usr/bin/env bash
# Dev tool for the H200 (not used by CI): compute-sanitizer over the GPU — memcheck (out-of-bounds and misaligned
# accesses, leaks), racecheck (shared-memory hazards) and initcheck (reads of uninitialised device memory) — on the
# GPU cases of the GoogleTest suites and on `teengine run` (inference with the graph and the eager executor, NVFP4,
# training) of models/tiny.yaml. One summary line per (target, tool): clean / ERRORS / TIMEOUT / FAILED and the
# sanitizer's ERROR SUMMARY. Logs in $OUT/gpu_sanitize_logs_TOOLS.tgz, the summary in $OUT/summary.txt (appended).
# Exits 1 when any pair reported errors, failed or timed out. `tools/dev/device_suite.sh BUILD sanitize` runs this.
#   tools/dev/gpu_sanitize.sh BUILD_DIR [memcheck|racecheck|initcheck]...          (default: all three)
# Environment: SANITIZE_TOOLS (instead of the arguments), SANITIZE_BINS (suites, default "engine quant ops graph
# comm models; initcheck: engine quant, see below), FILTER_<suite> (a gtest filter replacing the default below),
# SANITIZE_TIMEOUT (s per pair, 300), SANITIZE_RUNS=0 (the suites only) or 1 (the CLI runs under initcheck too).
set -uo pipefail
build=${1:?usage: tools/dev/gpu_sanitize.sh BUILD_DIR [memcheck|racecheck|initcheck]...}
shift
tools=${*:-${SANITIZE_TOOLS:-memcheck racecheck initcheck}}
out=${OUT:-/tmp/te-out}
work=$(mktemp -d /tmp/te-sanitize.XXXXXX)
mkdir -p "$out"
note() { echo "$*" | tee -a "$out/summary.txt"; }

cs=$(command -v compute-sanitizer || true)
[ -z "$cs" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && cs=/usr/local/cuda/bin/compute-sanitizer
if [ -z "$cs" ]; then note "gpu_sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin)"; exit 2; fi
exe=$PWD/$build/tools/teengine/teengine
if [ ! -x "$exe" ]; then note "gpu_sanitize: no $exe (build with -Dcuda=enabled first)"; exit 2; fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export TEENGINE_LOG=error TE_TEST_DATA=$PWD/tests/data NCCL_NVLS_ENABLE=0 TE_MODELS_DIR=$PWD/models \
  TE_FUZZ_CORPUS=$PWD/tests/fuzz/corpus TE_TEENGINE=$exe TEENGINE_BIN=$exe
note "gpu_sanitize: $("$cs" --version | tail -1); tools: $tools"

# The GPU cases of a suite. The quant suite's are thousands of shapes: every format on bf16 and the misc cases.
# NCCL's own kernels are left out of comm (the sanitizers would report inside the library, not in teengine).
default_filter() {
  local gpu='*Gpu*:*GPU*:*Cuda*:*CUDA*:*OnGpu*'
  case $1 in
    engine) echo "$gpu:MemoryPool*" ;;
    quant) echo '*Small*bf16*:*QuantGpuMisc*' ;;
    comm) echo "$gpu-*Nccl*" ;;
    *) echo "$gpu" ;;
  esac
}

# memcheck: the caching allocator keeps its device blocks until the process exits (freeing them during static
# destruction would race the CUDA context's own teardown), so a leak check lists every cached block; and the
# allocator's out-of-memory path is exercised on purpose (a failed cudaMalloc, then the cache released and the
# allocation retried), which the API-error report would count. Neither is an access error, and every CUDA call the
# engine makes is checked by the engine itself.
tool_args() {
  case $1 in
    memcheck) echo '--leak-check no --report-api-errors no' ;;
    racecheck) echo '--racecheck-report analysis' ;;
    initcheck) echo '--report-api-errors no' ;;
  esac
}

status=0
# sanitize NAME TOOL COMMAND...: one (target, tool) pair, logged to $work/NAME.TOOL.log.
sanitize() {
  local name=$1 tool=$2 s rc r
  shift 2
  local log=$work/$name.$tool.log
  s=$(date +%s)
  # shellcheck disable=SC2046
  timeout "${SANITIZE_TIMEOUT:-300}" "$cs" --tool "$tool" $(tool_args "$tool") --error-exitcode 9 --print-limit 100 \
    "$@" >"$log" 2>&1
  rc=$?
  case $rc in
    0) r=clean ;;
    9) r=ERRORS; status=1 ;;
    124) r=TIMEOUT; status=1 ;;
    *) r="FAILED rc=$rc"; status=1 ;;
  esac
  note "$name $tool: $r in $(( $(date +%s) - s )) s; $(grep -E 'ERROR SUMMARY|not supported' "$log" | tail -1)" \
       "$(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$log" | tr '\n' ' ')"
}

m=models/tiny.yaml
gpu=(--set run.device=cuda --set run.tokens=256 --set run.steps=2)
# initcheck does not see what cuBLASLt's Hopper GEMMs write (their tensor-memory-access stores): every read of a GEMM
# output is reported as uninitialised, in PyTorch as much as here (tools/dev/initcheck_gemm_probe.py shows it on a
# bare torch matmul). Its default selection is therefore the suites whose kernels read no GEMM output.
default_bins() {
  case $1 in
    initcheck) echo "engine quant" ;;
    *) echo "engine quant ops graph comm models" ;;
  esac
}
for tool in $tools; do
  for suite in ${SANITIZE_BINS:-$(default_bins "$tool")}; do
    t=$build/tests/$suite/${suite}_tests
    if [ ! -x "$t" ]; then note "$suite: no $t"; continue; fi
    var=FILTER_$suite
    sanitize "${suite}_tests" "$tool" "$t" --gtest_filter="${!var:-$(default_filter "$suite")}" --gtest_brief=1
  done
  # The CLI end to end: two ranks sharing cuda:0 over the local communicator.
  [ "${SANITIZE_RUNS:-1}" = 0 ] && continue
  [ "$tool" = initcheck ] && [ -z "${SANITIZE_RUNS:-}" ] && continue  # every run reads GEMM outputs (above)
  sanitize run_graph_fp8_block "$tool" "$exe" run $m "${gpu[@]}"
  sanitize run_eager_mxfp8 "$tool" "$exe" run $m "${gpu[@]}" --set run.executor=eager --set precision.recipe=mxfp8
  sanitize run_nvfp4 "$tool" "$exe" run $m "${gpu[@]}" --set precision.recipe=nvfp4
  sanitize train_fp8_block "$tool" "$exe" run $m "${gpu[@]}" --set run.mode=train
  sanitize train_nvfp4 "$tool" "$exe" run $m "${gpu[@]}" --set run.mode=train --set precision.recipe=nvfp4
  sanitize train_fp8_delayed_tp1 "$tool" "$exe" run $m "${gpu[@]}" --set run.mode=train --set parallel.tp=1 \
    --set precision.recipe=fp8_delayed
done

tar czf "$out/gpu_sanitize_logs_${tools// /_}.tgz" -C "$work" .
rm -rf "$work"
if [ $status = 0 ]; then note "gpu_sanitize: all clean"
else note "gpu_sanitize: errors: see the lines above and gpu_sanitize_logs_*.tgz"; fi
exit $status
