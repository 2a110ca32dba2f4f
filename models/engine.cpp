// teengine::Engine (include/teengine/teengine.h): this process's tensor-parallel ranks (models/rank_group.h) — all
// W ranks as threads over the local communicator, or one rank of a launched multi-process group — each running a
// RankModel on its shard of the tokens and weights.
#include <teengine/teengine.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/gather.h"
#include "comm/local_communicator.h"
#include "engine/allocator.h"
#include "engine/element.h"
#include "engine/log.h"
#include "engine/pinned_host.h"
#include "engine/printable.h"
#include "models/checkpoint.h"
#include "models/engine_impl.h"
#include "models/lr_schedule.h"
#include "ops/elementwise/elementwise.h"
#include "models/forward_replay.h"
#include "models/memory_estimate.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "models/rank_model.h"
#include "te_config.h"

namespace teengine {
using detail::translate;

namespace {
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

int64_t peak_rss_bytes() {  // VmHWM of /proc/self/status; 0 where it cannot be read
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

constexpr int kCounters = 6;
te::PathCounter* counters(te::CommMetrics& m, int i) {
  te::PathCounter* all[kCounters] = {&m.gather_quantized, &m.gather_fallback, &m.gather_hp,
                                     &m.gather_local,     &m.reduce_scatter,  &m.all_reduce};
  return all[i];
}
}  // namespace

struct StagedTensor::Impl {
  const void* owner = nullptr;   // the Engine::Impl that staged it
  int64_t tokens = 0;
  std::vector<te::Tensor> rows;  // per local rank: its rows (all of them without SP), on its device, model dtype
};

StagedTensor::StagedTensor() = default;
StagedTensor::~StagedTensor() = default;
StagedTensor::StagedTensor(const StagedTensor&) = default;
StagedTensor& StagedTensor::operator=(const StagedTensor&) = default;
StagedTensor::StagedTensor(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
int64_t StagedTensor::tokens() const { return impl_ ? impl_->tokens : 0; }
bool StagedTensor::defined() const { return impl_ != nullptr; }

struct Engine::Impl {
  std::unique_ptr<te::RankGroup> group;  // spec, placement, and per local rank a communicator, context and model
  std::vector<std::unique_ptr<te::ModelGraph>> graphs;  // inference forward per local rank (run.executor: graph)
  std::mutex mu;  // forward/train_step are serialised
  // The host side of every host-tensor copy (page-locked on a GPU), used under `mu`: stage() and to_host()
  // synchronise before they return, so one buffer serves inputs, targets and outputs in turn.
  std::unique_ptr<te::PinnedHostBuffer> staging;
  // run.cuda_graph: per token count, the graph forward captured once and replayed (GPU, tp 1). At most
  // kReplayBuckets token counts keep a capture (each holds its buffers); the least recently used goes first.
  struct ReplayBucket {
    te::Tensor input;  // [tokens, hidden]: the captured forward reads it in place
    std::unique_ptr<te::ModelGraph> graph;
    std::unique_ptr<te::ForwardReplay> replay;  // declared last: destroyed first
    uint64_t last_use = 0;
  };
  static constexpr size_t kReplayBuckets = 8;
  std::map<int64_t, ReplayBucket> replays;
  uint64_t replay_clock = 0;
  std::vector<double> step_ms, device_ms;
  std::vector<std::pair<te::Event, te::Event>> timers;  // per local rank: a step's first and last event (GPU)
  std::vector<float> losses;
  std::vector<double> lrs;  // per step: the learning rate it used
  std::vector<std::pair<int64_t, float>> evals;  // (step, eval loss)
  int64_t first_step = 0;   // the step the engine started from (a loaded checkpoint's)
  double last_lr = 0;
  StepStats last;
  int64_t tokens_done = 0;
  double total_ms = 0;
  int64_t step = 0;

  const te::ModelSpec& spec() const { return group->spec; }
  te::Device device() const { return group->ctxs[0]->device; }
  int world() const { return group->world(); }
  bool graph_forward() const {
    return spec().run.mode == te::RunMode::infer && spec().run.executor == te::ForwardExecutor::graph;
  }
  bool replays_forward() const {
    return spec().run.cuda_graph && graph_forward() && device().is_cuda() && world() == 1 && !group->distributed();
  }
  // The forward of x [tokens, hidden] through the token count's captured graph; returns a copy of the output
  // (the replay's own buffer is overwritten by the next replay).
  te::Tensor replay_forward(const te::Tensor& x);
  int64_t local_tokens(int64_t tokens) const {
    return spec().parallel.sequence_parallel && world() > 1 ? tokens / world() : tokens;
  }
  // Local rows of rank r (local index i): SP splits the tokens; without SP every rank sees all of them.
  te::Tensor rank_input(const te::Tensor& global, int r, int i, te::DType dtype) const;
  StagedTensor stage(const HostTensor& h);
  const StagedTensor::Impl& staged(const StagedTensor& t, const char* what) const;  // checks the owner
  // Runs fn(comm, local index) on every local rank; returns the slowest rank's time on its stream (ms).
  double run_timed(const std::function<void(te::Communicator&, int)>& fn);
  StagedTensor run_forward(const StagedTensor::Impl& x, double* device_ms);
  float run_train(const StagedTensor::Impl& x, const StagedTensor::Impl& target, double* device_ms);
  float run_eval(const StagedTensor::Impl& x, const StagedTensor::Impl& target);
  void check_train(const StagedTensor::Impl& x, const StagedTensor::Impl& target, const char* what) const;
  // The global [T, H] output from the ranks' rows (distributed: all-gathered from the other processes).
  HostTensor to_host(const StagedTensor::Impl& t);
  // Records a step on this process; distributed: collective (every rank's times and counters).
  void record_step(double wall_ms, double device_ms, int64_t tokens);
};

namespace {
// The caller's bytes as a tensor in the staging buffer (valid until its next use).
te::Tensor host_to_tensor(const HostTensor& h, te::PinnedHostBuffer& staging) {
  auto dt = te::dtype_from_name(h.dtype);
  if (!dt || !te::is_high_precision(*dt))
    TE_INPUT_ERROR("input dtype " << te::quoted_value(h.dtype) << " is not supported", "use f32, bf16 or f16");
  const te::Shape shape(h.shape.begin(), h.shape.end());
  const int64_t nbytes = te::dtype_storage_bytes(*dt, te::shape_numel(shape));  // refuses shapes that overflow
  if (static_cast<int64_t>(h.bytes.size()) != nbytes)
    TE_INPUT_ERROR("input holds " << h.bytes.size() << " bytes but shape " << te::shape_str(shape) << " "
                                  << te::printable(h.dtype) << " needs " << nbytes,
                   "fill HostTensor::bytes to match its shape and dtype");
  te::Tensor t = staging.view(shape, *dt);
  std::memcpy(t.data_ptr(), h.bytes.data(), h.bytes.size());
  return t;
}

// `t` (host or device, its producers synchronised) as a HostTensor, through the staging buffer.
HostTensor tensor_to_host(const te::Tensor& t, te::PinnedHostBuffer& staging) {
  te::Tensor c = t.device().is_cpu() ? t.contiguous() : staging.view(t.shape(), t.dtype());
  if (t.device().is_cuda()) c.copy_from(t);
  HostTensor h;
  h.shape.assign(c.shape().begin(), c.shape().end());
  h.dtype = std::string(te::dtype_name(c.dtype()));
  h.bytes.resize(static_cast<size_t>(c.nbytes()));
  std::memcpy(h.bytes.data(), c.data_ptr(), h.bytes.size());
  return h;
}
}  // namespace

te::Tensor Engine::Impl::rank_input(const te::Tensor& g, int r, int i, te::DType dtype) const {
  const int64_t n = local_tokens(g.size(0));
  const te::Tensor rows = n == g.size(0) ? g : g.narrow(0, r * n, n);
  // Cast where the rank computes (one kernel on a GPU), not element by element on the host.
  const te::Stream& st = group->ctxs[static_cast<size_t>(i)]->stream;
  te::Tensor on_device = rows.contiguous().to(device(), st);
  return on_device.dtype() == dtype ? on_device : te::cast(on_device, dtype, st);
}

StagedTensor Engine::Impl::stage(const HostTensor& h) {
  // The request's shape first, from its fields alone: nothing is copied or allocated for a request that cannot run.
  const te::Shape shape(h.shape.begin(), h.shape.end());
  const int64_t hidden = spec().model.hidden;
  (void)te::shape_numel(shape);  // negative or overflowing dimensions
  if (shape.size() != 2 || shape[1] != hidden)
    TE_INPUT_ERROR("input has shape " << te::shape_str(shape) << " but the model takes [tokens, " << hidden << "]",
                   "give a 2-D input whose last dimension is model.hidden");
  if (shape[0] == 0)
    TE_INPUT_ERROR("input has no tokens (shape " << te::shape_str(shape) << ")", "send at least one token");
  if (spec().parallel.sequence_parallel && world() > 1 && shape[0] % world() != 0)
    TE_INPUT_ERROR(
        "input has " << shape[0] << " tokens, not divisible by tp " << world() << " under sequence parallelism",
        "use a token count that is a multiple of parallel.tp");
  te::Tensor x = host_to_tensor(h, *staging);
  auto out = std::make_shared<StagedTensor::Impl>();
  out->owner = this;
  out->tokens = x.size(0);
  out->rows.resize(static_cast<size_t>(group->local_ranks()));
  for (auto& c : group->comms) {
    const int i = group->index_of(*c);
    out->rows[static_cast<size_t>(i)] = rank_input(x, c->rank(), i, spec().model.dtype);
  }
  for (auto& ctx : group->ctxs) ctx->stream.synchronize();  // the host copy may go
  return StagedTensor(std::move(out));
}

const StagedTensor::Impl& Engine::Impl::staged(const StagedTensor& t, const char* what) const {
  if (!t.defined() || t.impl()->owner != this)
    TE_INPUT_ERROR(what << " was not staged by this engine", "stage it with this engine's stage()");
  return *t.impl();
}

double Engine::Impl::run_timed(const std::function<void(te::Communicator&, int)>& fn) {
  std::vector<double> ms(static_cast<size_t>(group->local_ranks()));
  timers.resize(ms.size());
  te::run_ranks(group->comms, [&](te::Communicator& c) {
    const int i = group->index_of(c);
    te::RankContext& ctx = *group->ctxs[static_cast<size_t>(i)];
    const bool gpu = ctx.device.is_cuda();
    auto& [begin, end] = timers[static_cast<size_t>(i)];
    if (gpu) {
      if (!begin.handle()) {
        begin = te::Event::create(ctx.device, true);
        end = te::Event::create(ctx.device, true);
      }
      begin.record(ctx.stream);
    }
    const auto t0 = std::chrono::steady_clock::now();
    fn(c, i);
    if (gpu) end.record(ctx.stream);
    ctx.stream.synchronize();
    ms[static_cast<size_t>(i)] = gpu ? begin.elapsed_ms(end)
                                     : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                                           .count();
  });
  return *std::max_element(ms.begin(), ms.end());
}

StagedTensor Engine::Impl::run_forward(const StagedTensor::Impl& x, double* device_ms) {
  auto out = std::make_shared<StagedTensor::Impl>();
  out->owner = this;
  out->tokens = x.tokens;
  out->rows.resize(x.rows.size());
  *device_ms = run_timed([&](te::Communicator&, int i) {
    const te::Tensor& xr = x.rows[static_cast<size_t>(i)];
    te::RankModel& model = *group->models[static_cast<size_t>(i)];
    auto& graph = graphs[static_cast<size_t>(i)];
    if (replays_forward()) {
      out->rows[static_cast<size_t>(i)] = replay_forward(xr);
    } else if (graph_forward()) {
      // Planned once per token count (shapes are static in a plan).
      if (!graph || graph->local_tokens() != xr.size(0)) graph = std::make_unique<te::ModelGraph>(model, xr.size(0));
      out->rows[static_cast<size_t>(i)] = graph->forward(xr);
    } else {
      out->rows[static_cast<size_t>(i)] = model.forward(xr);
    }
  });
  return StagedTensor(std::move(out));
}

te::Tensor Engine::Impl::replay_forward(const te::Tensor& x) {
  te::RankContext& ctx = *group->ctxs[0];
  const int64_t tokens = x.size(0);
  auto it = replays.find(tokens);
  if (it == replays.end()) {
    if (replays.size() >= kReplayBuckets)
      replays.erase(std::min_element(replays.begin(), replays.end(), [](const auto& a, const auto& b) {
        return a.second.last_use < b.second.last_use;
      }));
    ReplayBucket& b = replays[tokens];
    try {
      b.input = te::Tensor::empty(x.shape(), x.dtype(), ctx.device, ctx.stream);
      b.input.copy_from(x, ctx.stream);
      b.graph = std::make_unique<te::ModelGraph>(*group->models[0], tokens);
      b.replay = std::make_unique<te::ForwardReplay>(*group->models[0], b.input,
                                                     [g = b.graph.get(), in = b.input] { return g->forward(in); });
    } catch (...) {
      replays.erase(tokens);  // no half-made capture stays behind
      throw;
    }
    it = replays.find(tokens);
  } else {
    it->second.input.copy_from(x, ctx.stream);
  }
  it->second.last_use = ++replay_clock;
  return it->second.replay->replay().clone(ctx.stream);
}

void Engine::Impl::check_train(const StagedTensor::Impl& x, const StagedTensor::Impl& t, const char* what) const {
  if (spec().run.mode != te::RunMode::train)
    TE_INPUT_ERROR(what << " on an inference engine", "set run.mode: train in the spec (or --set run.mode=train)");
  if (x.tokens != t.tokens)
    TE_INPUT_ERROR("target has " << t.tokens << " tokens but the input has " << x.tokens,
                   "give a target with the input's shape [tokens, hidden]");
}

float Engine::Impl::run_train(const StagedTensor::Impl& x, const StagedTensor::Impl& t, double* device_ms) {
  check_train(x, t, "train_step");
  ++step;
  const double lr = te::learning_rate(spec().run.optimizer, spec().run.steps, step);
  std::vector<float> loss(x.rows.size());
  *device_ms = run_timed([&](te::Communicator&, int i) {
    const size_t k = static_cast<size_t>(i);
    loss[k] = group->models[k]->train_step(x.rows[k], t.rows[k], step, lr);
  });
  losses.push_back(loss[0]);
  lrs.push_back(lr);
  last_lr = lr;
  return loss[0];
}

float Engine::Impl::run_eval(const StagedTensor::Impl& x, const StagedTensor::Impl& t) {
  check_train(x, t, "eval_loss");
  std::vector<float> loss(x.rows.size());
  te::run_ranks(group->comms, [&](te::Communicator& c) {
    const size_t k = static_cast<size_t>(group->index_of(c));
    loss[k] = group->models[k]->eval_loss(x.rows[k], t.rows[k]);
    group->ctxs[k]->stream.synchronize();
  });
  return loss[0];
}

HostTensor Engine::Impl::to_host(const StagedTensor::Impl& t) {
  const int64_t n = local_tokens(t.tokens), hidden = spec().model.hidden;
  if (n == t.tokens) return tensor_to_host(t.rows[0], *staging);  // every rank holds all tokens (no SP split)
  if (group->distributed()) {
    te::RankContext& ctx = *group->ctxs[0];
    te::Tensor full = te::Tensor::empty({t.tokens, hidden}, t.rows[0].dtype(), ctx.device, ctx.stream);
    group->comms[0]->all_gather(t.rows[0].contiguous(ctx.stream), full, ctx.stream).wait();
    ctx.stream.synchronize();
    return tensor_to_host(full, *staging);
  }
  // Every rank's rows straight into their place in the staging buffer.
  te::Tensor full = staging->view({t.tokens, hidden}, t.rows[0].dtype());
  for (int r = 0; r < world(); ++r) full.narrow(0, r * n, n).copy_from(t.rows[static_cast<size_t>(r)]);
  return tensor_to_host(full, *staging);
}

void Engine::Impl::record_step(double ms, double dev_ms, int64_t tokens) {
  StepStats s;
  for (auto& c : group->comms)
    for (int k = 0; k < kCounters; ++k) {
      counters(s.comm, k)->calls += counters(c->metrics(), k)->calls;
      counters(s.comm, k)->bytes += counters(c->metrics(), k)->bytes;
    }
  const StepStats::Rank mine{te::memory_stats(device()).peak_bytes, peak_rss_bytes()};
  s.ms = ms;
  s.device_ms = dev_ms;
  s.ranks = {mine};
  if (group->distributed()) {
    // One small all-gather: [ms bits, peak bytes, peak RSS, calls/bytes per counter] from every rank.
    constexpr int kFields = 4 + 2 * kCounters;
    std::vector<int64_t> pack(kFields);
    std::memcpy(&pack[0], &ms, sizeof(double));
    std::memcpy(&pack[1], &dev_ms, sizeof(double));
    pack[2] = mine.peak_bytes;
    pack[3] = mine.peak_rss_bytes;
    for (int k = 0; k < kCounters; ++k) {
      pack[4 + 2 * k] = counters(s.comm, k)->calls;
      pack[5 + 2 * k] = counters(s.comm, k)->bytes;
    }
    te::RankContext& ctx = *group->ctxs[0];
    te::Tensor in = te::Tensor::empty({kFields}, te::DType::i64);
    std::memcpy(in.data_ptr(), pack.data(), sizeof(int64_t) * kFields);
    te::Tensor all = te::Tensor::empty({world() * kFields}, te::DType::i64, ctx.device, ctx.stream);
    group->comms[0]->all_gather(in.to(ctx.device, ctx.stream), all, ctx.stream).wait();
    te::Tensor host = all.to(te::Device::cpu(), ctx.stream);
    ctx.stream.synchronize();
    const auto* v = static_cast<const int64_t*>(host.data_ptr());
    s = StepStats{};
    for (int r = 0; r < world(); ++r, v += kFields) {
      double rank_ms = 0, rank_dev_ms = 0;
      std::memcpy(&rank_ms, &v[0], sizeof(double));
      std::memcpy(&rank_dev_ms, &v[1], sizeof(double));
      s.ms = std::max(s.ms, rank_ms);
      s.device_ms = std::max(s.device_ms, rank_dev_ms);
      s.ranks.push_back({v[2], v[3]});
      for (int k = 0; k < kCounters; ++k) {
        counters(s.comm, k)->calls += v[4 + 2 * k];
        counters(s.comm, k)->bytes += v[5 + 2 * k];
      }
    }
  }
  last = s;
  step_ms.push_back(s.ms);
  device_ms.push_back(s.device_ms);
  total_ms += s.ms;
  tokens_done += tokens;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine detail::make_engine(te::ModelSpec spec) {  // NOLINT: defined in this file's namespace
  auto impl = std::make_unique<Engine::Impl>();
  const te::RankPlacement placement = te::place_ranks(spec);
  te::check_memory_fits(spec, placement);  // before anything is allocated
  impl->group = std::make_unique<te::RankGroup>(spec, placement, te::shards_for(spec));
  impl->graphs.resize(static_cast<size_t>(impl->group->local_ranks()));
  impl->staging = std::make_unique<te::PinnedHostBuffer>(impl->device().is_cuda());
  if (spec.run.cuda_graph && !impl->device().is_cuda())
    TE_LOG(warn, "run.cuda_graph ignored: the model runs on " << impl->device().str() << " (CUDA graphs need a GPU)");
  return Engine(std::move(impl));
}

void Engine::load_weights(const std::string& path) {
  translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    te::ModelSpec spec = impl_->spec();
    spec.weights_path = path;
    impl_->replays.clear();  // captures of the current models (recaptured lazily for the new ones)
    impl_->group->load(te::shards_for(spec));  // a bad file leaves the engine as it was
    for (auto& g : impl_->graphs) g.reset();
  });
}

void Engine::save_weights(const std::string& path) const {
  translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    te::RankGroup& g = *impl_->group;
    te::GlobalParams params = g.gather_params();
    if (g.placement.rank == 0) te::save_params(params, g.spec.model.dtype, path);
  });
}

void Engine::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());
    te::save_checkpoint(*impl_->group, impl_->step, path, metadata);
  });
}

std::map<std::string, std::string> Engine::load_checkpoint(const std::string& path) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());
    std::map<std::string, std::string> md = te::load_checkpoint(*impl_->group, path);  // a bad file changes nothing
    impl_->replays.clear();
    for (auto& g : impl_->graphs) g.reset();
    impl_->step = impl_->first_step = std::stoll(md.at("step"));
    return md;
  });
}

float Engine::eval_loss(const StagedTensor& input, const StagedTensor& target) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());
    return impl_->run_eval(impl_->staged(input, "eval_loss's input"), impl_->staged(target, "eval_loss's target"));
  });
}

void Engine::record_eval(int64_t step, float loss) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->evals.emplace_back(step, loss);
}

int64_t Engine::step() const { return impl_->step; }
double Engine::last_lr() const { return impl_->last_lr; }

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

HostTensor Engine::forward(const HostTensor& input) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    const auto t0 = std::chrono::steady_clock::now();
    double device = 0;
    StagedTensor x = impl_->stage(input);
    HostTensor y = impl_->to_host(*impl_->run_forward(*x.impl(), &device).impl());
    impl_->record_step(ms_since(t0), device, x.tokens());
    return y;
  });
}

float Engine::train_step(const HostTensor& input, const HostTensor& target) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    const auto t0 = std::chrono::steady_clock::now();
    double device = 0;
    StagedTensor x = impl_->stage(input), t = impl_->stage(target);
    const float loss = impl_->run_train(*x.impl(), *t.impl(), &device);
    impl_->record_step(ms_since(t0), device, x.tokens());
    return loss;
  });
}

StagedTensor Engine::stage(const HostTensor& tensor) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    return impl_->stage(tensor);
  });
}

StagedTensor Engine::forward(const StagedTensor& input) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    const auto t0 = std::chrono::steady_clock::now();
    double device = 0;
    StagedTensor y = impl_->run_forward(impl_->staged(input, "forward's input"), &device);
    impl_->record_step(ms_since(t0), device, input.tokens());
    return y;
  });
}

float Engine::train_step(const StagedTensor& input, const StagedTensor& target) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    const auto t0 = std::chrono::steady_clock::now();
    double device = 0;
    const float loss = impl_->run_train(impl_->staged(input, "train_step's input"),
                                        impl_->staged(target, "train_step's target"), &device);
    impl_->record_step(ms_since(t0), device, input.tokens());
    return loss;
  });
}

HostTensor Engine::to_host(const StagedTensor& tensor) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::set_current_device(impl_->device());  // the caller's thread stages, gathers and copies
    return impl_->to_host(impl_->staged(tensor, "to_host's tensor"));
  });
}

double Engine::last_step_ms() const { return impl_->step_ms.empty() ? 0.0 : impl_->step_ms.back(); }

int64_t Engine::hidden() const { return impl_->spec().model.hidden; }
int Engine::rank() const { return impl_->group->placement.rank; }
int Engine::world_size() const { return impl_->world(); }
int64_t Engine::tokens() const { return impl_->spec().run.tokens; }

std::string Engine::metrics_json() const {
  const Impl& m = *impl_;
  const te::CommMetrics& c = m.last.comm;
  auto pc = [](const te::PathCounter& p) { return nlohmann::json{{"calls", p.calls}, {"bytes", p.bytes}}; };
  int64_t peak = 0, rss = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : m.last.ranks) {
    peak = std::max(peak, r.peak_bytes);
    rss = std::max(rss, r.peak_rss_bytes);
    ranks.push_back({{"peak_bytes", r.peak_bytes}, {"peak_rss_bytes", r.peak_rss_bytes}});
  }
  if (m.last.ranks.empty()) {
    peak = te::memory_stats(m.device()).peak_bytes;
    rss = peak_rss_bytes();
  }
  nlohmann::json eval = nlohmann::json::array();
  for (const auto& [s, l] : m.evals) eval.push_back({{"step", s}, {"loss", l}});
  nlohmann::json j = {
      {"model", m.spec().name},
      {"mode", std::string(te::run_mode_name(m.spec().run.mode))},
      {"device", m.device().str()},
      {"world_size", m.world()},
      {"comm_backend", std::string(te::comm_backend_name(m.group->placement.backend))},
      {"processes", m.group->distributed() ? m.world() : 1},
      {"recipe", std::string(te::recipe_name(m.spec().precision.recipe))},
      {"tokens", m.spec().run.tokens},
      {"steps", static_cast<int64_t>(m.step_ms.size())},
      {"step_ms", m.step_ms},
      {"device_ms", m.device_ms},
      {"tokens_per_s", m.total_ms > 0 ? static_cast<double>(m.tokens_done) / (m.total_ms * 1e-3) : 0.0},
      {"peak_bytes", peak},
      {"peak_rss_bytes", rss},
      {"per_process", ranks},
      {"loss", m.losses},
      {"lr", m.lrs},
      {"first_step", m.first_step},
      {"eval", eval},
      {"eval_loss", m.evals.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.evals.back().second)},
      {"comm",
       {{"gather", {{"quantized", pc(c.gather_quantized)}, {"fallback", pc(c.gather_fallback)},
                    {"high_precision", pc(c.gather_hp)}}},
        {"reduce_scatter", pc(c.reduce_scatter)},
        {"all_reduce", pc(c.all_reduce)}}},
  };
  // A model name that is not UTF-8 (from the spec or its file name) gets U+FFFD rather than an exception.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Engine::explain() const {
  const Impl& m = *impl_;
  std::ostringstream o;
  o << te::describe_spec(m.spec());
  const int w = m.world();
  const bool sp = m.spec().parallel.sequence_parallel && w > 1;
  const int64_t local_tokens = m.local_tokens(m.spec().run.tokens);
  te::RecipeConfigs rc = te::recipe_configs(m.spec().precision, m.spec().run.seed);
  if (m.group->distributed())
    o << "device " << m.device().str() << ", rank " << m.group->placement.rank << " of " << w << " (one process per rank, "
      << te::comm_backend_name(m.group->placement.backend) << ")\n";
  else
    o << "device " << m.device().str() << ", " << w << " rank(s) as threads on the local communicator\n";
  o << "gathers per layer (local shard [" << local_tokens << ", " << m.spec().model.hidden << "]):\n";
  // One line per gather and usage, from the same plan the gather itself makes (gather_along_first_dim).
  auto line = [&](const std::string& what, te::Usage usages, const std::optional<te::QuantizerConfig>& qc) {
    std::optional<te::Quantizer> q;
    if (qc) q.emplace(*qc);
    te::GatherPlan p = te::plan_gather({local_tokens, m.spec().model.hidden}, q ? &*q : nullptr, usages, w);
    if (!qc) {
      o << "  " << what << ": " << te::gather_route_name(p.tensor.path) << " ("
        << te::dtype_name(m.spec().model.dtype) << ")\n";
      return;
    }
    for (te::Usage u : {te::Usage::rowwise, te::Usage::columnwise}) {
      if (!te::has_usage(usages, u)) continue;
      const te::UsagePath& up = p.of(u);
      o << "  " << what << ", " << te::usage_name(u) << ": " << te::gather_route_name(up.path);
      if (!up.reason.empty()) o << " — " << up.reason;
      o << "\n";
    }
  };
  if (!sp) {
    o << "  none (no sequence parallelism)\n";
  } else {
    line("column-parallel input, forward", te::Usage::rowwise, rc.input);
    if (m.spec().run.mode == te::RunMode::train) {
      line("column-parallel input, backward re-gather", te::Usage::columnwise, rc.input);
      line("row-parallel output gradient, backward", te::Usage::both, rc.grad);
    }
  }
  int64_t arena = -1;
  if (m.graph_forward()) {
    o << "rank 0 forward plan (" << local_tokens << " local tokens):\n";
    if (m.graphs[0] && m.graphs[0]->local_tokens() == local_tokens) {
      o << m.graphs[0]->explain();
      arena = m.graphs[0]->plan().arena_bytes;
    } else {
      te::ModelGraph g(*m.group->models[0], local_tokens);  // planning touches no device memory but the arena
      o << g.explain();
      arena = g.plan().arena_bytes;
    }
  } else {
    o << (m.spec().run.mode == te::RunMode::train ? "training steps run eagerly (layer by layer)\n"
                                                : "inference runs eagerly (run.executor: eager)\n");
  }
  // What rank 0 holds, by kind; communication buffers and eager activations come from the allocator's cache.
  const te::RankModel::Memory mem = m.group->models[0]->memory();
  auto mib = [](int64_t b) { return TE_STR_(std::fixed << std::setprecision(2) << static_cast<double>(b) / (1 << 20) << " MiB"); };
  o << "memory of rank 0 by kind: weights " << mib(mem.weights) << " (model dtype + quantized caches), master weights "
    << mib(mem.master_weights) << ", gradients " << mib(mem.gradients) << ", optimizer state "
    << mib(mem.optimizer_state)
    << (mem.host_weights ? ", model-dtype weights in host memory (for saving) " + mib(mem.host_weights) : "")
    << ", GEMM workspace " << mib(m.group->ctxs[0]->gemm->workspace_bytes())
    << ", activations " << (arena >= 0 ? mib(arena) + " (planned arena)" : std::string("eager (allocator cache)"))
    << "; device allocator now " << mib(te::memory_stats(m.device()).current_bytes) << ", peak "
    << mib(te::memory_stats(m.device()).peak_bytes) << "\n";
  return o.str();
}

HostTensor HostTensor::from_floats(std::vector<int64_t> shape, const std::vector<float>& values) {
  HostTensor h;
  h.shape = std::move(shape);
  h.dtype = "f32";
  if (static_cast<int64_t>(values.size()) != h.numel())
    throw Error("HostTensor::from_floats: " + std::to_string(values.size()) + " values for " +
                    std::to_string(h.numel()) + " elements",
                true);
  h.bytes.resize(values.size() * sizeof(float));
  std::memcpy(h.bytes.data(), values.data(), h.bytes.size());
  return h;
}

std::vector<float> HostTensor::to_floats() const {
  return translate([&] {
    te::PinnedHostBuffer host(false);
    return host_to_tensor(*this, host).to_f32_vector();
  });
}

int64_t HostTensor::numel() const {
  // Checked: a hostile shape ({2^62, 256}) is an input error, not a wrapped product.
  return translate([&] { return te::shape_numel(te::Shape(shape.begin(), shape.end())); });
}

const char* version() { return TE_VERSION; }

}  // namespace teengine
