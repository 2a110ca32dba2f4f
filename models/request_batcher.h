// Dynamic batching behind Engine::forward(HostTensor) (Engine::set_batching): callers on many threads queue their
// requests; one worker thread concatenates queued requests along the tokens (up to max_batch_tokens, waiting at most
// max_wait_us after the oldest arrived for company), runs them as one forward, and hands each caller its own rows.
// One forward of many tokens costs far less than many forwards of few: the weights are read, and on a GPU the
// kernels launched, once per batch instead of once per request.
#pragma once
#include <teengine/teengine.h>

#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "models/bucket_histogram.h"

namespace te {

struct BatchPolicy {
  int64_t max_batch_tokens = 4096;  // a batch never holds more, but a larger request still runs (alone)
  int64_t max_wait_us = 0;          // 0: a batch goes as soon as the engine is free
  int64_t token_multiple = 1;       // a forward's token count must be a multiple of this (sequence parallelism)
  bool pad = false;  // append zero rows to reach token_multiple (only where tokens are independent of each other)
};

class RequestBatcher {
 public:
  // `run` is the engine's forward of one [tokens, hidden] host tensor (serialised by the engine).
  using RunBatch = std::function<teengine::HostTensor(const teengine::HostTensor&)>;
  RequestBatcher(BatchPolicy policy, RunBatch run);
  ~RequestBatcher();  // close()
  RequestBatcher(const RequestBatcher&) = delete;
  RequestBatcher& operator=(const RequestBatcher&) = delete;

  // Queues `input` (already checked: [t, hidden], a supported dtype, bytes matching) and blocks until its output is
  // ready; rethrows what the batch's forward threw. After close() it runs the request alone, in the caller's thread.
  teengine::HostTensor submit(teengine::HostTensor input);
  // A new policy applies to the queued requests too (e.g. max_wait_us 0 sends them now).
  void set_policy(const BatchPolicy& policy);
  BatchPolicy policy() const;
  // Runs everything queued, then the worker exits.
  void close();
  // {"batches", "requests", "padded_tokens", "requests_per_batch": histogram, "tokens_per_batch": histogram}.
  nlohmann::json stats_json() const;

 private:
  struct Request {
    teengine::HostTensor input;
    std::promise<teengine::HostTensor> done;
    std::chrono::steady_clock::time_point arrived;
  };
  void work();
  std::vector<Request*> take_batch();  // under mu_
  void run_batch(const std::vector<Request*>& batch);

  RunBatch run_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  BatchPolicy policy_;
  std::deque<Request*> queue_;  // owned by the submit() calls, which wait for them
  int64_t queued_tokens_ = 0;
  bool closing_ = false;
  // Statistics (under mu_).
  int64_t batches_ = 0, requests_ = 0, padded_tokens_ = 0;
  BucketHistogram requests_per_batch_, tokens_per_batch_;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace te
