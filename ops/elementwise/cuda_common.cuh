// Device helpers shared by the norm, activation and elementwise kernels (CUDA builds only): typed element
// load/store through engine/float_convert.h (so CPU and CUDA round identically), 16-byte vectors, block
// reductions, and a dtype → C++ type dispatcher.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda_check.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/float_convert.h"
#include "engine/stream.h"

namespace te::cuda {

inline cudaStream_t raw_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

// Storage tags: the bits live in `bits`; to_f/from_f are the library's exact conversions.
struct BF16 { uint16_t bits; };
struct F16 { uint16_t bits; };

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(BF16 v) { return bf16_to_f32(v.bits); }
__device__ __forceinline__ float to_f(F16 v) { return f16_to_f32(v.bits); }
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ BF16 from_f<BF16>(float v) { return BF16{bf16_from_f32(v)}; }
template <> __device__ __forceinline__ F16 from_f<F16>(float v) { return F16{f16_from_f32(v)}; }

// N elements moved as one aligned access (N * sizeof(T) of 16 bytes → one 128-bit load/store).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};
template <class T, int N>
__device__ __forceinline__ void load_vec(const T* p, int64_t i, float (&out)[N]) {
  const Vec<T, N> x = *reinterpret_cast<const Vec<T, N>*>(p + i);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = to_f(x.v[k]);
}
// (a, b) rounded to the 16-bit type T by the hardware pair conversion cvt.rn (one instruction per pair instead of
// the portable rounding's several per element): the library's bits for every non-NaN value, and for the canonical
// NaN 0x7FFFFFFF that f32 arithmetic on the GPU produces (0x7FFF for both types). Returns the pair's bits, a low.
template <class T>
__device__ __forceinline__ uint32_t round_pair(float a, float b) {
  static_assert(std::is_same_v<T, BF16> || std::is_same_v<T, F16>);
  if constexpr (std::is_same_v<T, BF16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}
// The two values of a 16-bit pair (round_pair's bits) as floats, exactly.
template <class T>
__device__ __forceinline__ float2 unpack_pair(uint32_t bits) {
  static_assert(std::is_same_v<T, BF16> || std::is_same_v<T, F16>);
  if constexpr (std::is_same_v<T, BF16>) {
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&bits);
    return make_float2(__low2float(h), __high2float(h));
  } else {
    const __half2 h = *reinterpret_cast<const __half2*>(&bits);
    return make_float2(__low2float(h), __high2float(h));
  }
}

// Stores N floats as T. 16-bit pairs go through round_pair; a pair holding a NaN takes the portable path, so NaN
// payloads keep the library's bits too. kComputed: y was produced by f32 arithmetic on the GPU, whose NaN is always
// canonical: no per-pair NaN test (4 % of a LayerNorm micro-benchmark's time; within noise in the library's
// LayerNorm on the H200). Values merely loaded and stored (a cast) may carry any payload and must keep the test.
template <class T, int N, bool kComputed = false>
__device__ __forceinline__ void store_vec(T* p, int64_t i, const float (&y)[N]) {
  if constexpr ((std::is_same_v<T, BF16> || std::is_same_v<T, F16>) && N % 2 == 0) {
    Vec<uint32_t, N / 2> w;
#pragma unroll
    for (int k = 0; k < N; k += 2) {
      uint32_t bits = round_pair<T>(y[k], y[k + 1]);
      if (!kComputed && (y[k] != y[k] || y[k + 1] != y[k + 1]))
        bits = uint32_t(from_f<T>(y[k]).bits) | (uint32_t(from_f<T>(y[k + 1]).bits) << 16);
      w.v[k / 2] = bits;
    }
    *reinterpret_cast<Vec<uint32_t, N / 2>*>(p + i) = w;
  } else {
    Vec<T, N> x;
#pragma unroll
    for (int k = 0; k < N; ++k) x.v[k] = from_f<T>(y[k]);
    *reinterpret_cast<Vec<T, N>*>(p + i) = x;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Sum over the block, returned to every thread. `smem` holds 32 floats; blockDim.x a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? smem[lane] : 0.f;
  return warp_sum(t);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Calls f(T{}) with T the storage type of a high-precision dtype.
template <class F>
void dispatch_hp(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(BF16{}); return;
    case DType::f16: f(F16{}); return;
    default: TE_THROW(what << ": dtype " << dtype_name(t) << " is not supported", "use f32, bf16 or f16");
  }
}

}  // namespace te::cuda
