// Local communicator: rendezvous with timeouts and abort, byte gathers and rank-ordered reductions over host or
// device memory.
#include "comm/local_communicator.h"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/local_reduce.h"
#include "engine/error.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#endif

namespace te {
namespace {

// What one rank publishes for a launch. Events order the peers' streams against this rank's stream (CUDA only).
struct Slot {
  std::vector<Collective> ops;
  Event posted;  // recorded on the rank's stream when its inputs are ready
  Event done;    // recorded on the rank's stream after it read the peers' inputs
};

class LocalGroup {
 public:
  LocalGroup(int world, Device device) : world_(world), device_(device), slots_(world), arrived_(world, false) {}
  int world() const { return world_; }
  Device device() const { return device_; }
  Slot& slot(int r) { return slots_[r]; }

  // Blocks until every rank arrived at this rendezvous; te::Error on timeout or when the group is aborted.
  void rendezvous(int rank, std::chrono::milliseconds timeout, const char* what) {
    std::unique_lock<std::mutex> lock(mu_);
    throw_if_aborted(rank, what);
    const uint64_t gen = generation_;
    arrived_[rank] = true;
    if (++count_ == world_) {
      count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!cv_.wait_until(lock, deadline, [&] { return generation_ != gen || aborted_; })) {
      std::string missing;
      for (int r = 0; r < world_; ++r)
        if (!arrived_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      abort_locked(TE_STR_("local rank " << rank << " waited " << timeout.count() << " ms at '" << what
                                         << "' (launch " << gen / 2 << "); rank(s) " << missing
                                         << " never arrived"));
    }
    if (generation_ == gen) throw_if_aborted(rank, what);
  }

  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) abort_locked(reason);
  }

 private:
  void abort_locked(const std::string& reason) {
    aborted_ = true;
    reason_ = reason;
    cv_.notify_all();
  }
  void throw_if_aborted(int rank, const char* what) {
    if (aborted_)
      TE_THROW("local communicator rank " << rank << "/" << world_ << " at '" << what << "': the group was aborted: "
                                          << reason_,
               "a peer failed or never arrived; fix that rank (or raise TEENGINE_COMM_TIMEOUT_MS if it is just slow)");
  }

  const int world_;
  const Device device_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> arrived_;
  int count_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string reason_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->world(); }
  Device device() const override { return group_->device(); }
  std::string_view backend() const override { return "local"; }
  void abort(const std::string& reason) override { group_->abort(reason); }

  Work launch(std::span<const Collective> ops, const Stream& stream) override {
    validate(ops);
    count(ops);
    const int W = size();
    const bool cuda = device().is_cuda();
    Slot& mine = group_->slot(rank_);
    mine.ops.assign(ops.begin(), ops.end());
    if (cuda) {
      if (!mine.posted.handle()) {
        mine.posted = Event::create(device());
        mine.done = Event::create(device());
      }
      mine.posted.record(stream);
    }
    group_->rendezvous(rank_, timeout(), "posted");
    try {
      check_matching();
    } catch (const Error& e) {
      group_->abort(e.message());
      throw;
    }
    // Every peer's inputs are published: read them (device: after the peers' streams reached that point).
    if (cuda)
      for (int r = 0; r < W; ++r)
        if (r != rank_) group_->slot(r).posted.wait(stream);
    std::vector<Tensor> reduced(ops.size());  // all_reduce results, written back after "done"
    for (size_t i = 0; i < ops.size(); ++i) run_one(i, reduced[i], stream);
    if (cuda) mine.done.record(stream);
    group_->rendezvous(rank_, timeout(), "done");
    // Peers have read everything of ours: our stream must not overwrite or free our inputs before their reads.
    if (cuda)
      for (int r = 0; r < W; ++r)
        if (r != rank_) group_->slot(r).done.wait(stream);
    for (size_t i = 0; i < ops.size(); ++i)
      if (reduced[i].defined()) {
        Tensor dst = ops[i].output;  // a view: writes land in the caller's tensor
        dst.copy_from(reduced[i], stream);
      }
    mine.ops.clear();
    return Work();  // ordered on `stream` already: nothing left to wait for
  }

 private:
  void check_matching() const {
    const auto& ref = group_->slot(0).ops;
    const auto& own = group_->slot(rank_).ops;
    TE_CHECK_HINT(own.size() == ref.size(), "local rank " << rank_ << " launched " << own.size()
                                                          << " collectives, rank 0 launched " << ref.size(),
                  "every rank must launch the same collectives in the same order");
    for (size_t i = 0; i < ref.size(); ++i)
      TE_CHECK_HINT(own[i].kind == ref[i].kind && own[i].op == ref[i].op &&
                        own[i].output.nbytes() == ref[i].output.nbytes() && own[i].output.dtype() == ref[i].output.dtype(),
                    "local rank " << rank_ << " collective #" << i << " " << collective_name(own[i].kind) << " "
                                  << own[i].output.str() << " does not match rank 0's "
                                  << collective_name(ref[i].kind) << " " << ref[i].output.str(),
                    "every rank must launch the same collectives with the same sizes");
  }

  void copy_bytes(void* dst, const void* src, int64_t bytes, const Stream& stream) const {
    if (bytes == 0) return;
    if (device().is_cpu()) {
      std::memcpy(dst, src, static_cast<size_t>(bytes));
      return;
    }
#if TE_WITH_CUDA
    TE_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(stream.handle())));
#else
    (void)stream;
#endif
  }

  void reduce(void* out, const detail::RankBuffers& in, DType dtype, int64_t n, ReduceOp op,
              const Stream& stream) const {
    if (device().is_cpu()) return detail::local_reduce_cpu(out, in, size(), dtype, n, op);
#if TE_WITH_CUDA
    detail::local_reduce_cuda(out, in, size(), dtype, n, op, stream);
#else
    (void)stream;
#endif
  }

  void run_one(size_t i, Tensor& reduced, const Stream& stream) {
    const int W = size();
    const Collective& c = group_->slot(rank_).ops[i];
    switch (c.kind) {
      case CollectiveKind::all_gather: {  // output = concat of every rank's input bytes, rank order
        const int64_t n = c.input.nbytes();
        auto* out = static_cast<uint8_t*>(c.output.data_ptr());
        for (int r = 0; r < W; ++r) copy_bytes(out + r * n, group_->slot(r).ops[i].input.data_ptr(), n, stream);
        break;
      }
      case CollectiveKind::reduce_scatter: {  // my block of every rank's input, reduced in rank order
        const int64_t n = c.output.numel();
        const int64_t eb = dtype_bits(c.output.dtype()) / 8;
        detail::RankBuffers in{};
        for (int r = 0; r < W; ++r)
          in.ptr[r] = static_cast<const uint8_t*>(group_->slot(r).ops[i].input.data_ptr()) + rank_ * n * eb;
        reduce(c.output.data_ptr(), in, c.output.dtype(), n, c.op, stream);
        break;
      }
      case CollectiveKind::all_reduce: {  // into a temporary: the peers still read our buffer until "done"
        reduced = Tensor::empty(c.output.shape(), c.output.dtype(), device(), stream);
        detail::RankBuffers in{};
        for (int r = 0; r < W; ++r) in.ptr[r] = group_->slot(r).ops[i].output.data_ptr();
        reduce(reduced.data_ptr(), in, c.output.dtype(), c.output.numel(), c.op, stream);
        break;
      }
    }
  }

  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int world, const LocalGroupOptions& options) {
  TE_CHECK_HINT(world >= 1 && world <= detail::kMaxLocalRanks,
                "local communicator: world size " << world << " is outside [1, " << detail::kMaxLocalRanks << "]",
                "use fewer simulated ranks");
  TE_CHECK_HINT(options.device.is_cpu() || built_with_cuda(),
                "local communicator on " << options.device.str() << " in a build without CUDA", "use device: cpu");
  auto group = std::make_shared<LocalGroup>(world, options.device);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world; ++r) {
    comms.push_back(std::make_unique<LocalCommunicator>(group, r));
    comms.back()->set_timeout(options.timeout);
  }
  return comms;
}

void run_ranks(const std::vector<std::unique_ptr<Communicator>>& comms,
               const std::function<void(Communicator&)>& fn) {
  if (comms.size() == 1) {  // one rank here (tp 1, or one rank of a launched group): no thread to start per call
    set_current_device(comms[0]->device());
    try {
      fn(*comms[0]);
    } catch (const std::exception& e) {
      comms[0]->abort(TE_STR_("rank " << comms[0]->rank() << " failed: " << e.what()));
      throw;
    }
    return;
  }
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (const auto& c : comms) {
    threads.emplace_back([&, comm = c.get()] {
      try {
        set_current_device(comm->device());
        fn(*comm);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        std::string what = "unknown exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        comm->abort(TE_STR_("rank " << comm->rank() << " failed: " << what));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace te
