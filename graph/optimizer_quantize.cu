// The fused optimizer step → quantize (optimizer_quantize.h): the quantize tile kernel (ops/quant/quant_tile.cuh)
// with a tile source that runs AdamW's element update (optimizer_math.h, as the multi-tensor kernel does) on
// the tile's masters and parks them rounded to the model dtype; from there on the kernel is the one quantize runs.
#include "engine/cuda_check.h"
#include "graph/optimizer_math.h"
#include "graph/optimizer_quantize.h"
#include "ops/quant/quant_tile.cuh"

namespace te {
namespace {

using namespace quant_fast;

template <DType kValue>
struct OptimizerTile {
  float* p;
  float* g;   // written: zeroes on a skipped step
  float* s1;  // first moment
  float* s2;  // second moment
  const OptimizerScalars* scalars;
  const int32_t* skip;
  AdamWScalars s{};  // prepare() reads the step's scalars and flag once per thread
  bool skipped = false;

  __device__ __forceinline__ OptimizerTile prepare() const {
    OptimizerTile t = *this;
    t.skipped = skip != nullptr && *skip != 0;
    if (!t.skipped) t.s = scalars->adamw;
    return t;
  }

  static __device__ __forceinline__ uint32_t round_pair(float a, float b) {
    const auto bits = [](float v) -> uint32_t { return kValue == DType::bf16 ? bf16_from_f32(v) : f16_from_f32(v); };
    return bits(a) | (bits(b) << 16);
  }

  // Eight consecutive elements of one row: updated in place (or, skipped, their gradient zeroed), returned rounded.
  __device__ __forceinline__ uint4 load(const QuantInput& x, int64_t m0, int64_t k0, int i, int tid) const {
    int rr, cc;
    tile_chunk(i, tid, rr, cc);
    const int64_t m = m0 + rr, k = k0 + cc;
    if (m >= x.M || k >= x.K) return make_uint4(0, 0, 0, 0);
    const int64_t e = m * x.K + k;  // K % 8 == 0: the eight are inside the row, 32-byte aligned
    float4* pv = reinterpret_cast<float4*>(p + e);
    float4* gv = reinterpret_cast<float4*>(g + e);
    float4 w[2] = {pv[0], pv[1]};
    if (skipped) {
      gv[0] = gv[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
      float4* mv = reinterpret_cast<float4*>(s1 + e);
      float4* vv = reinterpret_cast<float4*>(s2 + e);
      const float4 gr[2] = {gv[0], gv[1]};
      float4 a[2] = {mv[0], mv[1]}, b[2] = {vv[0], vv[1]};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        detail::adamw_update(w[h].x, gr[h].x, a[h].x, b[h].x, s);
        detail::adamw_update(w[h].y, gr[h].y, a[h].y, b[h].y, s);
        detail::adamw_update(w[h].z, gr[h].z, a[h].z, b[h].z, s);
        detail::adamw_update(w[h].w, gr[h].w, a[h].w, b[h].w, s);
      }
      pv[0] = w[0], pv[1] = w[1];
      mv[0] = a[0], mv[1] = a[1];
      vv[0] = b[0], vv[1] = b[1];
    }
    return make_uint4(round_pair(w[0].x, w[0].y), round_pair(w[0].z, w[0].w), round_pair(w[1].x, w[1].y),
                      round_pair(w[1].z, w[1].w));
  }
  __device__ __forceinline__ uint4 finish(uint4 raw) const { return raw; }
};

}  // namespace

namespace detail {
template <DType kValue>
void launch_optimizer_quantize(const ParamSlot& slot, const OptimizerStep& step, const Quantizer::CastTarget& t,
                               cudaStream_t st) {
  OptimizerTile<kValue> source;
  source.p = slot.master.data<float>();
  source.g = slot.grad.data<float>();
  source.s1 = slot.state1.data<float>();
  source.s2 = slot.state2.data<float>();
  source.scalars = step.scalars;
  source.skip = step.skip;
  const dim3 grid(static_cast<unsigned>(ceil_div(t.in.M, kTile)),
                  static_cast<unsigned>(ceil_div(t.in.K, kTile)));  // M tiles fastest, as quantize launches
  tile_kernel<QuantFormat::fp8_block_2d, kValue == DType::bf16>
      <<<grid, kTileThreads, 0, st>>>(source, t.in, t.params, t.out);
  TE_CUDA_CHECK_LAUNCH();
}

void optimizer_quantize_cuda(const ParamSlot& slot, const OptimizerStep& step, const Quantizer::CastTarget& t,
                             const Stream& stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  if (t.in.dtype == DType::bf16)
    launch_optimizer_quantize<DType::bf16>(slot, step, t, st);
  else
    launch_optimizer_quantize<DType::f16>(slot, step, t, st);
}
}  // namespace detail

}  // namespace te
