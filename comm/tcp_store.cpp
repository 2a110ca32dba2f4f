// TcpStore's client (every rank, rank 0 included) and the public API. Requests go one at a time (a mutex) and block
// with deadlines; the wire format is in comm/tcp_store_wire.h, rank 0's server in comm/tcp_store_server.h.
#include "comm/tcp_store.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/tcp_store_server.h"
#include "comm/tcp_store_wire.h"
#include "engine/error.h"

namespace te {

using namespace store_wire;
using namespace std::chrono_literals;

struct TcpStore::Impl {
  TcpRendezvousOptions o;
  std::string ctx;  // "TCP store rank r/W at addr:port"
  sockaddr_in sa{};
  std::unique_ptr<Server> server;  // rank 0

  std::mutex mu;  // one request at a time
  Fd fd;
  std::vector<uint8_t> in;
  uint32_t next_req = 1;
  bool closed = false;        // the server closed the connection
  bool bye = false;           // …after saying bye (an orderly shutdown, not a crash of rank 0)
  std::vector<int> bye_lost;  // the lost ranks the bye carried
  std::map<std::string, int> barrier_rounds;

  std::string closed_message() const {
    return TE_STR_(ctx << ": the connection to rank 0's store closed"
                       << (bye ? " (rank 0 shut its store down)" : " (rank 0 exited?)"));
  }

  void send(Msg& m, Clock::time_point deadline, const std::string& what) {
    TE_CHECK_HINT(!closed, closed_message() << " before " << what, "look at rank 0's log");
    const auto& b = m.bytes();
    size_t off = 0;
    while (off < b.size()) {
      TE_CHECK_HINT(wait_fd(fd.get(), POLLOUT, deadline), ctx << ": timed out sending " << what,
                    "rank 0 is not reading its store connections; look at its log");
      ssize_t k = ::send(fd.get(), b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (k <= 0)  // `closed` is set by the receive that reads the rest (a bye, late answers) and the EOF
        TE_THROW(closed_message() << " while sending " << what << " (" << std::strerror(errno) << ")",
                 "look at rank 0's log");
      off += static_cast<size_t>(k);
    }
  }

  // Reads frames until the reply to request `id` or `alt` (returned); nullopt at the deadline. Throws once the
  // connection is closed. A bye on the way is remembered (the orderly shutdown and its lost ranks).
  std::optional<std::vector<uint8_t>> receive(uint32_t id, Clock::time_point deadline, const std::string& what,
                                              uint32_t alt = 0) {
    std::vector<std::vector<uint8_t>> frames;
    for (;;) {
      split_frames(in, kMaxFrame, frames);
      std::optional<std::vector<uint8_t>> reply;
      for (auto& f : frames) {  // every frame: a bye may follow the reply; other replies are stale
        Reader r(f);
        const uint8_t op = r.u8();
        const uint32_t rid = r.u32();
        if (op == kBye) {
          bye = true;
          bye_lost = r.ranks();
        } else if (!reply && (rid == id || (alt != 0 && rid == alt))) {
          reply = std::move(f);
        }
      }
      if (reply) return reply;
      frames.clear();
      TE_CHECK_HINT(!closed, closed_message() << " while waiting for " << what, "look at rank 0's log");
      if (!wait_fd(fd.get(), POLLIN, deadline)) return std::nullopt;
      uint8_t buf[65536];
      ssize_t k = ::recv(fd.get(), buf, sizeof(buf), 0);
      if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (k <= 0) {
        closed = true;  // parse what came before the close first (the bye)
        continue;
      }
      in.insert(in.end(), buf, buf + k);
    }
  }

  Msg next(Op op) { return Msg(op, next_req++); }  // a request with a fresh id
  // Sends a request; returns its id.
  uint32_t post(Msg m, Clock::time_point deadline, const std::string& what) {
    send(m, deadline, what);
    return m.id();
  }
  // Sends a request and waits for its reply: nullopt at the deadline.
  std::optional<std::vector<uint8_t>> request(Msg m, Clock::time_point deadline, const std::string& what) {
    return receive(post(std::move(m), deadline, what), deadline, what);
  }

  void connect_and_hello() {
    const auto deadline = Clock::now() + o.timeout;
    const std::string master = TE_STR_("MASTER_ADDR:MASTER_PORT " << o.addr << ":" << o.port);
    for (;;) {  // rank 0 may not listen yet: retry until the deadline
      Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      TE_CHECK(s.get() >= 0, ctx << ": socket(): " << std::strerror(errno));
      int err = 0;
      if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          const auto attempt = std::min(deadline, Clock::now() + 2s);  // a SYN lost on the way: try again
          if (wait_fd(s.get(), POLLOUT, attempt)) {
            socklen_t len = sizeof(err);
            ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          } else {
            err = ETIMEDOUT;
          }
        }
      }
      if (err == 0) {
        fd = std::move(s);
        break;
      }
      TE_CHECK_HINT(remaining_ms(deadline) > 0,
                    ctx << ": could not connect to rank 0's store at " << master << " within " << o.timeout.count()
                        << " ms (" << std::strerror(err) << ")",
                    "start rank 0, and check MASTER_ADDR/MASTER_PORT (rank 0's address, reachable from this node)");
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, remaining_ms(deadline))));
    }
    set_nodelay(fd.get());
    auto reply =
        request(next(kHello).u32(kMagic).u32(static_cast<uint32_t>(o.rank)).str(o.token), deadline, "the hello");
    TE_CHECK_HINT(reply.has_value(),
                  ctx << ": no answer to the hello from " << master << " within " << o.timeout.count() << " ms",
                  "is another program listening on MASTER_PORT? pick a free port (teengine launch --master-port P)");
    Reader r(*reply);
    const uint8_t op = r.u8();
    r.u32();
    if (op == kOk) return;
    TE_CHECK(op == kRefused, ctx << ": unexpected answer " << int(op) << " to the hello");
    const uint32_t why = r.u32();
    TE_CHECK_HINT(why != kBadToken,
                  ctx << ": rank 0 refused this rank: the job token does not match (TEENGINE_JOB_TOKEN)",
                  "set the same TEENGINE_JOB_TOKEN on every node, or start ranks with `teengine launch`");
    TE_CHECK_HINT(why != kDuplicateRank,
                  ctx << ": rank 0 refused this rank: rank " << o.rank << " is already connected",
                  "give every process its own RANK (teengine launch -n N does)");
    TE_THROW(ctx << ": rank 0 refused this rank: rank " << o.rank << " is outside world size " << o.world
                 << " as rank 0 sees it",
             "set the same WORLD_SIZE on every rank");
  }
};

TcpStore::TcpStore(const TcpRendezvousOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.o = options;
  s.ctx = TE_STR_("TCP store rank " << options.rank << "/" << options.world << " at " << options.addr << ":"
                                    << options.port);
  TE_CHECK(options.world >= 1 && options.rank >= 0 && options.rank < options.world,
           s.ctx << ": rank " << options.rank << " is outside world size " << options.world);
  TE_CHECK(options.port > 0 && options.port < 65536, s.ctx << ": port " << options.port << " is outside 1..65535");
  TE_CHECK(options.timeout.count() > 0, s.ctx << ": the timeout must be positive");
  s.sa = resolve(options, s.ctx);
  if (options.rank == 0) s.server = std::make_unique<Server>(options, s.sa, s.ctx);
  s.connect_and_hello();
}

TcpStore::~TcpStore() {
  Impl& s = *impl_;
  {
    std::unique_lock<std::mutex> lock(s.mu, std::defer_lock);
    if (lock_within(lock, kGoodbyeDeadline) && s.fd.get() >= 0 && !s.closed) {
      try {  // wait for the acknowledgement: the server recorded the goodbye before our close reaches it
        s.request(s.next(kGoodbye), Clock::now() + kGoodbyeDeadline, "the goodbye");
      } catch (const Error&) {
      }
      ::shutdown(s.fd.get(), SHUT_WR);
    }
  }
  s.fd.reset();
  s.server.reset();  // rank 0: stops serving (pending replies are flushed, bounded)
}

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::string what = TE_STR_("set '" << key << "'");
  auto reply = impl_->request(impl_->next(kSet).str(key).blob(value.data(), value.size()),
                              Clock::now() + impl_->o.timeout, what);
  TE_CHECK_HINT(reply.has_value(),
                impl_->ctx << ": " << what << " was not acknowledged within " << impl_->o.timeout.count() << " ms",
                "rank 0 is overloaded or stuck; look at its log");
}

std::vector<uint8_t> TcpStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::string what = TE_STR_("key '" << key << "'");
  auto reply = impl_->request(impl_->next(kGet).str(key), Clock::now() + impl_->o.timeout, what);
  TE_CHECK_HINT(reply.has_value(),
                impl_->ctx << ": key '" << key << "' was not set within " << impl_->o.timeout.count() << " ms",
                "the rank that sets it failed or is slow; look at its log, or raise parallel.timeout_s");
  Reader r(*reply);
  const uint8_t op = r.u8();
  r.u32();
  std::vector<uint8_t> value = r.blob();
  TE_CHECK(op == kValue && r.ok(), impl_->ctx << ": malformed answer to get '" << key << "'");
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  const std::string what = TE_STR_("key(s) " << names);
  Msg m = impl_->next(kWait);
  m.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) m.str(k);
  auto reply = impl_->request(std::move(m), Clock::now() + timeout, what);
  TE_CHECK_HINT(reply.has_value(), impl_->ctx << ": " << what << " not all set within " << timeout.count() << " ms",
                "the rank that sets them failed or is slow; look at its log, or raise parallel.timeout_s");
}

void TcpStore::barrier(const std::string& name) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const int round = s.barrier_rounds[name]++;
  const std::string what = TE_STR_("barrier '" << name << "'");
  const std::string hint = "start every rank (teengine launch -n N), or raise parallel.timeout_s";
  const uint32_t id = s.post(s.next(kBarrier).str(name), Clock::now() + s.o.timeout, what);
  auto reply = s.receive(id, Clock::now() + s.o.timeout, what);
  uint32_t status = 0;
  if (!reply) {  // timed out: ask who is missing (a late answer to the barrier itself is taken as well)
    try {
      status = s.post(s.next(kBarrierStatus).str(name), Clock::now() + kShortDeadline, what);
    } catch (const Error&) {
    }
    try {
      reply = s.receive(id, Clock::now() + kShortDeadline, what, status);
    } catch (const Error&) {
    }
  }
  std::vector<int> missing;
  if (reply) {
    Reader r(*reply);
    const uint8_t op = r.u8();
    r.u32();
    if (op == kOk) return;
    if (op == kStatus) {
      const uint32_t w = r.u32();
      for (uint32_t q = 0; q < w && r.ok(); ++q)
        if (static_cast<int>(r.u32()) <= round) missing.push_back(static_cast<int>(q));
    } else {
      const uint32_t why = r.u32();
      const std::vector<int> ranks = r.ranks();
      TE_CHECK(op == kBarrierFailed && r.ok(), s.ctx << ": malformed answer to " << what);
      TE_CHECK_HINT(why != kRanksLost,
                    s.ctx << ": rank(s) " << rank_list(ranks) << " exited before arriving at '" << name << "'",
                    "look at that rank's log");
      TE_THROW(s.ctx << ": rank(s) " << rank_list(ranks) << " never arrived at '" << name << "' within "
                     << s.o.timeout.count() << " ms (rank 0 stopped waiting)",
               hint);
    }
  }
  TE_CHECK_HINT(!missing.empty(),
                s.ctx << ": some rank(s) never arrived at '" << name << "' within " << s.o.timeout.count() << " ms"
                      << (!s.closed ? ""
                          : s.bye   ? " (rank 0 shut its store down)"
                                    : " (rank 0's store went away)"),
                hint);
  TE_THROW(s.ctx << ": rank(s) " << rank_list(missing) << " never arrived at '" << name << "' within "
                 << s.o.timeout.count() << " ms",
           hint);
}

std::vector<int> TcpStore::lost_ranks() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu, std::defer_lock);
  if (!lock_within(lock, kShortDeadline)) return {};
  const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(kShortDeadline, s.o.timeout);
  uint32_t id = 0;  // 0 if the request could not be sent: then read until the close (a bye?)
  try {
    if (!s.closed) id = s.post(s.next(kLost), deadline, "the lost ranks");
  } catch (...) {
  }
  try {
    if (!s.closed)
      if (auto reply = s.receive(id, deadline, "the lost ranks")) {
        Reader r(*reply);
        r.u8();
        r.u32();
        std::vector<int> out = r.ranks();
        return r.ok() ? out : std::vector<int>{};
      }
  } catch (...) {
  }
  if (!s.closed) return {};
  // The store is gone: rank 0 said bye with the ranks it had lost, or died itself.
  std::vector<int> out = s.bye_lost;
  if (!s.bye && s.o.rank != 0 && std::find(out.begin(), out.end(), 0) == out.end()) out.insert(out.begin(), 0);
  return out;
}

int TcpStore::rank() const { return impl_->o.rank; }
int TcpStore::world() const { return impl_->o.world; }
std::chrono::milliseconds TcpStore::timeout() const { return impl_->o.timeout; }

}  // namespace te
