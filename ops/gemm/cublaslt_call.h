// The cuBLASLt side of gemm() on CUDA builds, shared by its files (not a public header): the context's state, one
// cuBLASLt call in the form every role is reduced to, and the helpers the fp8, emulated and high-precision paths
// build on. Every role becomes one column-major call
//   D[m = Q, n = P] = op(A) · op(B),  A = "rhs" [Q, D], B = "lhs" [P, D]  (row-major out [P, Q] = lhs · rhsᵀ)
// where lhs/rhs are the role's operands in output orientation (role_views; gemm_fp8.cpp's tn_operand).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <vector>

#include "engine/int_math.h"
#include "ops/gemm/gemm_internal.h"

namespace te {
namespace detail {
struct LtPlan;  // a cached cuBLASLt descriptor set and algorithm (gemm_cublaslt.cpp)
}  // namespace detail

struct GemmContext::Impl {
  Device device;
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;           // [workspace_bytes] u8, persistent (also the streaming kernel's split-K partials)
  Tensor streaming_counters;  // [4096] i32, zero between launches (gemm_streaming.h)
  int sm_count = 0;
  int sm_major = 0;  // compute capability (the warpgroup kernel is built for sm_90a only)
  std::map<std::vector<int64_t>, std::unique_ptr<detail::LtPlan>> plans;
  ~Impl();
};

namespace detail {

inline cudaStream_t as_cuda(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

cudaDataType_t cuda_type(DType t);
// The largest power of two up to 256 that divides the address.
int ptr_alignment(const void* p);

// Everything that decides the cuBLASLt descriptors and algorithm (the plan-cache key).
struct LtConfig {
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t a_type = CUDA_R_16BF, b_type = CUDA_R_16BF, d_type = CUDA_R_16BF;
  cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int32_t a_scale_mode = -1, b_scale_mode = -1;  // -1: no scale pointers (high precision)
  bool fast_accum = false;
  bool bias_epilogue = false;
  cudaDataType_t bias_type = CUDA_R_16BF;
  bool device_alpha = false;
  int align_a = 256, align_b = 256, align_d = 256;
  GemmRole role = GemmRole::fprop;

  std::vector<int64_t> key() const {
    return {m,       n,       k,       a_type,       b_type,       d_type,     transa,        transb,    lda,
            ldb,     ldd,     compute, a_scale_mode, b_scale_mode, fast_accum, bias_epilogue, bias_type, device_alpha,
            align_a, align_b, align_d, int64_t(role)};
  }
};

// The inputs of one cuBLASLt call, already in A = rhs [Q, D], B = lhs [P, D] form.
struct LtCall {
  LtConfig cfg;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const float* alpha_beta_dev = nullptr;  // device [alpha, beta] when cfg.device_alpha
  int64_t P = 0, Q = 0;                   // true output dims (row-major out [P, Q])
  int64_t Pp = 0, Qp = 0;                 // dims of the call (padded)
  bool out_align16 = false;               // fp8: D must be 16-byte aligned with a 16-byte ld
};

// Runs the call into `out` (any strides) with bias/accumulate/alpha from opts.
void execute(GemmContext& ctx, LtCall& call, Tensor& out, const GemmOptions& opts, const Stream& stream);

// lhs [P, D], rhs [Q, D] in output orientation, any strides.
void run_hp(GemmContext& ctx, GemmRole role, const Tensor& lhs_in, const Tensor& rhs_in, Tensor& out,
            const GemmOptions& opts, const float* alpha_beta_dev, const Stream& stream);

// Role → output-orientation views of two [rows, cols] tensors (a = x/dy, b = W/x).
void role_views(GemmRole role, const Tensor& a2, const Tensor& b2, Tensor& lhs, Tensor& rhs);

// The fp8 path (gemm_fp8.cpp): per-tensor or 1x128/128x128 block-scaled operands on cuBLASLt, or on the
// weight-streaming / warpgroup kernels. Returns whether the kernel added opts.residual.
bool run_fp8(GemmContext& ctx, const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out,
             const GemmOptions& opts, const Stream& stream);
// The emulated path (gemm_emulated.cpp): MXFP8, NVFP4 and mixed formats, dequantized exactly to a high-precision GEMM.
void run_emulated(GemmContext& ctx, const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out,
                  const GemmOptions& opts, const Stream& stream);

}  // namespace detail
}  // namespace te
