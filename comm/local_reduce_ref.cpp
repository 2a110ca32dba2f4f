// CPU reference of the rank-ordered reduction (also what the local communicator runs on host memory).
#include "comm/local_reduce.h"

namespace te::detail {
void local_reduce_cpu(void* out, const RankBuffers& in, int world, DType dtype, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    float acc = load_f32(in.ptr[0], dtype, i);
    for (int r = 1; r < world; ++r) acc = reduce_step(acc, load_f32(in.ptr[r], dtype, i), op);
    store_f32(out, dtype, i, acc);
  }
}
}  // namespace te::detail
