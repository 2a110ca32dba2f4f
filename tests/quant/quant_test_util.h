// Helpers shared by the quant tests: raw bytes of a tensor, seeded inputs with injected special values.
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/element.h"
#include "engine/philox.h"
#include "engine/tensor.h"
#include "ops/quant/quantizer.h"

namespace te::qtest {

inline std::vector<uint8_t> bytes(const Tensor& t) {
  if (!t.defined()) return {};
  Tensor h = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
  std::vector<uint8_t> b(static_cast<size_t>(h.nbytes()));
  if (!b.empty()) std::memcpy(b.data(), h.data_ptr(), b.size());
  return b;
}

// Normal values with per-row magnitudes spread over several binades; with `specials`, a sprinkling of ±0,
// subnormals, ±Inf, NaN, values above fp8 max, and one all-zero run of 128 elements.
inline std::vector<float> make_values(int64_t n, uint64_t seed, bool specials) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = normal_at(seed, i) * std::ldexp(1.f, static_cast<int>(i / 37 % 9) - 4);
  if (specials && n >= 64) {
    const float inf = std::numeric_limits<float>::infinity();
    const float sp[] = {0.f, -0.f, 1e-40f, -3e-39f, 1e-8f, inf, -inf, std::nanf(""), 1000.f, -70000.f, 5e5f};
    for (size_t j = 0; j < sizeof sp / sizeof sp[0]; ++j) v[(j * 7919 + 13) % n] = sp[j];
    for (int64_t i = n / 2; i < std::min(n, n / 2 + 128); ++i) v[i] = 0.f;
  }
  return v;
}

// A tensor of `shape` and `dtype` with the values above; `values_out` receives them as rounded to the dtype.
inline Tensor make_input(const Shape& shape, DType dtype, uint64_t seed, bool specials,
                         std::vector<float>* values_out = nullptr) {
  std::vector<float> v = make_values(shape_numel(shape), seed, specials);
  Tensor t = Tensor::from_f32(v, shape, dtype);
  if (values_out) *values_out = t.to_f32_vector();
  return t;
}

struct FormatCase {
  const char* name;
  QuantizerConfig cfg;
};
inline QuantizerConfig cfg_of(QuantFormat f, DType dt = DType::fp8_e4m3, bool pow2 = false) {
  QuantizerConfig c;
  c.format = f;
  c.data_dtype = dt;
  c.pow2_scales = pow2;
  return c;
}
// Every format with the options a recipe uses (and the E5M2 / non-pow2 variants).
inline std::vector<FormatCase> format_cases() {
  std::vector<FormatCase> v = {
      {"pt_e4m3", cfg_of(QuantFormat::fp8_per_tensor)},
      {"pt_e5m2", cfg_of(QuantFormat::fp8_per_tensor, DType::fp8_e5m2)},
      {"b1d_pow2", cfg_of(QuantFormat::fp8_block_1d, DType::fp8_e4m3, true)},
      {"b1d_e5m2", cfg_of(QuantFormat::fp8_block_1d, DType::fp8_e5m2, false)},
      {"b2d_pow2", cfg_of(QuantFormat::fp8_block_2d, DType::fp8_e4m3, true)},
      {"mx_e4m3", cfg_of(QuantFormat::mxfp8)},
      {"mx_e5m2", cfg_of(QuantFormat::mxfp8, DType::fp8_e5m2)},
      {"nv1d", cfg_of(QuantFormat::nvfp4_1d)},
      {"nv2d", cfg_of(QuantFormat::nvfp4_2d)},
  };
  FormatCase rht{"nv1d_rht_sr", cfg_of(QuantFormat::nvfp4_1d)};
  rht.cfg.random_hadamard = true;
  rht.cfg.stochastic_rounding = true;
  rht.cfg.seed = 1234;
  v.push_back(rht);
  FormatCase rht_rn{"nv1d_rht", cfg_of(QuantFormat::nvfp4_1d)};
  rht_rn.cfg.random_hadamard = true;
  v.push_back(rht_rn);
  return v;
}

}  // namespace te::qtest
