// serve_load: latency and throughput of teengine-serve on 127.0.0.1 at several client concurrencies, against
// Engine::forward called directly in this process on the same inputs, from as many threads and with the server's
// batching (--batching, --max-wait-us: give the server's), so the difference is the server's overhead: HTTP,
// body coding, the socket. Bounded: at most --requests requests and --seconds seconds per concurrency and side.
//   serve_load MODEL.yaml --port 8080 [--tokens 16] [--concurrency 1,8,64] [--requests 200] [--seconds 20]
//              [--set k=v]... [--batching auto|on|off] [--max-wait-us N] [--token T] [--no-direct]
// Prints one JSON object (stdout): per concurrency, p50/p99 latency (ms), requests/s and tokens/s of each side and
// the p50 difference; a short table goes to stderr. Exits 1 if any request failed.
#include <httplib.h>
#include <teengine/teengine.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "examples/serve/http_codec.h"

namespace {
using Clock = std::chrono::steady_clock;

struct Side {
  std::vector<double> ms;  // per successful request
  int64_t errors = 0;
  std::map<std::string, int64_t> why;  // failures by kind: "HTTP 503", or httplib's error name
  double seconds = 0;
};

// Runs `call` from `clients` threads until `requests` calls are made or `seconds` pass; each call returns "" on
// success, else what went wrong.
Side drive(int clients, int64_t requests, double seconds, const std::function<std::string(int client)>& call) {
  Side s;
  std::mutex mu;
  std::atomic<int64_t> next{0};
  const auto t0 = Clock::now();
  const auto stop = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  for (int c = 0; c < clients; ++c)
    pool.emplace_back([&, c] {
      while (next++ < requests && Clock::now() < stop) {
        const auto a = Clock::now();
        const std::string error = call(c);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) {
          s.ms.push_back(ms);
        } else {
          ++s.errors;
          ++s.why[error];
        }
      }
    });
  for (auto& t : pool) t.join();
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return s;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

nlohmann::json summary(const Side& s, int64_t tokens) {
  const double n = static_cast<double>(s.ms.size());
  return {{"requests", s.ms.size()},       {"errors", s.errors},     {"error_kinds", s.why},
          {"p50_ms", percentile(s.ms, 0.5)}, {"p99_ms", percentile(s.ms, 0.99)},
          {"requests_per_s", n / s.seconds}, {"tokens_per_s", n * static_cast<double>(tokens) / s.seconds}};
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "serve_load: %s\nusage: serve_load MODEL.yaml --port N [--host H] [--tokens T] "
                       "[--concurrency 1,8,64] [--requests N] [--seconds S] [--set k=v]... [--batching auto|on|off] "
                       "[--max-wait-us N] [--token T] [--no-direct]\n",
               why);
  std::exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  std::string model, host = "127.0.0.1", token;
  int port = 0;
  int64_t tokens = 16, requests = 200;
  double seconds = 20;
  bool direct = true;
  std::vector<int> concurrency = {1, 8, 64};
  std::vector<std::string> sets = {"run.mode=infer"};
  std::string batching = "auto";
  int64_t max_wait_us = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-direct") {
      direct = false;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      model = a;
      continue;
    }
    if (i + 1 >= argc) usage("an option needs a value");
    const std::string v = argv[++i];
    if (a == "--port") port = std::atoi(v.c_str());
    else if (a == "--host") host = v;
    else if (a == "--tokens") tokens = std::atoll(v.c_str());
    else if (a == "--requests") requests = std::atoll(v.c_str());
    else if (a == "--seconds") seconds = std::atof(v.c_str());
    else if (a == "--set") sets.push_back(v);
    else if (a == "--token") token = v;
    else if (a == "--batching") batching = v;
    else if (a == "--max-wait-us") max_wait_us = std::atoll(v.c_str());
    else if (a == "--concurrency") {
      concurrency.clear();
      std::stringstream ss(v);
      for (std::string c; std::getline(ss, c, ',');) concurrency.push_back(std::max(1, std::atoi(c.c_str())));
    } else usage(("unknown option " + a).c_str());
  }
  if (model.empty() || port <= 0 || tokens < 1 || requests < 1) usage("give MODEL.yaml, --port, and positive counts");
  try {
    teengine::set_log_level(teengine::LogLevel::error);
    teengine::Engine engine = teengine::Engine::from_yaml(model, sets);  // the direct side, and the input shape
    teengine::BatchingOptions batch;  // as teengine-serve sets it
    batch.enabled = batching == "on" || (batching == "auto" && engine.tokens_independent());
    batch.allow_per_tensor_scaling = batching == "on";
    batch.max_wait_us = max_wait_us;
    engine.set_batching(batch);
    std::vector<teengine::HostTensor> inputs;
    std::vector<std::string> bodies;
    std::mt19937 gen(1);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int c = 0; c < 64; ++c) {  // one input per client slot (reused round robin)
      std::vector<float> v(static_cast<size_t>(tokens * engine.hidden()));
      for (float& x : v) x = d(gen);
      inputs.push_back(teengine::HostTensor::from_floats({tokens, engine.hidden()}, v));
      bodies.push_back(serve::encode_safetensors(inputs.back(), "input"));
    }
    nlohmann::json out = {{"server", host + ":" + std::to_string(port)}, {"model", model}, {"tokens", tokens},
                          {"hidden", engine.hidden()}, {"recipe", engine.recipe()}, {"batching", batch.enabled},
                          {"results", nlohmann::json::array()}};
    int64_t errors = 0;
    std::fprintf(stderr, "%-11s %-7s %9s %9s %10s %11s\n", "concurrency", "side", "p50 ms", "p99 ms", "req/s", "tokens/s");
    for (int c : concurrency) {
      std::vector<std::unique_ptr<httplib::Client>> clients;
      auto connect = [&] {  // one client (connection) per simulated user, fresh for each phase
        clients.clear();
        for (int i = 0; i < c; ++i) {
          clients.push_back(std::make_unique<httplib::Client>(host, port));
          clients.back()->set_read_timeout(300, 0);
          if (!token.empty()) clients.back()->set_bearer_token_auth(token);
        }
      };
      connect();
      auto post = [&](int i) {
        auto r = clients[static_cast<size_t>(i)]->Post("/v1/forward", bodies[static_cast<size_t>(i) % bodies.size()],
                                                       "application/octet-stream");
        if (!r) return "no reply: " + httplib::to_string(r.error());
        return r->status == 200 ? std::string() : "HTTP " + std::to_string(r->status);
      };
      drive(c, c, seconds, post);  // warm-up: the engine planned for this token count and batch sizes
      connect();
      const Side server = drive(c, requests, seconds, post);
      errors += server.errors;
      nlohmann::json row = {{"concurrency", c}, {"server", summary(server, tokens)}};
      auto print = [&](const char* side, const nlohmann::json& s) {
        std::fprintf(stderr, "%-11d %-7s %9.3f %9.3f %10.1f %11.0f\n", c, side, s["p50_ms"].get<double>(),
                     s["p99_ms"].get<double>(), s["requests_per_s"].get<double>(), s["tokens_per_s"].get<double>());
      };
      print("server", row["server"]);
      if (direct) {
        auto call = [&](int i) {
          engine.forward(inputs[static_cast<size_t>(i) % inputs.size()]);
          return std::string();
        };
        drive(c, c, seconds, call);
        const Side in_process = drive(c, requests, seconds, call);
        row["direct"] = summary(in_process, tokens);
        row["overhead_p50_ms"] = row["server"]["p50_ms"].get<double>() - row["direct"]["p50_ms"].get<double>();
        row["overhead_p99_ms"] = row["server"]["p99_ms"].get<double>() - row["direct"]["p99_ms"].get<double>();
        row["server_throughput_fraction"] =  // the server's requests/s as a share of the direct calls'
            row["server"]["requests_per_s"].get<double>() / std::max(1e-9, row["direct"]["requests_per_s"].get<double>());
        print("direct", row["direct"]);
      }
      out["results"].push_back(row);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return errors ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_load: %s\n", e.what());
    return 1;
  }
}
