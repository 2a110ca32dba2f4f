#!/usr/bin/env python3
"""Does compute-sanitizer's initcheck see a cuBLASLt GEMM's output writes? (dev tool, PyTorch on a GPU)

A GEMM writes a fresh tensor and an element-wise kernel reads it; under initcheck, `control` (written by an
element-wise kernel) must be clean, while on an H200 `bf16` and `fp8` report every element read as uninitialised:
the tool does not track the GEMMs' tensor-memory-access stores. tools/dev/gpu_sanitize.sh chooses its initcheck
selection from this.

  compute-sanitizer --tool initcheck --print-limit 3 python3 tools/dev/initcheck_gemm_probe.py control|bf16|fp8
"""
import sys

import torch

M = N = K = 512
kind = sys.argv[1] if len(sys.argv) > 1 else "bf16"
a = torch.randn(M, K, device="cuda")
b = torch.randn(N, K, device="cuda")
if kind == "fp8":
    one = torch.ones((), device="cuda")
    out = torch._scaled_mm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t(), scale_a=one, scale_b=one,
                           out_dtype=torch.bfloat16)
elif kind == "bf16":
    out = a.bfloat16() @ b.bfloat16().t()
else:
    out = (a * 2).bfloat16()
total = float((out.float() + 1).sum())
torch.cuda.synchronize()
print(kind, "sum", total)
