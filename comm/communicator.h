// Communicator: one rank's handle on a group of W ranks. Collectives move whole tensors along dim 0 (all_gather,
// reduce_scatter) or reduce in place (all_reduce); several collectives can be launched together (one rendezvous,
// one NCCL group). Every launch returns a Work whose wait() completes it — failing with te::Error, never hanging,
// when a peer does not arrive within the timeout — and then runs the post-processing attached to it.
// Backends: local (threads of one process, comm/local_communicator.h), gloo (CPU processes,
// comm/gloo_communicator.h) and nccl (comm/nccl_communicator.h).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace te {

enum class ReduceOp : uint8_t { sum, max };
enum class CollectiveKind : uint8_t { all_gather, reduce_scatter, all_reduce };
std::string_view reduce_op_name(ReduceOp op);
std::string_view collective_name(CollectiveKind k);

// One collective of a launch. Tensors are contiguous and on the communicator's device.
//  all_gather:     input [n, …] (any dtype; moved as bytes) → output [W·n, …], rank r's block at rows r·n.
//  reduce_scatter: input [W·n, …] → output [n, …] = Σ_ranks input[r·n : (r+1)·n] (f32/bf16/f16).
//  all_reduce:     output reduced in place over the ranks (input unused) (f32/bf16/f16).
// Reductions accumulate in f32 in rank order 0, 1, …, W−1 (local backend), so results are reproducible.
struct Collective {
  CollectiveKind kind = CollectiveKind::all_gather;
  Tensor input;
  Tensor output;
  ReduceOp op = ReduceOp::sum;
};

// Completion handle of a launch. Copies share one state; wait() completes the launch once (later calls return at
// once) and then runs the post-processing steps in the order they were added. A default Work is complete.
class Work {
 public:
  Work() = default;
  // `complete`: blocks until the launch finished (or, where the work is ordered on the caller's stream anyway,
  // returns at once); throws te::Error on timeout or a failed peer.
  explicit Work(std::function<void()> complete);
  void wait();
  bool waited() const;
  // Adds a step run by wait() after completion (e.g. the interleave fix of a gather). On a default Work the step
  // runs at the next wait().
  void then(std::function<void()> step);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Per-path counters of the sequence-parallel gather (comm/gather.h), owned by the communicator so the graph and
// the CLI can read them. bytes = bytes of the gathered output written on this rank by the collective (data plus
// scales for the quantized path; the high-precision buffer for the fallback).
struct PathCounter {
  int64_t calls = 0;
  int64_t bytes = 0;
};
struct CommMetrics {
  PathCounter gather_quantized;  // gathered in the quantized format (§5 quantized path)
  PathCounter gather_fallback;   // gathered in the original precision, then quantized once
  PathCounter gather_hp;         // plain high-precision gathers (no quantizer)
  PathCounter gather_local;      // world size 1: no communication
  PathCounter reduce_scatter;    // reduce_scatter_along_first_dim (bytes of the output)
  PathCounter all_reduce;        // all_reduce (bytes of the tensor)
  int64_t collectives = 0;       // collectives launched by this rank (a launch of 3 counts 3)
  int64_t launches = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;
  virtual std::string_view backend() const = 0;  // "local" | "nccl"

  // Launches `ops` together on `stream` (every rank must launch the same kinds and sizes in the same order).
  virtual Work launch(std::span<const Collective> ops, const Stream& stream = Stream()) = 0;
  // Breaks the group: this and every other rank's pending and later collectives throw te::Error naming `reason`.
  virtual void abort(const std::string& reason) = 0;

  // Convenience launches of one collective (call .wait() for a synchronous result).
  [[nodiscard]] Work all_gather(const Tensor& input, const Tensor& output, const Stream& stream = Stream());
  [[nodiscard]] Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                    const Stream& stream = Stream());
  [[nodiscard]] Work all_reduce(const Tensor& tensor, ReduceOp op, const Stream& stream = Stream());

  // How long a rank waits for its peers before the group fails with te::Error (default 300 s, or
  // TEENGINE_COMM_TIMEOUT_MS).
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  CommMetrics& metrics() { return metrics_; }
  const CommMetrics& metrics() const { return metrics_; }

 protected:
  Communicator();
  // Shape/dtype/device checks shared by the backends; `where` names the backend and rank in messages.
  void validate(std::span<const Collective> ops) const;
  void count(std::span<const Collective> ops);

 private:
  std::chrono::milliseconds timeout_;
  CommMetrics metrics_;
};

std::chrono::milliseconds default_comm_timeout();

}  // namespace te
