// Reduction of W same-shaped buffers (one per rank) into one, for the local communicator: f32 accumulation in
// rank order 0..W−1 and one rounding to the dtype, so CPU and CUDA give identical bits and runs are reproducible.
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "engine/element.h"

namespace te::detail {

constexpr int kMaxLocalRanks = 64;
struct RankBuffers {
  const void* ptr[kMaxLocalRanks];  // element 0 of each rank's slice
};

TE_HD float reduce_step(float acc, float x, ReduceOp op) {
  return op == ReduceOp::sum ? acc + x : (x > acc ? x : acc);
}

// out[i] = reduce_{r = 0..W−1} in_r[i] for i < n; out may not alias any input.
void local_reduce_cpu(void* out, const RankBuffers& in, int world, DType dtype, int64_t n, ReduceOp op);
void local_reduce_cuda(void* out, const RankBuffers& in, int world, DType dtype, int64_t n, ReduceOp op,
                       const Stream& stream);

}  // namespace te::detail
