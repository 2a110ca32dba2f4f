// TcpStore's wire protocol and socket helpers, shared by the client (comm/tcp_store.cpp) and rank 0's server
// (comm/tcp_store_server.h). Internal: only the store's own files include it.
//
// Frame: u32 length (network order), then the body: u8 op, u32 request id, fields (u32 numbers; strings and values
// as u32 length + bytes). A reply carries its request's id; the client drops replies to requests that already
// timed out, so a connection stays usable after a timeout.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/tcp_rendezvous.h"

namespace te::store_wire {

using Clock = std::chrono::steady_clock;

inline constexpr uint32_t kMagic = 0x7E570DE5u;
inline constexpr uint32_t kMaxHelloFrame = 4096;  // before the hello: a stray connection cannot make us allocate
inline constexpr uint32_t kMaxFrame = 1u << 30;
inline constexpr std::chrono::milliseconds kShortDeadline{1000};   // lost_ranks, the barrier status query
inline constexpr std::chrono::milliseconds kGoodbyeDeadline{500};  // destructor: goodbye and its acknowledgement
inline constexpr std::chrono::milliseconds kFlushDeadline{1000};   // server shutdown: pending replies and the bye

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

// Owns a file descriptor: closed on destruction or reset(); movable, not copyable.
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

// Milliseconds left until `deadline` (0 once it passed), for poll().
int remaining_ms(Clock::time_point deadline);
// Polls one fd for `events` until the deadline; false at the deadline or on an error.
bool wait_fd(int fd, short events, Clock::time_point deadline);
// try_lock_for without std::timed_mutex (ThreadSanitizer does not see pthread_mutex_clocklock).
bool lock_within(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds limit);
void set_nodelay(int fd);
// "1, 3, 4": ranks for an error message.
std::string rank_list(const std::vector<int>& ranks);

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
bool split_frames(std::vector<uint8_t>& in, uint32_t limit, std::vector<std::vector<uint8_t>>& frames);

// options.addr:options.port as an IPv4 address (a host name is resolved); te::Error naming MASTER_ADDR otherwise.
sockaddr_in resolve(const TcpRendezvousOptions& o, const std::string& ctx);

}  // namespace te::store_wire
