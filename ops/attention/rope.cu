// CUDA rotary embedding (ops/attention/rope.h): one thread per rotated pair or value element of a token's QKV row,
// so out may be qkv itself (a pair is read before it is written, by the thread that writes it).
#include <algorithm>
#include <cmath>

#include "ops/attention/attention_impl.h"
#include "ops/elementwise/cuda_common.cuh"

namespace te::cuda {
namespace {

template <class T>
__global__ void rope_kernel(int64_t tokens, int64_t seq, int64_t head_dim, int64_t group, int64_t qkv_cols,
                            int64_t values_from, float base, float sign, const T* qkv, T* out) {
  const int64_t n = tokens * qkv_cols, half = head_dim / 2, span = (group + 2) * head_dim;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tok = e / qkv_cols, c = e % qkv_cols, i = c % head_dim;
    // Interleaved rows (values_from < 0): a group's value is the last of its (group + 2) heads; kinds apart: the
    // values are the columns from values_from on.
    const bool value = values_from < 0 ? (c % span) / head_dim == group + 1 : c >= values_from;
    if (value) {  // passes unchanged
      out[e] = qkv[e];
    } else if (i < half) {
      // The CPU reference's f32 steps: inverse frequency, angle, then cos/sin of it.
      const float inv_freq = 1.0f / powf(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
      const float angle = static_cast<float>(tok % seq) * inv_freq;
      const float cs = cosf(angle), sn = sign * sinf(angle);
      const float a = to_f(qkv[e]), b = to_f(qkv[e + half]);
      out[e] = from_f<T>(a * cs - b * sn);
      out[e + half] = from_f<T>(b * cs + a * sn);
    }
  }
}

}  // namespace

void rope_apply(const AttentionLayout& l, float base, bool inverse, int64_t tokens, const void* qkv, DType t,
                void* out, const Stream& stream) {
  const int64_t n = tokens * l.qkv_cols();
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t(1) << 16));
  const float sign = inverse ? -1.f : 1.f;
  dispatch_hp(t, "rope_apply", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<grid, 256, 0, raw_stream(stream)>>>(tokens, l.seq, l.head_dim, l.group(), l.qkv_cols(),
                                                         l.kinds_apart ? l.v_col(0) : -1, base, sign,
                                                         static_cast<const T*>(qkv), static_cast<T*>(out));
  });
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
