// The model spec's tables: the names of its enums (one table per enum, shared by the parser's did-you-mean and the
// name functions in spec.cpp), and the keys every map of the spec accepts (the parser's unknown-key check reads
// them; tests/models/test_spec_docs.cpp checks that docs/MODEL-YAML.md documents each one).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/recipe.h"
#include "models/spec.h"

namespace te::spec_tables {
template <class E>
using Table = std::vector<std::pair<std::string, E>>;

inline const Table<NormType> kNorms = {{"layernorm", NormType::layernorm}, {"rmsnorm", NormType::rmsnorm}};
inline const Table<LayerKind> kKinds = {{"layernorm_linear", LayerKind::layernorm_linear},
                                 {"linear", LayerKind::linear},
                                 {"layernorm_mlp", LayerKind::layernorm_mlp},
                                 {"attention", LayerKind::attention}};
inline const Table<Activation> kActs = {{"gelu", Activation::gelu}, {"swiglu", Activation::swiglu}, {"relu", Activation::relu}};
inline const Table<ParallelMode> kModes = {{"column", ParallelMode::column}, {"row", ParallelMode::row}};
inline const Table<CommBackend> kComms = {{"auto", CommBackend::automatic}, {"local", CommBackend::local},
                                   {"nccl", CommBackend::nccl}, {"gloo", CommBackend::gloo}};
// The recipe names come from the recipe table (models/recipe.h), whose rows also say which options each takes.
inline const Table<Recipe>& recipes() {
  static const Table<Recipe> t = [] {
    Table<Recipe> names;
    for (const RecipeRow& r : recipe_table()) names.emplace_back(std::string(r.name), r.recipe);
    return names;
  }();
  return t;
}
inline const Table<Fp8Format> kFormats = {{"e4m3", Fp8Format::e4m3}, {"hybrid", Fp8Format::hybrid}};
inline const Table<AmaxAlgo> kAlgos = {{"max", AmaxAlgo::max}, {"most_recent", AmaxAlgo::most_recent}};
inline const Table<RunMode> kRunModes = {{"infer", RunMode::infer}, {"train", RunMode::train}};
inline const Table<ForwardExecutor> kExecutors = {{"graph", ForwardExecutor::graph},
                                                  {"eager", ForwardExecutor::eager}};
inline const Table<OptimizerType> kOptims = {{"sgd", OptimizerType::sgd}, {"adamw", OptimizerType::adamw}};
inline const Table<LrScheduleType> kSchedules = {{"constant", LrScheduleType::constant},
                                                 {"cosine", LrScheduleType::cosine}};
inline const Table<DType> kModelDTypes = {{"f32", DType::f32}, {"bf16", DType::bf16}, {"f16", DType::f16}};

// ---- accepted keys ----------------------------------------------------------------------------------------------

inline constexpr std::string_view kTopKeys[] = {"name", "model", "parallel", "precision", "run", "weights"};
inline constexpr std::string_view kModelKeys[] = {"hidden", "layers", "dtype", "norm", "block"};
inline constexpr std::string_view kNormKeys[] = {"type", "eps"};
// A layer is a one-key map {KIND: {...}}; its kinds are kKinds. The keys inside, per kind:
inline constexpr std::string_view kLinearKeys[] = {"name", "bias", "out"};                  // layernorm_linear, linear
inline constexpr std::string_view kMlpKeys[] = {"name", "bias", "ffn", "activation"};       // layernorm_mlp
inline constexpr std::string_view kAttentionKeys[] = {"name",        "heads",        "kv_heads",      "head_dim",
                                                      "seq_len",     "causal",       "softmax_scale", "rotary",
                                                      "rotary_base", "deterministic"};
inline constexpr std::string_view kParallelKeys[] = {"tp", "sequence_parallel", "comm", "timeout_s"};
inline constexpr std::string_view kPrecisionKeys[] = {"recipe",    "fp8_format",  "amax_history_len", "amax_algo",
                                                      "margin",    "pow2_scales", "amax_epsilon"};
inline constexpr std::string_view kRunKeys[] = {"mode",      "executor",   "cuda_graph",   "device",
                                                "tokens",    "steps",      "seed",         "optimizer",
                                                "data",      "eval_data",  "shuffle",      "eval_every",
                                                "eval_batches", "checkpoint_every", "weight_images",
                                                "activation_images"};
inline constexpr std::string_view kOptimizerKeys[] = {"type",  "lr",  "momentum", "weight_decay",
                                                      "betas", "eps", "schedule"};
inline constexpr std::string_view kScheduleKeys[] = {"type", "warmup_steps", "decay_steps", "min_lr"};

// Every map of the spec and its keys. `path` is how docs/MODEL-YAML.md and the parser's messages name the map;
// `[b][i]` stands for a branch and a layer index.
struct SpecMap {
  std::string_view path;
  std::span<const std::string_view> keys;
};
inline constexpr SpecMap kSpecMaps[] = {
    {"", kTopKeys},
    {"model", kModelKeys},
    {"model.norm", kNormKeys},
    {"model.block[b][i].layernorm_linear", kLinearKeys},
    {"model.block[b][i].linear", kLinearKeys},
    {"model.block[b][i].layernorm_mlp", kMlpKeys},
    {"model.block[b][i].attention", kAttentionKeys},
    {"parallel", kParallelKeys},
    {"precision", kPrecisionKeys},
    {"run", kRunKeys},
    {"run.optimizer", kOptimizerKeys},
    {"run.optimizer.schedule", kScheduleKeys},
};

// The keys of the map at `path` (a kSpecMaps path), as the parser's unknown-key check takes them; empty for a path
// that is not in kSpecMaps (so every key there is rejected).
inline std::vector<std::string> map_keys(std::string_view path) {
  for (const SpecMap& m : kSpecMaps)
    if (m.path == path) return {m.keys.begin(), m.keys.end()};
  return {};
}

template <class E>
std::string_view name_of(const Table<E>& t, E v) {
  for (const auto& [n, e] : t)
    if (e == v) return n;
  return "?";
}

}  // namespace te::spec_tables
