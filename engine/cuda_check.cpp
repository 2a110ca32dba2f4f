#include "engine/cuda_check.h"

#include <nccl.h>

#include "engine/device.h"

namespace te::detail {
void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  std::string hint;
  if (err == cudaErrorMemoryAllocation) hint = "free device memory or reduce tokens/batch";
  throw Error(std::string("CUDA error: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err), call, file, line,
              current_device_name(), hint);
}
namespace {
const char* cublas_status_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS status (unknown)";
  }
}
}  // namespace

void throw_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  throw Error(std::string("cuBLASLt error: ") + cublas_status_name(st), call, file, line, current_device_name(),
              st == CUBLAS_STATUS_NOT_SUPPORTED ? "this shape/dtype/layout combination is not supported by cuBLASLt"
                                                : "");
}
void throw_nccl(int st, const char* call, const char* file, int line) {
  throw Error(std::string("NCCL error: ") + ncclGetErrorString(static_cast<ncclResult_t>(st)), call, file, line,
              current_device_name(), "set NCCL_DEBUG=WARN for details");
}
}  // namespace te::detail
