// Dynamic batching. HTTP threads submit requests; one worker concatenates queued requests along the token dimension
// (up to max_batch_tokens, waiting at most max_wait_us after the oldest arrived), runs them as one Engine::forward,
// and hands each request its own rows back. One forward of many tokens costs far less than many forwards of few:
// the weights are read (and, on a GPU, the kernels launched) once per batch instead of once per request.
//
// Only when the engine's tokens are independent (Engine::tokens_independent: recipes none, fp8_block, mxfp8) is each
// request's output what it gets alone (up to the GEMM's rounding, which depends on the rows per call: an ulp of the
// model dtype on some elements; --batching off is bit-exact). Under sequence parallelism a forward's token count must be a
// multiple of tp: such batches get zero rows appended (dropped from the reply), which only those recipes allow;
// otherwise a request whose token count is not a multiple is refused at admission.
#pragma once
#include <teengine/teengine.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "metrics.h"

namespace serve {

struct BatchOptions {
  bool batching = true;            // off: one forward per request, in arrival order
  int64_t max_batch_tokens = 4096;  // a batch never exceeds it (one request larger than this is refused)
  int64_t max_wait_us = 2000;       // how long the oldest queued request waits for company
};

class Batcher {
 public:
  Batcher(teengine::Engine& engine, BatchOptions options, ServerMetrics& metrics);
  ~Batcher();  // stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Why `input` cannot be run (the caller answers 400/413), or "" when it can.
  std::string admission_error(const teengine::HostTensor& input, int* status) const;
  // Queues `input` [t, hidden] and blocks until its output [t, hidden] (model dtype) is ready; throws what the
  // forward threw (teengine::Error).
  teengine::HostTensor run(teengine::HostTensor input);
  // Stop waiting for company: batches go out as soon as the worker is free (for a drain).
  void flush();
  // Runs everything queued, then the worker exits; run() after stop() throws.
  void stop();

 private:
  struct Request {
    teengine::HostTensor input;
    std::promise<teengine::HostTensor> done;
    std::chrono::steady_clock::time_point arrived;
  };
  void work();
  void run_batch(std::vector<Request*>& batch);

  teengine::Engine& engine_;
  const BatchOptions opt_;
  ServerMetrics& metrics_;
  const int64_t multiple_;  // the engine's token_multiple
  const bool pad_ok_;       // zero rows may be appended (tokens_independent)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> queue_;  // owned by the submitting run() calls, which wait for them
  int64_t queued_tokens_ = 0;
  bool flushing_ = false, stopping_ = false;
  std::thread worker_;
};

}  // namespace serve
