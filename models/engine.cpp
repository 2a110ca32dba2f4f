// teengine::Engine (include/teengine/teengine.h): W tensor-parallel ranks as threads of this process over the
// local communicator (one GPU or the CPU), each running a RankModel on its shard of the tokens and weights.
#include <teengine/teengine.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/gather.h"
#include "comm/local_communicator.h"
#include "engine/allocator.h"
#include "engine/element.h"
#include "engine/log.h"
#include "models/engine_impl.h"
#include "ops/elementwise/elementwise.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "models/rank_model.h"
#include "te_config.h"

namespace teengine {
using detail::translate;

struct Engine::Impl {
  std::unique_ptr<te::RankGroup> group;  // spec, parameters, and per rank a communicator, context and model
  std::vector<std::unique_ptr<te::ModelGraph>> graphs;  // inference forward per rank (run.executor: graph)
  std::mutex mu;  // forward/train_step are serialised
  std::vector<double> step_ms;
  std::vector<float> losses;
  int64_t tokens_done = 0;
  double total_ms = 0;
  int64_t step = 0;

  const te::ModelSpec& spec() const { return group->spec; }
  te::Device device() const { return group->ctxs[0]->device; }
  int world() const { return group->world(); }
  bool graph_forward() const {
    return spec().run.mode == te::RunMode::infer && spec().run.executor == te::ForwardExecutor::graph;
  }
  int64_t local_tokens(int64_t tokens) const {
    return spec().parallel.sequence_parallel && world() > 1 ? tokens / world() : tokens;
  }
  // (Re)builds the ranks from a spec and its global parameters; the planned forwards are dropped.
  void build(te::ModelSpec spec, te::GlobalParams params);
  // Local rows of rank r: SP splits the tokens; without SP every rank sees all of them.
  te::Tensor rank_input(const te::Tensor& global, int r, te::DType dtype) const;
};

namespace {
te::Tensor host_to_tensor(const HostTensor& h) {
  auto dt = te::dtype_from_name(h.dtype);
  if (!dt || !te::is_high_precision(*dt))
    TE_INPUT_ERROR("input dtype '" << h.dtype << "' is not supported", "use f32, bf16 or f16");
  te::Tensor t = te::Tensor::empty(te::Shape(h.shape.begin(), h.shape.end()), *dt);
  TE_CHECK_HINT(static_cast<int64_t>(h.bytes.size()) == t.nbytes(),
                "input holds " << h.bytes.size() << " bytes but shape " << te::shape_str(t.shape()) << " "
                               << h.dtype << " needs " << t.nbytes(),
                "fill HostTensor::bytes to match its shape and dtype");
  std::memcpy(t.data_ptr(), h.bytes.data(), h.bytes.size());
  return t;
}

HostTensor tensor_to_host(const te::Tensor& t) {
  te::Tensor c = t.to(te::Device::cpu());
  HostTensor h;
  h.shape.assign(c.shape().begin(), c.shape().end());
  h.dtype = std::string(te::dtype_name(c.dtype()));
  h.bytes.resize(static_cast<size_t>(c.nbytes()));
  std::memcpy(h.bytes.data(), c.data_ptr(), h.bytes.size());
  return h;
}
}  // namespace

void Engine::Impl::build(te::ModelSpec spec, te::GlobalParams params) {
  const te::Device dev = te::parse_device(spec.run.device);
  // Built before the old group goes, so a failure (e.g. out of device memory) leaves the engine as it was.
  auto next = std::make_unique<te::RankGroup>(std::move(spec), std::move(params), dev);
  graphs.clear();
  group = std::move(next);
  graphs.resize(static_cast<size_t>(world()));
}

te::Tensor Engine::Impl::rank_input(const te::Tensor& g, int r, te::DType dtype) const {
  const int64_t n = local_tokens(g.size(0));
  const te::Tensor rows = n == g.size(0) ? g : g.narrow(0, r * n, n);
  // Cast where the rank computes (one kernel on a GPU), not element by element on the host.
  const te::Stream& st = group->ctxs[r]->stream;
  te::Tensor on_device = rows.contiguous().to(device(), st);
  return on_device.dtype() == dtype ? on_device : te::cast(on_device, dtype, st);
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine detail::make_engine(te::ModelSpec spec) {  // NOLINT: defined in this file's namespace
  auto impl = std::make_unique<Engine::Impl>();
  te::GlobalParams params = spec.weights_path.empty() ? te::init_params(spec) : te::load_params(spec, spec.weights_path);
  impl->build(std::move(spec), std::move(params));
  return Engine(std::move(impl));
}

void Engine::load_weights(const std::string& path) {
  translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::ModelSpec spec = impl_->spec();
    te::GlobalParams params = te::load_params(spec, path);  // a bad file leaves the engine as it was
    impl_->build(std::move(spec), std::move(params));
  });
}

void Engine::save_weights(const std::string& path) const {
  translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    te::RankGroup& g = *impl_->group;
    for (auto& r : g.models) r->ctx().stream.synchronize();
    for (auto& r : g.models) r->export_params(g.params);
    te::save_params(g.params, g.spec.model.dtype, path);
  });
}

HostTensor Engine::forward(const HostTensor& input) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Impl& m = *impl_;
    te::Tensor x = host_to_tensor(input);
    const int64_t hidden = m.spec().model.hidden;
    if (x.dim() != 2 || x.size(1) != hidden)
      TE_INPUT_ERROR("input has shape " << te::shape_str(x.shape()) << " but the model takes [tokens, " << hidden
                                        << "]",
                     "give a 2-D input whose last dimension is model.hidden");
    if (m.spec().parallel.sequence_parallel && m.world() > 1 && x.size(0) % m.world() != 0)
      TE_INPUT_ERROR("input has " << x.size(0) << " tokens, not divisible by tp " << m.world()
                                  << " under sequence parallelism",
                     "use a token count that is a multiple of parallel.tp");
    std::vector<te::Tensor> outs(m.world());
    auto t0 = std::chrono::steady_clock::now();
    te::run_ranks(m.group->comms, [&](te::Communicator& c) {
      const int r = c.rank();
      te::Tensor xr = m.rank_input(x, r, m.spec().model.dtype);
      if (m.graph_forward()) {
        // Planned once per token count (shapes are static in a plan).
        if (!m.graphs[r] || m.graphs[r]->local_tokens() != xr.size(0))
          m.graphs[r] = std::make_unique<te::ModelGraph>(*m.group->models[r], xr.size(0));
        outs[r] = m.graphs[r]->forward(xr);
      } else {
        outs[r] = m.group->models[r]->forward(xr);
      }
      m.group->ctxs[r]->stream.synchronize();
    });
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    m.step_ms.push_back(ms);
    m.total_ms += ms;
    m.tokens_done += x.size(0);
    const int64_t n = m.local_tokens(x.size(0));
    if (n == x.size(0)) return tensor_to_host(outs[0]);  // every rank holds all tokens (no SP split)
    te::Tensor full = te::Tensor::empty({x.size(0), hidden}, m.spec().model.dtype);
    for (int r = 0; r < m.world(); ++r) full.narrow(0, r * n, n).copy_from(outs[r].to(te::Device::cpu()));
    return tensor_to_host(full);
  });
}

float Engine::train_step(const HostTensor& input, const HostTensor& target) {
  return translate([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Impl& m = *impl_;
    TE_CHECK_HINT(m.spec().run.mode == te::RunMode::train, "train_step on an inference engine",
                  "set run.mode: train in the spec (or --set run.mode=train)");
    te::Tensor x = host_to_tensor(input), t = host_to_tensor(target);
    if (x.shape() != t.shape())
      TE_INPUT_ERROR("target shape " << te::shape_str(t.shape()) << " differs from input shape "
                                     << te::shape_str(x.shape()),
                     "give a target with the input's shape [tokens, hidden]");
    ++m.step;
    std::vector<float> loss(m.world());
    auto t0 = std::chrono::steady_clock::now();
    te::run_ranks(m.group->comms, [&](te::Communicator& c) {
      const int r = c.rank();
      loss[r] = m.group->models[r]->train_step(m.rank_input(x, r, m.spec().model.dtype),
                                       m.rank_input(t, r, m.spec().model.dtype), m.step);
      m.group->ctxs[r]->stream.synchronize();
    });
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    m.step_ms.push_back(ms);
    m.total_ms += ms;
    m.tokens_done += x.size(0);
    m.losses.push_back(loss[0]);
    return loss[0];
  });
}

int64_t Engine::hidden() const { return impl_->spec().model.hidden; }
int64_t Engine::tokens() const { return impl_->spec().run.tokens; }

std::string Engine::metrics_json() const {
  const Impl& m = *impl_;
  const te::CommMetrics& c = m.group->comms[0]->metrics();
  auto pc = [](const te::PathCounter& p) { return nlohmann::json{{"calls", p.calls}, {"bytes", p.bytes}}; };
  nlohmann::json j = {
      {"model", m.spec().name},
      {"mode", std::string(te::run_mode_name(m.spec().run.mode))},
      {"device", m.device().str()},
      {"world_size", m.world()},
      {"recipe", std::string(te::recipe_name(m.spec().precision.recipe))},
      {"tokens", m.spec().run.tokens},
      {"steps", static_cast<int64_t>(m.step_ms.size())},
      {"step_ms", m.step_ms},
      {"tokens_per_s", m.total_ms > 0 ? static_cast<double>(m.tokens_done) / (m.total_ms * 1e-3) : 0.0},
      {"peak_bytes", te::memory_stats(m.device()).peak_bytes},
      {"loss", m.losses},
      {"comm",
       {{"gather", {{"quantized", pc(c.gather_quantized)}, {"fallback", pc(c.gather_fallback)},
                    {"high_precision", pc(c.gather_hp)}}},
        {"reduce_scatter", pc(c.reduce_scatter)},
        {"all_reduce", pc(c.all_reduce)}}},
  };
  return j.dump(2);
}

std::string Engine::explain() const {
  const Impl& m = *impl_;
  std::ostringstream o;
  o << te::describe_spec(m.spec());
  const int w = m.world();
  const bool sp = m.spec().parallel.sequence_parallel && w > 1;
  const int64_t local_tokens = m.local_tokens(m.spec().run.tokens);
  te::RecipeConfigs rc = te::recipe_configs(m.spec().precision, m.spec().run.seed);
  o << "device " << m.device().str() << ", " << w << " rank(s) on the local communicator\n";
  o << "gathers per layer (local shard [" << local_tokens << ", " << m.spec().model.hidden << "]):\n";
  // One line per gather and usage, from the same plan the gather itself makes (gather_along_first_dim).
  auto line = [&](const std::string& what, te::Usage usages, const std::optional<te::QuantizerConfig>& qc) {
    std::optional<te::Quantizer> q;
    if (qc) q.emplace(*qc, usages);
    te::GatherPlan p = te::plan_gather({local_tokens, m.spec().model.hidden}, q ? &*q : nullptr, usages, w);
    if (!qc) {
      o << "  " << what << ": " << te::gather_route_name(p.tensor_path) << " ("
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
  if (m.graph_forward()) {
    o << "rank 0 forward plan (" << local_tokens << " local tokens):\n";
    if (m.graphs[0] && m.graphs[0]->local_tokens() == local_tokens) o << m.graphs[0]->explain();
    else o << te::ModelGraph(*m.group->models[0], local_tokens).explain();  // planning touches no device memory but the arena
  } else {
    o << (m.spec().run.mode == te::RunMode::train ? "training steps run eagerly (layer by layer)\n"
                                                : "inference runs eagerly (run.executor: eager)\n");
  }
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
  return translate([&] { return host_to_tensor(*this).to_f32_vector(); });
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* version() { return TE_VERSION; }

}  // namespace teengine
