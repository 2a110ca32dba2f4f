// Engine::metrics_json and what feeds it: each step's times, communication counters and peak memory, combined over
// the ranks (record_step), and the bounded history of steps (models/step_history.h).
#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/allocator.h"
#include "models/engine_state.h"

namespace teengine {
namespace {
int64_t peak_rss_bytes() {  // VmHWM of /proc/self/status; 0 where it cannot be read
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

constexpr int kCounters = 6;
te::PathCounter* counters(te::CommMetrics& m, int i) {
  te::PathCounter* all[kCounters] = {&m.gather_quantized, &m.gather_fallback, &m.gather_hp,
                                     &m.gather_local,     &m.reduce_scatter,  &m.all_reduce};
  return all[i];
}
}  // namespace

void Engine::Impl::record_step(double ms, double dev_ms, int64_t tokens) {
  detail::StepStats s;
  for (auto& c : group->comms)
    for (int k = 0; k < kCounters; ++k) {
      counters(s.comm, k)->calls += counters(c->metrics(), k)->calls;
      counters(s.comm, k)->bytes += counters(c->metrics(), k)->bytes;
    }
  const detail::StepStats::Rank mine{te::memory_stats(device()).peak_bytes, peak_rss_bytes()};
  s.ms = ms;
  s.device_ms = dev_ms;
  s.ranks = {mine};
  if (group->distributed()) {
    // One small all-gather: [ms bits, peak bytes, peak RSS, calls/bytes per counter] from every rank.
    constexpr int kFields = 4 + 2 * kCounters;
    std::vector<int64_t> pack(kFields);
    std::memcpy(&pack[0], &ms, sizeof(double));
    std::memcpy(&pack[1], &dev_ms, sizeof(double));
    pack[2] = mine.peak_bytes;
    pack[3] = mine.peak_rss_bytes;
    for (int k = 0; k < kCounters; ++k) {
      pack[4 + 2 * k] = counters(s.comm, k)->calls;
      pack[5 + 2 * k] = counters(s.comm, k)->bytes;
    }
    te::RankContext& ctx = *group->ctxs[0];
    te::Tensor in = te::Tensor::empty({kFields}, te::DType::i64);
    std::memcpy(in.data_ptr(), pack.data(), sizeof(int64_t) * kFields);
    te::Tensor all = te::Tensor::empty({world() * kFields}, te::DType::i64, ctx.device, ctx.stream);
    group->comms[0]->all_gather(in.to(ctx.device, ctx.stream), all, ctx.stream).wait();
    te::Tensor host = all.to(te::Device::cpu(), ctx.stream);
    ctx.stream.synchronize();
    const auto* v = static_cast<const int64_t*>(host.data_ptr());
    s = detail::StepStats{};
    for (int r = 0; r < world(); ++r, v += kFields) {
      double rank_ms = 0, rank_dev_ms = 0;
      std::memcpy(&rank_ms, &v[0], sizeof(double));
      std::memcpy(&rank_dev_ms, &v[1], sizeof(double));
      s.ms = std::max(s.ms, rank_ms);
      s.device_ms = std::max(s.device_ms, rank_dev_ms);
      s.ranks.push_back({v[2], v[3]});
      for (int k = 0; k < kCounters; ++k) {
        counters(s.comm, k)->calls += v[4 + 2 * k];
        counters(s.comm, k)->bytes += v[5 + 2 * k];
      }
    }
  }
  std::lock_guard<std::mutex> lock(metrics_mu);
  last = s;
  history.record(s.ms, s.device_ms, tokens);
}
double Engine::last_step_ms() const {
  std::lock_guard<std::mutex> lock(impl_->metrics_mu);
  return impl_->history.last_ms();
}

std::string Engine::metrics_json() const {
  const Impl& m = *impl_;
  nlohmann::json batching = {{"enabled", false}};
  if (const auto b = m.current_batcher()) {
    batching = b->stats_json();
    batching["enabled"] = true;
    batching["max_batch_tokens"] = b->policy().max_batch_tokens;
    batching["max_wait_us"] = b->policy().max_wait_us;
  }
  std::lock_guard<std::mutex> lock(m.metrics_mu);
  const te::CommMetrics& c = m.last.comm;
  const te::StepHistory& h = m.history;
  auto pc = [](const te::PathCounter& p) { return nlohmann::json{{"calls", p.calls}, {"bytes", p.bytes}}; };
  int64_t peak = 0, rss = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : m.last.ranks) {
    peak = std::max(peak, r.peak_bytes);
    rss = std::max(rss, r.peak_rss_bytes);
    ranks.push_back({{"peak_bytes", r.peak_bytes}, {"peak_rss_bytes", r.peak_rss_bytes}});
  }
  if (m.last.ranks.empty()) {
    peak = te::memory_stats(m.device()).peak_bytes;
    rss = peak_rss_bytes();
  }
  nlohmann::json at_peak = nlohmann::json::array();  // TEENGINE_MEMORY_TRACE: who held the device peak
  for (const te::LabelledBytes& l : te::memory_at_peak(m.device()))
    at_peak.push_back({{"label", l.label}, {"bytes", l.bytes}, {"blocks", l.blocks}});
  nlohmann::json eval = nlohmann::json::array();
  for (const auto& [s, l] : h.evals()) eval.push_back({{"step", s}, {"loss", l}});
  nlohmann::json j = {
      {"model", m.spec().name},
      {"mode", std::string(te::run_mode_name(m.spec().run.mode))},
      {"device", m.device().str()},
      {"world_size", m.world()},
      {"comm_backend", std::string(te::comm_backend_name(m.group->placement.backend))},
      {"processes", m.group->distributed() ? m.world() : 1},
      {"recipe", std::string(te::recipe_name(m.spec().precision.recipe))},
      {"tokens", m.spec().run.tokens},
      {"steps", h.steps()},
      {"step_window", te::StepHistory::kWindow},
      {"step_ms", h.wall_ms()},
      {"device_ms", h.device_ms()},
      {"step_ms_histogram", h.histogram_json()},
      {"tokens_total", h.tokens()},
      {"tokens_per_s", h.total_ms() > 0 ? static_cast<double>(h.tokens()) / (h.total_ms() * 1e-3) : 0.0},
      {"peak_bytes", peak},
      {"peak_rss_bytes", rss},
      {"per_process", ranks},
      {"memory_at_peak", at_peak},
      {"loss", h.losses()},
      {"lr", h.lrs()},
      {"first_step", m.first_step},
      {"eval", eval},
      {"eval_loss", h.evals().empty() ? nlohmann::json(nullptr) : nlohmann::json(h.evals().back().second)},
      {"batching", batching},
      {"comm",
       {{"gather",
         {{"quantized", pc(c.gather_quantized)},
          {"fallback", pc(c.gather_fallback)},
          {"high_precision", pc(c.gather_hp)}}},
        {"reduce_scatter", pc(c.reduce_scatter)},
        {"all_reduce", pc(c.all_reduce)}}},
  };
  // A model name that is not UTF-8 (from the spec or its file name) gets U+FFFD rather than an exception.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace teengine
