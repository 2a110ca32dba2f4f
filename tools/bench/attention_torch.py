#!/usr/bin/env python3
"""Attention forward and backward: `teengine bench attention` against PyTorch's scaled_dot_product_attention on its
flash and cuDNN backends (the faster of the two is the baseline of the ratios; the ratio to the flash backend, which
the targets name, is in the JSON too), the same shapes in the same call, our backward deterministic and not. Medians of
CUDA-event timings; the backward is timed as PyTorch's autograd backward of one forward (dq, dk, dv returned),
our backward as its kernels alone.
Prints one JSON line per shape and a ratio table.

    python3 tools/bench/attention_torch.py --teengine BUILD/tools/teengine/teengine [--json out.json]
"""
import argparse
import json
import subprocess

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from compare_torch import time_cuda

# (batch, seq, heads, kv_heads, head_dim, causal)
SHAPES = [(8, 2048, 32, 32, 128, True), (8, 2048, 32, 32, 128, False), (8, 2048, 32, 8, 128, True),
          (16, 1024, 16, 16, 64, True), (2, 8192, 32, 32, 128, True)]


def backend_times(backend, q, k, v, dout, causal, gqa):
    """fwd and fwd+bwd medians on one SDPA backend, or None where it refuses the shape."""
    try:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            with torch.no_grad():
                fwd = time_cuda(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa))

            def step():  # the gradients returned, not accumulated into .grad (no extra adds on PyTorch's side)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
                torch.autograd.grad(o, (q, k, v), dout)
            return {"fwd_ms": fwd, "fwd_bwd_ms": time_cuda(step)}
    except RuntimeError:
        return None


def torch_times(batch, seq, heads, kv, dim, causal):
    """PyTorch's flash backend (what the targets name) and its cuDNN backend; the faster of the two is the baseline
    the ratios use, so they never flatter us."""
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    k = torch.randn(batch, kv, seq, dim, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    v = torch.randn(batch, kv, seq, dim, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    dout = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    runs = {name: backend_times(b, q, k, v, dout, causal, kv != heads)
            for name, b in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))}
    runs = {name: r for name, r in runs.items() if r}
    fwd = min(runs, key=lambda n: runs[n]["fwd_ms"])
    both = min(runs, key=lambda n: runs[n]["fwd_bwd_ms"])
    return {"backend": f"fwd {fwd}, fwd+bwd {both}", "fwd_ms": runs[fwd]["fwd_ms"],
            "fwd_bwd_ms": runs[both]["fwd_bwd_ms"], "backends": runs}


def ours(exe, batch, seq, heads, kv, dim, causal, deterministic=True, interleaved=False):
    cmd = [exe, "bench", "attention", "--batch", str(batch), "--seq", str(seq), "--heads", str(heads), "--kv-heads",
           str(kv), "--head-dim", str(dim), "--dtype", "bf16", "--device", "cuda", "--json"]
    if not causal:
        cmd.append("--full")
    if not deterministic:
        cmd.append("--nondeterministic")
    if interleaved:
        cmd.append("--interleaved")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        return {"error": (r.stderr or r.stdout)[-400:]}
    return json.loads(r.stdout)


def nd_text(r):
    nd = r["teengine_nondeterministic"]
    if "fwd_ms" not in nd:
        return f"error: {nd.get('error')} | -"
    return f"{nd['fwd_bwd_ms']:.3f} (validated {nd['validated']}) | {r['ratio_fwd_bwd_nondeterministic']:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teengine", required=True)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for s in SHAPES:
        t, o, nd = torch_times(*s), ours(a.teengine, *s), ours(a.teengine, *s, deterministic=False)
        row = {"batch": s[0], "seq": s[1], "heads": s[2], "kv_heads": s[3], "head_dim": s[4], "causal": s[5],
               "torch": t, "teengine": o, "teengine_nondeterministic": nd}
        if "fwd_ms" in o:
            row["ratio_fwd"] = o["fwd_ms"] / t["fwd_ms"]
            row["ratio_fwd_bwd"] = o["fwd_bwd_ms"] / t["fwd_bwd_ms"]
        if "fwd_ms" in o and "flash" in t["backends"]:  # the backend the target names
            row["ratio_fwd_bwd_flash"] = o["fwd_bwd_ms"] / t["backends"]["flash"]["fwd_bwd_ms"]
        if s[3] not in (1, s[2]):  # grouped-query: also the interleaved rows, whose query heads are copied
            row["teengine_interleaved"] = ours(a.teengine, *s, interleaved=True)
        if "fwd_ms" in nd:  # PyTorch's flash and cuDNN backwards are nondeterministic too
            row["ratio_fwd_bwd_nondeterministic"] = nd["fwd_bwd_ms"] / t["fwd_bwd_ms"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("| B x S | heads/kv of D | causal | torch fwd ms | ours fwd ms | ratio | torch fwd+bwd ms | ours | ratio "
          "| ours nondeterministic | ratio |")
    for r in rows:
        o, t = r["teengine"], r["torch"]
        if "fwd_ms" not in o:
            print(f"| {r['batch']} x {r['seq']} | error: {o.get('error')} |")
            continue
        print(f"| {r['batch']} x {r['seq']} | {r['heads']}/{r['kv_heads']} of {r['head_dim']} | {r['causal']} | "
              f"{t['fwd_ms']:.3f} | {o['fwd_ms']:.3f} | {r['ratio_fwd']:.2f} | {t['fwd_bwd_ms']:.3f} | "
              f"{o['fwd_bwd_ms']:.3f} | {r['ratio_fwd_bwd']:.2f} | {nd_text(r)} | validated {o['validated']} "
              f"({t['backend']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
