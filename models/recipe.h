// A precision recipe (spec `precision:`) as the quantizer configurations of the three tensor roles of a linear
// layer: its input activation, its weight and the gradient of its output. It uses TransformerEngine's defaults
// except where docs/NUMERICS.md §2 says otherwise.
#pragma once
#include <optional>

#include "models/spec.h"
#include "ops/quant/quantizer.h"

namespace te {

struct RecipeConfigs {
  std::optional<QuantizerConfig> input, weight, grad;  // all empty for recipe none
  bool quantized() const { return input.has_value(); }
};

RecipeConfigs recipe_configs(const PrecisionSpec& precision, uint64_t seed);

}  // namespace te
