// `teengine bench comm`: the sequence-parallel gather on W ranks. Validates the gather of the exact configuration
// against quantize(concat) on one rank, then times each path: the planned gather of the requested usages, the
// quantized row-wise gather (when §4 allows it), the fallback (bf16 gather + one quantize) and the bare bf16
// gather — with the bytes each writes per rank. Local backend: W threads on one device (the GPU when present);
// nccl backend: run under `teengine launch -n N`.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include "comm/gather.h"
#include "comm/local_communicator.h"
#include "comm/nccl_communicator.h"
#include "engine/error.h"
#include "tools/teengine/bench_util.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

struct CommArgs {
  std::string backend = "local";
  int world = 4;
  int64_t local_tokens = 1000;
  int64_t hidden = 4096;
  std::string format = "fp8_block";
  std::string usages = "both";
  std::string device = "auto";
  int warmup = 3, repeats = 20;
  bool json = false;
};

QuantizerConfig parse_format(const std::string& name) {
  static const std::map<std::string, QuantizerConfig> aliases = [] {
    std::map<std::string, QuantizerConfig> m;
    auto add = [&](const char* n, QuantFormat f, ScalingKind s, bool pow2) {
      QuantizerConfig c;
      c.format = f;
      c.scaling = s;
      c.pow2_scales = pow2;
      if (nvfp4_format(f)) c.data_dtype = DType::fp4_e2m1;
      m[n] = c;
    };
    add("fp8_current", QuantFormat::fp8_per_tensor, ScalingKind::current, false);
    add("fp8_delayed", QuantFormat::fp8_per_tensor, ScalingKind::delayed, false);
    add("fp8_block", QuantFormat::fp8_block_1d, ScalingKind::current, true);
    add("fp8_block_1d", QuantFormat::fp8_block_1d, ScalingKind::current, true);
    add("fp8_block_2d", QuantFormat::fp8_block_2d, ScalingKind::current, true);
    add("mxfp8", QuantFormat::mxfp8, ScalingKind::current, false);
    add("nvfp4", QuantFormat::nvfp4_1d, ScalingKind::current, false);
    add("nvfp4_1d", QuantFormat::nvfp4_1d, ScalingKind::current, false);
    add("nvfp4_2d", QuantFormat::nvfp4_2d, ScalingKind::current, false);
    return m;
  }();
  auto it = aliases.find(name);
  if (it == aliases.end())
    TE_INPUT_ERROR("unknown --format '" << name << "'",
                   "use fp8_current, fp8_delayed, fp8_block (1d), fp8_block_2d, mxfp8, nvfp4 (1d) or nvfp4_2d");
  return it->second;
}

Usage parse_usages(const std::string& s) {
  if (s == "rowwise") return Usage::rowwise;
  if (s == "columnwise") return Usage::columnwise;
  if (s == "both") return Usage::both;
  TE_INPUT_ERROR("unknown --usages '" << s << "'", "use rowwise, columnwise or both");
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return std::memcmp(ha.data_ptr(), hb.data_ptr(), static_cast<size_t>(ha.nbytes())) == 0;
}
bool same_qt(const QuantizedTensor& a, const QuantizedTensor& b) {
  return same_bytes(a.rowwise_data, b.rowwise_data) && same_bytes(a.rowwise_scale_inv, b.rowwise_scale_inv) &&
         same_bytes(a.columnwise_data, b.columnwise_data) &&
         same_bytes(a.columnwise_scale_inv, b.columnwise_scale_inv) && same_bytes(a.rowwise_amax, b.rowwise_amax) &&
         same_bytes(a.columnwise_amax, b.columnwise_amax);
}

struct PathTiming {
  std::string name, route;
  double ms = 0;
  int64_t bytes = 0;  // written per rank by the collective
};

int run_bench_comm(const CommArgs& a) {
  if (a.world < 1 || a.local_tokens < 0 || a.hidden < 1 || a.repeats < 1)
    TE_INPUT_ERROR("--world, --hidden and --repeats must be >= 1, --local-tokens >= 0", "");
  const QuantizerConfig qc = parse_format(a.format);
  const Usage usages = parse_usages(a.usages);
  const bool nccl = a.backend == "nccl";
  if (!nccl && a.backend != "local") TE_INPUT_ERROR("unknown --backend '" << a.backend << "'", "use local or nccl");

  std::vector<std::unique_ptr<Communicator>> comms;
  if (nccl) {
    comms.push_back(make_nccl_communicator_from_env());
  } else {
    comms = make_local_group(a.world, {parse_device(a.device), default_comm_timeout()});
  }
  const Device dev = comms[0]->device();
  const int W = comms[0]->size();
  const int64_t Ml = a.local_tokens, K = a.hidden, M = W * Ml;
  // The global activation [M, K] bf16; each rank (thread or process) holds rows [r·M_l, (r+1)·M_l).
  Tensor x = Tensor::empty({M, K}, DType::bf16, dev);
  x.fill_normal(2024, 0.f, 1.f);
  (void)Tensor::zeros({1}, DType::f32, dev).to_f32_vector();  // the fill is done before the rank streams start

  Quantizer qref(qc);
  const QuantizedTensor ref = qref.quantize(x, usages);
  std::vector<PathTiming> paths;
  bool valid = true;
  std::string planned_rows, planned_cols, reason;
  std::mutex mu;

  run_ranks(comms, [&](Communicator& c) {
    const int r = nccl ? 0 : c.rank();
    const int rank = c.rank();
    Stream s = Stream::create(c.device());
    Tensor shard = x.narrow(0, rank * Ml, Ml);
    if (nccl && c.size() > 1) shard = shard.contiguous();  // each process holds its own rows (x is global here)
    Quantizer q(qc);
    // 1. validate the exact configuration that is timed
    GatherResult g = gather_along_first_dim(shard, c, &q, usages, false, s);
    const bool ok = same_qt(g.quantized(), ref);
    {
      std::lock_guard<std::mutex> lock(mu);
      valid = valid && ok;
      if (r == 0) {
        planned_rows = std::string(gather_route_name(g.plan.rowwise.path));
        planned_cols = std::string(gather_route_name(g.plan.columnwise.path));
        reason = g.plan.columnwise.reason.empty() ? g.plan.rowwise.reason : g.plan.columnwise.reason;
      }
    }
    // 2. time each path: all ranks run the same loop; rank 0's wall time per iteration (stream drained at the end)
    auto time_path = [&](const std::string& name, const std::function<std::pair<std::string, int64_t>()>& fn) {
      std::pair<std::string, int64_t> info;
      for (int i = 0; i < a.warmup; ++i) info = fn();
      s.synchronize();
      all_reduce(Tensor::zeros({1}, DType::f32, c.device(), s), c, ReduceOp::max, false, s);  // line up the ranks
      s.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.repeats; ++i) info = fn();
      s.synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / a.repeats;
      if (r == 0 && rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        paths.push_back({name, info.first, ms, info.second});
      }
    };
    time_path("planned_" + a.usages, [&] {
      GatherResult gr = gather_along_first_dim(shard, c, &q, usages, false, s);
      return std::make_pair(std::string(gather_route_name(gr.plan.rowwise.path != GatherRoute::none
                                                              ? gr.plan.rowwise.path
                                                              : gr.plan.columnwise.path)),
                            gr.quantized_bytes + gr.fallback_bytes);
    });
    if (plan_gather(shard.shape(), &q, Usage::rowwise, c.size()).rowwise.path == GatherRoute::quantized)
      time_path("quantized_rowwise", [&] {
        GatherResult gr = gather_along_first_dim(shard, c, &q, Usage::rowwise, false, s);
        return std::make_pair(std::string("quantized"), gr.quantized_bytes);
      });
    time_path("fallback_" + a.usages, [&] {  // the fallback done by hand: bf16 gather, one quantize
      GatherResult gr = gather_along_first_dim(shard, c, nullptr, Usage::none, false, s);
      Quantizer qf(qc);
      (void)qf.quantize(gr.tensor(), usages, s);
      return std::make_pair(std::string("fallback"), gr.tensor().nbytes());
    });
    time_path("bf16_gather_only", [&] {
      GatherResult gr = gather_along_first_dim(shard, c, nullptr, Usage::none, false, s);
      return std::make_pair(std::string("high_precision"), gr.tensor().nbytes());
    });
  });

  nlohmann::json rep;
  rep["bench"] = "comm";
  rep["backend"] = a.backend;
  rep["device"] = dev.str();
  rep["world"] = W;
  rep["local_tokens"] = Ml;
  rep["hidden"] = K;
  rep["format"] = a.format;
  rep["usages"] = a.usages;
  rep["valid_vs_quantize_concat"] = valid;
  rep["planned_rowwise"] = planned_rows;
  rep["planned_columnwise"] = planned_cols;
  if (!reason.empty()) rep["fallback_reason"] = reason;
  nlohmann::json jp = nlohmann::json::array();
  for (const auto& p : paths)
    jp.push_back({{"path", p.name},
                  {"route", p.route},
                  {"ms", p.ms},
                  {"bytes_per_rank", p.bytes},
                  {"bytes_per_element", static_cast<double>(p.bytes) / std::max<double>(1.0, double(M) * double(K))},
                  {"GB_per_s_written", p.ms > 0 ? static_cast<double>(p.bytes) / (p.ms * 1e-3) / 1e9 : 0.0}});
  rep["paths"] = jp;
  bench::print_report(rep, a.json);
  if (!valid) {
    std::fprintf(stderr, "teengine bench comm: the gather does not equal quantize(concat)\n");
    return 1;
  }
  return 0;
}

}  // namespace

Command add_bench_comm(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("comm", "Sequence-parallel gather paths: validate, then time and bytes per path");
  auto a = std::make_shared<CommArgs>();
  sub->add_option("--backend", a->backend, "local (W threads on one device) or nccl (under teengine launch)")
      ->capture_default_str();
  sub->add_option("--world", a->world, "Ranks (local backend)")->capture_default_str();
  sub->add_option("--local-tokens", a->local_tokens, "Rows per rank (local M)")->capture_default_str();
  sub->add_option("--hidden", a->hidden, "Columns (K)")->capture_default_str();
  sub->add_option("--format", a->format,
                  "fp8_current | fp8_delayed | fp8_block | fp8_block_2d | mxfp8 | nvfp4 | nvfp4_2d")
      ->capture_default_str();
  sub->add_option("--usages", a->usages, "rowwise | columnwise | both")->capture_default_str();
  sub->add_option("--device", a->device, "auto | cpu | cuda | cuda:N (local backend)")->capture_default_str();
  sub->add_option("--warmup", a->warmup)->capture_default_str();
  sub->add_option("--repeats", a->repeats)->capture_default_str();
  sub->add_flag("--json", a->json, "Print the report as JSON");
  return {sub, [a] { return run_bench_comm(*a); }};
}

}  // namespace te::cli
