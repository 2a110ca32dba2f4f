// What the CUDA fp8 GEMM kernels read: out [P, Q] = alpha · lhs [P, D] · rhs [Q, D]ᵀ [+ bias] [+ out], both operands
// K-contiguous, with their fp32 scales in the layouts of docs/NUMERICS.md §3.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/element.h"

namespace te::cuda {

// Where an operand's scales live, as the kernels index them for a [rows, depth] copy.
enum class Fp8ScaleLayout : uint8_t {
  per_tensor,  // scale[0]
  vec128,      // 1x128 blocks along depth: scale[kb * ld + row]
  blk128,      // 128x128 tiles: scale[(row / 128) * ld + kb]
};

struct Fp8GemmArgs {
  const void* lhs = nullptr;  // [P, D] fp8, row stride D, 16-byte aligned
  const void* rhs = nullptr;  // [Q, D] fp8, row stride D, 16-byte aligned
  DType lhs_dtype = DType::fp8_e4m3, rhs_dtype = DType::fp8_e4m3;
  const float* lhs_scale = nullptr;
  const float* rhs_scale = nullptr;
  Fp8ScaleLayout lhs_kind = Fp8ScaleLayout::per_tensor, rhs_kind = Fp8ScaleLayout::per_tensor;
  int64_t lhs_scale_ld = 0, rhs_scale_ld = 0;
  int64_t P = 0, Q = 0, D = 0;
  void* out = nullptr;  // [P, Q] contiguous, out_dtype f32 | bf16 | f16
  DType out_dtype = DType::bf16;
  const void* bias = nullptr;  // [Q] contiguous or null
  DType bias_dtype = DType::bf16;
  float alpha = 1.f;
  bool accumulate = false;
  int sm_count = 132;
};

// What keeps every fp8 kernel from running g, whatever its own limits (empty when nothing does): the K blocks they
// step through, fp8 operands at 16-byte aligned addresses, and the output dtypes they store.
inline const char* fp8_args_unsupported(const Fp8GemmArgs& g) {
  const auto fp8 = [](DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; };
  if (g.D % 128 != 0) return "the reduced dimension is not a multiple of 128";
  if (!fp8(g.lhs_dtype) || !fp8(g.rhs_dtype)) return "operands are not fp8";
  if (reinterpret_cast<uintptr_t>(g.lhs) % 16 || reinterpret_cast<uintptr_t>(g.rhs) % 16)
    return "operands not 16-byte aligned";
  if (!is_high_precision(g.out_dtype)) return "output dtype is not f32/bf16/f16";
  return "";
}

}  // namespace te::cuda
