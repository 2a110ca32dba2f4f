#!/usr/bin/env python3
"""Independent PyTorch reference for a small teengine model (dev tool; run on the device, not in CI).

Writes, next to tests/data/torch_ref.yaml:
  torch_ref_weights.safetensors  the model's global weights (bf16, teengine's parameter names)
  torch_ref_io.safetensors       input [T, H] bf16 and the expected outputs:
                                   expected_none       PyTorch eager bf16 (cuBLAS, fp32 accumulation)
                                   expected_fp8_block  an FP8 block-scaling emulation written from NUMERICS.md §2:
                                                       1x128 E4M3 activations, 128x128 E4M3 weights, pow2 scales,
                                                       dequantized and multiplied in fp32 (TF32 off), bias in fp32,
                                                       output rounded to bf16
Nothing here imports teengine: the math follows the model spec (x = x + branch(x), LayerNorm, Linear, tanh-GELU).

  python3 tools/gen_model_reference.py [--out-dir tests/data]
"""
import argparse
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

H, QKV, FFN, LAYERS, TOKENS, EPS = 128, 512, 512, 2, 80, 1e-5   # keep in step with tests/data/torch_ref.yaml; QKV/2 and FFN/2 are multiples of 128, so tp 2 keeps the 1x128 blocks
E4M3_MAX = 448.0


def weights(gen):
    w = {}
    def normal(shape, std):
        return (torch.randn(shape, generator=gen, dtype=torch.float32) * std).to(torch.bfloat16)
    for i in range(LAYERS):
        p = f"layers.{i}."
        w[p + "qkv.layer_norm_weight"] = (1 + normal([H], 0.1).float()).bfloat16()
        w[p + "qkv.layer_norm_bias"] = normal([H], 0.1)
        w[p + "qkv.weight"] = normal([QKV, H], H ** -0.5)
        w[p + "qkv.bias"] = normal([QKV], 0.05)
        w[p + "proj.weight"] = normal([H, QKV], QKV ** -0.5)
        w[p + "proj.bias"] = normal([H], 0.05)
        w[p + "mlp.layer_norm_weight"] = (1 + normal([H], 0.1).float()).bfloat16()
        w[p + "mlp.layer_norm_bias"] = normal([H], 0.1)
        w[p + "mlp.fc1_weight"] = normal([FFN, H], H ** -0.5)
        w[p + "mlp.fc1_bias"] = normal([FFN], 0.05)
        w[p + "mlp.fc2_weight"] = normal([H, FFN], FFN ** -0.5)
        w[p + "mlp.fc2_bias"] = normal([H], 0.05)
    return w


def pow2_scale(amax):
    """NUMERICS §2 compute_scale with pow2 on, eps 0: 448/amax, zero (or non-finite) amax -> 1, keep the exponent."""
    s = E4M3_MAX / amax
    s = torch.where((amax == 0) | ~torch.isfinite(amax), torch.ones_like(s), s)
    return torch.exp2(torch.floor(torch.log2(s)))


def fp8_block_dequant(x, tile_rows):
    """Quantize x [M, K] (K a multiple of 128) in blocks of tile_rows x 128 to E4M3 and back to fp32."""
    m, k = x.shape
    xf = x.float()
    mp = -(-m // tile_rows) * tile_rows
    padded = torch.zeros(mp, k, device=x.device)
    padded[:m] = xf
    tiles = padded.view(mp // tile_rows, tile_rows, k // 128, 128)
    amax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    scale = pow2_scale(amax)
    q = (tiles * scale).to(torch.float8_e4m3fn).float()
    return (q / scale).view(mp, k)[:m]


def linear(x, w, b, recipe):
    if recipe == "none":
        return F.linear(x, w, b)
    xd = fp8_block_dequant(x, 1)        # activations: 1x128 along K
    wd = fp8_block_dequant(w, 128)      # weights: 128x128 tiles
    return (xd @ wd.t() + b.float()).to(torch.bfloat16)


def forward(x, w, recipe):
    for i in range(LAYERS):
        p = f"layers.{i}."
        h = F.layer_norm(x, [H], w[p + "qkv.layer_norm_weight"], w[p + "qkv.layer_norm_bias"], EPS)
        h = linear(h, w[p + "qkv.weight"], w[p + "qkv.bias"], recipe)
        h = linear(h, w[p + "proj.weight"], w[p + "proj.bias"], recipe)
        x = x + h
        h = F.layer_norm(x, [H], w[p + "mlp.layer_norm_weight"], w[p + "mlp.layer_norm_bias"], EPS)
        h = linear(h, w[p + "mlp.fc1_weight"], w[p + "mlp.fc1_bias"], recipe)
        h = F.gelu(h, approximate="tanh")
        h = linear(h, w[p + "mlp.fc2_weight"], w[p + "mlp.fc2_bias"], recipe)
        x = x + h
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="tests/data")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(20261202)
    w = weights(gen)
    x = torch.randn([TOKENS, H], generator=gen).to(torch.bfloat16)
    wd = {k: v.to(dev) for k, v in w.items()}
    io = {"input": x}
    with torch.no_grad():
        for recipe in ("none", "fp8_block"):
            io["expected_" + recipe] = forward(x.to(dev), wd, recipe).cpu().contiguous()
    os.makedirs(args.out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, os.path.join(args.out_dir, "torch_ref_weights.safetensors"),
              metadata={"made_by": "tools/gen_model_reference.py", "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                        "torch": torch.__version__})
    save_file(io, os.path.join(args.out_dir, "torch_ref_io.safetensors"),
              metadata={"made_by": "tools/gen_model_reference.py", "torch": torch.__version__})
    a, b = io["expected_none"].double(), io["expected_fp8_block"].double()
    print(f"reference written to {args.out_dir}: fp8_block vs bf16 rel-L2 {((a - b).norm() / a.norm()).item():.4e}")


if __name__ == "__main__":
    main()
