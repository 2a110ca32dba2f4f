// A CPU stream that really runs asynchronously: one worker thread executing submitted tasks in order. The engine's
// CPU Stream runs work inline, which can hide missing dependencies; the executor's host_threads mode runs the compute
// and comm streams on two HostStreams so that overlap — and races, if an event is missing — are real on the CPU.
// HostEvent gives CUDA event semantics: wait() orders later work on one stream after the work submitted to another
// stream before the matching record().
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace te {

class HostStream {
 public:
  HostStream();
  ~HostStream();  // runs the queued tasks, then joins the worker
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  void submit(std::function<void()> task);
  // Blocks until every submitted task has run; rethrows the first exception a task threw (once).
  void synchronize();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int64_t submitted_ = 0, completed_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

class HostEvent {
 public:
  HostEvent();
  // Completes when the tasks submitted to `stream` so far have run.
  void record(HostStream& stream);
  // Tasks submitted to `stream` after this call run after the last record() (made before this call) completes.
  void wait(HostStream& stream) const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int64_t recorded = 0;   // records made (host side)
    int64_t completed = 0;  // records that have run on their stream
  };
  std::shared_ptr<State> state_;
};

}  // namespace te
