// Helpers for the ops tests: the tolerances (docs/NUMERICS.md §7, named once), rel-L2, seeded inputs in any
// layout, and device selection.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "engine/error.h"
#include "engine/tensor.h"

namespace te::test {

// NUMERICS.md §7: against a float64 reference, f32 ops rel-L2 <= 1e-5, bf16 ops <= 1e-2.
constexpr double kTolF32 = 1e-5;
constexpr double kTolBF16 = 1e-2;
// f16 is not named in §7; its rounding step is 8x finer than bf16's.
constexpr double kTolF16 = 2e-3;
// Finite differences in f64 (h = 1e-6, central) against a backward computed in f32.
constexpr double kTolFiniteDiff = 1e-4;
constexpr double kFiniteDiffStep = 1e-6;

inline double tol_for(DType t) {
  return t == DType::f32 ? kTolF32 : (t == DType::bf16 ? kTolBF16 : kTolF16);
}
// The coarsest of several dtypes.
inline double tol_for(std::initializer_list<DType> ts) {
  double t = 0;
  for (DType d : ts) t = std::max(t, tol_for(d));
  return t;
}

inline double rel_l2(const std::vector<double>& ref, const std::vector<float>& got) {
  EXPECT_EQ(ref.size(), got.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}
inline double rel_l2(const std::vector<double>& ref, const std::vector<double>& got) {
  std::vector<float> g(got.begin(), got.end());
  return rel_l2(ref, g);
}

inline std::vector<double> to_f64(const Tensor& t) {
  auto v = t.to_f32_vector();
  return {v.begin(), v.end()};
}

// How a test input is laid out in memory.
enum class Layout { contiguous, col_slice, transposed };
inline const char* layout_name(Layout l) {
  return l == Layout::contiguous ? "contig" : (l == Layout::col_slice ? "slice" : "transposed");
}

// A [rows, cols] tensor of seeded normal values on `dev` in the given layout (the values do not depend on it).
inline Tensor random_2d(int64_t rows, int64_t cols, DType dt, uint64_t seed, Device dev, Layout layout,
                        float stddev = 1.f, float mean = 0.f) {
  Tensor base = Tensor::empty({rows, cols}, dt);
  base.fill_normal(seed, mean, stddev);
  Tensor out;
  switch (layout) {
    case Layout::contiguous: out = base; break;
    case Layout::col_slice: {  // rows padded by 3 elements: a stride that breaks 16-byte alignment
      Tensor big = Tensor::zeros({rows, cols + 3}, dt);
      Tensor v = big.narrow(1, 0, cols);
      v.copy_from(base);
      out = v;
      break;
    }
    case Layout::transposed: {
      Tensor t = Tensor::empty({cols, rows}, dt);
      t.copy_from(base.transpose(0, 1));
      out = t.transpose(0, 1);
      break;
    }
  }
  if (dev.is_cpu()) return out;
  if (layout == Layout::contiguous) return out.to(dev);
  // Keep the strides on the device: move the whole backing storage, then view it the same way.
  if (layout == Layout::col_slice) {
    Tensor big = Tensor::empty({rows, cols + 3}, dt, dev);
    big.narrow(1, 0, cols).copy_from(out);
    return big.narrow(1, 0, cols);
  }
  Tensor t = Tensor::empty({cols, rows}, dt, dev);
  t.copy_from(out.transpose(0, 1));
  return t.transpose(0, 1);
}

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu());
  std::vector<uint8_t> b(static_cast<size_t>(c.nbytes()));
  std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

inline Device device_for(bool cuda) { return cuda ? Device::cuda(0) : Device::cpu(); }

}  // namespace te::test
