// The server's command line. Everything has a default that is safe on a shared machine: loopback only, bounded
// bodies and batches, client read timeouts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace serve {

struct Options {
  std::string model;                  // the model spec (YAML)
  std::vector<std::string> sets;      // --set a.b=value, as `teengine run --set`
  std::string weights;                // --weights FILE.safetensors (else the spec's)
  std::string host = "127.0.0.1";     // --host: 0.0.0.0 to listen on every interface
  int port = 8080;                    // --port: 0 picks a free one (see --port-file)
  std::string port_file;              // --port-file: the bound port is written there once listening
  std::string batching = "auto";      // auto | on | off; auto = on when the recipe's tokens are independent
  int64_t max_batch_tokens = 4096;    // the most tokens in one forward, and in one request
  int64_t max_wait_us = 0;            // 0: a batch goes as soon as the engine is free
  int64_t max_body_bytes = 64 << 20;  // larger bodies get 413 before they are read
  int threads = 64;                   // HTTP worker threads: the most requests in flight (and in one batch)
  int read_timeout_s = 5;             // a client that sends nothing for this long is disconnected
  std::string token;                  // --token or TEENGINE_SERVE_TOKEN: bearer token required (except /healthz)
};

// Parses argv; on --help or a bad argument prints usage and exits (0 or 2).
Options parse_options(int argc, char** argv);

}  // namespace serve
