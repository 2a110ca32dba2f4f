#!/usr/bin/env python3
"""Independent test vectors for ops/quant, read by tests/quant/test_quant_vectors.cpp.

    python3 tools/gen_quant_vectors.py [--torch | --pure] [--out tests/data/quant_vectors.bin] [--verify FILE]

Everything below is written from docs/NUMERICS.md (§1 casts, §2 scales, §3 layouts), in plain Python: f32
arithmetic is emulated by computing in double and rounding once to f32 (correct for + - * / of f32 operands),
bf16 rounding is done on the bits, and the narrow casts (E4M3, E5M2, E2M1) are round-to-nearest-even lookups in
tables of every code's value, with saturation. Nothing imports or mirrors the C++ code.

--torch (the default when torch imports): every fp8 cast the generator performs — the element-cast records and
each element of every quantize record — is also done by PyTorch (float8_e4m3fn / float8_e5m2, clamped to ±max
first so that the cast saturates), and the run aborts if the two disagree on any value. E2M1 is checked the same
way through torch.float4_e2m1fn_x2 when this torch can cast to it, else through ml_dtypes' float4_e2m1fn; with
neither, E2M1 rests on the table alone (said in the output). --pure skips torch (the sanity mode; it needs no numpy
and no torch). Both modes write the same bytes; the SHA-256 printed at the end identifies the file, and --verify
FILE compares the result with FILE.

Self-checks run in both modes: the format tables against the contract's constants, Philox4x32-10 against the
Random123 known-answer vectors, the Hadamard matrix's orthogonality, and a decode of every quantize record (the
dequantized copy must be close to its input). Inputs come from Philox with a fixed key, so runs are reproducible
whatever the Python version.

Coverage (one record per config × case; the config is in the record name, see below):
  per-tensor current scaling (E4M3, E4M3 pow2, E5M2), FP8 block 1×128 (pow2, not pow2, E5M2), FP8 block
  128×128 (pow2, not pow2), MXFP8 (E4M3, E5M2), NVFP4 1×16 (plain, RHT, RHT + stochastic rounding, stochastic
  rounding alone), NVFP4 16×16; each over f32, bf16 and f16 inputs, amaxes from 1e-38 to 3e38 (1e-6 ... 1e4
  among the ordinary cases), values in the formats' subnormal ranges and near their largest values, and — as
  separate cases — ±Inf, NaN, all-zero tensors and all-zero blocks.
  Stochastic rounding is covered because its random stream is ours (NUMERICS §2.7: Philox keyed by the
  quantizer's seed, counter = element index): the generator reproduces it from the contract. Not covered here:
  delayed scaling (a stateful scale; tests/quant checks it against the in-repo oracle), amax_epsilon > 0, strided
  inputs, and the fused norm/activation quantizers (checked against the unfused sequence).

Record (little endian): u32 name_len, name, u32 kind, u32 n_in, f32 in[n_in], u32 n_out, u8 out[n_out], u32 M,
u32 K.
  kind 0..3: element casts e4m3, e5m2, e2m1 (4-bit code), e8m0 (round up) of `in`; one output byte each.
  kind 10..16: quantize records of the first version of this file (configs fixed per kind; still read).
  kind 20: quantize `in` as an [M, K] tensor with the config in the name, "<config>|<case>", config =
    "<format>:<data dtype>:<input dtype>[:pow2][:rht][:sr=<seed>]", e.g. "nvfp4_1d:e2m1:bf16:rht:sr=1234|tiny".
    The input values are exactly representable in the input dtype. out = row-wise data | row-wise scale_inv |
    column-wise data | column-wise scale_inv | row-wise amax (f32) | column-wise amax (f32), the amaxes only for
    the formats that store one (per-tensor fp8, NVFP4), every part in the NUMERICS §3 layout, padding zero.
"""
import argparse
import bisect
import hashlib
import math
import struct
import sys

FLT_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
INF, NAN = math.inf, math.nan
MASK32 = 0xFFFFFFFF


# ---- f32 / bf16 / f16 arithmetic -----------------------------------------------------------------------------
def f32(x):
    """x rounded to f32 (nearest even; overflow to ±Inf)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u & MASK32))[0]


def mul(a, b):
    return f32(a * b)


def div(a, b):  # IEEE f32 division, including x/0
    if b == 0:
        if a == 0 or a != a:
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)
    return f32(a / b)


def bf16(x):
    """f32 x rounded to bf16, nearest even on the bits (NaN stays NaN)."""
    if x != x:
        return NAN
    u = f32_bits(x)
    return f32_from_bits((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000)


def f16(x):
    """x rounded to IEEE half (nearest even), returned as a float; values here are always in range."""
    return struct.unpack("<e", struct.pack("<e", x))[0]


ROUND_IN = {"f32": f32, "bf16": bf16, "f16": f16}
HP_MAX = {"f32": FLT_MAX, "bf16": f32_from_bits(0x7F7F0000), "f16": 65504.0}  # NUMERICS §2.5 value_for_inf


# ---- narrow formats (NUMERICS §1) ----------------------------------------------------------------------------
class Minifloat:
    """sign | ebits exponent (bias) | mbits mantissa, finite codes 0..max_code (values increase with the code)."""

    def __init__(self, name, ebits, mbits, bias, max_code, nan_code):
        self.name, self.max_code, self.nan_code, self.sign = name, max_code, nan_code, 1 << (ebits + mbits)
        self.vals = []
        for c in range(max_code + 1):
            e, m = c >> mbits, c & ((1 << mbits) - 1)
            self.vals.append(math.ldexp(m, 1 - bias - mbits) if e == 0 else math.ldexp((1 << mbits) + m, e - bias - mbits))
        self.mids = [(a + b) / 2 for a, b in zip(self.vals, self.vals[1:])]  # exact: few significant bits
        self.max = self.vals[-1]

    def cast(self, x):
        """Saturating round to nearest even (§1): |x| >= max and ±Inf → ±max, NaN → nan_code."""
        if x != x:
            return self.nan_code
        s = self.sign if math.copysign(1.0, x) < 0 else 0
        a = abs(x)
        if a >= self.max:
            return s | self.max_code
        i = bisect.bisect_right(self.vals, a) - 1  # vals[i] <= a < vals[i + 1]
        if a == self.vals[i]:
            return s | i
        mid = self.mids[i]
        c = i if a < mid else i + 1 if a > mid else (i if i % 2 == 0 else i + 1)
        return s | c

    def decode(self, code):
        v = self.vals[code & (self.sign - 1)] if (code & (self.sign - 1)) <= self.max_code else NAN
        return -v if code & self.sign else v


E4M3 = Minifloat("e4m3", 4, 3, 7, 0x7E, 0x7F)
E5M2 = Minifloat("e5m2", 5, 2, 15, 0x7B, 0x7F)
E2M1 = Minifloat("e2m1", 2, 1, 1, 0x7, 0x7)
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}
MINI = {"e4m3": E4M3, "e5m2": E5M2, "e2m1": E2M1}


def e8m0_ceil(v):
    """§1 f32 → e8m0 rounding up: NaN 0xFF, ±Inf 0xFE, 0 → 0; normal: exponent field, +1 unless a power of two
    (at most 0xFE); f32 subnormal: 1 when v > 2^-127, else 0."""
    if v != v:
        return 0xFF
    if math.isinf(v):
        return 0xFE
    u = f32_bits(v) & 0x7FFFFFFF
    if u == 0:
        return 0
    e, m = u >> 23, u & 0x7FFFFF
    if e == 0:
        return 1 if abs(v) > math.ldexp(1.0, -127) else 0
    return e + 1 if m and e < 0xFE else e


# ---- Philox4x32-10 (Salmon et al. 2011), used for inputs and for stochastic rounding (§2.7) -----------------
def philox(key, ctr_lo, ctr_hi=0):
    c0, c1, c2, c3 = ctr_lo & MASK32, (ctr_lo >> 32) & MASK32, ctr_hi & MASK32, (ctr_hi >> 32) & MASK32
    k0, k1 = key & MASK32, (key >> 32) & MASK32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def sr_uniform(seed, index, copy):
    """§2.7: the Philox block at counter (index/8, 2 + copy), 16-bit half index%2 of word (index/2)%4 as b;
    u = (b + 1/2) / 2^16."""
    b = (philox(seed, index >> 3, 2 + copy)[(index >> 1) & 3] >> (16 * (index & 1))) & 0xFFFF
    return (b + 0.5) / 65536.0


def e2m1_sr(x, u):
    """§2.7 stochastic rounding: between neighbours lo <= |x| < hi round up iff u < (|x| - lo) / (hi - lo)."""
    if x != x:
        return 0x7
    s = 0x8 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a >= 6.0:
        return s | 0x7
    i = bisect.bisect_right(E2M1.vals, a) - 1
    lo, hi = E2M1.vals[i], E2M1.vals[i + 1]
    return s | (i + 1 if u < (a - lo) / (hi - lo) else i)


class Stream:
    """Deterministic inputs: uniform and normal numbers from Philox under one key (independent of Python)."""

    def __init__(self, key):
        self.key, self.i = key, 0

    def uniform(self):
        w = philox(self.key, self.i >> 2, 7)[self.i & 3]
        self.i += 1
        return (w + 0.5) / 4294967296.0  # (0, 1)

    def normal(self):
        """Roughly normal (a sum of four uniforms, variance 1): only + and *, so every platform gets the same bits."""
        return (self.uniform() + self.uniform() + self.uniform() + self.uniform() - 2.0) * 1.7320508075688772


# ---- random Hadamard transform (§2.7) ------------------------------------------------------------------------
RHT_SIGNS = 0xD7E8  # s_j = -1 where bit j is set


def rht_negative(j, i):  # sign of s_j * H[j][i]
    return (bin(i & j).count("1") & 1) != ((RHT_SIGNS >> j) & 1)


def rht16(v):
    """y = v · diag(s) H16 / 4: the signs, then four f32 butterfly stages (h = 1, 2, 4, 8: the pair i, i + h with
    bit h of i clear becomes w_i + w_i+h, w_i - w_i+h), times 1/4 (f32), rounded to bf16."""
    w = [-x if (RHT_SIGNS >> j) & 1 else x for j, x in enumerate(v)]
    h = 1
    while h < 16:
        for i in range(16):
            if not i & h:
                a, b = w[i], w[i + h]
                w[i], w[i + h] = f32(a + b), f32(a - b)
        h *= 2
    return [bf16(f32(x * 0.25)) for x in w]


# ---- scales (§2) ---------------------------------------------------------------------------------------------
def amax_of(values):  # NaN skipped
    a = 0.0
    for x in values:
        if x == x and abs(x) > a:
            a = abs(x)
    return a


def compute_scale(amax, fmt_max, pow2, value_for_inf):  # §2.1 with eps = 0
    if amax == 0 or math.isinf(amax) or amax != amax:
        return 1.0
    s = div(fmt_max, amax)
    if math.isinf(s):
        s = value_for_inf
    if pow2:
        s = f32_from_bits(f32_bits(s) & 0xFF800000)
    return s


def nvfp4_s_enc(amax):  # §2.7 global level
    if amax == 0:
        return 1.0
    s = div(448.0 * 6.0, amax)
    if s > FLT_MAX:
        s = FLT_MAX
    return 1.0 if s == 0 else s


def ceil_div(a, b):
    return -(-a // b)


def ceil4(n):
    return ceil_div(n, 4) * 4


def f32_bytes(values):
    return struct.pack("<%df" % len(values), *values)


class Config:
    def __init__(self, fmt, dt, inp, pow2=False, rht=False, sr=None):
        self.fmt, self.dt, self.inp, self.pow2, self.rht, self.sr = fmt, dt, inp, pow2, rht, sr

    def name(self):
        s = f"{self.fmt}:{self.dt}:{self.inp}" + (":pow2" if self.pow2 else "") + (":rht" if self.rht else "")
        return s + (f":sr={self.sr}" if self.sr is not None else "")


class Gen:
    def __init__(self, torch_mod):
        self.torch = torch_mod
        self.records = []
        self.casts = {"e4m3": set(), "e5m2": set(), "e2m1": set()}  # every value cast, for the torch check
        self.kinds = {}

    # -- casts that remember their inputs
    def cast(self, dt, v):
        if self.torch is not None:
            self.casts[dt].add(v if v == v else NAN)
        return MINI[dt].cast(v)

    def record(self, name, kind, x, out, M=0, K=0):
        out = bytes(out)
        self.records.append(struct.pack("<I", len(name)) + name.encode() + struct.pack("<II", kind, len(x)) + f32_bytes(x)
                            + struct.pack("<I", len(out)) + out + struct.pack("<II", M, K))

    # -- one copy of A [R][C] (blocks along C) → (data bytes, scale bytes, decoded values for the self-check)
    def quant_copy(self, A, R, C, cfg, copy, copy_amax):
        fmt, dt = cfg.fmt, cfg.dt
        if fmt == "fp8_per_tensor":
            s = compute_scale(copy_amax, FMT_MAX[dt], cfg.pow2, FLT_MAX)
            sinv = div(1.0, s)
            data = [[self.cast(dt, mul(A[r][c], s)) for c in range(C)] for r in range(R)]
            dec = [[MINI[dt].decode(q) * sinv for q in row] for row in data]
            return b"".join(bytes(row) for row in data), f32_bytes([sinv]), dec
        B = {"fp8_block_1d": 128, "fp8_block_2d": 128, "mxfp8": 32, "nvfp4_1d": 16, "nvfp4_2d": 16}[fmt]
        two_d = fmt in ("fp8_block_2d", "nvfp4_2d")
        nb = ceil_div(C, B)

        def block_amax(r, b):
            rows = range((r // B) * B, min(R, (r // B + 1) * B)) if two_d else (r,)
            return amax_of(A[rr][c] for rr in rows for c in range(b * B, min(C, (b + 1) * B)))

        amax_cache = {}
        dec = [[0.0] * C for _ in range(R)]
        if fmt in ("fp8_block_1d", "fp8_block_2d"):
            data = [[0] * C for _ in range(R)]
            if two_d:
                sc = [[0.0] * ceil4(nb) for _ in range(ceil_div(R, B))]
            else:
                sc = [[0.0] * ceil4(R) for _ in range(nb)]
            for r in range(R):
                for b in range(nb):
                    key = ((r // B) if two_d else r, b)
                    if key not in amax_cache:
                        amax_cache[key] = block_amax(r, b)
                    s = compute_scale(amax_cache[key], FMT_MAX[dt], cfg.pow2, HP_MAX[cfg.inp])
                    sinv = div(1.0, s)
                    if two_d:
                        sc[r // B][b] = sinv
                    else:
                        sc[b][r] = sinv
                    for c in range(b * B, min(C, (b + 1) * B)):
                        data[r][c] = self.cast(dt, mul(A[r][c], s))
                        dec[r][c] = MINI[dt].decode(data[r][c]) * sinv
            return b"".join(bytes(row) for row in data), b"".join(f32_bytes(row) for row in sc), dec
        if fmt == "mxfp8":
            data = [[0] * C for _ in range(R)]
            sc = [[0] * nb for _ in range(R)]
            inv_max = f32(1.0 / FMT_MAX[dt])
            for r in range(R):
                for b in range(nb):
                    e = e8m0_ceil(mul(block_amax(r, b), inv_max))
                    sc[r][b] = e
                    factor = math.ldexp(1.0, 127 - e)  # 2^(127-e), exact in f32 for e in 0..254
                    for c in range(b * B, min(C, (b + 1) * B)):
                        data[r][c] = self.cast(dt, mul(A[r][c], factor))
                        dec[r][c] = MINI[dt].decode(data[r][c]) * math.ldexp(1.0, e - 127)
            if copy == 1:  # §3: column-wise data in x's [M, K] order, scales [block of M][k]
                data = [[data[r][c] for r in range(R)] for c in range(C)]
                sc = [[sc[r][b] for r in range(R)] for b in range(nb)]
            return b"".join(bytes(row) for row in data), b"".join(bytes(row) for row in sc), dec
        # NVFP4
        s_enc = nvfp4_s_enc(copy_amax)
        s_dec = div(1.0, s_enc)
        k = mul(s_enc, f32(1.0 / 6.0))
        ld = ceil_div(C, 2)
        data = bytearray(R * ld)
        sc = [[0] * nb for _ in range(R)]
        for r in range(R):
            for b in range(nb):
                key = ((r // B) if two_d else r, b)
                if key not in amax_cache:
                    amax_cache[key] = block_amax(r, b)
                d = self.cast("e4m3", min(mul(amax_cache[key], k), FLT_MAX))
                sc[r][b] = d
                f = min(div(1.0, mul(E4M3.decode(d), s_dec)), FLT_MAX)
                for c in range(b * B, min(C, (b + 1) * B)):
                    v = mul(A[r][c], f)
                    if cfg.sr is not None:
                        q = e2m1_sr(v, sr_uniform(cfg.sr, r * C + c, copy))
                    else:
                        q = self.cast("e2m1", v)
                    data[r * ld + c // 2] |= q << 4 if c % 2 else q
                    dec[r][c] = f32(f32(E2M1.decode(q) * E4M3.decode(d)) * s_dec)
        return bytes(data), b"".join(bytes(row) for row in sc), dec

    def quantize(self, X, M, K, cfg):
        """→ (out bytes, worst rel-L2 of a decoded copy against the values it encodes)."""
        row_amax = amax_of(v for row in X for v in row)
        At = [[X[m][k] for m in range(M)] for k in range(K)]
        if cfg.rht:
            for row in At:
                for c0 in range(0, M - 15, 16):
                    row[c0:c0 + 16] = rht16(row[c0:c0 + 16])
        col_amax = amax_of(v for row in At for v in row) if cfg.rht else row_amax
        out, err = b"", 0.0
        for copy, A, R, C, amax in ((0, X, M, K, row_amax), (1, At, K, M, col_amax)):
            d, s, dec = self.quant_copy(A, R, C, cfg, copy, amax)
            out += d + s
            num = den = 0.0
            for r in range(R):
                for c in range(C):
                    a = A[r][c]
                    if math.isfinite(a) and math.isfinite(dec[r][c]):
                        num += (dec[r][c] - a) ** 2
                        den += a * a
            if den > 0:
                err = max(err, math.sqrt(num / den))
        if cfg.fmt in ("fp8_per_tensor", "nvfp4_1d", "nvfp4_2d"):
            out += f32_bytes([row_amax, col_amax])
        return out, err

    # -- the torch cross-check of every cast
    def torch_check(self):
        torch = self.torch
        for dt, tdt in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
            xs = sorted(v for v in self.casts[dt] if v == v)
            t = torch.tensor(xs, dtype=torch.float32)
            got = t.clamp(-FMT_MAX[dt], FMT_MAX[dt]).to(tdt).view(torch.uint8).tolist()
            bad = [(x, g, MINI[dt].cast(x)) for x, g in zip(xs, got) if g != MINI[dt].cast(x)]
            if bad:
                sys.exit(f"torch and the {dt} table disagree on {len(bad)} of {len(xs)} values, e.g. {bad[:5]}")
            print(f"torch {tdt}: all {len(xs)} distinct cast inputs agree with the table")
        xs = sorted(v for v in self.casts["e2m1"] if v == v)
        codes, source = torch_e2m1(torch, xs)
        if codes is None:
            print("neither torch nor ml_dtypes can cast to E2M1 here: E2M1 rests on the table written from NUMERICS §1")
            return
        bad = [(x, g) for x, g in zip(xs, codes) if g != E2M1.cast(x)]
        if bad:
            sys.exit(f"{source} and the e2m1 table disagree on {len(bad)} of {len(xs)} values, e.g. {bad[:5]}")
        print(f"{source}: all {len(xs)} distinct cast inputs agree with the table")


def torch_e2m1(torch, xs):
    """E2M1 codes of xs (clamped to ±6) by torch's float4_e2m1fn_x2, else by ml_dtypes' float4_e2m1fn (which the
    device's PyTorch environment carries), as (codes, source); (None, None) when neither can cast. A source is only
    trusted after it rounds the probes (ties to even, saturation) as NUMERICS §1 says."""
    if not xs:
        return None, None
    probe = [0.25, 0.75, 1.25, 2.5, 5.0, -0.25, 7.0]

    def by_torch(vals):
        tdt = getattr(torch, "float4_e2m1fn_x2", None)
        if tdt is None:
            return None
        try:
            t = torch.tensor(vals + [0.0] * (len(vals) % 2), dtype=torch.float32).clamp(-6, 6)
            packed = t.view(-1, 2).to(tdt).view(torch.uint8).reshape(-1).tolist()  # may raise: no such cast
        except Exception:
            return None
        codes = []
        for b in packed:
            codes += [b & 0xF, b >> 4]
        return codes[:len(vals)]

    def by_ml_dtypes(vals):
        try:
            import ml_dtypes
            import numpy as np
        except ImportError:
            return None
        a = np.clip(np.array(vals, dtype=np.float32), -6, 6).astype(ml_dtypes.float4_e2m1fn)
        return [int(b) & 0xF for b in a.view(np.uint8).tolist()]

    for name, cast in (("torch float4_e2m1fn_x2", by_torch), ("ml_dtypes float4_e2m1fn", by_ml_dtypes)):
        pc = cast(probe)
        if pc is None:
            continue
        if pc != [E2M1.cast(p) for p in probe]:
            sys.exit(f"{name} rounds the probes {probe} to {pc}, not as NUMERICS §1")
        return cast(xs), name
    return None, None


# ---- self-checks ---------------------------------------------------------------------------------------------
def self_check():
    assert E4M3.max == 448 and E4M3.vals[1] == 2.0 ** -9 and len(E4M3.vals) == 127
    assert E5M2.max == 57344 and E5M2.vals[1] == 2.0 ** -16 and len(E5M2.vals) == 124
    assert E2M1.vals == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert E4M3.cast(464.0) == 0x7E and E4M3.cast(-1e9) == 0xFE and E4M3.cast(NAN) == 0x7F and E4M3.cast(-0.0) == 0x80
    assert E4M3.cast(2.0 ** -10) == 0 and E4M3.cast(3 * 2.0 ** -10) == 2  # ties to even in the subnormals
    assert E5M2.cast(INF) == 0x7B and E5M2.cast(-INF) == 0xFB and E2M1.cast(0.25) == 0 and E2M1.cast(0.75) == 2
    assert E2M1.cast(2.5) == 4 and E2M1.cast(5.0) == 6 and E2M1.cast(-7.0) == 0xF and E2M1.cast(NAN) == 0x7
    assert e8m0_ceil(1.0) == 127 and e8m0_ceil(1.5) == 128 and e8m0_ceil(INF) == 0xFE and e8m0_ceil(0.0) == 0
    assert e8m0_ceil(math.ldexp(1.0, -127)) == 0 and e8m0_ceil(math.ldexp(1.5, -127)) == 1
    assert bf16(f32_from_bits(0x3F808000)) == 1.0 and bf16(f32_from_bits(0x3F818000)) == f32_from_bits(0x3F820000)
    # Random123 known-answer vectors for philox4x32_10
    assert philox(0, 0, 0) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8), "Philox KAT 1"
    assert philox(0xFFFFFFFFFFFFFFFF, 2 ** 64 - 1, 2 ** 64 - 1) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD), "Philox KAT 2"
    assert philox(0x299F31D0A4093822, 0x85A308D3243F6A88, 0x0370734413198A2E) == \
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1), "Philox KAT 3"
    # R = diag(s) H / 4 is orthogonal: R Rᵀ = I (exact: 16 terms of ±1/16)
    for i in range(16):
        for k in range(16):
            dot = sum((-1 if rht_negative(j, i) else 1) * (-1 if rht_negative(j, k) else 1) for j in range(16)) / 16
            assert dot == (1 if i == k else 0)
    # The butterfly order computes the matrix product: small integers keep every sum exact
    v = [float((7 * j + 3) % 11 - 5) for j in range(16)]
    direct = [bf16(f32(sum((-1 if rht_negative(j, i) else 1) * v[j] for j in range(16)) * 0.25)) for i in range(16)]
    assert rht16(v) == direct, "RHT butterfly != matrix"
    signs = "".join("-" if (RHT_SIGNS >> j) & 1 else "+" for j in range(16))
    assert signs == "+++-+------+-+--", signs  # NUMERICS §2.7 lists s_0 … s_15


# ---- inputs --------------------------------------------------------------------------------------------------
def to_dtype(v, inp):
    if math.isinf(v):
        return v
    if inp == "f16":
        v = max(-65504.0, min(65504.0, v))
    elif inp == "bf16":
        v = max(-3.38e38, min(3.38e38, v))
    else:
        v = max(-FLT_MAX, min(FLT_MAX, v))
    return ROUND_IN[inp](f32(v))


def make_case(rng, name, M, K, inp):
    """Values of case `name` for an [M, K] tensor in dtype `inp` (exactly representable)."""
    X = [[0.0] * K for _ in range(M)]
    def normal_rows(scale, spread):
        for m in range(M):
            row_scale = scale * math.ldexp(1.0, int(rng.uniform() * (2 * spread + 1)) - spread)
            for k in range(K):
                X[m][k] = rng.normal() * row_scale
    if name.startswith("normal"):  # normal_<scale>: rows over 2^-6..2^6 around the scale
        normal_rows(float(name.split("_")[1]), 6)
    elif name == "nearmax":  # |x| in [0.85, 1] of 300: most codes land at or next to the format's largest ones
        for m in range(M):
            for k in range(K):
                X[m][k] = (0.85 + 0.15 * rng.uniform()) * 300.0 * (1 if rng.uniform() < 0.5 else -1)
    elif name == "tiny":  # f32-subnormal and barely normal values: scale overflow, e8m0 of a subnormal, S_enc cap
        for m in range(M):
            for k in range(K):
                X[m][k] = rng.normal() * math.ldexp(1.0, -126 - (m % 8))
    elif name == "huge":
        normal_rows(1e37, 3)
    elif name == "subnormal":  # f16 subnormals and around them
        normal_rows(2e-6, 4)
    elif name in ("inf", "nan"):
        normal_rows(1.0, 3)
        special = [INF, -INF] if name == "inf" else [NAN, -NAN, NAN]
        for j, v in enumerate(special):
            X[(j * 7 + 2) % M][(j * 13 + 3) % K] = v
    elif name == "zeros":
        for m in range(M):
            for k in range(K):
                X[m][k] = -0.0 if (m + k) % 3 == 0 else 0.0
    elif name == "zeroblock":  # a zero 1x128 row block and a zero 32-token column run among normal values
        normal_rows(1.0, 2)
        for k in range(min(K, 128)):
            X[0][k] = 0.0
        for m in range(min(M, 32)):
            X[m][K - 1] = 0.0
    else:
        raise ValueError(name)
    return [[to_dtype(v, inp) if v == v else NAN for v in row] for row in X]


CASES = [  # (case, M, K, input dtype)
    ("normal_1", 37, 144, "f32"),
    ("normal_1e-6", 33, 17, "f32"),
    ("normal_1e4", 64, 96, "bf16"),
    ("normal_1e-2", 130, 45, "f16"),
    ("nearmax", 24, 64, "f32"),
    ("tiny", 16, 48, "bf16"),
    ("huge", 8, 40, "f32"),
    ("subnormal", 20, 32, "f16"),
    ("inf", 37, 40, "f32"),
    ("nan", 37, 40, "bf16"),
    ("zeros", 17, 33, "f32"),
    ("zeroblock", 34, 136, "bf16"),
]
SPECIAL_CASES = ("inf", "nan", "zeros", "zeroblock")
CONFIGS = [  # (format, data dtype, options)
    ("fp8_per_tensor", "e4m3", {}), ("fp8_per_tensor", "e4m3", {"pow2": True}), ("fp8_per_tensor", "e5m2", {}),
    ("fp8_block_1d", "e4m3", {"pow2": True}), ("fp8_block_1d", "e4m3", {}), ("fp8_block_1d", "e5m2", {"pow2": True}),
    ("fp8_block_2d", "e4m3", {"pow2": True}), ("fp8_block_2d", "e4m3", {}),
    ("mxfp8", "e4m3", {}), ("mxfp8", "e5m2", {}),
    ("nvfp4_1d", "e2m1", {}), ("nvfp4_1d", "e2m1", {"rht": True}), ("nvfp4_1d", "e2m1", {"rht": True, "sr": 1234}),
    ("nvfp4_1d", "e2m1", {"sr": 99}), ("nvfp4_2d", "e2m1", {}),
]
# Upper bounds of the decode self-check (rel-L2 of a decoded copy vs its values, ordinary cases).
DECODE_BOUND = {"e4m3": 0.04, "e5m2": 0.08, "e2m1": 0.2}


def element_casts(g, rng):
    xs = [f32_from_bits(u << 16) for u in range(65536)]  # every bf16 value
    for _ in range(8000):
        xs.append(f32(rng.normal() * math.ldexp(1.0, int(rng.uniform() * 300) - 150)))
    xs += [i / 8 for i in range(256)]
    for fmt in (E4M3, E5M2, E2M1):  # every tie and its f32 neighbours, and values just past the largest code
        for mid in fmt.mids + [fmt.max * 1.0625, fmt.max * 1.125]:
            u = f32_bits(mid)
            for d in (-1, 0, 1):
                xs += [f32_from_bits(u + d), -f32_from_bits(u + d)]
    xs = [x for x in xs if x == x]
    if g.torch is not None:  # these records' codes come from torch itself
        torch = g.torch
        t = torch.tensor(xs, dtype=torch.float32)
        for kind, dt, tdt in ((0, "e4m3", torch.float8_e4m3fn), (1, "e5m2", torch.float8_e5m2)):
            codes = t.clamp(-FMT_MAX[dt], FMT_MAX[dt]).to(tdt).view(torch.uint8).tolist()
            table = [MINI[dt].cast(x) for x in xs]
            if codes != table:
                bad = [(x, a, b) for x, a, b in zip(xs, codes, table) if a != b]
                sys.exit(f"torch and the {dt} table disagree: {bad[:5]}")
            g.record(dt, kind, xs, codes)
        tc, source = torch_e2m1(torch, xs)
        if tc is not None and tc != [E2M1.cast(x) for x in xs]:
            sys.exit(f"{source} and the e2m1 table disagree on the element casts")
    else:
        g.record("e4m3", 0, xs, [E4M3.cast(x) for x in xs])
        g.record("e5m2", 1, xs, [E5M2.cast(x) for x in xs])
    g.record("e2m1", 2, xs, [E2M1.cast(x) for x in xs])
    pos = [abs(x) for x in xs if math.isfinite(x) and abs(x) >= math.ldexp(1.0, -126)]
    pos += [math.ldexp(1.0 + i / 64, -150 + i) for i in range(24)]  # f32 subnormals (the 2^-127 rule)
    g.record("e8m0", 3, pos, [e8m0_ceil(x) for x in pos])
    g.record("e4m3_nan", 0, [NAN, -NAN], [0x7F, 0x7F])
    g.record("e5m2_nan", 1, [NAN, -NAN], [0x7F, 0x7F])
    g.record("e2m1_nan", 2, [NAN, -NAN], [0x7, 0x7])
    g.record("e8m0_special", 3, [NAN, INF, 0.0], [0xFF, 0xFE, 0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--torch", action="store_true", help="cross-check every cast with PyTorch (the default if it imports)")
    mode.add_argument("--pure", action="store_true", help="no torch: tables only (the sanity mode)")
    ap.add_argument("--out", default="tests/data/quant_vectors.bin")
    ap.add_argument("--verify", metavar="FILE", help="compare the result with FILE instead of writing --out")
    args = ap.parse_args()
    torch_mod = None
    if not args.pure:
        try:
            import torch as torch_mod
        except ImportError:
            if args.torch:
                sys.exit("--torch: PyTorch does not import")
            print("PyTorch is not available: tables only (as --pure)")
    self_check()
    g = Gen(torch_mod)
    rng = Stream(20261202)
    element_casts(g, rng)
    for fmt, dt, opts in CONFIGS:
        for case, M, K, inp in CASES:
            cfg = Config(fmt, dt, inp, **opts)
            X = make_case(Stream(hash_key(case, M, K)), case, M, K, inp)
            out, err = g.quantize(X, M, K, cfg)
            if case not in SPECIAL_CASES and case not in ("tiny", "huge", "subnormal") and err > DECODE_BOUND[dt]:
                sys.exit(f"self-check: {cfg.name()}|{case} decodes with rel-L2 {err:.3g} > {DECODE_BOUND[dt]}")
            g.record(f"{cfg.name()}|{case}", 20, [v for row in X for v in row], out, M, K)
    if torch_mod is not None:
        g.torch_check()
    blob = b"".join(g.records)
    digest = hashlib.sha256(blob).hexdigest()
    if args.verify:
        with open(args.verify, "rb") as f:
            same = f.read() == blob
        print(f"{len(g.records)} records, sha256 {digest}: {'identical to' if same else 'DIFFERENT from'} {args.verify}")
        sys.exit(0 if same else 1)
    with open(args.out, "wb") as f:
        f.write(blob)
    print(f"{len(g.records)} records, {len(blob)} bytes, sha256 {digest} → {args.out}")


def hash_key(*parts):
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


if __name__ == "__main__":
    main()
