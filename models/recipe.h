// A precision recipe (spec `precision:`) as the quantizer configurations of the three tensor roles of a linear
// layer: its input activation, its weight and the gradient of its output. It uses TransformerEngine's defaults
// except where docs/NUMERICS.md §2 says otherwise.
//
// One table row per recipe drives everything about it: the parser reads the row to know which `precision.*` options
// the recipe takes (any other is refused, since it would be silently ignored), which fp8_format values it accepts
// and its defaults; recipe_configs builds the quantizers through the row.
#pragma once
#include <optional>
#include <string_view>
#include <vector>

#include "models/spec.h"
#include "ops/quant/quantizer.h"

namespace te {

struct RecipeConfigs {
  std::optional<QuantizerConfig> input, weight, grad;  // all empty for recipe none
  bool quantized() const { return input.has_value(); }
};

struct RecipeRow {
  Recipe recipe;
  std::string_view name;
  std::vector<std::string_view> options;  // the precision.* keys (besides `recipe`) this recipe reads
  std::vector<Fp8Format> fp8_formats;     // fp8_format values it takes, the default first (empty: none)
  bool pow2_scales_default = false;
  RecipeConfigs (*configs)(const PrecisionSpec& precision, uint64_t seed);
};

const std::vector<RecipeRow>& recipe_table();
const RecipeRow& recipe_row(Recipe recipe);
// "fp8_delayed | fp8_current": the recipes that read `option` (for error messages).
std::string recipes_reading(std::string_view option);

RecipeConfigs recipe_configs(const PrecisionSpec& precision, uint64_t seed);

}  // namespace te
