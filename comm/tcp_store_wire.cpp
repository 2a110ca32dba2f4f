// The store's socket helpers: deadlines, polling, frame splitting and address resolution (comm/tcp_store_wire.h).
#include "comm/tcp_store_wire.h"

#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "engine/error.h"

namespace te::store_wire {

using namespace std::chrono_literals;

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

}  // namespace te::store_wire
