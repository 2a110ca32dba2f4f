#!/usr/bin/env python3
"""Independent test vectors for ops/quant (read by tests/quant/test_quant_vectors.cpp).

Run once on a machine with torch, numpy and ml_dtypes:  python3 tools/gen_quant_vectors.py tests/data/quant_vectors.bin
Element casts come from torch (float8_e4m3fn / float8_e5m2, clamped to +-max first so the cast saturates) and
ml_dtypes (float4_e2m1fn); the E8M0 round-up and the block quantizers are written from docs/NUMERICS.md in plain
numpy f32 arithmetic, independent of the C++ code. NaN inputs are recorded separately with the contract's codes
(torch keeps the NaN's sign; the contract does not).

Record: u32 name_len, name, u32 kind, u32 n_in, f32 in[n_in], u32 n_out, u8 out[n_out], u32 M, u32 K.
kind 0..3: casts e4m3, e5m2, e2m1, e8m0 (round up); 10 block1d pow2, 11 block2d pow2, 12 mxfp8, 13 nvfp4 1d,
14 nvfp4 2d, 15 per-tensor current, 16 block1d (no pow2). Quantize output: row data | row scales | col data | col scales.
"""
import struct
import sys

import ml_dtypes
import numpy as np

F32 = np.float32
FLT_MAX = np.finfo(F32).max
records = []


def record(name, kind, x, out, M=0, K=0):
    x = np.ascontiguousarray(x, dtype=F32).ravel()
    out = np.ascontiguousarray(out, dtype=np.uint8).ravel()
    records.append(struct.pack("<I", len(name)) + name.encode() + struct.pack("<II", kind, x.size) + x.tobytes()
                   + struct.pack("<I", out.size) + out.tobytes() + struct.pack("<II", M, K))


def e4m3(v):  # saturating RNE cast → codes
    return np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def e2m1(v):  # saturating RNE cast → 4-bit codes
    return np.clip(v, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


def e8m0_ceil(v):  # power of two >= v as a biased exponent (v positive normal, 0 or Inf)
    m, e = np.frexp(v.astype(F32))
    code = np.minimum(np.where(m == 0.5, e - 1, e) + 127, 254)
    return np.where(v == 0, 0, np.where(np.isinf(v), 0xFE, code)).astype(np.uint8)


def element_casts(rng):
    import torch
    every_bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(F32)
    rand = (rng.standard_normal(20000) * np.exp2(rng.integers(-30, 30, 20000))).astype(F32)
    x = np.concatenate([every_bf16, rand, (np.arange(256) * F32(1 / 8)).astype(F32)])
    x = x[~np.isnan(x)]
    t = torch.from_numpy(x)
    record("e4m3", 0, x, t.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
    record("e5m2", 1, x, t.clamp(-57344, 57344).to(torch.float8_e5m2).view(torch.uint8).numpy())
    record("e2m1", 2, x, e2m1(x))
    pos = np.abs(x[np.isfinite(x) & (np.abs(x) >= np.finfo(F32).tiny)])
    record("e8m0", 3, pos, e8m0_ceil(pos))
    nan = np.array([np.nan, -np.nan], dtype=F32)
    record("e4m3_nan", 0, nan, [0x7F, 0x7F])
    record("e5m2_nan", 1, nan, [0x7F, 0x7F])
    record("e2m1_nan", 2, nan, [0x7, 0x7])
    record("e8m0_special", 3, np.array([np.nan, np.inf, 0], dtype=F32), [0xFF, 0xFE, 0])


def compute_scale(amax, fmt_max, pow2, vinf):  # NUMERICS §2, eps = 0
    with np.errstate(divide="ignore", over="ignore"):
        s = np.where((amax == 0) | ~np.isfinite(amax), F32(1), F32(fmt_max) / amax).astype(F32)
    s = np.where(np.isinf(s), F32(vinf), s).astype(F32)
    if pow2:
        s = (s.view(np.uint32) & np.uint32(0xFF800000)).view(F32)
    return s


def blocks(A, B, two_d):
    """Per-element block amax of A [R, C] (blocks of B along C; B x B tiles when two_d), zero-padded."""
    R, C = A.shape
    Rp, Cp = -(-R // B) * B if two_d else R, -(-C // B) * B
    P = np.zeros((Rp, Cp), F32)
    P[:R, :C] = np.abs(A)
    if two_d:
        t = P.reshape(Rp // B, B, Cp // B, B).max(axis=(1, 3))  # [R/B, C/B]
        return np.repeat(np.repeat(t, B, 0), B, 1)[:R, :C], t
    b = P.reshape(R, Cp // B, B).max(axis=2)  # [R, C/B]
    return np.repeat(b, B, 1)[:R, :C], b


def r4(n):
    return -(-n // 4) * 4


def quant_copy(A, kind, col, tensor_amax):
    """One copy of A [R, C] → (data bytes, scale bytes) in the NUMERICS §3 layout."""
    R, C = A.shape
    if kind == 15:  # per-tensor current scaling
        s = compute_scale(tensor_amax, 448, False, FLT_MAX)
        return e4m3(A * s), np.array([F32(1) / s], F32).view(np.uint8)
    if kind in (10, 11, 16):  # fp8 block 1D / 2D, scale_inv fp32
        two_d = kind == 11
        per_elem, per_block = blocks(A, 128, two_d)
        s = compute_scale(per_elem, 448, kind != 16, FLT_MAX)
        s_blk = (F32(1) / compute_scale(per_block, 448, kind != 16, FLT_MAX)).astype(F32)
        if two_d:  # [ceil(R/128)][round4(ceil(C/128))]
            sc = np.zeros((s_blk.shape[0], r4(s_blk.shape[1])), F32)
            sc[:, :s_blk.shape[1]] = s_blk
        else:  # [ceil(C/128)][round4(R)]
            sc = np.zeros((s_blk.shape[1], r4(R)), F32)
            sc[:, :R] = s_blk.T
        return e4m3(A * s), sc.view(np.uint8)
    if kind == 12:  # MXFP8
        per_elem, per_block = blocks(A, 32, False)
        e = e8m0_ceil((per_block * (F32(1) / F32(448))).astype(F32))  # [R, C/32]
        factor = np.ldexp(F32(1), 127 - np.repeat(e.astype(np.int32), 32, 1)[:, :C]).astype(F32)
        q = e4m3(A * factor)
        return (q.T, e.T) if col else (q, e)  # column-wise keeps [M, K]; scales [M/32][K]
    # NVFP4 (13: 1D, 14: 16x16 tiles); odd C is padded with a zero nibble
    with np.errstate(divide="ignore"):
        s_enc = F32(min(F32(2688) / tensor_amax, FLT_MAX)) if tensor_amax != 0 else F32(1)
    s_enc = F32(1) if s_enc == 0 else s_enc
    s_dec = F32(1) / s_enc
    per_elem, per_block = blocks(A, 16, kind == 14)
    if kind == 14:
        per_block = np.repeat(per_block, 16, 0)[:R]
    sb = e4m3(np.minimum(per_block * (s_enc * (F32(1) / F32(6))), FLT_MAX).astype(F32))  # [R, C/16]
    sbf = sb.view(ml_dtypes.float8_e4m3fn).astype(F32)
    with np.errstate(divide="ignore"):
        factor = np.minimum(F32(1) / (sbf * s_dec), FLT_MAX).astype(F32)
    q = e2m1(A * np.repeat(factor, 16, 1)[:, :C])
    if C % 2:
        q = np.concatenate([q, np.zeros((R, 1), np.uint8)], 1)
    return q[:, 0::2] | (q[:, 1::2] << 4), sb


def quantize(X, kind):
    amax = F32(np.max(np.abs(X))) if X.size else F32(0)
    parts = []
    for col, A in ((False, X), (True, np.ascontiguousarray(X.T))):
        d, s = quant_copy(A, kind, col, amax)
        parts += [np.ascontiguousarray(d).view(np.uint8).ravel(), np.ascontiguousarray(s).view(np.uint8).ravel()]
    return np.concatenate(parts)


def main():
    rng = np.random.default_rng(20261202)
    element_casts(rng)
    for M, K in ((37, 300), (64, 256), (130, 45), (1, 16)):
        X = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-6, 6, (M, 1)))).astype(F32)
        X[0, :min(K, 40)] = 0  # an all-zero block
        if M > 2:
            X[2, 3], X[1, 1] = np.inf, 1e5
        for kind in (10, 11, 12, 13, 14, 15, 16):
            record(f"quant{kind}_{M}x{K}", kind, X, quantize(X, kind), M, K)
    with open(sys.argv[1] if len(sys.argv) > 1 else "tests/data/quant_vectors.bin", "wb") as f:
        f.write(b"".join(records))


if __name__ == "__main__":
    main()
