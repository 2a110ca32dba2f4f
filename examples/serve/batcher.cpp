#include "batcher.h"

#include <cstring>

#include "http_codec.h"  // element_bytes

namespace serve {

Batcher::Batcher(teengine::Engine& engine, BatchOptions options, ServerMetrics& metrics)
    : engine_(engine),
      opt_(options),
      metrics_(metrics),
      multiple_(engine.token_multiple()),
      pad_ok_(engine.tokens_independent()),
      worker_([this] { work(); }) {}

Batcher::~Batcher() { stop(); }

std::string Batcher::admission_error(const teengine::HostTensor& input, int* status) const {
  const int64_t t = input.shape.empty() ? 0 : input.shape[0];
  if (t > opt_.max_batch_tokens) {
    *status = 413;
    return std::to_string(t) + " tokens is more than one batch holds (--max-batch-tokens " +
           std::to_string(opt_.max_batch_tokens) + ")";
  }
  if (t % multiple_ != 0 && !pad_ok_) {
    *status = 400;
    return std::to_string(t) + " tokens is not a multiple of tp " + std::to_string(multiple_) +
           " (sequence parallelism), and recipe " + engine_.recipe() +
           " scales per tensor, so the server cannot pad it without changing the output";
  }
  return "";
}

teengine::HostTensor Batcher::run(teengine::HostTensor input) {
  Request r{std::move(input), {}, std::chrono::steady_clock::now()};
  std::future<teengine::HostTensor> out = r.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw teengine::Error("the server is shutting down", false);
    queue_.push_back(&r);
    queued_tokens_ += r.input.shape[0];
  }
  cv_.notify_all();
  return out.get();
}

void Batcher::flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    flushing_ = true;
  }
  cv_.notify_all();
}

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = flushing_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Batcher::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    if (opt_.batching) {
      const auto deadline = queue_.front()->arrived + std::chrono::microseconds(opt_.max_wait_us);
      cv_.wait_until(lock, deadline, [&] { return flushing_ || queued_tokens_ >= opt_.max_batch_tokens; });
    }
    // The oldest request always goes; then, in arrival order, every request of its dtype that still fits (bytes
    // are concatenated as they are, so one batch holds one input dtype).
    std::vector<Request*> batch;
    int64_t tokens = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      Request* r = *it;
      const int64_t t = r->input.shape[0];
      const bool fits = batch.empty() || (opt_.batching && r->input.dtype == batch[0]->input.dtype &&
                                          tokens + t <= opt_.max_batch_tokens);
      if (!fits) {
        if (!opt_.batching) break;
        ++it;
        continue;
      }
      batch.push_back(r);
      tokens += t;
      queued_tokens_ -= t;
      it = queue_.erase(it);
    }
    lock.unlock();
    run_batch(batch);
    lock.lock();
  }
}

void Batcher::run_batch(std::vector<Request*>& batch) {
  int64_t tokens = 0;
  for (Request* r : batch) tokens += r->input.shape[0];
  const int64_t pad = (multiple_ - tokens % multiple_) % multiple_;
  try {
    if (batch.size() == 1 && pad == 0) {  // nothing to concatenate or split
      metrics_.batch_done(1, tokens, 0);
      batch[0]->done.set_value(engine_.forward(batch[0]->input));
      return;
    }
    teengine::HostTensor x;
    x.dtype = batch[0]->input.dtype;
    x.shape = {tokens + pad, engine_.hidden()};
    const size_t total = static_cast<size_t>(tokens + pad) * static_cast<size_t>(engine_.hidden()) *
                         element_bytes(x.dtype);
    x.bytes.reserve(total);
    for (Request* r : batch) x.bytes.insert(x.bytes.end(), r->input.bytes.begin(), r->input.bytes.end());
    x.bytes.resize(total, 0);  // the padding rows: zeros (their outputs are dropped)
    metrics_.batch_done(static_cast<int64_t>(batch.size()), tokens + pad, pad);
    const teengine::HostTensor y = engine_.forward(x);
    const size_t row = y.bytes.size() / static_cast<size_t>(tokens + pad);
    size_t offset = 0;
    for (Request* r : batch) {
      teengine::HostTensor out;
      out.dtype = y.dtype;
      out.shape = {r->input.shape[0], engine_.hidden()};
      const size_t n = row * static_cast<size_t>(r->input.shape[0]);
      out.bytes.assign(y.bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                       y.bytes.begin() + static_cast<std::ptrdiff_t>(offset + n));
      offset += n;
      r->done.set_value(std::move(out));
    }
  } catch (...) {
    // Every request of the batch fails with the forward's error; a request already answered keeps its answer.
    for (Request* r : batch) {
      try {
        r->done.set_exception(std::current_exception());
      } catch (const std::future_error&) {
      }
    }
  }
}

}  // namespace serve
