#!/usr/bin/env python3
"""Independent PyTorch reference for attention (dev tool; run on the device, not in CI).

Writes tests/data/attention_ref.safetensors: for each case below, `CASE.qkv` [T, W] and `CASE.dout` [T, H·D] (f32
inputs, seeded), and what PyTorch computes from them in float64 on the GPU:
  CASE.out   [T, H·D]  rotary embedding (when set) then torch.nn.functional.scaled_dot_product_attention
  CASE.dqkv  [T, W]    d(Σ dout ⊙ out)/d(qkv) by autograd
with the case's parameters in the file's metadata (`CASE` → "batch,seq,heads,kv_heads,head_dim,causal,rope_base").

Nothing here imports teengine. The QKV row layout is TransformerEngine's interleaved one (docs/MODEL-YAML.md): per
key/value group, its heads/kv_heads query heads, then its key, then its value, head_dim each. Tokens are batch-major
sequences. The rotary embedding is the rotate-half form with f32 inverse frequencies and f32 angles (as
TransformerEngine's RotaryPositionEmbedding computes them), applied in float64.

  python3 tools/gen_attention_reference.py [--out tests/data/attention_ref.safetensors] [--device cuda]
"""
import argparse
import json
import struct

import torch
import torch.nn.functional as F


def save_file(tensors, path, metadata):
    """The safetensors format (8-byte little-endian header size, JSON header, raw data), written here so the tool
    needs nothing beyond PyTorch: f32 tensors only."""
    header, blobs, at = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        flat = t.contiguous().reshape(-1).tolist()
        b = struct.pack(f"<{len(flat)}f", *flat)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

# name: (batch, seq, heads, kv_heads, head_dim, causal, rope_base); sequence lengths not multiples of 64.
CASES = {
    "gqa_causal": (2, 37, 4, 2, 16, True, 0.0),
    "gqa_full": (2, 37, 4, 2, 16, False, 0.0),
    "mqa_rotary": (1, 100, 4, 1, 32, True, 10000.0),
    "mha_rotary_full": (3, 19, 2, 2, 8, False, 500.0),
    "gqa_rotary_long": (1, 130, 8, 2, 64, True, 10000.0),
}


def split(qkv, batch, seq, heads, kv, dim):
    """[T, W] -> q [B, heads, S, D], k and v [B, kv, S, D]."""
    r = heads // kv
    x = qkv.view(batch, seq, kv, r + 2, dim)
    q = x[:, :, :, :r, :].reshape(batch, seq, heads, dim).transpose(1, 2)
    k = x[:, :, :, r, :].transpose(1, 2)
    v = x[:, :, :, r + 1, :].transpose(1, 2)
    return q, k, v


def rope(t, seq, dim, base):
    """Rotate-half rotary embedding of t [B, heads, S, D] (float64) with f32 angles."""
    inv = 1.0 / (torch.tensor(base, dtype=torch.float32) ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angle = torch.outer(torch.arange(seq, dtype=torch.float32), inv).to(t.device, torch.float64)  # [S, D/2]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    x1, x2 = t[..., : dim // 2], t[..., dim // 2:]
    return t * cos + torch.cat([-x2, x1], -1) * sin


def case(name, params, device, gen):
    batch, seq, heads, kv, dim, causal, base = params
    tokens, width = batch * seq, kv * (heads // kv + 2) * dim
    qkv32 = torch.randn(tokens, width, generator=gen, dtype=torch.float32)
    dout32 = torch.randn(tokens, heads * dim, generator=gen, dtype=torch.float32)
    qkv = qkv32.to(device, torch.float64).requires_grad_(True)
    q, k, v = split(qkv, batch, seq, heads, kv, dim)
    if base > 0:
        q, k = rope(q, seq, dim, base), rope(k, seq, dim, base)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=kv != heads)
    out = o.transpose(1, 2).reshape(tokens, heads * dim)
    (out * dout32.to(device, torch.float64)).sum().backward()
    meta = ",".join(str(p) for p in (batch, seq, heads, kv, dim, int(causal), base))
    tensors = {f"{name}.qkv": qkv32, f"{name}.dout": dout32, f"{name}.out": out.detach().float().cpu(),
               f"{name}.dqkv": qkv.grad.float().cpu()}
    return tensors, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/attention_ref.safetensors")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(20261205)
    tensors, meta = {}, {"generator": "tools/gen_attention_reference.py", "torch": torch.__version__,
                         "device": a.device}
    for name, params in CASES.items():
        t, m = case(name, params, a.device, gen)
        tensors.update(t)
        meta[name] = m
    save_file(tensors, a.out, metadata=meta)
    print(f"wrote {a.out}: {len(CASES)} cases, {len(tensors)} tensors")


if __name__ == "__main__":
    main()
