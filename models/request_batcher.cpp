#include "models/request_batcher.h"

namespace te {
namespace {
std::vector<double> powers_of_two(double first, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i) b.push_back(first * static_cast<double>(int64_t{1} << i));
  return b;
}
}  // namespace

RequestBatcher::RequestBatcher(BatchPolicy policy, RunBatch run)
    : run_(std::move(run)),
      policy_(policy),
      requests_per_batch_(powers_of_two(1, 10)),  // 1 … 512
      tokens_per_batch_(powers_of_two(16, 11)),   // 16 … 16384
      worker_([this] { work(); }) {}

RequestBatcher::~RequestBatcher() { close(); }

teengine::HostTensor RequestBatcher::submit(teengine::HostTensor input) {
  Request r{std::move(input), {}, std::chrono::steady_clock::now()};
  std::future<teengine::HostTensor> out = r.done.get_future();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) {
      // Batching was switched off (or the engine is going) while this caller was on its way: it runs alone.
      lock.unlock();
      run_batch({&r});
      return out.get();
    }
    queue_.push_back(&r);
    queued_tokens_ += r.input.shape[0];
  }
  cv_.notify_all();
  return out.get();
}

void RequestBatcher::set_policy(const BatchPolicy& policy) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy_ = policy;
  }
  cv_.notify_all();
}

BatchPolicy RequestBatcher::policy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

void RequestBatcher::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void RequestBatcher::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, and nothing left to run
    // Wait for company until the oldest request has waited max_wait_us or a batch's worth of tokens is queued; a
    // policy change or close() re-evaluates at once.
    for (;;) {
      const auto deadline = queue_.front()->arrived + std::chrono::microseconds(policy_.max_wait_us);
      if (closing_ || queued_tokens_ >= policy_.max_batch_tokens || std::chrono::steady_clock::now() >= deadline)
        break;
      cv_.wait_until(lock, deadline);
    }
    std::vector<Request*> batch = take_batch();
    lock.unlock();
    run_batch(batch);
    lock.lock();
  }
}

std::vector<RequestBatcher::Request*> RequestBatcher::take_batch() {
  // The oldest request always goes; then, in arrival order, every request of its dtype that still fits (the bytes
  // are concatenated as they are, so one batch holds one input dtype).
  std::vector<Request*> batch;
  int64_t tokens = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Request* r = *it;
    const int64_t t = r->input.shape[0];
    if (!batch.empty() && (r->input.dtype != batch[0]->input.dtype || tokens + t > policy_.max_batch_tokens)) {
      ++it;
      continue;
    }
    batch.push_back(r);
    tokens += t;
    queued_tokens_ -= t;
    it = queue_.erase(it);
  }
  return batch;
}

void RequestBatcher::run_batch(const std::vector<Request*>& batch) {
  int64_t tokens = 0;
  for (Request* r : batch) tokens += r->input.shape[0];
  int64_t multiple = 1;
  bool pad_ok = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    multiple = policy_.token_multiple;
    pad_ok = policy_.pad;
  }
  const int64_t pad = pad_ok ? (multiple - tokens % multiple) % multiple : 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++batches_;
    requests_ += static_cast<int64_t>(batch.size());
    padded_tokens_ += pad;
    requests_per_batch_.observe(static_cast<double>(batch.size()));
    tokens_per_batch_.observe(static_cast<double>(tokens + pad));
  }
  try {
    if (batch.size() == 1 && pad == 0) {  // nothing to concatenate or split
      batch[0]->done.set_value(run_(batch[0]->input));
      return;
    }
    teengine::HostTensor x;
    x.dtype = batch[0]->input.dtype;
    x.shape = {tokens + pad, batch[0]->input.shape[1]};
    const size_t row_in = batch[0]->input.bytes.size() / static_cast<size_t>(batch[0]->input.shape[0]);
    x.bytes.reserve(row_in * static_cast<size_t>(tokens + pad));
    for (Request* r : batch) x.bytes.insert(x.bytes.end(), r->input.bytes.begin(), r->input.bytes.end());
    x.bytes.resize(row_in * static_cast<size_t>(tokens + pad), 0);  // padding rows: zeros, their outputs dropped
    const teengine::HostTensor y = run_(x);
    const size_t row = y.bytes.size() / static_cast<size_t>(tokens + pad);
    size_t offset = 0;
    for (Request* r : batch) {
      teengine::HostTensor out;
      out.dtype = y.dtype;
      out.shape = {r->input.shape[0], y.shape[1]};
      const size_t n = row * static_cast<size_t>(r->input.shape[0]);
      out.bytes.assign(y.bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                       y.bytes.begin() + static_cast<std::ptrdiff_t>(offset + n));
      offset += n;
      r->done.set_value(std::move(out));
    }
  } catch (...) {
    // Every request of the batch fails with the forward's error; one already answered keeps its answer.
    for (Request* r : batch) {
      try {
        r->done.set_exception(std::current_exception());
      } catch (const std::future_error&) {
      }
    }
  }
}

nlohmann::json RequestBatcher::stats_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"batches", batches_},
          {"requests", requests_},
          {"padded_tokens", padded_tokens_},
          {"requests_per_batch", requests_per_batch_.json()},
          {"tokens_per_batch", tokens_per_batch_.json()}};
}

}  // namespace te
