// The executor runs a Plan step after step. Intermediate values live in one arena allocated at construction
// (Plan::arena_bytes); kernels get Tensor views at their planned offsets. Inputs and params are bound by the caller.
//
// Modes:
//   inline_cpu    the plan in order on the calling thread (the CPU reference schedule; events are no-ops).
//   host_threads  compute and comm streams are two worker threads (graph/host_stream.h) with host events for every
//                 planned cross-stream dependency: real overlap and real races on the CPU. run() returns when done.
//   cuda          a compute and a comm CUDA stream with a cudaEvent per planned dependency; run() enqueues and returns
//                 (call synchronize() before reading on the host). With ExecOptions::cuda_graph the first run()
//                 captures the whole step into a CUDA graph (the comm stream forked from and joined back into the
//                 compute stream by events) and every run() launches that graph; it is re-captured when a bound
//                 tensor's address changes. Kernels must then be capturable (no host sync, no allocation).
// Each run() starts with the comm stream waiting on the compute stream (inputs were written there) and ends with the
// compute stream waiting on the comm stream, so one step's arena reuse never races the next.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "engine/stream.h"
#include "engine/tensor.h"
#include "graph/graph.h"
#include "graph/op_table.h"
#include "graph/planner.h"

namespace te {

enum class ExecMode : uint8_t { inline_cpu, host_threads, cuda };

struct ExecOptions {
  ExecMode mode = ExecMode::inline_cpu;
  bool cuda_graph = true;  // cuda mode only: capture once, replay every step
  // cuda mode: run the compute lane on this stream (e.g. the caller's, so inputs written there need no extra event);
  // unset: a new stream.
  std::optional<Stream> compute_stream;
  // Time every node (CUDA events on its stream, or the host clock on the CPU); read step_ms() after synchronize().
  // In cuda mode it turns cuda_graph off: a captured step has no per-node boundaries.
  bool profile = false;
  ExecEnv env;
};

class Executor {
 public:
  // `graph` must outlive the executor. `device` is where the arena lives (cpu for the CPU modes).
  Executor(const Graph& graph, Plan plan, Device device, ExecOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Binds an input or param (shape, dtype and device must match its value). The tensor is read in place each step.
  void bind(int value, const Tensor& tensor);
  // One step. Throws te::Error naming the first unbound value, or rethrows a kernel's error.
  void run();
  void synchronize();
  // The tensor of a value: the bound tensor, or its arena view (valid until the next run() overwrites it; reliable
  // for outputs, which are never reused). Arena views borrow the executor's memory: do not keep them past its life.
  Tensor tensor(int value) const;

  const Plan& plan() const { return plan_; }
  // With ExecOptions::profile: each plan step's node time in the last run, ms (indexed like plan().steps).
  std::vector<double> step_ms() const;
  const Stream& compute_stream() const;
  const Stream& comm_stream() const;
  int64_t arena_bytes() const { return plan_.arena_bytes; }
  bool graph_captured() const;  // cuda mode: a CUDA graph is instantiated

 private:
  struct Impl;
  const Graph& g_;
  Plan plan_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace te
