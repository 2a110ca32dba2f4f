// Gloo communicator: the TcpStore rendezvous, Gloo's TCP transport, and the local backend's rank-ordered reductions
// on top of Gloo's all-to-all and all-gather, so results are bit-identical to the local backend.
#include "comm/gloo_communicator.h"

#include "engine/error.h"
#include "te_config.h"

#if TE_WITH_GLOO
#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/local_reduce.h"
#include "comm/tcp_store.h"
#endif

namespace te {

#if TE_WITH_GLOO
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Gloo writes to its sockets with writev(), without MSG_NOSIGNAL: a write to a peer that died would kill this
// process with SIGPIPE. SIGPIPE is blocked in the threads that touch Gloo's sockets — the caller during a
// collective, and Gloo's event-loop thread, which inherits the mask of the thread that creates the device — and a
// SIGPIPE raised meanwhile is consumed. The error itself reaches us as EPIPE, then a gloo::IoException.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlock() {
    if (!was_pending_ && sigismember(&old_, SIGPIPE) != 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

// Gloo's rendezvous store on top of the TcpStore, under a key prefix (the store also holds our barriers).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(TcpStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::vector<uint8_t> v = store_.get(prefix_ + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout);
  }

 private:
  TcpStore& store_;
  const std::string prefix_;
};

// The local IPv4 address Gloo should listen on: the one this node uses to reach rank 0 (a UDP connect() sends
// nothing; getsockname() then names the source address routing picked), 127.0.0.1 for a loopback master.
std::string local_address_towards(const TcpRendezvousOptions& rv, const std::string& where) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(rv.port));
  if (::inet_pton(AF_INET, rv.addr.c_str(), &sa.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    const int rc = ::getaddrinfo(rv.addr.c_str(), nullptr, &hints, &res);
    TE_CHECK_HINT(rc == 0 && res, where << ": cannot resolve MASTER_ADDR '" << rv.addr << "': " << gai_strerror(rc),
                  "set MASTER_ADDR to an IPv4 address or a resolvable host name");
    sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
  }
  if ((ntohl(sa.sin_addr.s_addr) >> 24) == 127) return "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  TE_CHECK(fd >= 0, where << ": socket(): " << std::strerror(errno));
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  TE_CHECK_HINT(ok,
                where << ": no route from this node to MASTER_ADDR " << rv.addr << " (" << std::strerror(err) << ")",
                "check MASTER_ADDR, or name the interface with GLOO_SOCKET_IFNAME");
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return buf;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const TcpRendezvousOptions& rv) : rank_(rv.rank), world_(rv.world) {
    const std::string where = TE_STR_("gloo rank " << rank_ << "/" << world_);
    TE_CHECK_HINT(world_ <= detail::kMaxLocalRanks,
                  where << ": world size " << world_ << " is above " << detail::kMaxLocalRanks,
                  "use at most " << detail::kMaxLocalRanks << " gloo ranks");
    store_ = std::make_unique<TcpStore>(rv);
    store_->barrier("join");  // a rank that never started is named here, before Gloo waits on it
    gloo::transport::tcp::attr attr;
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) {
      attr.iface = ifname;
    } else {
      attr.hostname = local_address_towards(rv, where);
    }
    const std::string listen = !attr.iface.empty() ? "interface " + attr.iface : attr.hostname;
    try {
      SigpipeBlock block;  // Gloo's event-loop thread starts here and inherits the mask
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
      context_->setTimeout(rv.timeout);
      StoreAdapter adapter(*store_, "gloo/");
      context_->connectFullMesh(adapter, device_);
    } catch (const Error&) {  // the store's own error (names the key or the rank)
      throw;
    } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet, std::system_error
      TE_THROW(where << ": connecting Gloo's TCP transport on " << listen << " failed: " << e.what(),
               "set GLOO_SOCKET_IFNAME to the interface that reaches the other nodes, or check the firewall");
    }
    store_->barrier("gloo-connect");
  }

  ~GlooCommunicator() override {
    SigpipeBlock block;
    context_.reset();  // closes the pairs
    device_.reset();   // joins Gloo's event loop
    store_.reset();    // goodbye: this rank did not die
  }

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend() const override { return "gloo"; }

  // Later launches here throw `reason`; closing our Gloo connections makes the peers' pending and later
  // collectives fail at once instead of at their timeout.
  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      reason_ = reason;
      aborted_ = true;
    }
    try {
      if (context_) context_->closeConnections();
    } catch (const std::exception&) {  // already closed by the failure that led here
    }
  }

  Work launch(std::span<const Collective> ops, const Stream& stream) override {
    (void)stream;  // host memory: the work is done when launch returns
    {
      std::lock_guard<std::mutex> lock(mu_);
      TE_CHECK_HINT(!aborted_, "gloo rank " << rank_ << "/" << world_ << ": the communicator was aborted: " << reason_,
                    "an earlier collective failed; look at the first error and at the other ranks' logs");
    }
    validate(ops);
    count(ops);
    SigpipeBlock block;
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto started = Clock::now();
      try {
        run_one(ops[i]);
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {  // gloo::Exception (IoException on a closed socket or a timeout), enforce
        fail(ops[i], i, e.what(), started);
      }
    }
    return Work();
  }

 private:
  uint32_t next_tag() { return tag_++; }

  void alltoall(const void* in, void* out, size_t bytes) {  // bytes: the whole buffer (W blocks)
    gloo::AlltoallOptions o(context_);
    o.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    o.setOutput(static_cast<uint8_t*>(out), bytes);
    o.setTag(next_tag());
    o.setTimeout(timeout());
    gloo::alltoall(o);
  }
  void allgather(const void* in, void* out, size_t bytes) {  // bytes: one rank's block
    gloo::AllgatherOptions o(context_);
    o.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    o.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(world_));
    o.setTag(next_tag());
    o.setTimeout(timeout());
    gloo::allgather(o);
  }

  void run_one(const Collective& c) {
    const int W = world_;
    switch (c.kind) {
      case CollectiveKind::all_gather: {  // output [W·n] = every rank's input bytes in rank order
        const size_t n = static_cast<size_t>(c.input.nbytes());
        if (n > 0) allgather(c.input.data_ptr(), c.output.data_ptr(), n);
        return;
      }
      case CollectiveKind::reduce_scatter: {  // block r of every rank's input → rank r, reduced in rank order
        const int64_t n = c.output.numel();
        const size_t block = static_cast<size_t>(c.output.nbytes());
        if (n == 0) return;
        std::vector<uint8_t> blocks(block * W);  // [W, n]: row r = rank r's block for us
        alltoall(c.input.data_ptr(), blocks.data(), blocks.size());
        reduce_blocks(c.output.data_ptr(), blocks.data(), block, c.output.dtype(), n, c.op);
        return;
      }
      case CollectiveKind::all_reduce: {  // reduce-scatter of the padded tensor, then all-gather of the blocks
        const int64_t numel = c.output.numel();
        if (numel == 0) return;
        const DType dt = c.output.dtype();
        const int64_t n = (numel + W - 1) / W;  // elements per block; the tail of the last blocks is padding
        const size_t eb = static_cast<size_t>(dtype_bits(dt) / 8);
        const size_t block = static_cast<size_t>(n) * eb;
        std::vector<uint8_t> padded(block * W, 0);  // [W·n] this rank's tensor, zero-padded
        std::memcpy(padded.data(), c.output.data_ptr(), static_cast<size_t>(c.output.nbytes()));
        std::vector<uint8_t> blocks(block * W);  // [W, n] our block from every rank
        alltoall(padded.data(), blocks.data(), blocks.size());
        std::vector<uint8_t> mine(block);  // [n] our block reduced
        reduce_blocks(mine.data(), blocks.data(), block, dt, n, c.op);
        allgather(mine.data(), padded.data(), block);  // [W·n] every reduced block
        std::memcpy(c.output.data_ptr(), padded.data(), static_cast<size_t>(c.output.nbytes()));
        return;
      }
    }
  }

  void reduce_blocks(void* out, const uint8_t* blocks, size_t block, DType dt, int64_t n, ReduceOp op) const {
    detail::RankBuffers in{};
    for (int r = 0; r < world_; ++r) in.ptr[r] = blocks + static_cast<size_t>(r) * block;
    detail::local_reduce_cpu(out, in, world_, dt, n, op);
  }

  // A collective failed: name the rank that died (the store saw its connection close without a goodbye) or say
  // that none did (a peer hangs or is slow), abort, throw.
  [[noreturn]] void fail(const Collective& c, size_t index, const char* what, Clock::time_point started) {
    std::vector<int> lost = store_->lost_ranks();
    // A socket closed before the timeout: a peer died, and the store may learn of it a moment after Gloo did.
    if (lost.empty() && Clock::now() - started < timeout()) {
      const auto until = Clock::now() + 1s;
      while (lost.empty() && Clock::now() < until) {
        std::this_thread::sleep_for(50ms);
        lost = store_->lost_ranks();
      }
    }
    std::string gloo_what = what;
    while (!gloo_what.empty() && (gloo_what.back() == '\n' || gloo_what.back() == ' ')) gloo_what.pop_back();
    const std::string cause =
        lost.empty()
            ? TE_STR_("no rank exited: a peer is hanging or slower than the timeout (" << timeout().count() << " ms)")
            : TE_STR_((lost.size() == 1 ? "rank " : "ranks ") << ranks_text(lost) << " exited");
    const std::string msg = TE_STR_("gloo rank " << rank_ << "/" << world_ << ": " << collective_name(c.kind) << " #"
                                                 << index << " of launch " << metrics().launches << " failed: " << cause
                                                 << " (gloo: " << gloo_what << ")");
    abort(msg);
    TE_THROW(msg, "look at that rank's log; raise parallel.timeout_s if it is just slow");
  }

  const int rank_, world_;
  std::unique_ptr<TcpStore> store_;  // kept for lost_ranks(); destroyed last (goodbye)
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t tag_ = 1;
  std::mutex mu_;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace

bool built_with_gloo() { return true; }

std::unique_ptr<Communicator> make_gloo_communicator(const TcpRendezvousOptions& rv,
                                                     std::chrono::milliseconds timeout) {
  auto c = std::make_unique<GlooCommunicator>(rv);
  c->set_timeout(timeout);
  return c;
}

#else  // !TE_WITH_GLOO

bool built_with_gloo() { return false; }

std::unique_ptr<Communicator> make_gloo_communicator(const TcpRendezvousOptions& rv, std::chrono::milliseconds) {
  TE_THROW("gloo rank " << rv.rank << "/" << rv.world << ": this build has no Gloo",
           "install libgloo-dev (tools/install-deps.sh) and rebuild");
}

#endif

}  // namespace te
