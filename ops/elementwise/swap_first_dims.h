// swap_first_dims: out[b][a][…] = in[a][b][…] — the copy that turns W rank blocks gathered one after another
// ([W, R, C] bytes) into the rank-interleaved order of a tensor whose M axis runs along its columns ([R, W·C]).
// Pure data movement: any dtype, bit-exact on CPU and CUDA.
#pragma once
#include "engine/tensor.h"

namespace te {

// in [A, B, …] and out [B, A, …], same dtype and device. Dims 0 and 1 may have any strides (so a narrowed view
// can drop per-rank padding and the destination can be a column window of a wider buffer); the trailing dims
// must be contiguous (one row of bytes; for fp4 an even number of elements starting on a byte). `out` is
// written through its view.
void swap_first_dims(const Tensor& in, const Tensor& out, const Stream& stream = Stream());

namespace detail {
// One row copy problem in bytes: A x B rows of `row_bytes`, with byte pitches for a and b on each side.
struct SwapFirstDimsArgs {
  const uint8_t* in;
  uint8_t* out;
  int64_t A, B, row_bytes;
  int64_t in_pitch_a, in_pitch_b;    // byte distance between in[a] and in[a+1] / in[a][b] and in[a][b+1]
  int64_t out_pitch_b, out_pitch_a;  // out[b] / out[b][a]
};
void swap_first_dims_cpu(const SwapFirstDimsArgs& args);
void swap_first_dims_cuda(const SwapFirstDimsArgs& args, const Stream& stream);
}  // namespace detail

// The same copy described directly in bytes (pointers on `device`): for destinations that no Tensor view can
// express, such as a column window [R, W·C] inside a padded [R, ld] scale buffer.
void swap_first_dims_bytes(const detail::SwapFirstDimsArgs& args, Device device, const Stream& stream = Stream());

}  // namespace te
