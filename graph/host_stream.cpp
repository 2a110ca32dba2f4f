#include "graph/host_stream.h"

#include <algorithm>

namespace te {

HostStream::HostStream() : worker_([this] { loop(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HostStream::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    ++submitted_;
  }
  cv_.notify_all();
}

void HostStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ == submitted_; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void HostStream::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // A failing task must not stop the stream: later event records still have to run, or the other stream waits
    // forever. The first error is kept for synchronize().
    try {
      task();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++completed_;
    }
    cv_.notify_all();
  }
}

HostEvent::HostEvent() : state_(std::make_shared<State>()) {}

void HostEvent::record(HostStream& stream) {
  int64_t gen;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    gen = ++state_->recorded;
  }
  stream.submit([s = state_, gen] {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->completed = std::max(s->completed, gen);
    }
    s->cv.notify_all();
  });
}

void HostEvent::wait(HostStream& stream) const {
  int64_t target;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    target = state_->recorded;
  }
  if (target == 0) return;  // never recorded: nothing to wait for (as cudaStreamWaitEvent)
  stream.submit([s = state_, target] {
    std::unique_lock<std::mutex> lock(s->mu);
    s->cv.wait(lock, [&] { return s->completed >= target; });
  });
}

}  // namespace te
