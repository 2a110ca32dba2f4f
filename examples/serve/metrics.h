// The server's own counters and the Prometheus text of GET /metrics: requests by status, request latency as a
// histogram (fixed buckets, so memory stays constant however long the server runs) and tokens served, then the
// engine's figures from Engine::metrics_json: steps, step time, tokens/s, batch sizes, gather bytes.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace serve {

// Prometheus histogram: cumulative counts per upper bound, plus +Inf, sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the `# TYPE` line and the _bucket/_sum/_count series of `name`.
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void request_started();
  void request_done(int status, double seconds, int64_t tokens);
  // Everything, with the engine's figures read from `engine_metrics_json`.
  std::string prometheus(const std::string& engine_metrics_json) const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> by_status_;
  int64_t in_flight_ = 0, tokens_ = 0;
  Histogram latency_s_;
};

}  // namespace serve
