// TcpStore: length-prefixed messages over TCP. Rank 0's server is one poll() loop over non-blocking sockets with a
// buffer per connection, so a silent or slow peer never blocks the others; clients block with deadlines.
//
// Frame: u32 length (network order), then the body: u8 op, u32 request id, fields (u32 numbers; strings and values
// as u32 length + bytes). A reply carries its request's id; the client drops replies to requests that already
// timed out, so a connection stays usable after a timeout.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "engine/error.h"

namespace te {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint32_t kMagic = 0x7E570DE5u;
constexpr uint32_t kMaxHelloFrame = 4096;  // before the hello: a stray connection cannot make us allocate
constexpr uint32_t kMaxFrame = 1u << 30;
constexpr auto kShortDeadline = 1000ms;   // lost_ranks, the barrier status query
constexpr auto kGoodbyeDeadline = 500ms;  // destructor: goodbye and its acknowledgement
constexpr auto kFlushDeadline = 1000ms;   // server shutdown: pending replies and the bye

enum Op : uint8_t {
  // client → server
  kHello = 1,      // magic, rank, token          → kOk | kRefused(reason)
  kSet,            // key, value                  → kOk
  kGet,            // key                         → kValue(value) once the key exists
  kWait,           // n, keys…                    → kOk once every key exists
  kBarrier,        // name                        → kOk | kBarrierFailed(why, ranks)
  kBarrierStatus,  // name                        → kStatus(world, arrivals per rank)
  kLost,           //                             → kRanks(lost ranks)
  kGoodbye,        //                             → kOk; the connection then closes without counting as lost
  // server → client
  kOk = 32,
  kValue,
  kRefused,
  kStatus,
  kRanks,
  kBarrierFailed,
  kBye,  // id 0, lost ranks: the server shuts down (rank 0 destroyed its store)
};
enum Refusal : uint32_t { kBadToken = 1, kBadRank = 2, kDuplicateRank = 3 };
enum BarrierFailure : uint32_t { kRanksLost = 1, kServerStopped = 2 };

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// try_lock_for without std::timed_mutex (ThreadSanitizer does not see pthread_mutex_clocklock).
bool lock_within(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (!lock.try_lock()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// One frame under construction: the length is patched in by bytes().
class Msg {
 public:
  Msg(Op op, uint32_t id) : id_(id) {
    buf_.reserve(64);
    buf_.assign(4, 0);  // the length, patched in by bytes()
    u8(op);
    u32(id);
  }
  Msg& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Msg& u32(uint32_t v) {
    const uint32_t be = htonl(v);
    const auto* p = reinterpret_cast<const uint8_t*>(&be);
    buf_.insert(buf_.end(), p, p + 4);
    return *this;
  }
  Msg& blob(const void* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    const auto* p = static_cast<const uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + n);
    return *this;
  }
  Msg& str(const std::string& s) { return blob(s.data(), s.size()); }
  Msg& ranks(const std::vector<int>& rs) {
    u32(static_cast<uint32_t>(rs.size()));
    for (int r : rs) u32(static_cast<uint32_t>(r));
    return *this;
  }
  uint32_t id() const { return id_; }
  const std::vector<uint8_t>& bytes() {
    const uint32_t be = htonl(static_cast<uint32_t>(buf_.size() - 4));
    std::memcpy(buf_.data(), &be, 4);
    return buf_;
  }

 private:
  uint32_t id_;
  std::vector<uint8_t> buf_;
};

// Reads the fields of a frame body; a short or malformed body clears ok() instead of reading past the end.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& body) : p_(body.data()), end_(body.data() + body.size()) {}
  bool ok() const { return ok_; }
  uint8_t u8() { return take(1) ? p_[-1] : 0; }
  uint32_t u32() {
    if (!take(4)) return 0;
    uint32_t be;
    std::memcpy(&be, p_ - 4, 4);
    return ntohl(be);
  }
  std::vector<uint8_t> blob() {
    const uint32_t n = u32();
    if (!take(n)) return {};
    return std::vector<uint8_t>(p_ - n, p_);
  }
  std::string str() {
    auto b = blob();
    return std::string(b.begin(), b.end());
  }
  std::vector<int> ranks() {
    const uint32_t n = u32();
    std::vector<int> rs;
    for (uint32_t i = 0; i < n && ok_; ++i) rs.push_back(static_cast<int>(u32()));
    if (!ok_) rs.clear();
    return rs;
  }

 private:
  bool take(size_t n) {
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) return ok_ = false;
    p_ += n;
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

// Splits complete frames off the front of `in` (bodies appended to `frames`); false when a frame is over `limit`.
bool split_frames(std::vector<uint8_t>& in, uint32_t limit, std::vector<std::vector<uint8_t>>& frames) {
  size_t off = 0;
  bool ok = true;
  while (in.size() - off >= 4) {
    uint32_t be;
    std::memcpy(&be, in.data() + off, 4);
    const uint32_t n = ntohl(be);
    if (n > limit) {
      ok = false;
      break;
    }
    if (in.size() - off - 4 < n) break;
    frames.emplace_back(in.begin() + static_cast<std::ptrdiff_t>(off + 4),
                        in.begin() + static_cast<std::ptrdiff_t>(off + 4 + n));
    off += 4 + n;
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(off));
  return ok;
}

sockaddr_in resolve(const TcpRendezvousOptions& o, const std::string& ctx) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.addr.c_str(), &sa.sin_addr) == 1) return sa;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(o.addr.c_str(), nullptr, &hints, &res);
  TE_CHECK_HINT(rc == 0 && res, ctx << ": cannot resolve MASTER_ADDR '" << o.addr << "': " << gai_strerror(rc),
                "set MASTER_ADDR to an IPv4 address or a resolvable host name");
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return sa;
}

// ---------------------------------------------------------------------------------------------------------------
// Server (rank 0): one thread, one poll() over the listening socket, a wake pipe and every connection.

class Server {
 public:
  // Binds and listens in the caller's thread (so a port in use throws here), then serves from a thread.
  Server(const TcpRendezvousOptions& o, const sockaddr_in& sa, const std::string& ctx) : o_(o) {
    listen_ = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    TE_CHECK(listen_.get() >= 0, ctx << ": socket(): " << std::strerror(errno));
    int one = 1;
    ::setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
      if (errno == EADDRINUSE)
        TE_INPUT_ERROR("MASTER_PORT " << o.port << " on " << o.addr << " is in use",
                       "pick a free port (teengine launch --master-port P)");
      TE_THROW(ctx << ": bind(): " << std::strerror(errno), "set MASTER_ADDR to an address of rank 0's node");
    }
    TE_CHECK(::listen(listen_.get(), SOMAXCONN) == 0, ctx << ": listen(): " << std::strerror(errno));
    int p[2];
    TE_CHECK(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0, ctx << ": pipe2(): " << std::strerror(errno));
    wake_read_ = Fd(p[0]);
    wake_write_ = Fd(p[1]);
    thread_ = std::thread([this] { run(); });
  }
  ~Server() {
    const char c = 1;
    while (::write(wake_write_.get(), &c, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }

 private:
  struct Conn {
    Fd fd;
    std::vector<uint8_t> in, out;
    size_t out_off = 0;
    int rank = -1;  // -1 until the hello is accepted
    bool goodbye = false;
    bool closing = false;  // drop once `out` is flushed (refused, or the server stops); input is discarded
    bool broken = false;   // EOF or a socket error: drop at the end of this iteration
    Clock::time_point hello_deadline;
  };
  struct KeyWaiter {  // a pending get (one key) or wait (every key)
    uint64_t conn;
    uint32_t id;
    bool get;
    std::vector<std::string> keys;
  };
  struct BarrierWaiter {
    uint64_t conn;
    uint32_t id;
    std::string name;
    int round;  // completes once every rank arrived more than `round` times
  };

  void run() {
    Clock::time_point flush_deadline{};
    for (;;) {
      std::vector<pollfd> fds{{wake_read_.get(), POLLIN, 0}};
      if (listen_.get() >= 0) fds.push_back({listen_.get(), POLLIN, 0});
      std::vector<uint64_t> ids;
      Clock::time_point next = Clock::now() + 1h;
      for (auto& [id, c] : conns_) {
        short ev = POLLIN;
        if (c.out_off < c.out.size()) ev |= POLLOUT;
        fds.push_back({c.fd.get(), ev, 0});
        ids.push_back(id);
        if (c.rank < 0) next = std::min(next, c.hello_deadline);
      }
      if (stopping_) next = std::min(next, flush_deadline);
      if (::poll(fds.data(), fds.size(), std::max(1, remaining_ms(next))) < 0 && errno != EINTR) break;

      const bool had_listen = listen_.get() >= 0;
      if (fds[0].revents) {
        char drain[16];
        while (::read(wake_read_.get(), drain, sizeof(drain)) > 0) {
        }
      }
      if (!stopping_ && fds[0].revents) {
        stopping_ = true;
        flush_deadline = Clock::now() + kFlushDeadline;
        stop();
      }
      const size_t first = had_listen ? 2 : 1;
      if (had_listen && listen_.get() >= 0 && fds[1].revents) accept_all();
      for (size_t i = first; i < fds.size(); ++i) {
        auto it = conns_.find(ids[i - first]);
        if (it == conns_.end() || !fds[i].revents) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(it->first, it->second);
        if (fds[i].revents & POLLOUT) flush(it->second);
      }
      const auto now = Clock::now();
      std::vector<uint64_t> drop;
      for (auto& [id, c] : conns_)
        if (c.broken || (c.closing && c.out_off == c.out.size()) ||
            (c.rank < 0 && !c.closing && now > c.hello_deadline) || (stopping_ && now > flush_deadline))
          drop.push_back(id);
      for (uint64_t id : drop) drop_conn(id);
      if (stopping_ && conns_.empty()) break;
    }
    conns_.clear();
  }

  // Shutdown: fail the pending barriers (naming who never arrived), say bye with the lost ranks, flush, close.
  void stop() {
    listen_.reset();
    for (const auto& w : barriers_) fail_barrier(w, kServerStopped, missing(w.name, w.round));
    barriers_.clear();
    keys_.clear();
    const std::vector<int> lost(lost_.begin(), lost_.end());
    for (auto& [id, c] : conns_) {
      if (c.rank >= 0 && !c.goodbye) queue(c, Msg(kBye, 0).ranks(lost));
      c.closing = true;
    }
  }

  void accept_all() {
    for (;;) {
      Fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (fd.get() < 0) return;  // EAGAIN, or a connection that went away before we took it
      set_nodelay(fd.get());
      Conn c;
      c.fd = std::move(fd);
      c.hello_deadline = Clock::now() + o_.timeout;
      conns_.emplace(next_id_++, std::move(c));
    }
  }

  void read_from(uint64_t id, Conn& c) {
    uint8_t buf[65536];
    bool eof = false;
    for (size_t total = 0; total < (1u << 20);) {  // bounded per iteration: one busy peer cannot starve the others
      ssize_t k = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (k <= 0) {
        eof = true;
        break;
      }
      total += static_cast<size_t>(k);
      if (!c.closing) c.in.insert(c.in.end(), buf, buf + k);
    }
    std::vector<std::vector<uint8_t>> frames;
    if (!split_frames(c.in, c.rank < 0 ? kMaxHelloFrame : kMaxFrame, frames)) c.broken = true;
    for (const auto& f : frames) {  // requests sent just before a close still count (a goodbye, a set)
      if (c.broken || c.closing) break;
      handle(id, c, f);
    }
    if (eof) c.broken = true;
  }

  void queue(Conn& c, Msg m) {
    const auto& b = m.bytes();
    c.out.insert(c.out.end(), b.begin(), b.end());
    flush(c);
  }

  void flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      ssize_t k = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k <= 0) {
        c.broken = true;
        return;
      }
      c.out_off += static_cast<size_t>(k);
    }
    c.out.clear();
    c.out_off = 0;
  }

  void handle(uint64_t id, Conn& c, const std::vector<uint8_t>& body) {
    Reader r(body);
    const uint8_t op = r.u8();
    const uint32_t req = r.u32();
    if (c.rank < 0) {  // only a valid hello is answered; anything else is a stray connection
      const uint32_t magic = r.u32(), rank = r.u32();
      const std::string token = r.str();
      if (op != kHello || !r.ok() || magic != kMagic) {
        c.broken = true;
        return;
      }
      uint32_t refusal = 0;
      if (token != o_.token) {
        refusal = kBadToken;
      } else if (rank >= static_cast<uint32_t>(o_.world)) {
        refusal = kBadRank;
      } else if (by_rank_.count(static_cast<int>(rank))) {
        refusal = kDuplicateRank;
      }
      if (refusal) {
        queue(c, Msg(kRefused, req).u32(refusal));
        c.closing = true;
        return;
      }
      c.rank = static_cast<int>(rank);
      by_rank_[c.rank] = id;
      lost_.erase(c.rank);
      queue(c, Msg(kOk, req));
      return;
    }
    switch (op) {
      case kSet: {
        std::string key = r.str();
        std::vector<uint8_t> value = r.blob();
        if (!r.ok()) break;
        kv_[key] = std::move(value);
        queue(c, Msg(kOk, req));
        wake_key_waiters();
        return;
      }
      case kGet:
      case kWait: {
        KeyWaiter w{id, req, op == kGet, {}};
        const uint32_t n = op == kGet ? 1 : r.u32();
        for (uint32_t i = 0; i < n && r.ok(); ++i) w.keys.push_back(r.str());
        if (!r.ok()) break;
        if (!try_answer(w)) keys_.push_back(std::move(w));
        return;
      }
      case kBarrier: {
        std::string name = r.str();
        if (!r.ok()) break;
        auto& arrivals = arrivals_.try_emplace(name, o_.world, 0).first->second;
        const int round = arrivals[c.rank]++;
        BarrierWaiter w{id, req, name, round};
        if (missing(name, round).empty()) {
          for (const auto& other : barriers_)  // the last rank arrived: release every waiter of this round
            if (other.name == name && other.round == round) reply_ok(other.conn, other.id);
          std::erase_if(barriers_, [&](const BarrierWaiter& o) { return o.name == name && o.round == round; });
          queue(c, Msg(kOk, req));
        } else if (auto gone = lost_among(missing(name, round)); !gone.empty()) {
          fail_barrier(w, kRanksLost, gone);
        } else {
          barriers_.push_back(std::move(w));
        }
        return;
      }
      case kBarrierStatus: {
        std::string name = r.str();
        if (!r.ok()) break;
        Msg m(kStatus, req);
        auto it = arrivals_.find(name);
        m.u32(static_cast<uint32_t>(o_.world));
        for (int q = 0; q < o_.world; ++q) m.u32(it == arrivals_.end() ? 0u : static_cast<uint32_t>(it->second[q]));
        queue(c, std::move(m));
        return;
      }
      case kLost:
        queue(c, Msg(kRanks, req).ranks(std::vector<int>(lost_.begin(), lost_.end())));
        return;
      case kGoodbye:
        c.goodbye = true;
        forget_waiters(id);
        queue(c, Msg(kOk, req));
        return;
      default:
        break;
    }
    c.broken = true;  // a malformed request from a rank: drop it (it then counts as lost)
  }

  bool try_answer(const KeyWaiter& w) {
    for (const auto& k : w.keys)
      if (!kv_.count(k)) return false;
    auto it = conns_.find(w.conn);
    if (it == conns_.end()) return true;
    if (!w.get) {
      queue(it->second, Msg(kOk, w.id));
    } else {
      const auto& v = kv_[w.keys[0]];
      queue(it->second, Msg(kValue, w.id).blob(v.data(), v.size()));
    }
    return true;
  }
  void wake_key_waiters() {
    std::erase_if(keys_, [&](const KeyWaiter& w) { return try_answer(w); });
  }

  void reply_ok(uint64_t conn, uint32_t id) {
    if (auto it = conns_.find(conn); it != conns_.end()) queue(it->second, Msg(kOk, id));
  }
  void fail_barrier(const BarrierWaiter& w, BarrierFailure why, const std::vector<int>& ranks) {
    if (auto it = conns_.find(w.conn); it != conns_.end())
      queue(it->second, Msg(kBarrierFailed, w.id).u32(why).ranks(ranks));
  }
  std::vector<int> missing(const std::string& name, int round) const {
    std::vector<int> out;
    const auto& arrivals = arrivals_.at(name);
    for (int q = 0; q < o_.world; ++q)
      if (arrivals[q] <= round) out.push_back(q);
    return out;
  }
  std::vector<int> lost_among(const std::vector<int>& ranks) const {
    std::vector<int> out;
    for (int q : ranks)
      if (lost_.count(q)) out.push_back(q);
    return out;
  }
  void forget_waiters(uint64_t conn) {
    std::erase_if(keys_, [&](const KeyWaiter& w) { return w.conn == conn; });
    std::erase_if(barriers_, [&](const BarrierWaiter& w) { return w.conn == conn; });
  }

  // A rank whose connection closes without a goodbye is lost: barriers it never reached fail at once.
  void drop_conn(uint64_t id) {
    auto it = conns_.find(id);
    const int rank = it->second.rank;
    const bool lost = rank >= 0 && !it->second.goodbye && !stopping_;
    if (auto b = by_rank_.find(rank); b != by_rank_.end() && b->second == id) by_rank_.erase(b);
    conns_.erase(it);
    forget_waiters(id);
    if (!lost) return;
    lost_.insert(rank);
    std::erase_if(barriers_, [&](const BarrierWaiter& w) {
      auto gone = lost_among(missing(w.name, w.round));
      if (gone.empty()) return false;
      fail_barrier(w, kRanksLost, gone);
      return true;
    });
  }

  const TcpRendezvousOptions o_;
  Fd listen_, wake_read_, wake_write_;
  std::thread thread_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Conn> conns_;
  std::map<int, uint64_t> by_rank_;  // rank → its connection
  std::set<int> lost_;
  std::map<std::string, std::vector<uint8_t>> kv_;
  std::map<std::string, std::vector<int>> arrivals_;  // barrier name → arrivals per rank
  std::vector<KeyWaiter> keys_;
  std::vector<BarrierWaiter> barriers_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Client (every rank).

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
