#!/usr/bin/env python3
"""An independent check of `teengine bench gemm`'s raw cuBLASLt baseline (dev tool; runs where PyTorch sees a GPU):
PyTorch's bf16 matmul (cuBLASLt underneath) on the fprop shape teengine's bench uses, out[M, N] = x[M, K] · W[N, K]ᵀ,
timed with CUDA events, median of repeats, in the same call as `teengine bench gemm`. Prints one JSON line per
shape. If the raw baseline in teengine's report runs clearly below this figure, the baseline is not cuBLASLt at its
fastest and the ratio against it flatters teengine.

  python3 tools/bench/torch_gemm.py [--shapes 8192x16384x4096,8192x4096x16384] [--repeats 50]
"""
import argparse
import json

import torch

from compare_torch import time_cuda  # the same timing loop as the block comparison


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="8192x16384x4096,8192x4096x16384", help="MxNxK,... (fprop: x[M,K], W[N,K])")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(1)
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ms = time_cuda(lambda: torch.matmul(x, w.t(), out=out), warmup=args.warmup, reps=args.repeats)
        print(json.dumps({"bench": "torch_gemm", "m": m, "n": n, "k": k, "format": "bf16", "torch": torch.__version__,
                          "device": torch.cuda.get_device_name(), "ms": ms,
                          "tflops": 2.0 * m * n * k / (ms * 1e-3) / 1e12}), flush=True)


if __name__ == "__main__":
    main()
