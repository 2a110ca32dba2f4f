#include "models/checkpoint_header.h"

#include <charconv>
#include <sstream>

#include "engine/error.h"
#include "engine/log.h"
#include "engine/printable.h"
#include "models/recipe.h"

namespace te {
namespace {

// The shortest text that reads back as the same double: two specs record equal values only when they are equal.
std::string num(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
std::string flag(bool b) { return b ? "true" : "false"; }

// "[layernorm_linear qkv out=768 bias=true, linear proj out=256 bias=true] [...]": every field a parameter's
// shape or the computation depends on.
std::string block_text(const std::vector<Branch>& block) {
  std::ostringstream o;
  for (size_t b = 0; b < block.size(); ++b) {
    o << (b ? " [" : "[");
    for (size_t i = 0; i < block[b].size(); ++i) {
      const LayerSpec& l = block[b][i];
      o << (i ? ", " : "") << layer_kind_name(l.kind) << " " << l.name;
      if (l.kind == LayerKind::layernorm_mlp)
        o << " ffn=" << l.ffn << " " << activation_name(l.activation);
      else
        o << " out=" << l.out;
      if (l.kind == LayerKind::attention)
        o << " (" << attention_summary(l.attention) << ")";
      else
        o << " bias=" << flag(l.bias);
    }
    o << "]";
  }
  return o.str();
}

std::string precision_option(const PrecisionSpec& p, std::string_view option) {
  if (option == "fp8_format") return std::string(fp8_format_name(p.fp8_format));
  if (option == "amax_history_len") return std::to_string(p.amax_history_len);
  if (option == "amax_algo") return std::string(amax_algo_name(p.amax_algo));
  if (option == "margin") return std::to_string(p.margin);
  if (option == "pow2_scales") return flag(p.pow2_scales);
  if (option == "amax_epsilon") return num(p.amax_epsilon);
  TE_THROW("checkpoint_identity: precision option " << option << " has no text form", "add it here");
}

std::string meta(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace

CheckpointFields checkpoint_identity(const ModelSpec& s) {
  const ModelSection& m = s.model;
  CheckpointFields f = {{"model.hidden", std::to_string(m.hidden)},
                        {"model.layers", std::to_string(m.layers)},
                        {"model.dtype", std::string(dtype_name(m.dtype))},
                        {"model.norm.type", std::string(norm_type_name(m.norm))},
                        {"model.norm.eps", num(m.eps)},
                        {"model.block", block_text(m.block)},
                        {"precision.recipe", std::string(recipe_name(s.precision.recipe))}};
  // Only the options the recipe reads: the others are refused by the parser and stay at their defaults.
  for (std::string_view o : recipe_row(s.precision.recipe).options)
    f.emplace_back("precision." + std::string(o), precision_option(s.precision, o));
  f.emplace_back("run.optimizer.type", std::string(optimizer_type_name(s.run.optimizer.type)));
  return f;
}

CheckpointFields checkpoint_run_fields(const ModelSpec& s) {
  const OptimizerSpec& o = s.run.optimizer;
  CheckpointFields f = {{"run.optimizer.lr", num(o.lr)}, {"run.optimizer.weight_decay", num(o.weight_decay)}};
  if (o.type == OptimizerType::sgd) {
    f.emplace_back("run.optimizer.momentum", num(o.momentum));
  } else {
    std::ostringstream betas;
    betas << "[" << num(o.beta1) << ", " << num(o.beta2) << "]";
    f.emplace_back("run.optimizer.betas", betas.str());
    f.emplace_back("run.optimizer.eps", num(o.eps));
  }
  f.emplace_back("run.optimizer.schedule.type", std::string(lr_schedule_name(o.schedule.type)));
  f.emplace_back("run.optimizer.schedule.warmup_steps", std::to_string(o.schedule.warmup_steps));
  if (o.schedule.type == LrScheduleType::cosine) {
    f.emplace_back("run.optimizer.schedule.decay_steps", std::to_string(o.schedule.decay_steps));
    f.emplace_back("run.optimizer.schedule.min_lr", num(o.schedule.min_lr));
    // The decay runs to run.steps when decay_steps is 0: only then do the steps change the learning rates.
    if (o.schedule.decay_steps == 0) f.emplace_back("run.steps", std::to_string(s.run.steps));
  }
  f.emplace_back("run.seed", std::to_string(s.run.seed));
  f.emplace_back("run.shuffle", flag(s.run.shuffle));
  f.emplace_back("run.tokens", std::to_string(s.run.tokens));
  return f;
}

std::map<std::string, std::string> checkpoint_metadata(const ModelSpec& spec, int64_t step,
                                                       const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> md = extra;  // the header's own keys win over `extra`'s
  md.insert_or_assign("format", std::string(kCheckpointFormat));
  md.insert_or_assign("version", std::string(kCheckpointVersion));
  md.insert_or_assign("step", std::to_string(step));
  for (const CheckpointFields& fields : {checkpoint_identity(spec), checkpoint_run_fields(spec)})
    for (const auto& [k, v] : fields) md.insert_or_assign(k, v);
  return md;
}

int64_t check_checkpoint_identity(const std::string& path_in, const std::map<std::string, std::string>& md,
                                  const ModelSpec& spec) {
  const std::string path = printable_path(path_in);  // values from the file are echoed escaped and cut as well
  if (meta(md, "format") != kCheckpointFormat)
    TE_INPUT_ERROR(
        path << ": is not a teengine checkpoint (its __metadata__ has no format \"" << kCheckpointFormat << "\")",
        "pass a file written by --checkpoint-dir (or Engine::save_checkpoint); to start from a weights "
        "file instead, set weights: to it and drop --resume");
  if (meta(md, "version") != kCheckpointVersion)
    TE_INPUT_ERROR(
        path << ": checkpoint version " << printable(meta(md, "version")) << ", this build reads version "
             << kCheckpointVersion,
        "resume with the teengine version that wrote it");
  for (const auto& [key, want] : checkpoint_identity(spec)) {
    if (!md.count(key))
      TE_INPUT_ERROR(path << ": the checkpoint's __metadata__ has no " << key,
                     "the file is damaged or was not written by this teengine: use another checkpoint");
    const std::string& have = md.at(key);
    if (have != want)
      TE_INPUT_ERROR(path << ": a checkpoint of another spec: " << key << " is " << printable(have)
                          << " in the checkpoint but " << want << " in the spec",
                     "resume with the spec that wrote it (set " << key << " back), or start anew without --resume");
  }
  int64_t step = -1;
  const std::string text = meta(md, "step");
  const auto r = std::from_chars(text.data(), text.data() + text.size(), step);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || step < 0)
    TE_INPUT_ERROR(path << ": the checkpoint's step " << quoted_value(text) << " is not a step count",
                   "the file is damaged: use another checkpoint");
  return step;
}

void warn_checkpoint_run_differences(const std::string& path, const std::map<std::string, std::string>& md,
                                     const ModelSpec& spec) {
  std::ostringstream diff;
  for (const auto& [key, want] : checkpoint_run_fields(spec)) {
    const std::string have = meta(md, key);
    if (have != want)
      diff << (diff.tellp() > 0 ? ", " : "") << key << " " << (have.empty() ? "(none)" : printable(have)) << " -> "
           << want;
  }
  if (diff.tellp() > 0)
    TE_LOG(warn, printable_path(path) << ": the run differs from the one that wrote this checkpoint (" << diff.str()
                      << "): training continues, but not as that run would have");
}

}  // namespace te
