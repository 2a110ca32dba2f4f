#!/usr/bin/env python3
"""teengine vs PyTorch on the same LayerNorm -> FC1 -> GELU -> FC2 shapes, in one process on one device (dev tool;
runs only where PyTorch sees a GPU). PyTorch side: eager bf16 (and CUDA-graph replay at small T), timed with CUDA
events, median of repeats. teengine side: `teengine bench block --json` on the same shapes, run from here so both
sides share the call. Prints a table of ratios teengine / PyTorch and writes all figures as JSON.

Same math on both sides: teengine's module is a residual branch, out = x + MLP(x) (FC2's bias rides in the residual
add), and its training step computes the mean-squared-error loss and its gradient before the backward. The PyTorch
reference ("torch ms") does the same: x + MLP(x), and the gradients of mse_loss(out, target) (returned by
torch.autograd.grad, not accumulated into .grad). The bare MLP without the
residual (and, for the step, backward from a given dy) is timed too and printed as "mlp-only ms" with its own ratio,
so both comparisons are on record.

  python3 tools/bench/compare_torch.py --teengine build/tools/teengine/teengine [--json out.json]
"""
import argparse
import json
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F

H, FFN = 4096, 16384


def progress(what, value):
    """Each figure as it is measured (stderr), so a run cut short by a time limit still reports what it reached."""
    print(f"  {what}: {value}", file=sys.stderr, flush=True)


def time_cuda(fn, warmup=5, reps=20, inner=1):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) / inner)
    return statistics.median(samples)


class Mlp:
    def __init__(self, grad):
        g = torch.Generator(device="cuda").manual_seed(7)
        def p(*shape, std):
            return (torch.randn(shape, device="cuda", generator=g) * std).bfloat16().requires_grad_(grad)
        self.ln_w, self.ln_b = p(H, std=0.1), p(H, std=0.1)
        self.w1, self.b1 = p(FFN, H, std=H ** -0.5), p(FFN, std=0.02)
        self.w2, self.b2 = p(H, FFN, std=FFN ** -0.5), p(H, std=0.02)

    def params(self):
        return [self.ln_w, self.ln_b, self.w1, self.b1, self.w2, self.b2]

    def __call__(self, x):
        h = F.layer_norm(x, [H], self.ln_w, self.ln_b, 1e-5)
        h = F.gelu(F.linear(h, self.w1, self.b1), approximate="tanh")
        return F.linear(h, self.w2, self.b2)


def torch_side(tokens, with_step=True):
    res = {}
    with torch.no_grad():
        m = Mlp(False)
        for t in tokens:
            x = torch.randn(t, H, device="cuda").bfloat16()
            inner = 10 if t <= 256 else 1
            res[f"fwd_mlponly_T{t}"] = time_cuda(lambda: m(x), inner=inner)
            res[f"fwd_eager_T{t}"] = time_cuda(lambda: x + m(x), inner=inner)
            progress(f"torch eager T={t} ms", res[f"fwd_eager_T{t}"])
            if t <= 256:
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        x + m(x)
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(g):
                    x + m(x)
                res[f"fwd_graph_T{t}"] = time_cuda(g.replay, inner=10)
    m = Mlp(True)
    for t in (8192,) if with_step else ():
        x = torch.randn(t, H, device="cuda").bfloat16().requires_grad_(True)
        dy = torch.randn(t, H, device="cuda").bfloat16()
        target = torch.randn(t, H, device="cuda").bfloat16()
        wrt = [x] + m.params()
        # The gradients returned, not accumulated into .grad: no extra adds on PyTorch's side.
        def step_mlp_only():
            torch.autograd.grad(m(x), wrt, dy)
        def step():
            torch.autograd.grad(F.mse_loss(x + m(x), target), wrt)
        res[f"fwdbwd_mlponly_T{t}"] = time_cuda(step_mlp_only, reps=10)
        res[f"fwdbwd_eager_T{t}"] = time_cuda(step, reps=10)
    return res


def teengine_side(binary, tokens, with_step=True):
    res = {}
    def bench(recipe, t, backward=False, graph=False):
        cmd = [binary, "bench", "block", "--module", "layernorm_mlp", "--tokens", str(t), "--hidden", str(H),
               "--ffn", str(FFN), "--recipe", recipe, "--json"] + (["--backward"] if backward else []) + \
              (["--cuda-graph", "on"] if graph else [])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode not in (0, 1) or not p.stdout.strip():
            print("teengine bench failed:", " ".join(cmd), p.stderr[-2000:])
            return None
        r = json.loads(p.stdout)
        what = f"teengine {recipe}{'+graph' if graph else ''} T={t}{' fwd+bwd' if backward else ''} ms"
        progress(what, r["median_ms"])
        return r
    for recipe in ("none", "fp8_block", "fp8_current"):
        for t in tokens:
            if recipe == "fp8_current" and t > 256:
                continue
            res[f"fwd_{recipe}_T{t}"] = bench(recipe, t)
            if t <= 256:  # small T: the forward replayed as one CUDA graph too (against PyTorch eager and graph)
                res[f"fwd_{recipe}+graph_T{t}"] = bench(recipe, t, graph=True)
    for recipe in ("none", "fp8_block") if with_step else ():  # forward + loss + backward, no optimizer (as PyTorch)
        res[f"fwdbwd_{recipe}_T8192"] = bench(recipe, 8192, True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teengine", required=True)
    ap.add_argument("--json")
    ap.add_argument("--tokens", default="16,64,256,1000,8192")
    ap.add_argument("--forward-only", action="store_true", help="skip the T=8192 forward + backward comparison")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    torch.backends.cuda.matmul.allow_tf32 = False
    pt = torch_side(tokens, not args.forward_only)
    te = teengine_side(args.teengine, tokens, not args.forward_only)
    rows = []
    for key, r in te.items():
        if r is None:
            continue
        kind, recipe, t = key.split("_", 1)[0], key.split("_", 1)[1].rsplit("_T", 1)[0], int(key.rsplit("_T", 1)[1])
        ref, bare = pt.get(f"{kind}_eager_T{t}"), pt.get(f"{kind}_mlponly_T{t}")
        rows.append({"what": kind, "recipe": recipe, "tokens": t, "teengine_ms": r["median_ms"],
                     "torch_eager_ms": ref, "ratio": r["median_ms"] / ref if ref else None,
                     "torch_mlp_only_ms": bare, "ratio_mlp_only": r["median_ms"] / bare if bare else None,
                     "torch_graph_ms": pt.get(f"{kind}_graph_T{t}"), "gemm_floor_ms": r["gemm_floor_ms"],
                     "validated": r["validated"]})
    print(f"{'what':7} {'recipe':18} {'T':>6} {'teengine ms':>12} {'torch ms':>10} {'ratio':>7} {'mlp-only ms':>12} "
          f"{'ratio':>7} {'graph ms':>9} {'floor ms':>9} ok")
    for r in rows:
        g = f"{r['torch_graph_ms']:.4f}" if r["torch_graph_ms"] else "-"
        print(f"{r['what']:7} {r['recipe']:18} {r['tokens']:>6} {r['teengine_ms']:>12.4f} {r['torch_eager_ms']:>10.4f} "
              f"{r['ratio']:>7.3f} {r['torch_mlp_only_ms']:>12.4f} {r['ratio_mlp_only']:>7.3f} {g:>9} "
              f"{r['gemm_floor_ms']:>9.4f} {r['validated']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "torch_side": pt,
                       "teengine_side": te, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
