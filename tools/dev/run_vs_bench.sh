#!/usr/bin/env bash
# Dev tool for the H200 (not used by CI), one call: (1) the NCCL launch path at world size 1 against the local run
# (inference output, saved weights, 20 training losses), (2) `teengine run` on models/h200-mlp.yaml against
# `teengine bench block` on the same shapes (inference and training, fp8_block and none: wall and device ms per step,
# peak memory), (3) PyTorch's bf16 inference and AMP + fused AdamW step on the same block (tools/bench/torch_step.py),
# (4) the emulated recipes (mxfp8, nvfp4) against none with and without GEMM images (`bench block --images`, forward
# and forward + backward, two rounds alternating; `teengine run` inference and training).
#   tools/dev/run_vs_bench.sh BUILD_DIR [parity|run|torch|images]...    (logs and JSON into $OUT)
set -uo pipefail
build=${1:-build}
shift
sections=${*:-parity run torch}
out=${OUT:-/tmp/te-out}
mkdir -p "$out"
T=$PWD/$build/tools/teengine/teengine
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} TEENGINE_LOG=error NCCL_NVLS_ENABLE=0
med() { python3 -c "import json,statistics,sys; j=json.load(open(sys.argv[1])); print('%s wall %.3f device %.3f ms (median of steps 2..), peak %.0f MiB' % (sys.argv[2], statistics.median(j['step_ms'][1:] or j['step_ms']), statistics.median(j['device_ms'][1:] or j['device_ms']), j['peak_bytes']/2**20))" "$@"; }

for s in $sections; do
  case $s in
    parity)
      m=models/tiny.yaml
      common="--set parallel.tp=1 --set run.tokens=256"
      "$T" run $m $common --set parallel.comm=local --output "$out/l.st" --save-weights "$out/lw.st" >"$out/parity.log" 2>&1
      "$T" launch -n 1 -- teengine run $m $common --set parallel.comm=nccl --output "$out/n.st" --save-weights "$out/nw.st" --json "$out/n.json" >>"$out/parity.log" 2>&1
      echo "nccl launch rc=$? backend=$(python3 -c "import json;print(json.load(open('$out/n.json'))['comm_backend'])")"
      cmp "$out/l.st" "$out/n.st" && echo "output: identical"
      cmp "$out/lw.st" "$out/nw.st" && echo "saved weights: identical"
      train="--set run.mode=train --set run.steps=20"
      "$T" run $m $common $train --set parallel.comm=local --json "$out/lt.json" >>"$out/parity.log" 2>&1
      "$T" launch -n 1 -- teengine run $m $common $train --json "$out/nt.json" >>"$out/parity.log" 2>&1
      python3 -c "import json; a=json.load(open('$out/lt.json')); b=json.load(open('$out/nt.json')); print('20 losses identical:', a['loss']==b['loss'], 'auto ->', b['comm_backend'])"
      ;;
    run)
      for r in fp8_block none; do
        "$T" run models/h200-mlp.yaml --set precision.recipe=$r --set run.steps=6 --json "$out/run_infer_$r.json" >/dev/null 2>>"$out/run.log"
        med "$out/run_infer_$r.json" "run infer $r"
        "$T" run models/h200-mlp.yaml --set precision.recipe=$r --set run.mode=train --set run.steps=6 --json "$out/run_train_$r.json" >/dev/null 2>>"$out/run.log"
        med "$out/run_train_$r.json" "run train $r"
        "$T" bench block --module layernorm_mlp --tokens 8192 --hidden 4096 --ffn 16384 --recipe $r --json >"$out/bench_fwd_$r.json" 2>>"$out/run.log"
        "$T" bench block --module layernorm_mlp --tokens 8192 --hidden 4096 --ffn 16384 --recipe $r --backward --optimizer --json >"$out/bench_step_$r.json" 2>>"$out/run.log"
        python3 -c "import json,sys; [print(f, {k: v for k, v in json.load(open(f)).items() if 'ms' in k or 'median' in k}) for f in sys.argv[1:]]" "$out/bench_fwd_$r.json" "$out/bench_step_$r.json"
      done
      "$T" run models/h200-mlp.yaml --explain --set run.steps=1 2>&1 | grep "memory" ;;
    torch) timeout 300 python3 tools/bench/torch_step.py | tee "$out/torch.json" ;;
    images)
      # bench block forward and forward + backward, each recipe with and without GEMM images, two rounds alternating
      for round in 1 2; do
        for cfg in "none on" "mxfp8 on" "mxfp8 off" "nvfp4 on" "nvfp4 off"; do
          set -- $cfg
          for bw in fwd bwd; do
            "$T" bench block --module layernorm_mlp --tokens 8192 --hidden 4096 --ffn 16384 --recipe $1 --images $2 \
              $([ $bw = bwd ] && echo --backward) --json >"$out/images_block_$1_$2_${bw}_$round.json" 2>>"$out/images.log"
            python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('round %s %s %-6s images %-3s median %.3f ms, GEMM floor %.3f ms, validated %s' % (sys.argv[2], sys.argv[3], j['recipe'], sys.argv[4], j['median_ms'], j['gemm_floor_ms'], j['validated']))" \
              "$out/images_block_$1_$2_${bw}_$round.json" $round $bw $2
          done
        done
      done
      for cfg in "none true" "mxfp8 true" "mxfp8 false" "nvfp4 true" "nvfp4 false"; do
        set -- $cfg
        for mode in infer train; do
          "$T" run models/h200-mlp.yaml --set precision.recipe=$1 --set run.weight_images=$2 --set run.activation_images=$2 \
            --set run.mode=$mode --set run.steps=6 --json "$out/images_run_$1_$2_$mode.json" >/dev/null 2>>"$out/images.log"
          med "$out/images_run_$1_$2_$mode.json" "run $mode $1 images=$2"
        done
      done ;;
  esac
done
