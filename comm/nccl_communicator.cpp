// NCCL communicator: non-blocking init, grouped launches, event-polled completion with timeout and abort.
#include "comm/nccl_communicator.h"

#include "engine/error.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "engine/cuda_check.h"
#endif

namespace te {

#if TE_WITH_CUDA
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: TE_THROW("NCCL reduction of " << dtype_name(t) << " is not supported", "reduce in f32/bf16/f16");
  }
}

// Polls a non-blocking communicator until `done()` or the async error is final; aborts on error/timeout.
template <class Done>
void poll_until(ncclComm_t comm, Clock::time_point deadline, const std::string& what, Done&& done,
                bool* aborted) {
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t st = ncclCommGetAsyncError(comm, &async);
    if (st != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      const ncclResult_t bad = st != ncclSuccess ? st : async;
      const char* last = ncclGetLastError(comm);
      ncclCommAbort(comm);
      *aborted = true;
      TE_THROW("NCCL " << what << " failed: " << ncclGetErrorString(bad) << (last && *last ? " (" : "")
                       << (last ? last : "") << (last && *last ? ")" : ""),
               "a peer failed or the network broke; look at every rank's log (NCCL_DEBUG=WARN)");
    }
    if (async == ncclSuccess && done()) return;
    if (Clock::now() > deadline) {
      ncclCommAbort(comm);
      *aborted = true;
      TE_THROW("NCCL " << what << " did not complete within the timeout; the communicator was aborted",
               "a peer never arrived or is stuck; raise TEENGINE_COMM_TIMEOUT_MS if it is just slow");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void disable_nvls_unless_set() { ::setenv("NCCL_NVLS_ENABLE", "0", 0); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, Device device)
      : comm_(comm), rank_(rank), world_(world), device_(device) {}
  ~NcclCommunicator() override {
    if (!comm_ || aborted_) return;
    cudaSetDevice(device_.index);  // not set_current_device: a destructor must not throw
    // Finalize flushes pending work; if it does not finish in time, abort (never hang in a destructor).
    ncclResult_t r = ncclCommFinalize(comm_);
    ncclResult_t async = r;
    const auto deadline = Clock::now() + std::min(timeout(), std::chrono::milliseconds(10000));
    while ((r == ncclSuccess || r == ncclInProgress) && ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
           async == ncclInProgress && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if ((r == ncclSuccess || r == ncclInProgress) && async == ncclSuccess) {
      ncclCommDestroy(comm_);
      return;
    }
    ncclCommAbort(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return world_; }
  Device device() const override { return device_; }
  std::string_view backend() const override { return "nccl"; }
  void abort(const std::string& reason) override {
    if (!aborted_ && comm_) ncclCommAbort(comm_);
    aborted_ = true;
    reason_ = reason;
  }

  Work launch(std::span<const Collective> ops, const Stream& stream) override {
    TE_CHECK_HINT(!aborted_, "nccl rank " << rank_ << ": the communicator was aborted" << (reason_.empty() ? "" : ": ")
                                          << reason_,
                  "create a new communicator");
    validate(ops);
    count(ops);
    set_current_device(device_);
    cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
    const auto deadline = Clock::now() + timeout();
    TE_NCCL_CHECK(ncclGroupStart());
    for (const Collective& c : ops) {
      switch (c.kind) {
        case CollectiveKind::all_gather:
          enqueue(ncclAllGather(c.input.data_ptr(), c.output.data_ptr(), static_cast<size_t>(c.input.nbytes()),
                                ncclUint8, comm_, st));
          break;
        case CollectiveKind::reduce_scatter:
          enqueue(ncclReduceScatter(c.input.data_ptr(), c.output.data_ptr(), static_cast<size_t>(c.output.numel()),
                                    nccl_dtype(c.output.dtype()), c.op == ReduceOp::sum ? ncclSum : ncclMax, comm_,
                                    st));
          break;
        case CollectiveKind::all_reduce:
          enqueue(ncclAllReduce(c.output.data_ptr(), c.output.data_ptr(), static_cast<size_t>(c.output.numel()),
                                nccl_dtype(c.output.dtype()), c.op == ReduceOp::sum ? ncclSum : ncclMax, comm_, st));
          break;
      }
    }
    enqueue(ncclGroupEnd());
    // Non-blocking: the group may still be enqueueing; wait for that before recording the completion event.
    poll_until(comm_, deadline, "group launch", [] { return true; }, &aborted_);
    Event done = Event::create(device_);
    done.record(stream);
    return Work([this, done, deadline] {
      set_current_device(device_);
      poll_until(comm_, deadline, "collective", [&] { return done.query(); }, &aborted_);
    });
  }

 private:
  void enqueue(ncclResult_t r) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    TE_NCCL_CHECK(r);
  }
  ncclComm_t comm_;
  int rank_, world_;
  Device device_;
  bool aborted_ = false;
  std::string reason_;
};

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const TcpRendezvousOptions& rv, Device device,
                                                     const NcclOptions& options) {
  TE_CHECK_HINT(device.is_cuda() && device.index < cuda_device_count(),
                "nccl communicator: device " << device.str() << " is not a visible GPU (" << cuda_device_count()
                                             << " visible)",
                "use the local backend on the CPU, or check CUDA_VISIBLE_DEVICES / LOCAL_RANK");
  disable_nvls_unless_set();
  set_current_device(device);
  ncclUniqueId id;
  std::vector<uint8_t> blob;
  if (rv.rank == 0) {
    TE_NCCL_CHECK(ncclGetUniqueId(&id));
    blob.assign(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id));
  }
  TcpRendezvousOptions o = rv;
  o.timeout = options.timeout;
  blob = tcp_broadcast_blob(o, blob);
  TE_CHECK(blob.size() == sizeof(id), "nccl rendezvous: received " << blob.size() << " bytes, expected " << sizeof(id));
  std::memcpy(&id, blob.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = nonblocking_config();
  ncclResult_t r = ncclCommInitRankConfig(&comm, rv.world, id, rv.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) TE_NCCL_CHECK(r);
  bool aborted = false;
  poll_until(comm, Clock::now() + options.timeout, "init", [] { return true; }, &aborted);
  auto c = std::make_unique<NcclCommunicator>(comm, rv.rank, rv.world, device);
  c->set_timeout(options.timeout);
  return c;
}

std::unique_ptr<Communicator> make_nccl_communicator_from_env(const NcclOptions& options) {
  int local_rank = 0;
  TcpRendezvousOptions rv = rendezvous_options_from_env(&local_rank);
  return make_nccl_communicator(rv, Device::cuda(local_rank), options);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices,
                                                           const NcclOptions& options) {
  const int n = static_cast<int>(devices.size());
  TE_CHECK(n >= 1, "make_nccl_group: no devices");
  for (const Device& d : devices)
    TE_CHECK_HINT(d.is_cuda() && d.index < cuda_device_count(), "make_nccl_group: " << d.str() << " is not a visible GPU",
                  "NCCL needs one GPU per rank; simulate ranks on one GPU with the local backend");
  disable_nvls_unless_set();
  ncclUniqueId id;
  TE_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(n, nullptr);
  // ncclCommInitAll, but non-blocking (so a stuck init times out): one group of InitRankConfig calls.
  TE_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    set_current_device(devices[r]);
    ncclConfig_t config = nonblocking_config();
    ncclResult_t st = ncclCommInitRankConfig(&comms[r], n, id, r, &config);
    if (st != ncclSuccess && st != ncclInProgress) TE_NCCL_CHECK(st);
  }
  ncclResult_t st = ncclGroupEnd();
  if (st != ncclSuccess && st != ncclInProgress) TE_NCCL_CHECK(st);
  const auto deadline = Clock::now() + options.timeout;
  for (int r = 0; r < n; ++r) {
    bool aborted = false;
    set_current_device(devices[r]);
    poll_until(comms[r], deadline, "init", [] { return true; }, &aborted);
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::make_unique<NcclCommunicator>(comms[r], r, n, devices[r]));
    out.back()->set_timeout(options.timeout);
  }
  return out;
}

#else  // !TE_WITH_CUDA

std::unique_ptr<Communicator> make_nccl_communicator(const TcpRendezvousOptions&, Device, const NcclOptions&) {
  TE_THROW("the nccl communicator needs a CUDA build", "use the local backend (--backend local)");
}
std::unique_ptr<Communicator> make_nccl_communicator_from_env(const NcclOptions&) {
  TE_THROW("the nccl communicator needs a CUDA build", "use the local backend (--backend local)");
}
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>&, const NcclOptions&) {
  TE_THROW("the nccl communicator needs a CUDA build", "use the local backend (--backend local)");
}

#endif

}  // namespace te
