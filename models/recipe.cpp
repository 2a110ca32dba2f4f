#include "models/recipe.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace te {
namespace {

QuantizerConfig base(const PrecisionSpec& p) {
  QuantizerConfig c;
  c.eps = static_cast<float>(p.amax_epsilon);
  c.pow2_scales = p.pow2_scales;
  return c;
}

RecipeConfigs none(const PrecisionSpec&, uint64_t) { return {}; }

// Per-tensor FP8, delayed or current scaling; gradients in E5M2 under the hybrid format.
RecipeConfigs fp8_per_tensor(const PrecisionSpec& p, uint64_t) {
  QuantizerConfig c = base(p);
  c.format = QuantFormat::fp8_per_tensor;
  c.scaling = p.recipe == Recipe::fp8_delayed ? ScalingKind::delayed : ScalingKind::current;
  c.amax_history_len = p.amax_history_len;
  c.amax_algo = p.amax_algo;
  c.margin = p.margin;
  RecipeConfigs r;
  r.input = r.weight = r.grad = c;
  if (p.fp8_format == Fp8Format::hybrid) r.grad->data_dtype = DType::fp8_e5m2;
  return r;
}

// E4M3 everywhere (gradients too); activations and gradients 1x128, weights 128x128.
RecipeConfigs fp8_block(const PrecisionSpec& p, uint64_t) {
  QuantizerConfig c = base(p);
  c.format = QuantFormat::fp8_block_1d;
  RecipeConfigs r;
  r.input = r.grad = c;
  c.format = QuantFormat::fp8_block_2d;
  r.weight = c;
  return r;
}

RecipeConfigs mxfp8(const PrecisionSpec& p, uint64_t) {
  QuantizerConfig c = base(p);
  c.format = QuantFormat::mxfp8;
  c.pow2_scales = false;  // E8M0 scales are powers of two by construction
  RecipeConfigs r;
  r.input = r.weight = r.grad = c;
  return r;
}

RecipeConfigs nvfp4(const PrecisionSpec& p, uint64_t seed) {
  QuantizerConfig c = base(p);
  RecipeConfigs r;
  c.format = QuantFormat::nvfp4_2d;  // weights: 16x16 tiles, no RHT, no SR
  c.data_dtype = DType::fp4_e2m1;
  c.pow2_scales = false;
  r.weight = c;
  c.format = QuantFormat::nvfp4_1d;  // activations: RHT on the column-wise copy
  c.random_hadamard = true;
  r.input = c;
  c.stochastic_rounding = true;  // gradients: RHT + stochastic rounding, seeded by the run
  c.seed = seed ^ 0x9E3779B97F4A7C15ull;
  r.grad = c;
  return r;
}

}  // namespace

const std::vector<RecipeRow>& recipe_table() {
  static const std::vector<RecipeRow> rows = {
      {Recipe::none, "none", {}, {}, false, none},
      {Recipe::fp8_delayed, "fp8_delayed", {"fp8_format", "amax_history_len", "amax_algo", "margin"},
       {Fp8Format::hybrid, Fp8Format::e4m3}, false, fp8_per_tensor},
      {Recipe::fp8_current, "fp8_current", {"fp8_format", "pow2_scales", "amax_epsilon"},
       {Fp8Format::hybrid, Fp8Format::e4m3}, false, fp8_per_tensor},
      // Block-scaled gradients stay E4M3 here: hybrid (E5M2 gradients) is not offered for the block formats.
      {Recipe::fp8_block, "fp8_block", {"fp8_format", "pow2_scales", "amax_epsilon"}, {Fp8Format::e4m3}, true,
       fp8_block},
      {Recipe::mxfp8, "mxfp8", {"fp8_format"}, {Fp8Format::e4m3}, false, mxfp8},
      {Recipe::nvfp4, "nvfp4", {}, {}, false, nvfp4},
  };
  return rows;
}

const RecipeRow& recipe_row(Recipe recipe) {
  for (const RecipeRow& r : recipe_table())
    if (r.recipe == recipe) return r;
  TE_THROW("recipe " << static_cast<int>(recipe) << " has no row in the recipe table", "add its row (models/recipe.cpp)");
}

std::string recipes_reading(std::string_view option) {
  std::string out;
  for (const RecipeRow& r : recipe_table())
    if (std::find(r.options.begin(), r.options.end(), option) != r.options.end())
      out += (out.empty() ? "" : " | ") + std::string(r.name);
  return out.empty() ? "none" : out;
}

RecipeConfigs recipe_configs(const PrecisionSpec& p, uint64_t seed) { return recipe_row(p.recipe).configs(p, seed); }

}  // namespace te
