#include "ops/gemm/cpu_workers.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace te::detail {
namespace {
struct Job {
  const std::function<void(int64_t)>* fn;
  int64_t n;
  std::atomic<int64_t> next{0};
  int64_t done = 0;  // under Pool::mu
  std::condition_variable finished;
};

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()); }

  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(job);
    }
    cv_.notify_all();
    help(*job);  // the caller works on its own job too
    std::unique_lock<std::mutex> lock(mu_);
    job->finished.wait(lock, [&] { return job->done == job->n; });
  }

 private:
  // Runs tasks of `job` until none is left to take.
  void help(Job& job) {
    for (int64_t i; (i = job.next++) < job.n;) {
      (*job.fn)(i);
      std::lock_guard<std::mutex> lock(mu_);
      if (++job.done == job.n) job.finished.notify_all();
    }
  }
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      std::shared_ptr<Job> job = jobs_.front();
      if (job->next.load() >= job->n) {  // every task taken: the job leaves the queue
        jobs_.pop_front();
        continue;
      }
      lock.unlock();
      help(*job);
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool p(std::max(1u, std::thread::hardware_concurrency()) - 1);
  return p;
}
}  // namespace

int cpu_workers() { return pool().threads() + 1; }

void run_cpu_tasks(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 1 || pool().threads() == 0) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool().run(n, fn);
}

}  // namespace te::detail
