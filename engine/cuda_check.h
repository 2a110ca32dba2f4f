// Checked wrappers for CUDA, cuBLASLt and NCCL status codes (CUDA builds only). Each throws te::Error naming the
// failing call, the status string, file:line and the device.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "engine/error.h"

namespace te::detail {
[[noreturn]] void throw_cuda(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t st, const char* call, const char* file, int line);
[[noreturn]] void throw_nccl(int st, const char* call, const char* file, int line);
}  // namespace te::detail

#define TE_CUDA_CHECK(call)                                                              \
  do {                                                                                   \
    cudaError_t te_err_ = (call);                                                        \
    if (te_err_ != cudaSuccess) ::te::detail::throw_cuda(te_err_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: catches bad launch configurations at the launch site.
#define TE_CUDA_CHECK_LAUNCH() TE_CUDA_CHECK(cudaGetLastError())
#define TE_CUBLAS_CHECK(call)                                                                         \
  do {                                                                                                \
    cublasStatus_t te_st_ = (call);                                                                   \
    if (te_st_ != CUBLAS_STATUS_SUCCESS) ::te::detail::throw_cublas(te_st_, #call, __FILE__, __LINE__); \
  } while (0)
#define TE_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    int te_st_ = static_cast<int>(call);                                                      \
    if (te_st_ != 0) ::te::detail::throw_nccl(te_st_, #call, __FILE__, __LINE__);             \
  } while (0)
