// Rank 0's store server (comm/tcp_store_server.h): the poll loop, the request handlers, barriers and lost ranks.
#include "comm/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace te::store_wire {

using namespace std::chrono_literals;

Server::Server(const TcpRendezvousOptions& o, const sockaddr_in& sa, const std::string& ctx) : o_(o) {
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

Server::~Server() {
  const char c = 1;
  while (::write(wake_write_.get(), &c, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

void Server::run() {
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
void Server::stop() {
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

void Server::accept_all() {
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

void Server::read_from(uint64_t id, Conn& c) {
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

void Server::queue(Conn& c, Msg m) {
  const auto& b = m.bytes();
  c.out.insert(c.out.end(), b.begin(), b.end());
  flush(c);
}

void Server::flush(Conn& c) {
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

void Server::handle(uint64_t id, Conn& c, const std::vector<uint8_t>& body) {
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

bool Server::try_answer(const KeyWaiter& w) {
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

void Server::wake_key_waiters() {
  std::erase_if(keys_, [&](const KeyWaiter& w) { return try_answer(w); });
}

void Server::reply_ok(uint64_t conn, uint32_t id) {
  if (auto it = conns_.find(conn); it != conns_.end()) queue(it->second, Msg(kOk, id));
}

void Server::fail_barrier(const BarrierWaiter& w, BarrierFailure why, const std::vector<int>& ranks) {
  if (auto it = conns_.find(w.conn); it != conns_.end())
    queue(it->second, Msg(kBarrierFailed, w.id).u32(why).ranks(ranks));
}

std::vector<int> Server::missing(const std::string& name, int round) const {
  std::vector<int> out;
  const auto& arrivals = arrivals_.at(name);
  for (int q = 0; q < o_.world; ++q)
    if (arrivals[q] <= round) out.push_back(q);
  return out;
}

std::vector<int> Server::lost_among(const std::vector<int>& ranks) const {
  std::vector<int> out;
  for (int q : ranks)
    if (lost_.count(q)) out.push_back(q);
  return out;
}

void Server::forget_waiters(uint64_t conn) {
  std::erase_if(keys_, [&](const KeyWaiter& w) { return w.conn == conn; });
  std::erase_if(barriers_, [&](const BarrierWaiter& w) { return w.conn == conn; });
}

// A rank whose connection closes without a goodbye is lost: barriers it never reached fail at once.
void Server::drop_conn(uint64_t id) {
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

}  // namespace te::store_wire
