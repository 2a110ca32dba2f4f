// Rank 0's side of the TcpStore (comm/tcp_store.h): one thread, one poll() over the listening socket, a wake pipe
// and every connection. Sockets are non-blocking with a buffer per connection, so a silent or slow peer never
// blocks the others. It holds the keys, the barriers' arrivals per rank and the ranks lost (a connection that closed
// without a goodbye). Internal: only comm/tcp_store.cpp creates one.
#pragma once
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_rendezvous.h"
#include "comm/tcp_store_wire.h"

namespace te::store_wire {

class Server {
 public:
  // Binds and listens in the caller's thread (so a port in use throws here), then serves from a thread.
  Server(const TcpRendezvousOptions& o, const sockaddr_in& sa, const std::string& ctx);
  // Stops serving: pending barriers fail, every rank gets a bye with the lost ranks, replies are flushed (bounded).
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

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

  void run();   // the poll loop (the server's thread)
  void stop();  // shutdown: fail the pending barriers, say bye with the lost ranks, mark every connection closing
  void accept_all();
  void read_from(uint64_t id, Conn& c);  // reads what is there (bounded), then handles the complete frames
  void queue(Conn& c, Msg m);            // appends a reply and flushes what the socket takes
  void flush(Conn& c);
  void handle(uint64_t id, Conn& c, const std::vector<uint8_t>& body);  // one request (or the hello)
  bool try_answer(const KeyWaiter& w);  // true once answered (or its connection is gone)
  void wake_key_waiters();
  void reply_ok(uint64_t conn, uint32_t id);
  void fail_barrier(const BarrierWaiter& w, BarrierFailure why, const std::vector<int>& ranks);
  std::vector<int> missing(const std::string& name, int round) const;  // ranks not yet at `name`'s `round`
  std::vector<int> lost_among(const std::vector<int>& ranks) const;
  void forget_waiters(uint64_t conn);
  void drop_conn(uint64_t id);  // a rank whose connection closes without a goodbye is lost

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

}  // namespace te::store_wire
