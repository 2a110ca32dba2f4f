// TCP blob broadcast: wire format per peer: peer → master: magic u32, rank u32; master → peer: size u32, bytes.
#include "comm/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "engine/error.h"

namespace te {
namespace {

constexpr uint32_t kMagic = 0x7E3C0A11u;
using Clock = std::chrono::steady_clock;

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
  return left < 0 ? 0 : static_cast<int>(left);
}

std::string where(const TcpRendezvousOptions& o) {
  return TE_STR_("TCP rendezvous rank " << o.rank << "/" << o.world << " at " << o.addr << ":" << o.port);
}

// Waits until fd is readable/writable or the deadline passes.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

void io_all(int fd, void* buf, size_t n, bool send, Clock::time_point deadline, const std::string& ctx) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    TE_CHECK_HINT(wait_fd(fd, send ? POLLOUT : POLLIN, deadline),
                  ctx << ": timed out " << (send ? "sending" : "receiving"), "check that every rank was started");
    ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    TE_CHECK_HINT(k > 0, ctx << ": connection " << (k == 0 ? "closed by the peer" : std::strerror(errno)),
                  "a peer exited; look at its log");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

sockaddr_in resolve(const TcpRendezvousOptions& o) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.addr.c_str(), &sa.sin_addr) == 1) return sa;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(o.addr.c_str(), nullptr, &hints, &res);
  TE_CHECK_HINT(rc == 0 && res, where(o) << ": cannot resolve '" << o.addr << "': " << gai_strerror(rc),
                "set MASTER_ADDR to an IPv4 address or a resolvable host name");
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return sa;
}

std::vector<uint8_t> serve(const TcpRendezvousOptions& o, const std::vector<uint8_t>& blob) {
  const auto deadline = Clock::now() + o.timeout;
  const std::string ctx = where(o);
  Fd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  TE_CHECK(lfd.get() >= 0, ctx << ": socket(): " << std::strerror(errno));
  int one = 1;
  ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa = resolve(o);
  TE_CHECK_HINT(::bind(lfd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0,
                ctx << ": bind(): " << std::strerror(errno), "pick a free MASTER_PORT");
  TE_CHECK(::listen(lfd.get(), o.world) == 0, ctx << ": listen(): " << std::strerror(errno));
  std::vector<bool> seen(o.world, false);
  for (int served = 0; served < o.world - 1;) {
    TE_CHECK_HINT(wait_fd(lfd.get(), POLLIN, deadline),
                  ctx << ": only " << served << " of " << o.world - 1 << " peers connected within "
                      << o.timeout.count() << " ms",
                  "start every rank (teengine launch -n N) or raise the timeout");
    Fd c(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (c.get() < 0) continue;
    uint32_t hello[2];
    try {
      io_all(c.get(), hello, sizeof(hello), false, deadline, ctx);
    } catch (const Error&) {
      continue;  // a stray connection (port scanner, stale peer): keep waiting for real ranks
    }
    const uint32_t peer = ntohl(hello[1]);
    if (ntohl(hello[0]) != kMagic || peer == 0 || peer >= static_cast<uint32_t>(o.world) || seen[peer]) continue;
    seen[peer] = true;
    const uint32_t size = htonl(static_cast<uint32_t>(blob.size()));
    io_all(c.get(), const_cast<uint32_t*>(&size), sizeof(size), true, deadline, ctx);
    io_all(c.get(), const_cast<uint8_t*>(blob.data()), blob.size(), true, deadline, ctx);
    ++served;
  }
  return blob;
}

std::vector<uint8_t> join(const TcpRendezvousOptions& o) {
  const auto deadline = Clock::now() + o.timeout;
  const std::string ctx = where(o);
  const sockaddr_in sa = resolve(o);
  for (;;) {  // the master may not listen yet: retry until the deadline
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    TE_CHECK(fd.get() >= 0, ctx << ": socket(): " << std::strerror(errno));
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) {
      uint32_t hello[2] = {htonl(kMagic), htonl(static_cast<uint32_t>(o.rank))};
      io_all(fd.get(), hello, sizeof(hello), true, deadline, ctx);
      uint32_t size = 0;
      io_all(fd.get(), &size, sizeof(size), false, deadline, ctx);
      size = ntohl(size);
      TE_CHECK(size <= (1u << 20), ctx << ": implausible blob size " << size);
      std::vector<uint8_t> blob(size);
      io_all(fd.get(), blob.data(), blob.size(), false, deadline, ctx);
      return blob;
    }
    TE_CHECK_HINT(remaining_ms(deadline) > 0,
                  ctx << ": could not connect to rank 0 within " << o.timeout.count() << " ms (" << std::strerror(errno)
                      << ")",
                  "start rank 0, and check MASTER_ADDR/MASTER_PORT");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, remaining_ms(deadline))));
  }
}

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (required) TE_INPUT_ERROR(name << " is not set", "set RANK and WORLD_SIZE, or start with teengine launch -n N");
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 20)) TE_INPUT_ERROR(name << "='" << v << "' is not a non-negative integer", "");
  return static_cast<int>(x);
}

}  // namespace

std::vector<uint8_t> tcp_broadcast_blob(const TcpRendezvousOptions& o, const std::vector<uint8_t>& blob) {
  TE_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world,
           "TCP rendezvous: rank " << o.rank << " is outside world size " << o.world);
  TE_CHECK(o.port > 0 && o.port < 65536, "TCP rendezvous: port " << o.port << " is outside 1..65535");
  if (o.world == 1) return blob;
  return o.rank == 0 ? serve(o, blob) : join(o);
}

TcpRendezvousOptions rendezvous_options_from_env(int* local_rank) {
  TcpRendezvousOptions o;
  o.rank = env_int("RANK", 0, true);
  o.world = env_int("WORLD_SIZE", 1, true);
  if (o.rank >= o.world) TE_INPUT_ERROR("RANK=" << o.rank << " is not below WORLD_SIZE=" << o.world, "");
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.addr = a;
  o.port = env_int("MASTER_PORT", 29500, false);
  if (local_rank) *local_rank = env_int("LOCAL_RANK", o.rank, false);
  return o;
}

}  // namespace te
