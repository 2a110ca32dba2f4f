#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace serve {
namespace {
using nlohmann::json;

std::string num(double v) {
  if (std::isinf(v)) return "+Inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}
void line(std::string& out, const std::string& series, double v) { out += series + " " + num(v) + "\n"; }
void head(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// One of the engine's histograms ({le_key: [bounds…, null], "counts" per bucket, "count", sum_key}) as a Prometheus
// one: cumulative counts, bounds and sum multiplied by `scale` (ms → s).
void engine_histogram(std::string& out, const std::string& name, const std::string& help, const json& h,
                      const char* le_key, const char* sum_key, double scale) {
  if (!h.contains(le_key) || !h.contains("counts")) return;
  head(out, name, "histogram", help);
  double cum = 0;
  for (size_t i = 0; i < h[le_key].size() && i < h["counts"].size(); ++i) {
    cum += h["counts"][i].get<double>();
    const json& le = h[le_key][i];
    line(out, name + "_bucket{le=\"" + (le.is_null() ? std::string("+Inf") : num(le.get<double>() * scale)) + "\"}", cum);
  }
  line(out, name + "_sum", h.value(sum_key, 0.0) * scale);
  line(out, name + "_count", h.value("count", 0.0));
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;
  ++counts_[b];
  sum_ += v;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  head(out, name, "histogram", help);
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    line(out, name + "_bucket{le=\"" + num(i < bounds_.size() ? bounds_[i] : INFINITY) + "\"}",
         static_cast<double>(cum));
  }
  line(out, name + "_sum", sum_);
  line(out, name + "_count", static_cast<double>(count_));
}

ServerMetrics::ServerMetrics() : latency_s_({0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}) {}

void ServerMetrics::request_started() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
}

void ServerMetrics::request_done(int status, double seconds, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  ++by_status_[status];
  if (status == 200) {
    latency_s_.observe(seconds);
    tokens_ += tokens;
  }
}

std::string ServerMetrics::prometheus(const std::string& engine_metrics_json) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    head(out, "teengine_serve_requests_total", "counter", "POST /v1/forward requests answered, by HTTP status");
    for (const auto& [status, n] : by_status_)
      line(out, "teengine_serve_requests_total{code=\"" + std::to_string(status) + "\"}", static_cast<double>(n));
    int64_t errors = 0;
    for (const auto& [status, n] : by_status_) errors += status == 200 ? 0 : n;
    head(out, "teengine_serve_request_errors_total", "counter", "requests answered with a status other than 200");
    line(out, "teengine_serve_request_errors_total", static_cast<double>(errors));
    head(out, "teengine_serve_in_flight_requests", "gauge", "requests received and not yet answered");
    line(out, "teengine_serve_in_flight_requests", static_cast<double>(in_flight_));
    head(out, "teengine_serve_tokens_total", "counter", "tokens of the requests answered with 200");
    line(out, "teengine_serve_tokens_total", static_cast<double>(tokens_));
    latency_s_.write(out, "teengine_serve_request_duration_seconds", "request latency, body read to reply (200 only)");
  }
  const json e = json::parse(engine_metrics_json, nullptr, false);
  if (!e.is_object()) return out;
  head(out, "teengine_engine_steps_total", "counter", "forward calls run by the engine");
  line(out, "teengine_engine_steps_total", e.value("steps", 0.0));
  head(out, "teengine_engine_tokens_per_second", "gauge", "tokens per second of engine time (all steps)");
  line(out, "teengine_engine_tokens_per_second", e.value("tokens_per_s", 0.0));
  engine_histogram(out, "teengine_engine_step_seconds", "engine forward wall time per step",
                   e.value("step_ms_histogram", json::object()), "le_ms", "sum_ms", 1e-3);
  const json& batching = e.value("batching", json::object());
  if (batching.value("enabled", false)) {
    head(out, "teengine_serve_batches_total", "counter", "forwards run by dynamic batching");
    line(out, "teengine_serve_batches_total", batching.value("batches", 0.0));
    head(out, "teengine_serve_padded_tokens_total", "counter", "zero rows added to batches for sequence parallelism");
    line(out, "teengine_serve_padded_tokens_total", batching.value("padded_tokens", 0.0));
    engine_histogram(out, "teengine_serve_batch_requests", "requests per forward (dynamic batching)",
                     batching.value("requests_per_batch", json::object()), "le", "sum", 1);
    engine_histogram(out, "teengine_serve_batch_tokens", "tokens per forward, padding included",
                     batching.value("tokens_per_batch", json::object()), "le", "sum", 1);
  }
  const json& gather = e.value("comm", json::object()).value("gather", json::object());
  head(out, "teengine_engine_gather_bytes_total", "counter", "sequence-parallel gather bytes, by path");
  for (const char* path : {"quantized", "fallback", "high_precision"})
    if (gather.contains(path))
      line(out, std::string("teengine_engine_gather_bytes_total{path=\"") + path + "\"}",
           gather[path].value("bytes", 0.0));
  return out;
}

}  // namespace serve
