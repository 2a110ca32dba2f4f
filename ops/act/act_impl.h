// Private: CPU reference and CUDA launchers behind ops/act/act.h. Contiguous buffers; rows M, output columns F
// (the input has 2F columns for swiglu).
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/stream.h"
#include "ops/act/act.h"

namespace te {
namespace cpu {
void act_forward(ActKind k, const void* x, DType tx, void* out, DType tout, int64_t rows, int64_t cols);
void act_backward(ActKind k, const void* dy, const void* x, DType tx, void* dx, DType tdx, int64_t rows,
                  int64_t cols);
void bias_grad(const void* dy, DType tdy, void* dbias, DType tdb, int64_t rows, int64_t cols);
}  // namespace cpu
namespace cuda {
void act_forward(ActKind k, const void* x, DType tx, void* out, DType tout, int64_t rows, int64_t cols,
                 const Stream& stream);
void act_backward(ActKind k, const void* dy, const void* x, DType tx, void* dx, DType tdx, int64_t rows,
                  int64_t cols, const Stream& stream);
void bias_grad(const void* dy, DType tdy, void* dbias, DType tdb, int64_t rows, int64_t cols, const Stream& stream);
}  // namespace cuda
}  // namespace te
