#include "options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace serve {
namespace {
const char* kUsage =
    "usage: teengine-serve MODEL.yaml [options]\n"
    "  --host ADDR              listen address (default 127.0.0.1: this machine only)\n"
    "  --port N                 TCP port (default 8080; 0: any free port, see --port-file)\n"
    "  --port-file FILE         write the bound port to FILE once listening\n"
    "  --set KEY=VALUE          spec override, as `teengine run --set` (repeatable)\n"
    "  --weights FILE           safetensors weights (default: the spec's)\n"
    "  --batching auto|on|off   dynamic batching of concurrent requests (auto: on for recipes none, fp8_block and\n"
    "                           mxfp8, where each request gets the bytes it gets alone on the CPU; off for\n"
    "                           per-tensor scaling, whose batched outputs depend on the batch; on: batch anyway)\n"
    "  --max-batch-tokens N     most tokens in one forward, and in one request (default 4096)\n"
    "  --max-wait-us N          how long a request waits for others to batch with (default 0: requests that\n"
    "                           arrive while a forward runs go together in the next)\n"
    "  --max-body-bytes N       larger request bodies get 413 (default 64 MiB)\n"
    "  --threads N              HTTP worker threads (default 64)\n"
    "  --read-timeout-s N       disconnect clients silent this long (default 5)\n"
    "  --token TOKEN            require `Authorization: Bearer TOKEN` (also TEENGINE_SERVE_TOKEN)\n";

[[noreturn]] void usage(int code, const std::string& why = "") {
  if (!why.empty()) std::fprintf(stderr, "teengine-serve: %s\n", why.c_str());
  std::fputs(kUsage, code ? stderr : stdout);
  std::exit(code);
}

int64_t to_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || n < lo || n > hi)
    usage(2, flag + " takes an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not '" + v + "'");
  return n;
}
}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  if (const char* t = std::getenv("TEENGINE_SERVE_TOKEN")) o.token = t;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") usage(0);
    if (a.rfind("--", 0) != 0) {
      if (!o.model.empty()) usage(2, "one model spec only ('" + o.model + "' and '" + a + "')");
      o.model = a;
      continue;
    }
    if (i + 1 >= argc) usage(2, a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--host") o.host = v;
    else if (a == "--port") o.port = static_cast<int>(to_int(a, v, 0, 65535));
    else if (a == "--port-file") o.port_file = v;
    else if (a == "--set") o.sets.push_back(v);
    else if (a == "--weights") o.weights = v;
    else if (a == "--batching") {
      if (v != "auto" && v != "on" && v != "off") usage(2, "--batching takes auto, on or off");
      o.batching = v;
    } else if (a == "--max-batch-tokens") o.max_batch_tokens = to_int(a, v, 1, int64_t{1} << 24);
    else if (a == "--max-wait-us") o.max_wait_us = to_int(a, v, 0, 10'000'000);
    else if (a == "--max-body-bytes") o.max_body_bytes = to_int(a, v, 1024, int64_t{1} << 34);
    else if (a == "--threads") o.threads = static_cast<int>(to_int(a, v, 1, 4096));
    else if (a == "--read-timeout-s") o.read_timeout_s = static_cast<int>(to_int(a, v, 1, 3600));
    else if (a == "--token") o.token = v;
    else usage(2, "unknown option " + a);
  }
  if (o.model.empty()) usage(2, "no model spec given");
  return o;
}

}  // namespace serve
