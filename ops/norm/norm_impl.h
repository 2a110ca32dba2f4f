// Private: CPU reference and CUDA launchers behind ops/norm/norm.h. Buffers are contiguous rows [M, H];
// mean is nullptr for RMSNorm; beta nullptr means 0; dgamma/dbeta nullptr skip that output.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/stream.h"
#include "ops/norm/norm.h"

namespace te {

struct NormFwdArgs {
  NormKind kind;
  const void* x;
  DType tx;
  const void* gamma;
  const void* beta;
  DType tp;
  void* out;
  DType tout;
  float* mean;
  float* rstd;
  int64_t rows, cols;
  float eps;
};

struct NormBwdArgs {
  NormKind kind;
  const void* dy;  // same dtype as x
  const void* x;
  DType tx;
  const float* mean;
  const float* rstd;
  const void* gamma;
  DType tp;
  void* dx;
  DType tdx;
  void* dgamma;
  void* dbeta;
  DType tdg;  // dtype of dgamma and dbeta
  int64_t rows, cols;
};

namespace cpu {
void norm_forward(const NormFwdArgs& a);
void norm_backward(const NormBwdArgs& a);
}  // namespace cpu
namespace cuda {
void norm_forward(const NormFwdArgs& a, const Stream& stream);
void norm_backward(const NormBwdArgs& a, const Stream& stream);
}  // namespace cuda

}  // namespace te
