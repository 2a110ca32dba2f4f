// The name tables of the model spec's enums: one table per enum, shared by the parser (did-you-mean) and the
// name functions in spec.cpp.
#pragma once
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
                                 {"layernorm_mlp", LayerKind::layernorm_mlp}};
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
inline const Table<DType> kModelDTypes = {{"f32", DType::f32}, {"bf16", DType::bf16}, {"f16", DType::f16}};

template <class E>
std::string_view name_of(const Table<E>& t, E v) {
  for (const auto& [n, e] : t)
    if (e == v) return n;
  return "?";
}

}  // namespace te::spec_tables
