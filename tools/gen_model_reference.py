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
                                   expected_mxfp8      the same with MXFP8 (§2.6): 1x32 E4M3 blocks along K for
                                                       activations and weights, E8M0 scales (amax·fl(1/448) rounded
                                                       up to a power of two)
                                   expected_nvfp4      the same with NVFP4 (§2.7) as the forward pass reads it:
                                                       activations in 1x16 blocks, weights in 16x16 tiles, both with
                                                       the per-tensor S_enc = 2688/amax and E4M3 block scales, E2M1
                                                       round to nearest even (the RHT and stochastic rounding only
                                                       touch column-wise copies and gradients, which a forward does
                                                       not read)
Nothing here imports teengine: the math follows the model spec (x = x + branch(x), LayerNorm, Linear, tanh-GELU).
The E2M1 rounding is a table of the eight magnitudes with ties to the even code (torch has no float -> fp4 cast).

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


def e4m3(v):
    """Saturating RNE cast to E4M3 and back to fp32."""
    return v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()


def mxfp8_dequant(x):
    """MXFP8 row-wise copy of x [M, K] (K a multiple of 32): 1x32 blocks, E8M0 scale = 2^ceil(log2(amax/448))."""
    m, k = x.shape
    blocks = x.float().view(m, k // 32, 32)
    v = blocks.abs().amax(dim=2, keepdim=True) * torch.tensor(1.0 / E4M3_MAX, dtype=torch.float32)
    mant, ex = torch.frexp(v)                                   # v = mant * 2^ex, mant in [0.5, 1)
    p = torch.where(mant == 0.5, ex - 1, ex)                    # the power of two at or above v
    p = torch.where(v == 0, torch.full_like(p, -127), p)        # zero block: code 0 (2^-127); its codes are 0
    q = e4m3(blocks * torch.exp2(-p.float()))                   # 2^(127 - e) with e = p + 127
    return (q * torch.exp2(p.float())).view(m, k)


E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1(v):
    """Saturating round to nearest even onto the E2M1 magnitudes, sign kept; returns the values."""
    vals = torch.tensor(E2M1_VALUES, device=v.device)
    a = v.abs().clamp(max=6.0)
    lo = (torch.bucketize(a, vals, right=True) - 1).clamp(0, 7)   # vals[lo] <= a
    hi = (lo + 1).clamp(max=7)
    mid = (vals[lo] + vals[hi]) / 2
    up = (a > mid) | ((a == mid) & (lo % 2 == 1))               # ties go to the even code
    q = torch.where(up & (hi != lo), vals[hi], vals[lo])
    return torch.where(v < 0, -q, q)


def nvfp4_dequant(x, tile_rows):
    """NVFP4 row-wise copy of x [M, K] (K a multiple of 16): blocks of tile_rows x 16, two-level scales."""
    m, k = x.shape
    xf = x.float()
    amax = xf.abs().amax()
    s_enc = torch.tensor(448.0 * 6.0, dtype=torch.float32, device=x.device) / amax
    s_enc = torch.where(amax == 0, torch.ones_like(s_enc), s_enc.clamp(max=torch.finfo(torch.float32).max))
    s_dec = 1.0 / s_enc
    mp = -(-m // tile_rows) * tile_rows
    padded = torch.zeros(mp, k, device=x.device)
    padded[:m] = xf
    tiles = padded.view(mp // tile_rows, tile_rows, k // 16, 16)
    bamax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    d = e4m3(bamax * (s_enc * torch.tensor(1.0 / 6.0, dtype=torch.float32)))   # E4M3 block decode scale
    f = (1.0 / (d * s_dec)).clamp(max=torch.finfo(torch.float32).max)        # code 0 -> 1/0 = Inf -> FLT_MAX
    q = e2m1(tiles * f)
    return ((q * d) * s_dec).view(mp, k)[:m]


def linear(x, w, b, recipe):
    if recipe == "none":
        return F.linear(x, w, b)
    if recipe == "fp8_block":
        xd = fp8_block_dequant(x, 1)        # activations: 1x128 along K
        wd = fp8_block_dequant(w, 128)      # weights: 128x128 tiles
    elif recipe == "mxfp8":
        xd, wd = mxfp8_dequant(x), mxfp8_dequant(w)
    else:  # nvfp4
        xd = nvfp4_dequant(x, 1)            # activations: 1x16 along K
        wd = nvfp4_dequant(w, 16)           # weights: 16x16 tiles
    return (xd @ wd.t() + b.float()).to(torch.bfloat16)


def self_check():
    """The emulations against hand-worked values of NUMERICS §1-§2 (fails loudly rather than writing bad data)."""
    t = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.25, -2.5, 0.1, 0.3])
    assert e2m1(t).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.0, -2.0, 0.0, 0.5], e2m1(t).tolist()
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1] = 300.0, 1.0  # amax/448 < 1 -> scale 2^0: 300 rounds to 288 (E4M3 step 32 there)
    assert mxfp8_dequant(x)[0, :2].tolist() == [288.0, 1.0], mxfp8_dequant(x)[0, :2].tolist()
    x = torch.zeros(1, 16)
    x[0, 0], x[0, 1], x[0, 2] = 6.0, 1.0, 1.3  # amax 6: S_enc 448, block scale 448 (saturated), f ~ 1: 1.3 -> 1.5
    got = nvfp4_dequant(x, 1)[0, :3]
    assert torch.allclose(got, torch.tensor([6.0, 1.0, 1.5]), rtol=1e-6, atol=0), got.tolist()


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
    self_check()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(20261202)
    w = weights(gen)
    x = torch.randn([TOKENS, H], generator=gen).to(torch.bfloat16)
    wd = {k: v.to(dev) for k, v in w.items()}
    io = {"input": x}
    with torch.no_grad():
        for recipe in ("none", "fp8_block", "mxfp8", "nvfp4"):
            io["expected_" + recipe] = forward(x.to(dev), wd, recipe).cpu().contiguous()
    os.makedirs(args.out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, os.path.join(args.out_dir, "torch_ref_weights.safetensors"),
              metadata={"made_by": "tools/gen_model_reference.py", "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                        "torch": torch.__version__})
    save_file(io, os.path.join(args.out_dir, "torch_ref_io.safetensors"),
              metadata={"made_by": "tools/gen_model_reference.py", "torch": torch.__version__})
    a = io["expected_none"].double()
    for recipe in ("fp8_block", "mxfp8", "nvfp4"):
        b = io["expected_" + recipe].double()
        print(f"reference written to {args.out_dir}: {recipe} vs bf16 rel-L2 {((a - b).norm() / a.norm()).item():.4e}")


if __name__ == "__main__":
    main()
