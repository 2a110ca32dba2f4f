// teengine-serve: an HTTP/1.1 server on the public API alone (include/teengine/teengine.h) and cpp-httplib.
//   teengine-serve models/tiny.yaml --port 8080
//   POST /v1/forward   safetensors `input` [t, hidden] → `output`, or JSON {"shape", "data"} → JSON (http_codec.h)
//   GET  /healthz      200 "ok" while serving
//   GET  /metrics      Prometheus text (metrics.h)
// Concurrent requests are batched into one forward by the engine (Engine::set_batching). SIGTERM or SIGINT stops
// accepting, answers every request already received, and exits 0.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <teengine/teengine.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "http_codec.h"
#include "metrics.h"
#include "options.h"

namespace {

void log_line(const char* level, const std::string& message) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
  std::fprintf(stderr, "%sZ %s %s\n", when, level, message.c_str());
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump() + "\n", "application/json");
}

// Compares every byte whatever the first difference, so the reply time does not reveal how much of a guess is right.
bool same_token(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// cpp-httplib 0.11 listens with a backlog of 5: a burst of more simultaneous connects overflows the accept queue,
// and a client whose handshake the kernel dropped retransmits its request with a backoff that can outlast the
// server's wait for it, failing with no reply. listen() again on the bound socket raises the backlog (Linux).
void widen_backlog(int port) {
  for (int fd = 0; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    sockaddr_in addr{};
    socklen_t alen = sizeof(addr);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) == 0 && addr.sin_family == AF_INET &&
        ntohs(addr.sin_port) == port)
      ::listen(fd, SOMAXCONN);
  }
}

int signal_pipe[2] = {-1, -1};
void on_stop_signal(int sig) {
  const unsigned char c = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(signal_pipe[1], &c, 1);  // async-signal-safe
}

}  // namespace

int main(int argc, char** argv) {
  const serve::Options opt = serve::parse_options(argc, argv);
  // SIGTERM/SIGINT write their number to a pipe that the stopper thread (below) reads. Not sigwait with the signals
  // blocked: threads that libraries start before main (OpenBLAS's pool) would still take them and die by them.
  if (::pipe(signal_pipe) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up mid-reply is its own problem, not the server's
  // The engine's log lines in the server's format (the public log sink).
  teengine::set_log_sink([](teengine::LogLevel level, const std::string& message) {
    static const char* names[] = {"error", "warn", "info", "debug"};
    log_line(names[static_cast<int>(level)], "teengine: " + message);
  });

  try {
    std::vector<std::string> sets = {"run.mode=infer"};
    sets.insert(sets.end(), opt.sets.begin(), opt.sets.end());
    teengine::Engine engine = teengine::Engine::from_yaml(opt.model, sets);
    if (!opt.weights.empty()) engine.load_weights(opt.weights);
    // Under a launcher every rank must call forward collectively; this server drives one process's engine only.
    if (nlohmann::json::parse(engine.metrics_json()).value("processes", 1) > 1)
      throw teengine::Error("teengine-serve runs as one process: use parallel.comm local (tp ranks as threads)", true);
    // Batching: on by default where it leaves every output as it is alone (per-token recipes); --batching on
    // forces it for per-tensor recipes, where a request's output then depends on its batch-mates.
    const bool batching = opt.batching == "on" || (opt.batching == "auto" && engine.tokens_independent());
    if (batching && !engine.tokens_independent())
      log_line("warn", "batching is on with recipe " + engine.recipe() +
                           ", which scales per tensor: a request's output depends on the requests batched with it");
    teengine::BatchingOptions batch;
    batch.enabled = batching;
    batch.max_batch_tokens = opt.max_batch_tokens;
    batch.max_wait_us = opt.max_wait_us;
    batch.allow_per_tensor_scaling = opt.batching == "on";
    engine.set_batching(batch);

    serve::ServerMetrics metrics;
    const serve::RequestLimits limits{engine.hidden(), opt.max_batch_tokens};
    std::atomic<bool> draining{false};

    httplib::Server svr;
    const int threads = opt.threads;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_read_timeout(opt.read_timeout_s, 0);
    svr.set_write_timeout(opt.read_timeout_s, 0);
    svr.set_keep_alive_timeout(opt.read_timeout_s);
    svr.set_payload_max_length(static_cast<size_t>(opt.max_body_bytes));  // httplib answers 413 itself

    svr.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
      if (opt.token.empty() || req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) == 0 && same_token(auth.substr(7), opt.token))
        return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      reply_error(res, 401, "missing or wrong bearer token");
      return httplib::Server::HandlerResponse::Handled;
    });
    svr.Get("/healthz", [&](const httplib::Request&, httplib::Response& res) {
      res.status = draining ? 503 : 200;
      res.set_content(draining ? "draining\n" : "ok\n", "text/plain");
    });
    svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus(engine.metrics_json()), "text/plain; version=0.0.4");
    });
    svr.Post("/v1/forward", [&](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = std::chrono::steady_clock::now();
      metrics.request_started();
      int64_t tokens = 0;
      try {
        const serve::BodyFormat format = serve::body_format(req.get_header_value("Content-Type"));
        const teengine::HostTensor x = serve::decode(format, req.body, limits);
        tokens = x.shape[0];
        res.set_content(serve::encode(format, engine.forward(x)), serve::content_type(format));
        res.status = 200;
      } catch (const serve::BadRequest& e) {
        reply_error(res, e.status, e.what());
      } catch (const teengine::Error& e) {
        reply_error(res, e.is_input_error() ? 400 : 500, e.what());
        if (!e.is_input_error()) log_line("error", std::string("forward failed: ") + e.what());
      } catch (const std::exception& e) {
        reply_error(res, 500, e.what());
        log_line("error", std::string("forward failed: ") + e.what());
      }
      metrics.request_done(res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                           tokens);
    });
    // httplib's own refusals (404, 413 for a body over --max-body-bytes, 400 for a malformed request line) get a
    // message too; replies the handlers wrote keep theirs.
    svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const int s = res.status;
      reply_error(res, s, s == 404 ? "no such path (POST /v1/forward, GET /healthz, GET /metrics)"
                          : s == 413 ? "request body larger than --max-body-bytes"
                                     : "request refused (HTTP " + std::to_string(s) + ")");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      reply_error(res, 500, "internal error");
    });

    int port = opt.port;
    if (port == 0) port = svr.bind_to_any_port(opt.host);
    else if (!svr.bind_to_port(opt.host, port)) port = -1;
    if (port < 0) throw teengine::Error("cannot listen on " + opt.host + ":" + std::to_string(opt.port), true);
    widen_backlog(port);
    if (!opt.port_file.empty()) {
      const std::string tmp = opt.port_file + ".tmp";  // renamed into place: a reader never sees half a number
      std::ofstream(tmp) << port << "\n";
      std::rename(tmp.c_str(), opt.port_file.c_str());
    }
    log_line("info", "serving " + opt.model + " (recipe " + engine.recipe() + ", batching " +
                         (batching ? "on" : "off") + ") on http://" + opt.host + ":" + std::to_string(port));

    std::atomic<bool> listening_done{false};
    std::thread stopper([&] {
      unsigned char sig = 0;
      while (::read(signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
      }
      if (listening_done) return;  // woken by main (below) after listen failed
      log_line("info", std::string("signal ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                           ": draining in-flight requests");
      draining = true;
      if (batch.enabled) {  // queued requests go now instead of waiting for company
        teengine::BatchingOptions now = batch;
        now.max_wait_us = 0;
        engine.set_batching(now);
      }
      while (!svr.is_running() && !listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      svr.stop();       // closes the listening socket; listen returns once every accepted request is answered
    });
    const bool ok = svr.listen_after_bind();
    listening_done = true;
    if (!draining) on_stop_signal(0);  // wakes the stopper, which sees listening_done
    stopper.join();
    engine.set_batching({});  // runs anything still queued
    log_line("info", "stopped");
    return ok || draining ? 0 : 1;
  } catch (const teengine::Error& e) {
    log_line("error", e.what());
    return e.is_input_error() ? 2 : 1;
  }
}
