#include "models/spec.h"

#include <numeric>
#include <sstream>

#include "engine/error.h"
#include "engine/printable.h"
#include "models/spec_tables.h"
#include "ops/attention/attention.h"

namespace te {
using namespace spec_tables;

std::string_view norm_type_name(NormType v) { return name_of(kNorms, v); }
std::string_view layer_kind_name(LayerKind v) { return name_of(kKinds, v); }
std::string_view activation_name(Activation v) { return name_of(kActs, v); }
std::string_view parallel_mode_name(ParallelMode v) { return name_of(kModes, v); }
std::string_view comm_backend_name(CommBackend v) { return name_of(kComms, v); }
std::string_view recipe_name(Recipe v) { return name_of(recipes(), v); }
std::string_view fp8_format_name(Fp8Format v) { return name_of(kFormats, v); }
std::string_view amax_algo_name(AmaxAlgo v) { return name_of(kAlgos, v); }
std::string_view run_mode_name(RunMode v) { return name_of(kRunModes, v); }
std::string_view executor_name(ForwardExecutor v) { return name_of(kExecutors, v); }
std::string_view optimizer_type_name(OptimizerType v) { return name_of(kOptims, v); }
std::string_view lr_schedule_name(LrScheduleType v) { return name_of(kSchedules, v); }
std::optional<Recipe> recipe_from_name(std::string_view name) {
  for (const auto& [n, r] : recipes())
    if (n == name) return r;
  return std::nullopt;
}

// ---- entry points ------------------------------------------------------------------------------------------------

SpecOverride parse_override(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    TE_INPUT_ERROR("--set " << printable(arg) << ": expected PATH=VALUE",
                   "e.g. --set model.hidden=512 or --set precision.recipe=fp8_block");
  return {arg.substr(0, eq), arg.substr(eq + 1), arg};
}

// ---- parameters --------------------------------------------------------------------------------------------------

bool qkv_kinds_apart(const AttentionSpec& a) { return AttentionLayout{a.heads, a.kv_heads}.grouped_query(); }

std::vector<ParamSpec> parameter_specs(const ModelSpec& spec) {
  std::vector<ParamSpec> out;
  const bool layernorm = spec.model.norm == NormType::layernorm;
  for (int i = 0; i < spec.model.layers; ++i)
    for (const Branch& br : spec.model.block)
      for (size_t at = 0; at < br.size(); ++at) {
        const LayerSpec& l = br[at];
        if (!l.has_params()) continue;
        const std::string base = "layers." + std::to_string(i) + "." + l.name + ".";
        // The QKV projection of a grouped-query attention that follows it.
        const AttentionSpec* qkv_of =
            at + 1 < br.size() && br[at + 1].kind == LayerKind::attention && qkv_kinds_apart(br[at + 1].attention)
                ? &br[at + 1].attention
                : nullptr;
        auto add = [&](const std::string& n, Shape shape, ParamRole role, int shard_dim, bool gated = false) {
          const bool projection = role == ParamRole::weight || role == ParamRole::bias;
          out.push_back({base + n, std::move(shape), role, i, &l, shard_dim, gated, projection ? qkv_of : nullptr});
        };
        if (l.has_norm()) {
          add("layer_norm_weight", {l.in}, ParamRole::norm_weight, -1);
          if (layernorm) add("layer_norm_bias", {l.in}, ParamRole::norm_bias, -1);
        }
        if (l.kind == LayerKind::layernorm_mlp) {
          const bool gated = l.activation == Activation::swiglu;
          const int64_t fc1_rows = gated ? 2 * l.ffn : l.ffn;
          add("fc1_weight", {fc1_rows, l.in}, ParamRole::weight, 0, gated);  // column-parallel
          if (l.bias) add("fc1_bias", {fc1_rows}, ParamRole::bias, 0, gated);
          add("fc2_weight", {l.out, l.ffn}, ParamRole::weight, 1);            // row-parallel
          if (l.bias) add("fc2_bias", {l.out}, ParamRole::bias, -1);
        } else {
          const bool column = l.mode == ParallelMode::column;
          add("weight", {l.out, l.in}, ParamRole::weight, column ? 0 : 1);
          if (l.bias) add("bias", {l.out}, ParamRole::bias, column ? 0 : -1);
        }
      }
  return out;
}

Shape local_shape(const ParamSpec& p, int tp) {
  Shape s = p.shape;
  if (p.shard_dim >= 0) s[p.shard_dim] /= tp;
  return s;
}

int64_t sequence_multiple(const ModelSpec& spec) {
  int64_t m = 1;
  for (const Branch& br : spec.model.block)
    for (const LayerSpec& l : br)
      if (l.kind == LayerKind::attention) m = std::lcm(m, l.attention.seq_len);
  return m;
}

std::string attention_summary(const AttentionSpec& a) {
  std::ostringstream o;
  o << a.heads << " heads";
  if (a.kv_heads != a.heads) o << " / " << a.kv_heads << " kv";
  o << " of " << a.head_dim << ", seq " << a.seq_len << (a.causal ? ", causal" : "");
  if (a.softmax_scale > 0) o << ", scale " << a.softmax_scale;
  if (a.rotary_base > 0) o << ", rotary base " << a.rotary_base;
  if (!a.deterministic) o << ", nondeterministic backward";
  return o.str();
}

std::string describe_spec(const ModelSpec& spec) {
  std::ostringstream o;
  const auto& m = spec.model;
  o << printable(spec.name) << ": hidden " << m.hidden << ", " << m.layers << " layer(s), " << dtype_name(m.dtype)
    << ", " << norm_type_name(m.norm) << " eps " << m.eps << "\n";
  o << "parallel: tp " << spec.parallel.tp << (spec.parallel.sequence_parallel ? " with" : " without")
    << " sequence parallelism, comm " << comm_backend_name(spec.parallel.comm) << "; recipe "
    << recipe_name(spec.precision.recipe) << "\n";
  for (size_t b = 0; b < m.block.size(); ++b) {
    o << "branch " << b << ": x = x + ";
    for (size_t i = 0; i < m.block[b].size(); ++i) {
      const LayerSpec& l = m.block[b][i];
      o << (i ? " -> " : "") << layer_kind_name(l.kind) << " " << l.name << " [" << l.in << " -> ";
      if (l.kind == LayerKind::layernorm_mlp)
        o << l.ffn << " " << activation_name(l.activation) << " -> " << l.out << "] (FC1 column, FC2 row)";
      else if (l.kind == LayerKind::attention)
        o << l.out << "] (" << attention_summary(l.attention) << ", heads split)";
      else
        o << l.out << "] (" << parallel_mode_name(l.mode) << ")";
    }
    o << "\n";
  }
  o << "run: " << run_mode_name(spec.run.mode);
  if (spec.run.mode == RunMode::infer)
    o << " (" << executor_name(spec.run.executor) << " executor" << (spec.run.cuda_graph ? ", CUDA-graph replay" : "")
      << ")";
  o << " on " << spec.run.device << ", " << spec.run.tokens
    << " tokens, " << spec.run.steps << " step(s), seed " << spec.run.seed << "\n";
  return o.str();
}

}  // namespace te
