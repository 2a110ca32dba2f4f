#!/usr/bin/env python3
"""PyTorch's best plain-eager figures for the LayerNorm -> MLP block that `teengine run models/h200-mlp.yaml` runs:
bf16 inference (time per forward, peak memory) and an AMP training step (fp32 parameters, bf16 autocast, MSE loss,
fused AdamW; time per step, peak memory). Medians of CUDA-event timings. Prints one JSON object.

    python3 tools/bench/torch_step.py [--tokens 8192 --hidden 4096 --ffn 16384 --reps 20]
"""
import argparse
import json

import torch

from compare_torch import time_cuda  # the same timing loop as the block comparison


class Block(torch.nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = torch.nn.Linear(hidden, ffn)
        self.fc2 = torch.nn.Linear(ffn, hidden)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x)), approximate="tanh"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}

    # bf16 inference: weights and activations in bf16, no autograd.
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = Block(a.hidden, a.ffn).cuda().to(torch.bfloat16)
    x = torch.randn(a.tokens, a.hidden, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        out["infer_bf16_ms"] = time_cuda(lambda: model(x), warmup=3, reps=a.reps)
    out["infer_bf16_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    del model, x

    # AMP training step: fp32 parameters, bf16 autocast, MSE, fused AdamW.
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = Block(a.hidden, a.ffn).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(a.tokens, a.hidden, device="cuda")
    target = 0.5 * x

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out["train_amp_adamw_ms"] = time_cuda(step, warmup=3, reps=a.reps)
    out["train_amp_adamw_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
