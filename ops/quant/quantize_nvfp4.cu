// Row-wise NVFP4 1D fast path: a lane owns one 1x16 block (two 16-byte loads of 16-bit input), so the block amax,
// its E4M3 scale and the 16 codes need no shuffles and the codes leave as one 8-byte store. The per-block and
// per-element math is quant_block.h's (block_scale, nvfp4_element's steps), so the bytes equal the CPU reference's;
// stochastic rounding draws one Philox block per 4 elements, the same words sr_uniform gives each element. The
// generic tile kernel in quantize.cu writes the column-wise copy (with its Hadamard transform) where one is asked.
#include <cuda_runtime.h>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "ops/elementwise/cuda_common.cuh"
#include "ops/quant/quant_fast_common.cuh"
#include "ops/quant/quantize_nvfp4.h"

namespace te {
namespace {

using namespace quant_fast;

constexpr int kThreads = 256, kBlock = 16;

template <DType kIn>
__global__ void __launch_bounds__(kThreads) nvfp4_rowwise_kernel(QuantInput x, QuantParams p, QuantOutputs out) {
  const int64_t per_row = x.K / kBlock, total = x.M * per_row;
  const float s_enc = nvfp4_global_encode_scale(*out.row_amax);
  const float s_dec_image = image_s_dec(out.image, s_enc);
  const char* base = static_cast<const char*>(x.data);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / per_row, k = (i % per_row) * kBlock;
    float v[kBlock];
    unpack8(*reinterpret_cast<const uint4*>(base + (m * x.stride_m + k) * 2), kIn, v);
    unpack8(*reinterpret_cast<const uint4*>(base + (m * x.stride_m + k + 8) * 2), kIn, v + 8);
    float a = 0.f;
#pragma unroll
    for (int j = 0; j < kBlock; ++j) a = amax_fold(a, v[j]);
    const BlockScale bs = block_scale(p, kIn, a, s_enc);
    store_block_scale(p, out.row.scale_inv, scale_offset(out.row.layout, m, k / kBlock), bs);
    const int64_t index = m * x.K + k;  // the SR counter of the first element (a multiple of 4)
    uint8_t q[kBlock];
#pragma unroll
    for (int j = 0; j < kBlock; j += 4) {
      Philox4 r{};
      if (p.sr) r = philox4x32(p.seed, (index + j) >> 2, 2u);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float y = v[j + t] * bs.factor;
        q[j + t] = p.sr ? e2m1_from_f32_sr(y, uniform_from_bits(r.v[t])) : e2m1_from_f32(y);
      }
    }
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < kBlock; ++j) w[j / 8] |= static_cast<uint32_t>(q[j]) << (4 * (j % 8));
    *reinterpret_cast<uint2*>(out.row.data + data_offset(out.row.layout, m, k) / 2) = make_uint2(w[0], w[1]);
    if (out.row_image) {
      const float decoded = decoded_block_scale(p, bs);
      float img[kBlock];
#pragma unroll
      for (int j = 0; j < kBlock; ++j) img[j] = image_value(p, q[j], decoded, s_dec_image);
      if (out.image.dtype == DType::bf16) {
        uint32_t h[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) h[j] = bf16x2_bits(img[2 * j], img[2 * j + 1]);
        uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(out.row_image) + index);
        dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
        dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
      } else {
#pragma unroll
        for (int j = 0; j < kBlock; ++j) store_f32(out.row_image, out.image.dtype, index + j, img[j]);
      }
    }
  }
}

}  // namespace

bool quantize_nvfp4_rowwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                 const Stream& stream) {
  const bool eligible = p.format == QuantFormat::nvfp4_1d && p.rowwise && p.pre_act == QuantPreAct::none &&
                        (x.dtype == DType::bf16 || x.dtype == DType::f16) && x.stride_k == 1 && x.K % kBlock == 0 &&
                        x.stride_m % 8 == 0 && (reinterpret_cast<uintptr_t>(x.data) & 15) == 0 && x.M > 0 &&
                        (reinterpret_cast<uintptr_t>(out.row.data) & 7) == 0 &&
                        (reinterpret_cast<uintptr_t>(out.row_image) & 15) == 0 && out.row_amax != nullptr;
  if (!eligible) return false;
  const int64_t lanes = x.M * (x.K / kBlock);
  const unsigned blocks = static_cast<unsigned>(grid_stride_blocks(lanes, kThreads, 32));
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  if (x.dtype == DType::bf16) nvfp4_rowwise_kernel<DType::bf16><<<blocks, kThreads, 0, st>>>(x, p, out);
  else nvfp4_rowwise_kernel<DType::f16><<<blocks, kThreads, 0, st>>>(x, p, out);
  TE_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace te
