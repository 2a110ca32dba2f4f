#include "models/recipe.h"

namespace te {

RecipeConfigs recipe_configs(const PrecisionSpec& p, uint64_t seed) {
  RecipeConfigs r;
  const DType grad_fp8 = p.fp8_format == Fp8Format::hybrid ? DType::fp8_e5m2 : DType::fp8_e4m3;
  QuantizerConfig c;
  c.eps = static_cast<float>(p.amax_epsilon);
  c.pow2_scales = p.pow2_scales;
  switch (p.recipe) {
    case Recipe::none:
      return r;
    case Recipe::fp8_delayed:
    case Recipe::fp8_current: {
      c.format = QuantFormat::fp8_per_tensor;
      c.scaling = p.recipe == Recipe::fp8_delayed ? ScalingKind::delayed : ScalingKind::current;
      c.amax_history_len = p.amax_history_len;
      c.amax_algo = p.amax_algo;
      c.margin = p.margin;
      r.input = r.weight = r.grad = c;
      r.grad->data_dtype = grad_fp8;
      return r;
    }
    case Recipe::fp8_block: {
      // E4M3 everywhere (gradients too); activations and gradients 1x128, weights 128x128.
      c.format = QuantFormat::fp8_block_1d;
      r.input = r.grad = c;
      c.format = QuantFormat::fp8_block_2d;
      r.weight = c;
      return r;
    }
    case Recipe::mxfp8: {
      c.format = QuantFormat::mxfp8;
      c.pow2_scales = false;
      r.input = r.weight = r.grad = c;
      return r;
    }
    case Recipe::nvfp4: {
      c.format = QuantFormat::nvfp4_2d;  // weights: 16x16 tiles, no RHT, no SR
      c.data_dtype = DType::fp4_e2m1;
      c.pow2_scales = false;
      r.weight = c;
      c.format = QuantFormat::nvfp4_1d;  // activations: RHT on the column-wise copy
      c.random_hadamard = true;
      r.input = c;
      c.stochastic_rounding = true;      // gradients: RHT + stochastic rounding, seeded by the run
      c.seed = seed ^ 0x9E3779B97F4A7C15ull;
      r.grad = c;
      return r;
    }
  }
  return r;
}

}  // namespace te
