// Where an fp8 GEMM operand's fp32 scales live (docs/NUMERICS.md §3), as the CUDA kernels index them for a
// [rows, depth] K-contiguous copy.
#pragma once
#include <cstdint>

namespace te::cuda {

enum class Fp8ScaleLayout : uint8_t {
  per_tensor,  // scale[0]
  vec128,      // 1x128 blocks along depth: scale[kb * ld + row]
  blk128,      // 128x128 tiles: scale[(row / 128) * ld + kb]
};

}  // namespace te::cuda
