// CUDA launchers behind Tensor (CUDA builds only). Shapes/strides in elements, at most kMaxDims dims.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/stream.h"

namespace te::cuda {
constexpr int kMaxDims = 8;
struct StridedLayout {
  int dims;
  int64_t shape[kMaxDims];
  int64_t stride[kMaxDims];
};
// dst[i] = src[i] for every logical index, element size `elem_bytes` (1, 2, 4 or 8).
void strided_copy(void* dst, const StridedLayout& dst_layout, const void* src, const StridedLayout& src_layout,
                  int elem_bytes, int64_t numel, const Stream& stream);
// Contiguous fills: `value` converted to dtype, or seeded normal/uniform values (see engine/philox.h).
void fill(void* dst, DType dtype, int64_t numel, float value, const Stream& stream);
void fill_random(void* dst, DType dtype, int64_t numel, uint64_t seed, bool normal, float a, float b,
                 const Stream& stream);
}  // namespace te::cuda
