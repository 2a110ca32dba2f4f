// teengine bench norm: LayerNorm/RMSNorm forward and backward (and, with --quantize, the fused norm + quantize
// forward) validated against the CPU reference on a row subset, then timed against copy bandwidth.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/compare.h"
#include "engine/error.h"
#include "ops/norm/norm.h"
#include "ops/norm/norm_quantize.h"
#include "ops/quant/format.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {


struct NormOpts {
  std::string op = "layernorm", shape = "8192x4096", dtype = "bf16", quantize, device = "auto";
  float eps = 1e-5f;
  bool json = false;
};

std::pair<int64_t, int64_t> parse_mxn(const std::string& s) {
  const auto x = s.find('x');
  long long m = 0, n = 0;
  if (x == std::string::npos || std::sscanf(s.c_str(), "%lldx%lld", &m, &n) != 2 || m <= 0 || n <= 0)
    TE_INPUT_ERROR("bad --shape '" << s << "'", "use ROWSxCOLS, e.g. 8192x4096");
  return {m, n};
}

int run_norm(const NormOpts& o) {
  const auto kind = norm_kind_from_name(o.op);
  if (!kind) TE_INPUT_ERROR("unknown --op '" << o.op << "'", "use layernorm or rmsnorm");
  const auto dt = dtype_from_name(o.dtype);
  if (!dt || !is_high_precision(*dt)) TE_INPUT_ERROR("bad --dtype '" << o.dtype << "'", "use f32, bf16 or f16");
  std::optional<QuantFormat> qfmt;
  if (!o.quantize.empty()) {
    qfmt = quant_format_from_name(o.quantize);
    if (!qfmt) TE_INPUT_ERROR("unknown --quantize '" << o.quantize << "'", "e.g. fp8_block_1d");
  }
  const auto [M, H] = parse_mxn(o.shape);
  const Device dev = parse_device(o.device);
  const Stream stream = Stream::create(dev);
  const bool ln = *kind == NormKind::layernorm;

  // [M, H] dt input; gamma/beta [H] in the same dtype (TE's default parameter dtype = activation dtype).
  Tensor x = Tensor::empty({M, H}, *dt, dev, stream);
  x.fill_normal(1, 0.5f, 2.f, stream);
  Tensor gamma = Tensor::empty({H}, *dt, dev, stream), beta;
  gamma.fill_normal(2, 1.f, 0.5f, stream);
  if (ln) {
    beta = Tensor::empty({H}, *dt, dev, stream);
    beta.fill_normal(3, 0.f, 0.5f, stream);
  }
  NormForward f = norm_forward(*kind, x, gamma, beta, o.eps, *dt, stream);
  Tensor dy = Tensor::empty({M, H}, *dt, dev, stream);
  dy.fill_normal(4, 0.f, 1.f, stream);
  NormBackward b = norm_backward(*kind, dy, x, f.mean, f.rstd, gamma, stream);

  // Validate the timed configuration on its first rows against the CPU reference (row results are independent).
  const int64_t R = std::min<int64_t>(M, 256);
  const Stream cpu;
  const Tensor xs = x.narrow(0, 0, R).to(Device::cpu(), stream), dys = dy.narrow(0, 0, R).to(Device::cpu(), stream);
  const Tensor gc = gamma.to(Device::cpu(), stream), bc = ln ? beta.to(Device::cpu(), stream) : Tensor();
  NormForward fr = norm_forward(*kind, xs, gc, bc, o.eps, *dt, cpu);
  NormBackward br = norm_backward(*kind, dys, xs, fr.mean, fr.rstd, gc, cpu);
  const double err_fwd = rel_l2(f.out.narrow(0, 0, R).to_f32_vector(stream), fr.out.to_f32_vector());
  const double err_bwd = rel_l2(b.dx.narrow(0, 0, R).to_f32_vector(stream), br.dx.to_f32_vector());
  // GPU vs CPU, both rounded to dt: a few output ulps.
  const double tol = *dt == DType::f32 ? 1e-5 : 1e-2;
  const bool ok = err_fwd <= tol && err_bwd <= tol;

  const bench::Timing tf = bench::time_per_op([&] { norm_forward(*kind, x, gamma, beta, o.eps, f.out, f.mean, f.rstd, stream); }, stream);
  Tensor dgamma = b.dgamma, dbeta = b.dbeta;
  const bench::Timing tb =
      bench::time_per_op([&] { norm_backward(*kind, dy, x, f.mean, f.rstd, gamma, b.dx, dgamma, dbeta, stream); }, stream);
  const double copy = bench::copy_bandwidth_gbs(stream);

  const double es = dtype_bits(*dt) / 8.0;
  const double stats = (ln ? 2.0 : 1.0) * 4.0 * M;
  // fwd: read x, write y, stats; bwd: read x, dy, write dx (+ stats, gamma; dgamma/dbeta negligible)
  const double fwd_bytes = 2.0 * M * H * es + stats + (ln ? 2 : 1) * H * es;
  const double bwd_bytes = 3.0 * M * H * es + stats + H * es;
  nlohmann::json r = {{"bench", "norm"},
                      {"op", std::string(norm_kind_name(*kind))},
                      {"shape", {M, H}},
                      {"dtype", std::string(dtype_name(*dt))},
                      {"device", dev.str()},
                      {"validated", ok},
                      {"rel_l2_fwd_vs_cpu", err_fwd},
                      {"rel_l2_bwd_dx_vs_cpu", err_bwd},
                      {"validated_rows", R}};
  r.update(bench::fwd_bwd_throughput(tf, fwd_bytes, tb, bwd_bytes, copy));
  bool qok = true;
  if (qfmt) {
    // Fused norm + quantize (row-wise) against norm then Quantizer::quantize: same bytes, then both timed.
    QuantizerConfig qc;
    qc.format = *qfmt;
    qc.pow2_scales = *qfmt == QuantFormat::fp8_block_1d || *qfmt == QuantFormat::fp8_block_2d;
    Quantizer quant(qc);
    NormQuantized fused = norm_forward_quantized(*kind, x, gamma, beta, o.eps, *dt, quant, Usage::rowwise, stream);
    NormQuantized plain = norm_forward_then_quantize(*kind, x, gamma, beta, o.eps, *dt, quant, Usage::rowwise, stream);
    auto bytes = [&](const Tensor& t) {
      Tensor c = t.to(Device::cpu(), stream);
      return std::vector<uint8_t>(static_cast<const uint8_t*>(c.data_ptr()),
                                  static_cast<const uint8_t*>(c.data_ptr()) + c.nbytes());
    };
    qok = bytes(fused.out.rowwise_data) == bytes(plain.out.rowwise_data) &&
          bytes(fused.out.rowwise_scale_inv) == bytes(plain.out.rowwise_scale_inv);
    const bench::Timing tq = bench::time_per_op(
        [&] { (void)norm_forward_quantized(*kind, x, gamma, beta, o.eps, *dt, quant, Usage::rowwise, stream); },
        stream);
    const bench::Timing tu = bench::time_per_op(
        [&] { (void)norm_forward_then_quantize(*kind, x, gamma, beta, o.eps, *dt, quant, Usage::rowwise, stream); },
        stream);
    // read x, write fp8 data + scales + stats
    const double qbytes = double(M) * H * (es + 1.0) + 4.0 * M * ((H + 127) / 128) + stats;
    r["quantize"] = o.quantize;
    r["quantize_fused_kernel"] = fused.fused;
    r["quantize_bytes_equal_unfused"] = qok;
    r["fused_ms"] = tq.median_ms;
    r["fused_gbs"] = qbytes / (tq.median_ms * 1e-3) / 1e9;
    r["fused_fraction_of_copy"] = qbytes / (tq.median_ms * 1e-3) / 1e9 / copy;
    r["unfused_ms"] = tu.median_ms;
    r["fused_speedup"] = tu.median_ms / tq.median_ms;
  }
  r["validated"] = ok && qok;
  bench::print_report(r, o.json);
  return ok && qok ? 0 : 1;
}

}  // namespace

Command add_bench_norm(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("norm", "LayerNorm/RMSNorm (and fused quantize) against copy bandwidth");
  auto o = std::make_shared<NormOpts>();
  sub->add_option("--op", o->op, "layernorm | rmsnorm")->capture_default_str();
  sub->add_option("--shape", o->shape, "ROWSxHIDDEN")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "f32 | bf16 | f16 (input, output and parameters)")->capture_default_str();
  sub->add_option("--quantize", o->quantize, "fused quantized output format, e.g. fp8_block_1d (row-wise)");
  sub->add_option("--device", o->device, "auto | cpu | cuda[:N]")->capture_default_str();
  sub->add_option("--eps", o->eps, "epsilon")->capture_default_str();
  sub->add_flag("--json", o->json, "print the report as JSON");
  return {sub, [o] { return run_norm(*o); }};
}

}  // namespace te::cli
