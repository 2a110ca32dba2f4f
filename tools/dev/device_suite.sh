#!/usr/bin/env bash
# Dev tool for the H200 (not used by CI): runs every GoogleTest binary of a carried build directory directly (the
# build dir's meson files hold this machine's absolute paths), compute-sanitizer over the CUDA tests, the benchmarks
# and the PyTorch comparisons. Logs go to a work folder and come back as one tarball ($OUT/logs.tgz: the device
# tool returns at most 8 files), with summary.txt beside it.
#   tools/dev/device_suite.sh BUILD_DIR [tests|sanitize|bench|quantbench|block|reference|attention_reference|attention|torch|all]...
#   (run in the order given)
set -uo pipefail
build=${1:-build}
shift
sections=${*:-all}
out=${OUT:-/tmp/te-out}
work=/tmp/te-logs
mkdir -p "$out" "$work"
exe=$PWD/$build/tools/teengine/teengine
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$PWD/$build/lib
export TEENGINE_LOG=error TE_TEST_DATA=$PWD/tests/data NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  TE_MODELS_DIR=$PWD/models TE_FUZZ_CORPUS=$PWD/tests/fuzz/corpus TE_TEENGINE=$exe TEENGINE_BIN=$exe \
  PYTHONUNBUFFERED=1
note() { echo "$*" | tee -a "$out/summary.txt"; }
status=0

run_reference() {  # regenerates the committed PyTorch reference (tests/data/torch_ref_*) into $OUT
  timeout 120 python3 tools/gen_model_reference.py --out-dir "$out" >"$work/reference.log" 2>&1
  note "reference: rc=$? $(tail -1 "$work/reference.log")"
}

run_attention_reference() {  # the PyTorch SDPA vectors the attention tests read (tests/data/attention_ref.safetensors)
  timeout 120 python3 tools/gen_attention_reference.py --out "$out/attention_ref.safetensors" \
    >"$work/attention_reference.log" 2>&1
  note "attention_reference: rc=$? $(tail -1 "$work/attention_reference.log")"
}

run_attention() {  # the attention kernels' tests, then teengine against PyTorch's flash SDPA on the same shapes
  local rc=0
  "$build"/tests/ops/ops_tests --gtest_filter='*ttention*:*Rope*' --gtest_brief=1 >"$work/attention_tests.log" 2>&1 || rc=1
  "$build"/tests/models/models_tests --gtest_filter='*ttention*' --gtest_brief=1 >>"$work/attention_tests.log" 2>&1 || rc=1
  [ $rc -eq 0 ] || status=1
  note "attention tests: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
  timeout "${TORCH_TIMEOUT:-300}" python3 tools/bench/attention_torch.py --teengine "$exe" --json "$work/attention.json" \
    >"$work/attention.txt" 2>&1
  note "attention_torch: rc=$?"
  grep '^|' "$work/attention.txt" >>"$out/summary.txt"
}

run_torch() {
  timeout "${TORCH_TIMEOUT:-300}" python3 tools/bench/compare_torch.py --teengine "$exe" --json "$work/compare.json" \
    >"$work/compare.txt" 2>&1
  note "compare_torch: rc=$?"
  cat "$work/compare.txt" >>"$out/summary.txt"
}

run_tests() {
  "$exe" info >"$work/info.txt" 2>&1
  for t in "$build"/tests/*/*_tests; do
    name=$(basename "$t")
    s=$(date +%s)
    if timeout "${TEST_TIMEOUT:-150}" "$t" --gtest_brief=1 >"$work/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
    note "$name: $r in $(( $(date +%s) - s )) s $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran' "$work/$name.log" | tr '\n' ' ')"
  done
}

# compute-sanitizer (memcheck, racecheck, initcheck) over the GPU test cases and `teengine run`: one place for it,
# tools/dev/gpu_sanitize.sh (SANITIZE_TOOLS, SANITIZE_BINS, SANITIZE_TIMEOUT pass through).
run_sanitize() {
  OUT=$work/sanitize tools/dev/gpu_sanitize.sh "$build" || status=1
  cat "$work/sanitize/summary.txt" >>"$out/summary.txt"
}

run_bench() {
  {
    for f in bf16 fp8_per_tensor fp8_block; do
      "$exe" bench gemm --m 8192 --n 16384 --k 4096 --format $f --role fprop --json
    done
    "$exe" bench gemm --m 8192 --n 4096 --k 16384 --format fp8_block --role dgrad --json
    "$exe" bench gemm --m 16384 --n 4096 --k 8192 --format fp8_block --role wgrad --json
    # An independent bf16 figure for the raw baseline to be checked against (PyTorch's matmul), where PyTorch is.
    python3 tools/bench/torch_gemm.py 2>/dev/null || true
    for f in fp8_per_tensor fp8_block_1d fp8_block_2d mxfp8 nvfp4_1d nvfp4_2d; do
      for u in rowwise both; do
        "$exe" bench quant --format $f --usages $u --shape 8192x4096 --dtype bf16 --json
      done
    done
    "$exe" bench norm --op layernorm --shape 8192x4096 --dtype bf16 --json
    "$exe" bench norm --op layernorm --shape 8192x4096 --dtype bf16 --quantize fp8_block_1d --json
    "$exe" bench act --op gelu --shape 8192x16384 --dtype bf16 --json
    for f in fp8_block_1d mxfp8; do
      "$exe" bench comm --world 4 --local-tokens 2048 --hidden 4096 --format $f --device cuda --json
    done
  } >"$work/bench.jsonl" 2>"$work/bench.err"
  note "bench: $(wc -l <"$work/bench.jsonl") reports, $(wc -l <"$work/bench.err") stderr lines"
}

run_quantbench() {
  for f in fp8_per_tensor fp8_block_1d mxfp8 fp8_block_2d nvfp4_1d; do
    for u in rowwise both; do
      "$exe" bench quant --format $f --usages $u --shape 8192x4096 --dtype bf16 --json
    done
  done >"$work/quantbench.jsonl" 2>&1
  note "quantbench: $(grep -c '"bench"' "$work/quantbench.jsonl") reports"
}

# The layernorm_mlp block at T=8192 (hidden 4096, ffn 16384) per recipe: forward, forward + backward, the training
# step with the optimizer, and the NVFP4 forward + backward profiled node by node; a table of medians last.
run_block() {
  local a="--module layernorm_mlp --tokens 8192 --hidden 4096 --ffn 16384 --json"
  {
    for r in none fp8_block mxfp8 nvfp4; do
      "$exe" bench block $a --recipe $r
      "$exe" bench block $a --recipe $r --backward
    done
    for r in none fp8_block; do "$exe" bench block $a --recipe $r --backward --optimizer; done
    "$exe" bench block $a --recipe nvfp4 --backward --profile
  } >"$work/block.jsonl" 2>"$work/block.err" || status=1
  python3 - "$work/block.jsonl" >>"$out/summary.txt" <<'PY'
import json, sys
print("| recipe | step | median ms | validated |")
text, pos, dec = open(sys.argv[1]).read(), 0, json.JSONDecoder()
while (pos := text.find("{", pos)) >= 0:  # the reports are indented JSON objects, one after another
    r, pos = dec.raw_decode(text, pos)
    step = "fwd+bwd+opt" if r["optimizer"] else "fwd+bwd" if r["backward"] else "fwd"
    print(f"| {r['recipe']} | {step}{' (profiled)' if 'profile' in r else ''} | {r['median_ms']:.3f} | {r['validated']} |")
PY
  note "block: $(grep -c '^{' "$work/block.jsonl") reports, $(wc -l <"$work/block.err") stderr lines"
}

# Sections run in the order given (all = tests sanitize bench reference torch).
[ "$sections" = all ] && sections="tests sanitize bench reference torch"
for section in $sections; do "run_$section"; done
tar czf "$out/logs.tgz" -C /tmp te-logs
exit $status
