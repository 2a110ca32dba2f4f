// The state behind teengine::Engine and StagedTensor, shared by the files that implement the Engine: engine.cpp
// (building, staging, forward and training), engine_metrics.cpp, engine_explain.cpp, engine_device.cpp (forward on
// caller-owned buffers) and engine_batching.cpp (dynamic batching of concurrent forward calls).
#pragma once
#include <numeric>
#include <teengine/teengine.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "engine/pinned_host.h"
#include "engine/stream.h"
#include "models/engine_impl.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "models/request_batcher.h"
#include "models/step_history.h"
#include "models/train_graph.h"

namespace teengine {

struct StagedTensor::Impl {
  const void* owner = nullptr;   // the Engine::Impl that staged it
  int64_t tokens = 0;
  std::vector<te::Tensor> rows;  // per local rank: its rows (all of them without SP), on its device, model dtype
};

namespace detail {
// What a step leaves in the metrics, over every rank of the group: the slowest rank's time, the summed gather and
// reduction counters, and each process's peak memory.
struct StepStats {
  double ms = 0, device_ms = 0;
  te::CommMetrics comm;
  struct Rank {
    int64_t peak_bytes = 0, peak_rss_bytes = 0;
  };
  std::vector<Rank> ranks;  // distributed: one per rank; local: one for this process
};

// The dtype of `h` after checking it is a float dtype the engine reads and its bytes fill its shape (input Error).
te::DType check_host_bytes(const HostTensor& h);

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace detail

struct Engine::Impl {
  std::unique_ptr<te::RankGroup> group;  // spec, placement, and per local rank a communicator, context and model
  // Per local rank, each planned once for the token count it last ran (shapes are static in a plan): the inference
  // forward, the training step, the eval loss.
  std::vector<std::unique_ptr<te::ModelGraph>> graphs;
  std::vector<std::unique_ptr<te::TrainGraph>> train_graphs, eval_graphs, forward_graphs;  // train mode
  std::mutex mu;  // the ranks run one call at a time: forward, train_step, stage, to_host, weights, checkpoints
  // The host side of every host-tensor copy (page-locked on a GPU), used under `mu`: stage() and to_host()
  // synchronise before they return, so one buffer serves inputs, targets and outputs in turn.
  std::unique_ptr<te::PinnedHostBuffer> staging;
  // run.cuda_graph: per token count, the graph forward captured once and replayed (GPU, tp 1). At most
  // kReplayBuckets token counts keep a capture (each holds its buffers); the least recently used goes first.
  struct ReplayBucket {
    std::unique_ptr<te::ModelGraph> graph;  // built with cuda_graph
    uint64_t last_use = 0;
  };
  static constexpr size_t kReplayBuckets = 8;
  std::map<int64_t, ReplayBucket> replays;
  uint64_t replay_clock = 0;
  std::vector<std::pair<te::Event, te::Event>> timers;  // per local rank: a step's first and last event (GPU)
  // What metrics_json reports, under its own lock so metrics can be read while a step runs under `mu`.
  mutable std::mutex metrics_mu;
  te::StepHistory history;  // bounded: counters, histogram, the last StepHistory::kWindow steps
  int64_t first_step = 0;   // the step the engine started from (a loaded checkpoint's)
  double last_lr = 0;
  detail::StepStats last;
  int64_t step = 0;
  // Dynamic batching (Engine::set_batching): null when off. Callers take a reference under batch_mu, so switching
  // it off never pulls it from under a caller (who then runs alone). Declared last: closed and joined first.
  mutable std::mutex batch_mu;
  BatchingOptions batching;
  std::shared_ptr<te::RequestBatcher> batcher;

  const te::ModelSpec& spec() const { return group->spec; }
  te::Device device() const { return group->ctxs[0]->device; }
  int world() const { return group->world(); }
  // Ranks sharing the tokens under sequence parallelism (1 otherwise), and what the attention layers need: every
  // token count a forward runs is a multiple of both.
  int64_t sp_ranks() const { return spec().parallel.sequence_parallel && world() > 1 ? world() : 1; }
  int64_t token_multiple() const { return std::lcm(sp_ranks(), te::sequence_multiple(spec())); }
  // Whether the recipe quantizes the forward input per token (unquantized, or in blocks within a token), so that
  // batching whole sequences does not change any of them (Engine::tokens_independent adds: no attention).
  bool per_token_recipe() const;
  // run.executor: graph overlaps the collectives with compute; eager runs the same graph's nodes in order.
  bool overlaps() const { return spec().run.executor == te::ForwardExecutor::graph; }
  te::ModelGraphOptions forward_options() const { return {.overlap = overlaps()}; }
  // run.cuda_graph on a GPU with one in-process rank: the inference forward and the training step are replayed.
  bool captures() const { return spec().run.cuda_graph && device().is_cuda() && world() == 1 && !group->distributed(); }
  bool replays_forward() const { return captures() && spec().run.mode == te::RunMode::infer; }
  te::TrainGraphOptions train_options(te::TrainGraphOptions::Kind kind) const {
    return {.kind = kind, .overlap = overlaps(), .cuda_graph = captures() && kind == te::TrainGraphOptions::Kind::step};
  }
  // The forward of x [tokens, hidden] through the token count's captured graph; returns a copy of the output
  // (the replay's own buffer is overwritten by the next replay).
  te::Tensor replay_forward(const te::Tensor& x);
  int64_t local_tokens(int64_t tokens) const { return tokens / sp_ranks(); }
  // Every plan and capture holds the current models' parameters: after a load they are made again, lazily.
  void drop_graphs() {
    replays.clear();
    const size_t n = static_cast<size_t>(group->local_ranks());
    for (auto* v : {&train_graphs, &eval_graphs, &forward_graphs}) {
      v->clear();
      v->resize(n);
    }
    graphs.clear();
    graphs.resize(n);
  }
  // Refuses an input of the wrong shape, no tokens, or (sequence parallelism) a token count not a multiple of tp
  // unless `any_tokens`, from its fields alone: nothing is copied or allocated for a request that cannot run.
  void check_input(const std::vector<int64_t>& shape, bool any_tokens = false) const;
  // Local rows of rank r (local index i): SP splits the tokens; without SP every rank sees all of them.
  te::Tensor rank_input(const te::Tensor& global, int r, int i, te::DType dtype) const;
  StagedTensor stage(const HostTensor& h);
  StagedTensor stage(const te::Tensor& x);  // x [tokens, hidden], checked, on the host or the engine's device
  const StagedTensor::Impl& staged(const StagedTensor& t, const char* what) const;  // checks the owner
  // Runs fn(comm, local index) on every local rank; returns the slowest rank's time on its stream (ms).
  double run_timed(const std::function<void(te::Communicator&, int)>& fn);
  StagedTensor run_forward(const StagedTensor::Impl& x, double* device_ms);
  HostTensor forward_host(const HostTensor& input);  // Engine::forward of one input, unbatched (takes `mu`)
  // Engine::forward through the batcher: checks the request, queues it and waits for its rows of the batch.
  HostTensor forward_batched(te::RequestBatcher& batcher, const HostTensor& input);
  float run_train(const StagedTensor::Impl& x, const StagedTensor::Impl& target, double* device_ms);
  float run_eval(const StagedTensor::Impl& x, const StagedTensor::Impl& target);
  void check_train(const StagedTensor::Impl& x, const StagedTensor::Impl& target, const char* what) const;
  // The global [T, H] output from the ranks' rows (distributed: all-gathered from the other processes).
  HostTensor to_host(const StagedTensor::Impl& t);
  // The same into `out` [T, H] (model dtype) on the engine's device, each rank's rows on its stream; synchronised.
  // In-process ranks only.
  void write_rows(const StagedTensor::Impl& t, te::Tensor& out);
  // Records a step on this process; distributed: collective (every rank's times and counters).
  void record_step(double wall_ms, double device_ms, int64_t tokens);
  // f() holding `mu`, with the engine's device current on the calling thread (which stages, gathers and copies).
  template <class F>
  decltype(auto) exclusive(F&& f) {
    std::lock_guard<std::mutex> lock(mu);
    te::set_current_device(device());
    return f();
  }
  // f(step) recorded as one step with its wall time and what f puts in `step` (exclusive() already held).
  struct StepRecord {
    double device_ms = 0;
    int64_t tokens = 0;
  };
  template <class F>
  auto timed_step(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    StepRecord step;
    if constexpr (std::is_void_v<decltype(f(step))>) {
      f(step);
      record_step(detail::ms_since(t0), step.device_ms, step.tokens);
    } else {
      auto result = f(step);
      record_step(detail::ms_since(t0), step.device_ms, step.tokens);
      return result;
    }
  }
  std::shared_ptr<te::RequestBatcher> current_batcher() const;
};

}  // namespace teengine
