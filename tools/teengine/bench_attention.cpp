// teengine bench attention: scaled-dot-product attention forward and backward (ops/attention) on one shape,
// validated first against a float64 computation of a few query rows of the first sequence (every head), then timed.
// FLOPs count the two GEMM-shaped products of the forward (QKᵀ, PV: 4·B·H·S²·D) and the five of the backward
// (recomputed QKᵀ, dO·Vᵀ, dS·K, dSᵀ·Q, Pᵀ·dO: 10·B·H·S²·D), halved when causal — the convention flash-attention
// benchmarks use, so figures compare across implementations. On the GPU --kernels picks cuDNN's fused attention or
// the engine's own kernels (TEENGINE_ATTENTION_KERNELS otherwise); the report names the ones that ran.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/compare.h"
#include "engine/error.h"
#include "ops/attention/attention.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

struct AttentionOpts {
  int64_t batch = 2, seq = 1024, heads = 16, kv_heads = 0, head_dim = 64;
  bool full = false, json = false, nondeterministic = false, interleaved = false;
  std::string dtype = "bf16", device = "auto", kernels;
};

// out rows [0, rows) of sequence 0 in float64 from the QKV values the kernel read: [rows, heads·D].
std::vector<double> reference_rows(const AttentionLayout& l, bool causal, const std::vector<float>& qkv,
                                   int64_t rows) {
  const int64_t S = l.seq, D = l.head_dim, W = l.qkv_cols();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(static_cast<size_t>(rows * l.out_cols())), p(static_cast<size_t>(S));
  for (int64_t h = 0; h < l.heads; ++h)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t g = h / l.group(), n = causal ? i + 1 : S;
      double m = -std::numeric_limits<double>::infinity(), z = 0;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t e = 0; e < D; ++e)
          s += double(qkv[static_cast<size_t>(i * W + l.q_col(h) + e)]) *
               qkv[static_cast<size_t>(j * W + l.k_col(g) + e)];
        p[static_cast<size_t>(j)] = s * scale;
        m = std::max(m, s * scale);
      }
      for (int64_t j = 0; j < n; ++j) z += std::exp(p[static_cast<size_t>(j)] - m);
      for (int64_t e = 0; e < D; ++e) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j)
          o += std::exp(p[static_cast<size_t>(j)] - m) / z * qkv[static_cast<size_t>(j * W + l.v_col(g) + e)];
        out[static_cast<size_t>(i * l.out_cols() + h * D + e)] = o;
      }
    }
  return out;
}

int run_attention(const AttentionOpts& o) {
  const int64_t kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  if (o.batch < 1 || o.seq < 1 || o.heads < 1 || o.head_dim < 1 || o.heads % kv != 0)
    TE_INPUT_ERROR("bad shape: --batch " << o.batch << " --seq " << o.seq << " --heads " << o.heads << " --kv-heads "
                                         << kv << " --head-dim " << o.head_dim,
                   "all positive, and --kv-heads dividing --heads");
  const auto dt = dtype_from_name(o.dtype);
  if (!dt || !is_high_precision(*dt)) TE_INPUT_ERROR("bad --dtype '" << o.dtype << "'", "use f32, bf16 or f16");
  // The model's layout: grouped-query QKV rows with the heads' kinds apart (models/spec.h, qkv_kinds_apart).
  AttentionLayout l{o.heads, kv, o.head_dim, o.seq};
  l.kinds_apart = !o.interleaved && l.grouped_query();
  const AttentionOptions opt{!o.full, 0.0f, !o.nondeterministic};
  const int64_t T = o.batch * o.seq;
  if (!o.kernels.empty()) {
    if (o.kernels != "cudnn" && o.kernels != "own")
      TE_INPUT_ERROR("bad --kernels '" << o.kernels << "'", "use cudnn or own");
    setenv("TEENGINE_ATTENTION_KERNELS", o.kernels.c_str(), 1);  // what ops/attention reads at every call
  }
  const Device dev = parse_device(o.device);
  const Stream stream = Stream::create(dev);

  Tensor qkv = Tensor::empty({T, l.qkv_cols()}, *dt, dev, stream);
  qkv.fill_normal(1, 0.f, 1.f, stream);
  Tensor dout = Tensor::empty({T, l.out_cols()}, *dt, dev, stream);
  dout.fill_normal(2, 0.f, 1.f, stream);
  Tensor out = Tensor::empty({T, l.out_cols()}, *dt, dev, stream);
  Tensor lse = Tensor::empty({o.batch, o.heads, o.seq}, DType::f32, dev, stream);
  Tensor dqkv = Tensor::empty(qkv.shape(), *dt, dev, stream);
  attention_forward(l, opt, qkv, out, lse, stream);

  const int64_t rows = std::min<int64_t>(o.seq, 8);
  const std::vector<float> first = qkv.narrow(0, 0, o.seq).to_f32_vector(stream);
  const double err = rel_l2(out.narrow(0, 0, rows).to_f32_vector(stream), reference_rows(l, opt.causal, first, rows));
  const double tol = *dt == DType::f32 ? 1e-5 : *dt == DType::bf16 ? 1e-2 : 2e-3;

  // The nondeterministic backward against the deterministic one: its only difference is the order of dq's f32 sums.
  double err_bwd = 0;
  if (!opt.deterministic) {
    AttentionOptions det = opt;
    det.deterministic = true;
    Tensor reference = Tensor::empty(qkv.shape(), *dt, dev, stream);
    attention_backward(l, det, dout, qkv, out, lse, reference, stream);
    attention_backward(l, opt, dout, qkv, out, lse, dqkv, stream);
    err_bwd = rel_l2(dqkv.to_f32_vector(stream), reference.to_f32_vector(stream));
  }
  const bool ok = err <= tol && err_bwd <= tol;

  const int repeats = dev.is_cuda() ? 30 : 3;
  const bench::Timing tf =
      bench::time_it([&] { attention_forward(l, opt, qkv, out, lse, stream); }, stream, 1, repeats);
  const bench::Timing tb = bench::time_it([&] { attention_backward(l, opt, dout, qkv, out, lse, dqkv, stream); },
                                          stream, 1, repeats);
  const double flops = 4.0 * double(o.batch) * double(o.heads) * double(o.seq) * double(o.seq) * double(o.head_dim) *
                       (opt.causal ? 0.5 : 1.0);
  nlohmann::json r = {{"bench", "attention"},
                      {"batch", o.batch},
                      {"seq", o.seq},
                      {"heads", o.heads},
                      {"kv_heads", kv},
                      {"head_dim", o.head_dim},
                      {"causal", opt.causal},
                      {"qkv_layout", l.kinds_apart ? "kinds apart" : "interleaved"},
                      {"deterministic", opt.deterministic},
                      {"dtype", std::string(dtype_name(*dt))},
                      {"device", dev.str()},
                      {"kernels_fwd", dev.is_cuda() ? attention_kernels_name(last_attention_kernels(false)) : "cpu"},
                      {"kernels_bwd", dev.is_cuda() ? attention_kernels_name(last_attention_kernels(true)) : "cpu"},
                      {"validated", ok},
                      {"rel_l2_fwd_vs_f64", err},
                      {"validated_rows", rows},
                      {"rel_l2_bwd_vs_deterministic", err_bwd},
                      {"fwd_ms", tf.median_ms},
                      {"bwd_ms", tb.median_ms},
                      {"fwd_bwd_ms", tf.median_ms + tb.median_ms},
                      {"fwd_tflops", flops / (tf.median_ms * 1e9)},
                      {"bwd_tflops", 2.5 * flops / (tb.median_ms * 1e9)},
                      {"repeats", repeats}};
  bench::print_report(r, o.json);
  return ok ? 0 : 1;
}

}  // namespace

Command add_bench_attention(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("attention", "Scaled-dot-product attention forward and backward");
  auto o = std::make_shared<AttentionOpts>();
  sub->add_option("--batch", o->batch, "sequences")->capture_default_str();
  sub->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str();
  sub->add_option("--heads", o->heads, "query heads")->capture_default_str();
  sub->add_option("--kv-heads", o->kv_heads, "key/value heads (0: --heads)")->capture_default_str();
  sub->add_option("--head-dim", o->head_dim, "one head's width")->capture_default_str();
  sub->add_flag("--full", o->full, "attend to every token of the sequence (default: causal)");
  sub->add_flag("--interleaved", o->interleaved,
                "grouped-query QKV rows interleaved per key/value group, as checkpoints hold them (default: the "
                "model's layout, every query head, then every key, then every value)");
  sub->add_flag("--nondeterministic", o->nondeterministic,
                "cuDNN's backward with the query gradient accumulated by atomics (attention.deterministic: false)");
  sub->add_option("--dtype", o->dtype, "f32 | bf16 | f16")->capture_default_str();
  sub->add_option("--device", o->device, "auto | cpu | cuda[:N]")->capture_default_str();
  sub->add_option("--kernels", o->kernels,
                  "GPU kernels: cudnn | own (default: TEENGINE_ATTENTION_KERNELS, else cuDNN where it applies)");
  sub->add_flag("--json", o->json, "print the report as JSON");
  return {sub, [o] { return run_attention(*o); }};
}

}  // namespace te::cli
