// TE_HD marks code shared verbatim by host and device (conversions, block math, RNG): one definition, so the
// CPU reference and the CUDA kernels cannot drift apart.
#pragma once
#if defined(__CUDACC__)
#define TE_HD __host__ __device__ __forceinline__
#else
#define TE_HD inline
#endif
