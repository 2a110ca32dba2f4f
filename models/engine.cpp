// teengine::Engine (include/teengine/teengine.h): this process's tensor-parallel ranks (models/rank_group.h) — all
// W ranks as threads over the local communicator, or one rank of a launched multi-process group — each running a
// RankModel on its shard of the tokens and weights.
#include <teengine/teengine.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "comm/local_communicator.h"
#include "engine/allocator.h"
#include "engine/element.h"
#include "engine/log.h"
#include "engine/pinned_host.h"
#include "engine/printable.h"
#include "models/checkpoint.h"
#include "models/engine_state.h"
#include "models/lr_schedule.h"
#include "models/memory_estimate.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "models/rank_model.h"
#include "models/recipe.h"
#include "ops/attention/attention.h"
#include "ops/elementwise/elementwise.h"
#include "te_config.h"

namespace teengine {
using detail::ms_since;
using detail::translate;

StagedTensor::StagedTensor() = default;
StagedTensor::~StagedTensor() = default;
StagedTensor::StagedTensor(const StagedTensor&) = default;
StagedTensor& StagedTensor::operator=(const StagedTensor&) = default;
StagedTensor::StagedTensor(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
int64_t StagedTensor::tokens() const { return impl_ ? impl_->tokens : 0; }
bool StagedTensor::defined() const { return impl_ != nullptr; }

namespace {
// The caller's bytes as a tensor in the staging buffer (valid until its next use).
te::Tensor host_to_tensor(const HostTensor& h, te::PinnedHostBuffer& staging) {
  te::Tensor t = staging.view(te::Shape(h.shape.begin(), h.shape.end()), detail::check_host_bytes(h));
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

te::DType detail::check_host_bytes(const HostTensor& h) {  // NOLINT: declared in engine_state.h
  auto dt = te::dtype_from_name(h.dtype);
  if (!dt || !te::is_high_precision(*dt))
    TE_INPUT_ERROR("input dtype " << te::quoted_value(h.dtype) << " is not supported", "use f32, bf16 or f16");
  const te::Shape shape(h.shape.begin(), h.shape.end());
  const int64_t nbytes = te::dtype_storage_bytes(*dt, te::shape_numel(shape));  // refuses shapes that overflow
  if (static_cast<int64_t>(h.bytes.size()) != nbytes)
    TE_INPUT_ERROR("input holds " << h.bytes.size() << " bytes but shape " << te::shape_str(shape) << " "
                                  << te::printable(h.dtype) << " needs " << nbytes,
                   "fill HostTensor::bytes to match its shape and dtype");
  return *dt;
}

te::Tensor Engine::Impl::rank_input(const te::Tensor& g, int r, int i, te::DType dtype) const {
  const int64_t n = local_tokens(g.size(0));
  const te::Tensor rows = n == g.size(0) ? g : g.narrow(0, r * n, n);
  // Cast where the rank computes (one kernel on a GPU), not element by element on the host.
  const te::Stream& st = group->ctxs[static_cast<size_t>(i)]->stream;
  te::Tensor on_device = rows.contiguous().to(device(), st);
  return on_device.dtype() == dtype ? on_device : te::cast(on_device, dtype, st);
}

void Engine::Impl::check_input(const std::vector<int64_t>& dims, bool any_tokens) const {
  const te::Shape shape(dims.begin(), dims.end());
  const int64_t hidden = spec().model.hidden;
  (void)te::shape_numel(shape);  // negative or overflowing dimensions
  if (shape.size() != 2 || shape[1] != hidden)
    TE_INPUT_ERROR("input has shape " << te::shape_str(shape) << " but the model takes [tokens, " << hidden << "]",
                   "give a 2-D input whose last dimension is model.hidden");
  if (shape[0] == 0)
    TE_INPUT_ERROR("input has no tokens (shape " << te::shape_str(shape) << ")", "send at least one token");
  const int64_t seq = te::sequence_multiple(spec());
  if (shape[0] % seq != 0)
    TE_INPUT_ERROR("input has " << shape[0] << " tokens, not whole sequences of " << seq
                                << " (the attention layers' seq_len)",
                   "send batch × " << seq << " tokens, each sequence's tokens consecutive");
  if (!any_tokens && shape[0] % token_multiple() != 0)
    TE_INPUT_ERROR("input has " << shape[0] << " tokens, not divisible by "
                                << (seq > 1 ? "lcm(tp, seq_len) " : "tp ") << token_multiple()
                                << " under sequence parallelism",
                   "use a token count that is a multiple of " << token_multiple());
}

StagedTensor Engine::Impl::stage(const HostTensor& h) {
  check_input(h.shape);  // before anything is copied
  return stage(host_to_tensor(h, *staging));
}

StagedTensor Engine::Impl::stage(const te::Tensor& x) {
  auto out = std::make_shared<StagedTensor::Impl>();
  out->owner = this;
  out->tokens = x.size(0);
  out->rows.resize(static_cast<size_t>(group->local_ranks()));
  for (auto& c : group->comms) {
    const int i = group->index_of(*c);
    out->rows[static_cast<size_t>(i)] = rank_input(x, c->rank(), i, spec().model.dtype);
  }
  for (auto& ctx : group->ctxs) ctx->stream.synchronize();  // the source may go
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
    ms[static_cast<size_t>(i)] = gpu ? begin.elapsed_ms(end) : ms_since(t0);
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
    } else if (spec().run.mode == te::RunMode::train) {  // the current weights' output; training state unchanged
      auto& g = forward_graphs[static_cast<size_t>(i)];
      if (!g || g->local_tokens() != xr.size(0))
        g = std::make_unique<te::TrainGraph>(model, xr.size(0), xr.dtype(),
                                             train_options(te::TrainGraphOptions::Kind::forward));
      out->rows[static_cast<size_t>(i)] = g->forward(xr);
    } else {
      if (!graph || graph->local_tokens() != xr.size(0))
        graph = std::make_unique<te::ModelGraph>(model, xr.size(0), forward_options());
      out->rows[static_cast<size_t>(i)] = graph->forward(xr);
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
    te::ModelGraphOptions options = forward_options();
    options.cuda_graph = true;
    it = replays.emplace(tokens, ReplayBucket{std::make_unique<te::ModelGraph>(*group->models[0], tokens, options)})
             .first;
  }
  it->second.last_use = ++replay_clock;
  try {
    return it->second.graph->forward(x).clone(ctx.stream);  // the first forward of a token count captures it
  } catch (...) {
    replays.erase(it);  // no half-made capture stays behind
    throw;
  }
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
    auto& graph = train_graphs[k];
    if (!graph || graph->local_tokens() != x.rows[k].size(0))
      graph = std::make_unique<te::TrainGraph>(*group->models[k], x.rows[k].size(0), t.rows[k].dtype(),
                                               train_options(te::TrainGraphOptions::Kind::step));
    loss[k] = graph->train_step(x.rows[k], t.rows[k], step, lr);
  });
  {
    std::lock_guard<std::mutex> lock(metrics_mu);
    history.record_train(loss[0], lr);
  }
  last_lr = lr;
  return loss[0];
}

float Engine::Impl::run_eval(const StagedTensor::Impl& x, const StagedTensor::Impl& t) {
  check_train(x, t, "eval_loss");
  std::vector<float> loss(x.rows.size());
  te::run_ranks(group->comms, [&](te::Communicator& c) {
    const size_t k = static_cast<size_t>(group->index_of(c));
    auto& graph = eval_graphs[k];
    if (!graph || graph->local_tokens() != x.rows[k].size(0))
      graph = std::make_unique<te::TrainGraph>(*group->models[k], x.rows[k].size(0), t.rows[k].dtype(),
                                               train_options(te::TrainGraphOptions::Kind::eval));
    loss[k] = graph->eval_loss(x.rows[k], t.rows[k]);
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

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine detail::make_engine(te::ModelSpec spec) {  // NOLINT: defined in this file's namespace
  auto impl = std::make_unique<Engine::Impl>();
  const te::RankPlacement placement = te::place_ranks(spec);
  te::check_memory_fits(spec, placement);  // before anything is allocated
  for (const te::Branch& br : spec.model.block)
    for (const te::LayerSpec& l : br)
      if (l.kind == te::LayerKind::attention && placement.device.is_cuda() &&
          !te::cuda_attention_supports(spec.model.dtype, l.attention.head_dim))
        TE_INPUT_ERROR(spec.source << ": " << l.path << ".attention '" << l.name << "' would run on "
                                   << placement.device.str() << " in " << te::dtype_name(spec.model.dtype)
                                   << " with head_dim " << l.attention.head_dim << ", but the CUDA attention takes "
                                   << "bf16/f16 and head_dim ≤ " << te::kCudaAttentionMaxHeadDim,
                       "set model.dtype: bf16 (or f16), or run this model on the CPU (--set run.device=cpu)");
  impl->group = std::make_unique<te::RankGroup>(spec, placement, te::shards_for(spec));
  impl->drop_graphs();
  impl->staging = std::make_unique<te::PinnedHostBuffer>(impl->device().is_cuda());
  if (spec.run.cuda_graph && !impl->device().is_cuda())
    TE_LOG(warn, "run.cuda_graph ignored: the model runs on " << impl->device().str() << " (CUDA graphs need a GPU)");
  return Engine(std::move(impl));
}

void Engine::load_weights(const std::string& path) {
  translate([&] {
    impl_->exclusive([&] {
      te::ModelSpec spec = impl_->spec();
      spec.weights_path = path;
      impl_->drop_graphs();  // plans and captures of the current models (made again, lazily, for the new ones)
      impl_->group->load(te::shards_for(spec));  // a bad file leaves the weights as they were
    });
  });
}

void Engine::save_weights(const std::string& path) const {
  translate([&] {
    impl_->exclusive([&] {
      te::RankGroup& g = *impl_->group;
      te::GlobalParams params = g.gather_params();
      if (g.placement.rank == 0) te::save_params(params, g.spec.model.dtype, path);
    });
  });
}

void Engine::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  translate([&] { impl_->exclusive([&] { te::save_checkpoint(*impl_->group, impl_->step, path, metadata); }); });
}

std::map<std::string, std::string> Engine::load_checkpoint(const std::string& path) {
  return translate([&] {
    return impl_->exclusive([&] {
      impl_->drop_graphs();  // they hold the current models (made again, lazily, for the loaded ones)
      std::map<std::string, std::string> md = te::load_checkpoint(*impl_->group, path);  // a bad file changes nothing
      impl_->step = impl_->first_step = std::stoll(md.at("step"));
      return md;
    });
  });
}

float Engine::eval_loss(const StagedTensor& input, const StagedTensor& target) {
  return translate([&] {
    return impl_->exclusive([&] {
      return impl_->run_eval(impl_->staged(input, "eval_loss's input"), impl_->staged(target, "eval_loss's target"));
    });
  });
}

void Engine::record_eval(int64_t step, float loss) {
  std::lock_guard<std::mutex> lock(impl_->metrics_mu);
  impl_->history.record_eval(step, loss);
}

int64_t Engine::step() const { return impl_->step; }
double Engine::last_lr() const { return impl_->last_lr; }

HostTensor Engine::Impl::forward_host(const HostTensor& input) {
  return exclusive([&] {
    return timed_step([&](StepRecord& step) {
      StagedTensor x = stage(input);
      step.tokens = x.tokens();
      return to_host(*run_forward(*x.impl(), &step.device_ms).impl());
    });
  });
}

HostTensor Engine::forward(const HostTensor& input) {
  return translate([&] {
    if (const auto batcher = impl_->current_batcher()) return impl_->forward_batched(*batcher, input);
    return impl_->forward_host(input);
  });
}

float Engine::train_step(const HostTensor& input, const HostTensor& target) {
  return translate([&] {
    return impl_->exclusive([&] {
      return impl_->timed_step([&](Impl::StepRecord& step) {
        StagedTensor x = impl_->stage(input), t = impl_->stage(target);
        step.tokens = x.tokens();
        return impl_->run_train(*x.impl(), *t.impl(), &step.device_ms);
      });
    });
  });
}

StagedTensor Engine::stage(const HostTensor& tensor) {
  return translate([&] { return impl_->exclusive([&] { return impl_->stage(tensor); }); });
}

StagedTensor Engine::forward(const StagedTensor& input) {
  return translate([&] {
    return impl_->exclusive([&] {
      return impl_->timed_step([&](Impl::StepRecord& step) {
        step.tokens = input.tokens();
        return impl_->run_forward(impl_->staged(input, "forward's input"), &step.device_ms);
      });
    });
  });
}

float Engine::train_step(const StagedTensor& input, const StagedTensor& target) {
  return translate([&] {
    return impl_->exclusive([&] {
      return impl_->timed_step([&](Impl::StepRecord& step) {
        step.tokens = input.tokens();
        return impl_->run_train(impl_->staged(input, "train_step's input"),
                                impl_->staged(target, "train_step's target"), &step.device_ms);
      });
    });
  });
}

HostTensor Engine::to_host(const StagedTensor& tensor) {
  return translate([&] {
    return impl_->exclusive([&] { return impl_->to_host(impl_->staged(tensor, "to_host's tensor")); });
  });
}

int64_t Engine::hidden() const { return impl_->spec().model.hidden; }
int Engine::rank() const { return impl_->group->placement.rank; }
int Engine::world_size() const { return impl_->world(); }
int64_t Engine::tokens() const { return impl_->spec().run.tokens; }
int64_t Engine::token_multiple() const { return impl_->token_multiple(); }
std::string Engine::recipe() const { return std::string(te::recipe_name(impl_->spec().precision.recipe)); }
bool Engine::tokens_independent() const {
  return impl_->per_token_recipe() && te::sequence_multiple(impl_->spec()) == 1;
}

bool Engine::Impl::per_token_recipe() const {
  // The forward quantizes only the input activation by its values (weights are fixed), and only its row-wise copy:
  // unquantized, or per block within a token (fp8_block's 1x128, MXFP8's 1x32), no token's value reaches another's.
  const te::RecipeConfigs rc = te::recipe_configs(spec().precision, spec().run.seed);
  return !rc.input || rc.input->format == te::QuantFormat::fp8_block_1d || rc.input->format == te::QuantFormat::mxfp8;
}
std::string Engine::dtype() const { return std::string(te::dtype_name(impl_->spec().model.dtype)); }

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
