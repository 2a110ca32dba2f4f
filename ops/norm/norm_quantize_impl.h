// Private: the fused CUDA LayerNorm/RMSNorm + FP8 block-1D row-wise quantize launcher.
#pragma once
#include <cstdint>

#include "ops/norm/norm_impl.h"

namespace te::cuda {

struct NormQuantArgs {
  NormFwdArgs norm;   // out/tout: tout is the rounding dtype; out is unused (nullptr)
  uint8_t* q;         // [M, H] fp8 row-wise data
  float* scale_inv;   // [ceil(H/128), round4(M)]; padding rows M..round4(M) are written as 0
  int64_t scale_ld;   // round4(M)
  bool e5m2;          // data dtype fp8_e5m2 (else e4m3)
  bool pow2;
  float qeps;
};
// True when the launcher supports these (vector path, row fits the register cache).
bool norm_quantize_fusable(const NormFwdArgs& a);
void norm_quantize_forward(const NormQuantArgs& a, const Stream& stream);

}  // namespace te::cuda
