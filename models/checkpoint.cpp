#include "models/checkpoint.h"

#include "engine/error.h"
#include "models/checkpoint_header.h"
#include "models/safetensors.h"

namespace te {
namespace {
const char* const kStateFields[4] = {"scale", "amax_history", "step_amax", "history_count"};

bool adamw(const ModelSpec& s) { return s.run.optimizer.type == OptimizerType::adamw; }
const char* state1_prefix(const ModelSpec& s) { return adamw(s) ? "optimizer.exp_avg." : "optimizer.momentum."; }
constexpr const char* kState2Prefix = "optimizer.exp_avg_sq.";

void require_training(const ModelSpec& spec, const char* what) {
  if (spec.run.mode != RunMode::train)
    TE_INPUT_ERROR(what << " needs a training engine (run.mode: train); this one is for inference",
                   "set run.mode: train; to run inference from a checkpoint, set weights: to it (it holds the "
                   "weights under their names)");
}
}  // namespace

void save_checkpoint(RankGroup& g, int64_t step, const std::string& path,
                     const std::map<std::string, std::string>& metadata) {
  const ModelSpec& spec = g.spec;
  require_training(spec, "save_checkpoint");
  std::map<std::string, Tensor> out;
  GlobalParams masters = g.gather_params();
  GlobalParams s1 = g.gather([](RankModel& m, size_t i) { return m.params()[i].state1; });
  GlobalParams s2;
  if (adamw(spec)) s2 = g.gather([](RankModel& m, size_t i) { return m.params()[i].state2; });
  for (size_t i = 0; i < masters.specs.size(); ++i) {
    const std::string& name = masters.specs[i].name;
    out.emplace(name, masters.values[i]);
    out.emplace(state1_prefix(spec) + name, s1.values[i]);
    if (adamw(spec)) out.emplace(kState2Prefix + name, s2.values[i]);
  }
  RankModel& m = *g.models[0];
  for (auto& [name, q] : m.quantizers()) {
    const DelayedScaling& d = q->delayed();
    if (!d.defined()) continue;
    const Tensor* t[4] = {&d.scale, &d.amax_history, &d.step_amax, &d.count};
    for (int k = 0; k < 4; ++k)
      out.emplace("quantizer." + name + "." + kStateFields[k], t[k]->to(Device::cpu(), m.ctx().stream));
  }
  m.ctx().stream.synchronize();
  if (g.placement.rank != 0) return;
  write_safetensors(path, out, checkpoint_metadata(spec, step, metadata));
}

std::map<std::string, std::string> load_checkpoint(RankGroup& g, const std::string& path) {
  const ModelSpec& spec = g.spec;
  require_training(spec, "load_checkpoint");
  const SafetensorsReader r = SafetensorsReader::open(path);
  const std::map<std::string, std::string>& md = r.metadata();
  const int64_t step = check_checkpoint_identity(path, md, spec);
  warn_checkpoint_run_differences(path, md, spec);

  // Everything is read and checked before the models change: a bad file leaves the group as it was.
  const size_t n = g.comms.size();
  std::vector<RankShards> masters(n), s1(n), s2(n);
  for (auto& c : g.comms) {
    const size_t i = static_cast<size_t>(g.index_of(*c));
    masters[i] = load_rank_params(spec, path, c->rank(), c->size());
    s1[i] = load_rank_params(spec, path, c->rank(), c->size(), state1_prefix(spec));
    if (adamw(spec)) s2[i] = load_rank_params(spec, path, c->rank(), c->size(), kState2Prefix);
  }
  struct QState {
    std::string name;
    Tensor t[4];
  };
  std::vector<QState> qstates;
  for (auto& [name, q] : g.models[0]->quantizers()) {
    const QuantizerConfig& qc = q->config();
    if (qc.format != QuantFormat::fp8_per_tensor || qc.scaling != ScalingKind::delayed) continue;
    const std::string base = "quantizer." + name + ".";
    if (!r.contains(base + "scale")) {
      if (step > 0)
        TE_INPUT_ERROR(path << ": no delayed-scaling state for quantizer " << name << " (" << base << "scale)",
                       "the file is incomplete: use another checkpoint");
      continue;
    }
    QState s{name, {}};
    const Shape shapes[4] = {{1}, {qc.amax_history_len}, {1}, {1}};
    const DType dtypes[4] = {DType::f32, DType::f32, DType::f32, DType::i64};
    for (int k = 0; k < 4; ++k) s.t[k] = r.read(base + kStateFields[k], shapes[k], dtypes[k]);
    qstates.push_back(std::move(s));
  }

  g.load([&](int rank, int) { return std::move(masters[static_cast<size_t>(g.distributed() ? 0 : rank)]); });
  for (auto& c : g.comms) {
    const size_t i = static_cast<size_t>(g.index_of(*c));
    RankModel& m = *g.models[i];
    for (size_t k = 0; k < m.params().size(); ++k)
      m.set_optimizer_state(k, s1[i].values[k], adamw(spec) ? s2[i].values[k] : Tensor());
    for (auto& [name, q] : m.quantizers())
      for (const QState& s : qstates)
        if (s.name == name) q->set_delayed({s.t[0], s.t[1], s.t[2], s.t[3]}, m.ctx().device, m.ctx().stream);
    m.ctx().stream.synchronize();
  }
  return md;
}

}  // namespace te
