// teengine bench act: GELU/SwiGLU/ReLU forward and backward validated against the CPU reference on a row subset,
// then timed against copy bandwidth.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "engine/compare.h"
#include "engine/error.h"
#include "ops/act/act.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {


struct ActOpts {
  std::string op = "gelu", shape = "8192x16384", dtype = "bf16", device = "auto";
  bool json = false;
};

int run_act(const ActOpts& o) {
  const auto kind = act_kind_from_name(o.op);
  if (!kind) TE_INPUT_ERROR("unknown --op '" << o.op << "'", "use gelu, swiglu or relu");
  const auto dt = dtype_from_name(o.dtype);
  if (!dt || !is_high_precision(*dt)) TE_INPUT_ERROR("bad --dtype '" << o.dtype << "'", "use f32, bf16 or f16");
  long long m = 0, n = 0;
  if (std::sscanf(o.shape.c_str(), "%lldx%lld", &m, &n) != 2 || m <= 0 || n <= 0)
    TE_INPUT_ERROR("bad --shape '" << o.shape << "'", "use ROWSxCOLS (the output shape; swiglu reads 2x the columns)");
  const int64_t M = m, F = n, in = *kind == ActKind::swiglu ? 2 * F : F;
  const Device dev = parse_device(o.device);
  const Stream stream = Stream::create(dev);

  Tensor x = Tensor::empty({M, in}, *dt, dev, stream);  // [M, F_in]
  x.fill_normal(1, 0.f, 2.f, stream);
  Tensor dy = Tensor::empty({M, F}, *dt, dev, stream);  // [M, F]
  dy.fill_normal(2, 0.f, 1.f, stream);
  Tensor y = act_forward(*kind, x, *dt, stream);
  Tensor dx = act_backward(*kind, dy, x, stream);

  const int64_t R = std::min<int64_t>(M, 256);
  const Tensor xs = x.narrow(0, 0, R).to(Device::cpu(), stream), dys = dy.narrow(0, 0, R).to(Device::cpu(), stream);
  const double err_fwd = rel_l2(y.narrow(0, 0, R).to_f32_vector(stream), act_forward(*kind, xs, *dt).to_f32_vector());
  const double err_bwd = rel_l2(dx.narrow(0, 0, R).to_f32_vector(stream), act_backward(*kind, dys, xs).to_f32_vector());
  const double tol = *dt == DType::f32 ? 1e-5 : 1e-2;
  const bool ok = err_fwd <= tol && err_bwd <= tol;

  const bench::Timing tf = bench::time_per_op([&] { act_forward(*kind, x, y, stream); }, stream);
  const bench::Timing tb = bench::time_per_op([&] { act_backward(*kind, dy, x, dx, stream); }, stream);
  const double copy = bench::copy_bandwidth_gbs(stream);
  const double es = dtype_bits(*dt) / 8.0;
  const double fwd_bytes = (double(M) * in + double(M) * F) * es;           // read x, write y
  const double bwd_bytes = (double(M) * F + 2.0 * double(M) * in) * es;     // read dy, x; write dx
  nlohmann::json r = {{"bench", "act"},
                      {"op", std::string(act_kind_name(*kind))},
                      {"shape", {M, F}},
                      {"input_shape", {M, in}},
                      {"dtype", std::string(dtype_name(*dt))},
                      {"device", dev.str()},
                      {"validated", ok},
                      {"rel_l2_fwd_vs_cpu", err_fwd},
                      {"rel_l2_bwd_vs_cpu", err_bwd},
                      {"validated_rows", R}};
  r.update(bench::fwd_bwd_throughput(tf, fwd_bytes, tb, bwd_bytes, copy));
  bench::print_report(r, o.json);
  return ok ? 0 : 1;
}

}  // namespace

Command add_bench_act(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("act", "Activations (and fused quantize)");
  auto o = std::make_shared<ActOpts>();
  sub->add_option("--op", o->op, "gelu | swiglu | relu")->capture_default_str();
  sub->add_option("--shape", o->shape, "ROWSxCOLS of the output")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "f32 | bf16 | f16")->capture_default_str();
  sub->add_option("--device", o->device, "auto | cpu | cuda[:N]")->capture_default_str();
  sub->add_flag("--json", o->json, "print the report as JSON");
  return {sub, [o] { return run_act(*o); }};
}

}  // namespace te::cli
