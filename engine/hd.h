// TE_HD marks code shared verbatim by host and device (conversions, block math, RNG): one definition, so the
// CPU reference and the CUDA kernels cannot drift apart.
#pragma once
#if defined(__CUDACC__)
#define TE_HD __host__ __device__ __forceinline__
#else
#define TE_HD inline
#endif
// Unrolls the next loop in device code, so small arrays it indexes stay in registers (host compilers ignore it).
#if defined(__CUDA_ARCH__)
#define TE_UNROLL _Pragma("unroll")
#else
#define TE_UNROLL
#endif
