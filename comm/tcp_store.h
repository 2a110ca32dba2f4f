// A small key/value store over TCP: the rendezvous of multi-process groups (the Gloo communicator's address
// exchange, the NCCL unique id). Rank 0 serves it from a background thread; every rank, rank 0 included, is a
// client. Peers must present the job's token (TEENGINE_JOB_TOKEN, which `teengine launch` sets to a random value),
// so a stray or foreign connection is refused; the server handles every connection concurrently, so one silent
// connection cannot stall the others. Every wait is bounded by the timeout and names what it waited for.
//
// The server also notices a rank whose connection closes before it said goodbye: lost_ranks() lets a rank whose
// collective failed name the peer that died.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/tcp_rendezvous.h"

namespace te {

class TcpStore {
 public:
  // Rank 0 binds options.addr:options.port (a port in use is te::InputError naming MASTER_PORT and the fix) and
  // starts serving; every rank then connects (retrying until the timeout while the server is not up yet) and
  // presents options.token.
  explicit TcpStore(const TcpRendezvousOptions& options);
  ~TcpStore();  // says goodbye; rank 0 stops its server
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value);
  // Waits until `key` is set (te::Error naming the key after the timeout).
  std::vector<uint8_t> get(const std::string& key);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Every rank arrives at `name`; on timeout the error names the ranks that never arrived.
  void barrier(const std::string& name);
  // Ranks whose connection to the store closed without a goodbye (died); empty if none or the store is gone.
  // Never throws; bounded by a short deadline.
  std::vector<int> lost_ranks();

  int rank() const;
  int world() const;
  std::chrono::milliseconds timeout() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace te
