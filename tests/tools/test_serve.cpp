// teengine-serve (examples/serve) end to end on the CPU: concurrent requests, batched, answered with the bytes
// Engine::forward gives each request alone (per-token recipes; the CPU GEMM is row-independent), the same bytes as
// `teengine run`, per-tensor recipes unbatched by default, bad requests refused with the server still up, bearer
// auth, slow clients disconnected, SIGTERM draining in-flight requests, and the load generator's 200 requests.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <teengine/teengine.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "examples/serve/http_codec.h"
#include "tools/serve_process.h"

namespace {
using teengine::HostTensor;
using te::test::ServeProcess;

std::string tiny() { return std::string(std::getenv("TE_MODELS_DIR") ? std::getenv("TE_MODELS_DIR") : "models") + "/tiny.yaml"; }

HostTensor random_input(int64_t tokens, int64_t hidden, uint32_t seed, const std::string& dtype = "f32") {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(tokens * hidden));
  for (float& x : v) x = d(gen);
  HostTensor h = HostTensor::from_floats({tokens, hidden}, v);
  if (dtype == "bf16") {  // truncate to bf16 (exactly representable, so the request means the same numbers)
    HostTensor b{h.shape, "bf16", {}};
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      b.bytes.push_back(static_cast<uint8_t>((u >> 16) & 0xff));
      b.bytes.push_back(static_cast<uint8_t>(u >> 24));
    }
    return b;
  }
  return h;
}

// What the server must answer for `x` alone: Engine::forward, with zero rows appended up to the engine's token
// multiple (the server pads the same way; the padding rows are dropped).
HostTensor forward_alone(teengine::Engine& e, const HostTensor& x) {
  const int64_t t = x.shape[0], m = e.token_multiple(), pad = (m - t % m) % m;
  if (pad == 0) return e.forward(x);
  HostTensor p = x;
  p.shape[0] += pad;
  p.bytes.resize(p.bytes.size() / static_cast<size_t>(t) * static_cast<size_t>(t + pad), 0);
  HostTensor y = e.forward(p);
  y.shape[0] = t;
  y.bytes.resize(y.bytes.size() / static_cast<size_t>(t + pad) * static_cast<size_t>(t));
  return y;
}

// The `output` of a safetensors reply.
HostTensor output_of(const std::string& body) {
  std::string renamed = body;  // the decoder reads `input`; the reply names it `output`
  const size_t at = renamed.find("\"output\"");
  if (at == std::string::npos) throw std::runtime_error("no output tensor in the reply");
  renamed.replace(at, 8, "\"input\" ");
  // The header stays the same length; decode with the reply's own dtype and shape.
  serve::RequestLimits lim{256, 1 << 20};
  return serve::decode_safetensors(renamed, lim);
}

int64_t metric(const std::string& text, const std::string& series) {
  std::smatch m;
  const std::regex re("(^|\n)" + std::regex_replace(series, std::regex(R"([{}\[\]\"+.])"), R"(\$&)") + " ([0-9.e+]+)");
  return std::regex_search(text, m, re) ? static_cast<int64_t>(std::stod(m[2])) : -1;
}

struct Sent {
  HostTensor input;
  bool json;
};

// Sends every request from `clients` threads at once; returns the outputs (model dtype) in order.
std::vector<HostTensor> send_all(int port, const std::vector<Sent>& reqs, int clients) {
  std::vector<HostTensor> out(reqs.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  std::mutex fail_mu;
  std::string failure;
  for (int c = 0; c < clients; ++c)
    pool.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(120, 0);
      for (size_t i; (i = next++) < reqs.size();) {
        const Sent& s = reqs[i];
        auto res = s.json ? cli.Post("/v1/forward", serve::encode_json(s.input), "application/json")
                          : cli.Post("/v1/forward", serve::encode_safetensors(s.input, "input"),
                                     "application/octet-stream");
        if (!res || res->status != 200) {
          std::lock_guard<std::mutex> lock(fail_mu);
          failure = "request " + std::to_string(i) + ": " + (res ? std::to_string(res->status) + " " + res->body : "no reply");
          continue;
        }
        if (s.json) {
          auto j = nlohmann::json::parse(res->body);
          HostTensor f = HostTensor::from_floats(j["shape"].get<std::vector<int64_t>>(), j["data"].get<std::vector<float>>());
          out[i] = f;
          out[i].dtype = "json:" + j["dtype"].get<std::string>();
        } else {
          out[i] = output_of(res->body);
        }
      }
    });
  for (auto& t : pool) t.join();
  if (!failure.empty()) throw std::runtime_error(failure);
  return out;
}

// Each reply equals the request's forward alone, byte for byte (the JSON numbers are the model-dtype values, exactly).
void expect_alone(teengine::Engine& e, const std::vector<Sent>& reqs, const std::vector<HostTensor>& got) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    const HostTensor want = forward_alone(e, reqs[i].input);
    HostTensor values = got[i];
    if (reqs[i].json) {
      EXPECT_EQ(got[i].dtype, "json:" + want.dtype) << "request " << i;
      values.dtype = "f32";  // send_all kept the JSON numbers as f32
    } else {
      EXPECT_EQ(got[i].dtype, want.dtype) << "request " << i;
    }
    EXPECT_EQ(got[i].shape, want.shape) << "request " << i;
    EXPECT_TRUE(values.to_floats() == want.to_floats()) << "request " << i << " (" << reqs[i].input.shape[0]
                                                        << " tokens) differs from its forward alone";
  }
}

std::vector<Sent> mixed_requests(int n, int64_t hidden, uint32_t seed) {
  const int64_t sizes[] = {1, 2, 3, 4, 7, 8, 16, 30, 64};
  std::vector<Sent> reqs;
  for (int i = 0; i < n; ++i) {
    const int64_t t = sizes[static_cast<size_t>(i) % 9];
    reqs.push_back({random_input(t, hidden, seed + static_cast<uint32_t>(i), i % 3 == 2 ? "bf16" : "f32"), i % 4 == 1});
  }
  return reqs;
}

std::string get(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  auto r = cli.Get(path);
  return r ? r->body : "";
}

// 200 concurrent requests (fp8_block, tp 2 with sequence parallelism, odd token counts padded), batched: every
// reply is that request's forward alone, and the server did batch them (fewer forwards than requests).
TEST(Serve, ConcurrentRequestsMatchForwardAlone) {
  ServeProcess server(tiny(), {"--max-wait-us", "5000", "--threads", "64"});
  auto engine = teengine::Engine::from_yaml(tiny(), {"run.mode=infer"});
  const auto reqs = mixed_requests(200, engine.hidden(), 100);
  expect_alone(engine, reqs, send_all(server.port(), reqs, 64));
  const std::string m = get(server.port(), "/metrics");
  EXPECT_EQ(metric(m, "teengine_serve_requests_total{code=\"200\"}"), 200) << m;
  const int64_t batches = metric(m, "teengine_serve_batch_requests_count");
  EXPECT_GT(batches, 0);
  EXPECT_LT(batches, 200) << "no two requests were batched together";
  EXPECT_EQ(metric(m, "teengine_serve_batches_total"), batches);
  EXPECT_EQ(server.stop(), 0);
}

// The other per-token recipes batch by default too, and each request still gets its bytes alone.
TEST(Serve, BatchingMatchesForwardAloneForPerTokenRecipes) {
  for (const char* recipe : {"none", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const std::string set = std::string("precision.recipe=") + recipe;
    ServeProcess server(tiny(), {"--set", set, "--max-wait-us", "20000"});
    auto engine = teengine::Engine::from_yaml(tiny(), {"run.mode=infer", set});
    ASSERT_TRUE(engine.tokens_independent());
    const auto reqs = mixed_requests(24, engine.hidden(), 7);
    expect_alone(engine, reqs, send_all(server.port(), reqs, 24));
    EXPECT_GE(metric(get(server.port(), "/metrics"), "teengine_serve_batch_requests_count"), 1);
    EXPECT_LT(metric(get(server.port(), "/metrics"), "teengine_serve_batch_requests_count"), 24);
  }
}

// Per-tensor scaling (fp8_current): batching is off by default, so each request runs alone (one engine step each);
// a token count that is not a multiple of tp is refused, since padding it would change its scale.
TEST(Serve, PerTensorRecipeIsNotBatchedByDefault) {
  const std::string set = "precision.recipe=fp8_current";
  ServeProcess server(tiny(), {"--set", set, "--max-wait-us", "20000"});
  auto engine = teengine::Engine::from_yaml(tiny(), {"run.mode=infer", set});
  ASSERT_FALSE(engine.tokens_independent());
  std::vector<Sent> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back({random_input(2 * (i + 1), engine.hidden(), 50 + i), false});
  expect_alone(engine, reqs, send_all(server.port(), reqs, 8));
  const std::string m = get(server.port(), "/metrics");
  EXPECT_EQ(metric(m, "teengine_engine_steps_total"), 8) << m;
  EXPECT_EQ(metric(m, "teengine_serve_batch_requests_count"), -1) << "batching reported as on";
  httplib::Client cli("127.0.0.1", server.port());
  auto r = cli.Post("/v1/forward", serve::encode_json(random_input(3, engine.hidden(), 1)), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("not divisible by tp"), std::string::npos) << r->body;
}

// --batching off: concurrent requests each run alone.
TEST(Serve, UnbatchedRepliesAreBitIdentical) {
  ServeProcess server(tiny(), {"--batching", "off"});
  auto engine = teengine::Engine::from_yaml(tiny(), {"run.mode=infer"});
  std::vector<Sent> reqs = mixed_requests(24, engine.hidden(), 300);
  for (Sent& r : reqs)  // without batching nothing pads: even token counts only
    if (r.input.shape[0] % 2) r.input = random_input(r.input.shape[0] + 1, engine.hidden(), 7);
  expect_alone(engine, reqs, send_all(server.port(), reqs, 12));
  EXPECT_EQ(metric(get(server.port(), "/metrics"), "teengine_engine_steps_total"), 24);
}

// A safetensors request is a `teengine run --input` file, and the reply equals its --output file.
TEST(Serve, OutputEqualsTeengineRun) {
  const char* cli_bin = std::getenv("TE_TEENGINE");
  if (!cli_bin) GTEST_SKIP() << "TE_TEENGINE not set";
  ServeProcess server(tiny(), {});
  const HostTensor x = random_input(64, 256, 9);
  const std::string body = serve::encode_safetensors(x, "input");
  const auto dir = std::filesystem::temp_directory_path() / ("te_serve_run_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "in.safetensors", std::ios::binary) << body;
  const std::string cmd = std::string("'") + cli_bin + "' run '" + tiny() +
                          "' --set run.device=cpu --set run.tokens=64 --input '" + (dir / "in.safetensors").string() +
                          "' --output '" + (dir / "out.safetensors").string() + "' >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dir / "out.safetensors", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  httplib::Client cli("127.0.0.1", server.port());
  auto r = cli.Post("/v1/forward", body, "application/octet-stream");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const HostTensor want = output_of(file), got = output_of(r->body);
  EXPECT_EQ(got.dtype, want.dtype);
  EXPECT_TRUE(got.bytes == want.bytes);
}

std::string safetensors_with_header(const std::string& header, size_t data_bytes, uint64_t claimed = 0) {
  std::string s(8, '\0');
  const uint64_t n = claimed ? claimed : header.size();
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s + header + std::string(data_bytes, '\0');
}

// Malformed, wrong-shape and oversized requests get 400/413 with a message; the server answers the next request.
TEST(Serve, BadRequestsAreRefusedAndTheServerStaysUp) {
  ServeProcess server(tiny(), {"--max-batch-tokens", "128", "--max-body-bytes", "200000"});
  httplib::Client cli("127.0.0.1", server.port());
  const std::string js = "application/json", st = "application/octet-stream";
  std::string string_data = "{\"shape\": [1, 256], \"data\": [\"a\"";
  for (int i = 1; i < 256; ++i) string_data += ", 1";
  string_data += "]}";
  struct Case {
    std::string name, body, type;
    int status;
  };
  const std::vector<Case> cases = {
      {"not json", "{\"shape\": [2, 256], \"data\": [1, 2", js, 400},
      {"json array", "[1, 2, 3]", js, 400},
      {"no shape", "{\"data\": []}", js, 400},
      {"wrong hidden", "{\"shape\": [1, 3], \"data\": [1, 2, 3]}", js, 400},
      {"zero tokens", "{\"shape\": [0, 256], \"data\": []}", js, 400},
      {"negative tokens", "{\"shape\": [-4, 256], \"data\": []}", js, 400},
      {"3-d shape", "{\"shape\": [1, 1, 256], \"data\": []}", js, 400},
      {"short data", "{\"shape\": [2, 256], \"data\": [1, 2]}", js, 400},
      {"string data", "{\"shape\": [1, 2], \"data\": [1, \"a\"]}", js, 400},
      {"string in data", string_data, js, 400},
      {"too many tokens", "{\"shape\": [129, 256], \"data\": []}", js, 413},
      {"huge tokens", "{\"shape\": [9223372036854775807, 256], \"data\": []}", js, 413},
      {"empty safetensors", "", st, 400},
      {"short safetensors", "abc", st, 400},
      {"header past the end", safetensors_with_header("{}", 0, 1ull << 62), st, 400},
      {"header not json", safetensors_with_header("{nope", 0), st, 400},
      {"no input tensor", safetensors_with_header("{\"x\": {}}", 0), st, 400},
      {"bad dtype", safetensors_with_header(R"({"input": {"dtype": "I8", "shape": [2, 256], "data_offsets": [0, 512]}})", 512), st, 400},
      {"offsets past the data", safetensors_with_header(R"({"input": {"dtype": "F32", "shape": [2, 256], "data_offsets": [0, 2048]}})", 100), st, 400},
      {"offsets reversed", safetensors_with_header(R"({"input": {"dtype": "F32", "shape": [2, 256], "data_offsets": [2048, 0]}})", 2048), st, 400},
      {"wrong byte count", safetensors_with_header(R"({"input": {"dtype": "F32", "shape": [2, 256], "data_offsets": [0, 1024]}})", 2048), st, 400},
      {"body over --max-body-bytes", std::string(300000, 'x'), st, 413},
  };
  for (const Case& c : cases) {
    auto r = cli.Post("/v1/forward", c.body, c.type);
    ASSERT_TRUE(r) << c.name << ": no reply";
    EXPECT_EQ(r->status, c.status) << c.name << ": " << r->body;
    EXPECT_NE(r->body.find("\"error\""), std::string::npos) << c.name << ": " << r->body;
  }
  EXPECT_EQ(cli.Get("/v1/nothing")->status, 404);
  EXPECT_EQ(get(server.port(), "/healthz"), "ok\n");
  auto ok = cli.Post("/v1/forward", serve::encode_json(random_input(4, 256, 3)), js);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(server.stop(), 0);
}

// A model with attention takes whole sequences (models/transformer.yaml: seq_len 128, tp 2 with sequence
// parallelism): requests of one and two sequences, sent together, each answer their forward alone; 100 tokens get
// 400 naming the sequence length, and the server carries on.
TEST(Serve, AttentionModelTakesWholeSequences) {
  const std::string model = std::string(std::getenv("TE_MODELS_DIR") ? std::getenv("TE_MODELS_DIR") : "models") +
                            "/transformer.yaml";
  ServeProcess server(model, {});
  teengine::Engine e = teengine::Engine::from_yaml(model);
  const std::vector<Sent> reqs = {{random_input(128, 256, 5), false}, {random_input(256, 256, 6), true}};
  expect_alone(e, reqs, send_all(server.port(), reqs, 2));
  httplib::Client cli("127.0.0.1", server.port());
  auto bad = cli.Post("/v1/forward", serve::encode_json(random_input(100, 256, 7)), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("not whole sequences of 128"), std::string::npos) << bad->body;
  EXPECT_EQ(get(server.port(), "/healthz"), "ok\n");
  EXPECT_EQ(server.stop(), 0);
}

TEST(Serve, BearerToken) {
  ServeProcess server(tiny(), {"--token", "s3cret"});
  httplib::Client cli("127.0.0.1", server.port());
  const std::string body = serve::encode_json(random_input(2, 256, 4));
  EXPECT_EQ(cli.Post("/v1/forward", body, "application/json")->status, 401);
  EXPECT_EQ(cli.Get("/metrics")->status, 401);
  EXPECT_EQ(cli.Get("/healthz")->status, 200);  // liveness probes carry no token
  cli.set_bearer_token_auth("wrong");
  EXPECT_EQ(cli.Post("/v1/forward", body, "application/json")->status, 401);
  cli.set_bearer_token_auth("s3cret");
  EXPECT_EQ(cli.Post("/v1/forward", body, "application/json")->status, 200);
}

// A client that sends half a request and then nothing is disconnected after --read-timeout-s; others are served.
TEST(Serve, SlowClientTimesOut) {
  ServeProcess server(tiny(), {"--read-timeout-s", "1"});
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(server.port()));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  const std::string partial = "POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"sha";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  httplib::Client cli("127.0.0.1", server.port());
  EXPECT_EQ(cli.Post("/v1/forward", serve::encode_json(random_input(2, 256, 5)), "application/json")->status, 200);
  timeval tv{10, 0};  // the server must close well before this
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  EXPECT_EQ(n, 0) << "the server did not close the slow connection";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  ::close(fd);
  EXPECT_EQ(server.stop(), 0);
}

// SIGTERM while requests wait in the batcher: every one is answered with 200, then the server exits 0.
TEST(Serve, SigtermDrainsInFlightRequests) {
  ServeProcess server(tiny(), {"--max-wait-us", "10000000", "--max-batch-tokens", "100000"});
  auto engine = teengine::Engine::from_yaml(tiny(), {"run.mode=infer"});
  std::vector<Sent> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back({random_input(4, 256, 200 + i), i % 2 == 0});
  std::vector<HostTensor> got;
  std::string error;
  std::thread clients([&] {
    try {
      got = send_all(server.port(), reqs, 8);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  // All eight are in the server (waiting up to 10 s for company) before the signal.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (metric(get(server.port(), "/metrics"), "teengine_serve_in_flight_requests") < 8 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(SIGTERM), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8)) << "the drain waited for the batch window";
  clients.join();
  ASSERT_EQ(error, "");
  expect_alone(engine, reqs, got);
}

}  // namespace

namespace {
// The acceptance run: the load generator's 200 requests at concurrency 64 all answered with 200.
TEST(Serve, LoadGeneratorAt64Clients) {
  const char* load = std::getenv("TE_SERVE_LOAD_BIN");
  if (!load) GTEST_SKIP() << "TE_SERVE_LOAD_BIN not set";
  ServeProcess server(tiny(), {});
  const std::string out = std::filesystem::temp_directory_path() / ("te_serve_load_" + std::to_string(::getpid()));
  const std::string cmd = std::string("'") + load + "' '" + tiny() + "' --port " + std::to_string(server.port()) +
                          " --concurrency 64 --requests 200 --seconds 120 --no-direct >'" + out + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  std::filesystem::remove(out);
  EXPECT_EQ(j["results"][0]["server"]["requests"].get<int>(), 200);
  EXPECT_EQ(j["results"][0]["server"]["errors"].get<int>(), 0);
  EXPECT_EQ(metric(get(server.port(), "/metrics"), "teengine_serve_requests_total{code=\"200\"}"), 200 + 64);
  EXPECT_EQ(server.stop(), 0);
}
}  // namespace
