#include "models/checkpoint.h"

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "engine/error.h"
#include "engine/log.h"
#include "models/lr_schedule.h"
#include "models/safetensors.h"

namespace te {
namespace fs = std::filesystem;

namespace {
constexpr const char* kVersion = "1";
const char* const kStateFields[4] = {"scale", "amax_history", "step_amax", "history_count"};

std::string fnv1a_hex(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

// Full precision for doubles: two specs hash equal only when their values are.
std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool adamw(const ModelSpec& s) { return s.run.optimizer.type == OptimizerType::adamw; }
const char* state1_prefix(const ModelSpec& s) { return adamw(s) ? "optimizer.exp_avg." : "optimizer.momentum."; }
constexpr const char* kState2Prefix = "optimizer.exp_avg_sq.";

std::string meta(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}
}  // namespace

std::string checkpoint_spec_hash(const ModelSpec& s) {
  std::ostringstream o;
  const ModelSection& m = s.model;
  o << "hidden=" << m.hidden << ";layers=" << m.layers << ";dtype=" << dtype_name(m.dtype)
    << ";norm=" << norm_type_name(m.norm) << ";eps=" << num(m.eps) << ";block=";
  for (const Branch& b : m.block) {
    o << "[";
    for (const LayerSpec& l : b)
      o << layer_kind_name(l.kind) << ":" << l.name << ":" << l.out << ":" << l.ffn << ":"
        << activation_name(l.activation) << ":" << l.bias << ",";
    o << "]";
  }
  const PrecisionSpec& p = s.precision;
  o << ";recipe=" << recipe_name(p.recipe) << ";format=" << fp8_format_name(p.fp8_format)
    << ";history=" << p.amax_history_len << ";algo=" << amax_algo_name(p.amax_algo) << ";margin=" << p.margin
    << ";pow2=" << p.pow2_scales << ";amax_eps=" << num(p.amax_epsilon)
    << ";optimizer=" << optimizer_type_name(s.run.optimizer.type);
  return fnv1a_hex(o.str());
}

std::string checkpoint_run_hash(const ModelSpec& s) {
  const OptimizerSpec& o = s.run.optimizer;
  std::ostringstream h;
  h << "lr=" << num(o.lr) << ";wd=" << num(o.weight_decay) << ";momentum=" << num(o.momentum)
    << ";betas=" << num(o.beta1) << "," << num(o.beta2) << ";eps=" << num(o.eps)
    << ";schedule=" << lr_schedule_name(o.schedule.type) << "," << o.schedule.warmup_steps << ","
    << o.schedule.decay_steps << "," << num(o.schedule.min_lr) << ";seed=" << s.run.seed
    << ";shuffle=" << s.run.shuffle << ";tokens=" << s.run.tokens;
  // The schedule's decay length follows run.steps when decay_steps is 0: only then is steps part of the run.
  if (o.schedule.type == LrScheduleType::cosine && o.schedule.decay_steps == 0) h << ";steps=" << s.run.steps;
  return fnv1a_hex(h.str());
}

void save_checkpoint(RankGroup& g, int64_t step, const std::string& path,
                     const std::map<std::string, std::string>& metadata) {
  const ModelSpec& spec = g.spec;
  TE_CHECK_HINT(spec.run.mode == RunMode::train, "a checkpoint holds training state; this engine is for inference",
                "set run.mode: train, or use save_weights");
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
    if (!q->has_delayed_state()) continue;
    const Tensor* t[4] = {&q->scale(), &q->amax_history(), &q->step_amax(), &q->history_count()};
    for (int k = 0; k < 4; ++k)
      out.emplace("quantizer." + name + "." + kStateFields[k], t[k]->to(Device::cpu(), m.ctx().stream));
  }
  m.ctx().stream.synchronize();
  if (g.placement.rank != 0) return;
  std::map<std::string, std::string> md = metadata;
  md["format"] = kCheckpointFormat;
  md["version"] = kVersion;
  md["step"] = std::to_string(step);
  md["spec_hash"] = checkpoint_spec_hash(spec);
  md["run_hash"] = checkpoint_run_hash(spec);
  md["recipe"] = std::string(recipe_name(spec.precision.recipe));
  md["optimizer"] = std::string(optimizer_type_name(spec.run.optimizer.type));
  md["tp"] = std::to_string(spec.parallel.tp);
  write_safetensors(path, out, md);
}

std::map<std::string, std::string> load_checkpoint(RankGroup& g, const std::string& path) {
  const ModelSpec& spec = g.spec;
  TE_CHECK_HINT(spec.run.mode == RunMode::train, "resuming a checkpoint needs a training engine",
                "set run.mode: train (to run inference from a checkpoint, use it as the weights file)");
  const SafetensorsReader r = SafetensorsReader::open(path);
  const auto& md = r.metadata();
  if (meta(md, "format") != kCheckpointFormat)
    TE_INPUT_ERROR(path << ": is not a teengine checkpoint (its __metadata__ has no format \"" << kCheckpointFormat
                        << "\")",
                   "pass a file written by --checkpoint-dir (or Engine::save_checkpoint); to start from its weights "
                   "alone, set weights: to the file");
  if (meta(md, "version") != kVersion)
    TE_INPUT_ERROR(path << ": checkpoint version " << meta(md, "version") << ", this build reads " << kVersion,
                   "resume with the teengine version that wrote it");
  if (meta(md, "spec_hash") != checkpoint_spec_hash(spec)) {
    std::ostringstream why;
    if (meta(md, "recipe") != recipe_name(spec.precision.recipe))
      why << "it was written with precision.recipe " << meta(md, "recipe") << ", the spec has "
          << recipe_name(spec.precision.recipe);
    else if (meta(md, "optimizer") != optimizer_type_name(spec.run.optimizer.type))
      why << "it was written with run.optimizer.type " << meta(md, "optimizer") << ", the spec has "
          << optimizer_type_name(spec.run.optimizer.type);
    else
      why << "its model or precision section differs from the spec's (model.* or precision.* options)";
    TE_INPUT_ERROR(path << ": checkpoint of another spec: " << why.str(),
                   "resume with the spec that wrote it, or start a new run without --resume");
  }
  if (meta(md, "run_hash") != checkpoint_run_hash(spec))
    TE_LOG(warn, path << ": the optimizer, schedule, seed, tokens or steps differ from the run that wrote this "
                         "checkpoint: training continues, but not as that run would have");
  int64_t step = 0;
  try {
    step = std::stoll(meta(md, "step"));
  } catch (const std::exception&) {
    TE_INPUT_ERROR(path << ": checkpoint metadata step '" << meta(md, "step") << "' is not a number",
                   "the file is damaged: use another checkpoint");
  }

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
        if (s.name == name) q->restore_delayed_state(s.t[0], s.t[1], s.t[2], s.t[3], m.ctx().device, m.ctx().stream);
    m.ctx().stream.synchronize();
  }
  return md;
}

std::string checkpoint_file_name(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "step-%08lld.safetensors", static_cast<long long>(step));
  return buf;
}

std::string resolve_checkpoint(const std::string& p) {
  std::error_code ec;
  if (!fs::exists(p, ec))
    TE_INPUT_ERROR("--resume " << p << ": does not exist", "give a checkpoint file or the --checkpoint-dir of a run");
  if (!fs::is_directory(p, ec)) return p;
  std::string best;
  long long best_step = -1;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    const std::string f = e.path().filename().string();
    long long s = 0;
    char tail[32] = {};
    if (std::sscanf(f.c_str(), "step-%lld.%31s", &s, tail) == 2 && std::string(tail) == "safetensors" &&
        s > best_step) {
      best_step = s;
      best = e.path().string();
    }
  }
  if (best.empty())
    TE_INPUT_ERROR("--resume " << p << ": the directory holds no step-N.safetensors checkpoint",
                   "pass the --checkpoint-dir of a run that wrote one, or a checkpoint file");
  return best;
}

}  // namespace te
