// cuBLASLt calls of gemm() on CUDA builds: the GEMM context (handle, workspace, plan cache), the plan of a call
// configuration (descriptors and the heuristic's first usable algorithm, built once), one call's execution with its
// padding, bias and accumulate, and the high-precision path. How every role becomes one call: cublaslt_call.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <vector>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/error.h"
#include "ops/gemm/cublaslt_call.h"
#include "ops/gemm/gemm_kernels.h"

namespace te {
namespace detail {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::fp8_e4m3: return CUDA_R_8F_E4M3;
    case DType::fp8_e5m2: return CUDA_R_8F_E5M2;
    default: break;
  }
  TE_THROW("GEMM: no cuBLASLt type for " << dtype_name(t), "use f32/bf16/f16 or fp8");
}

int ptr_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;  // false: cuBLASLt has no algorithm for this configuration
  ~LtPlan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

}  // namespace detail

namespace {

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& v) {
  TE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
}

}  // namespace

GemmContext::Impl::~Impl() {
  plans.clear();
  if (handle) cublasLtDestroy(handle);
}

GemmContext::GemmContext(Device device, int64_t workspace_bytes) : device_(device), workspace_bytes_(workspace_bytes) {}
GemmContext::~GemmContext() = default;
GemmContext::Impl& GemmContext::impl() {
  if (!impl_) {
    TE_CHECK_HINT(device_.is_cuda(), "GemmContext for " << device_.str() << " used for a CUDA GEMM",
                  "create the context with the operands' device: GemmContext(Device::cuda(i))");
    auto impl = std::make_unique<Impl>();
    impl->device = device_;
    set_current_device(device_);
    TE_CUBLAS_CHECK(cublasLtCreate(&impl->handle));
    impl->workspace = Tensor::empty({workspace_bytes_}, DType::u8, device_);
    impl->streaming_counters = Tensor::zeros({4096}, DType::i32, device_);
    Stream().synchronize();  // the counters are zero before any stream of this context uses them
    TE_CUDA_CHECK(cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, device_.index));
    TE_CUDA_CHECK(cudaDeviceGetAttribute(&impl->sm_major, cudaDevAttrComputeCapabilityMajor, device_.index));
    impl_ = std::move(impl);
  }
  return *impl_;
}

namespace detail {
namespace {

LtPlan* get_plan(GemmContext& ctx, const LtConfig& c, const void* a_scale, const void* b_scale) {
  GemmContext::Impl& impl = ctx.impl();
  auto it = impl.plans.find(c.key());
  if (it != impl.plans.end()) {
    ctx.mutable_stats().plan_cache_hits++;
    return it->second.get();
  }
  ctx.mutable_stats().plans_built++;
  auto plan = std::make_unique<LtPlan>();
  TE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, c.compute, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(c.transa));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(c.transb));
  if (c.a_scale_mode >= 0) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, c.a_scale_mode);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, c.b_scale_mode);
    // The heuristic rejects block-scaled problems without scale pointers: give it this call's (reset per call).
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
    // Fast accumulation only exists for per-tensor scaling; block-scaled kernels always promote.
    if (c.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
      set_desc(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(c.fast_accum ? 1 : 0));
  }
  if (c.bias_epilogue) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<int32_t>(CUBLASLT_EPILOGUE_BIAS));
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(c.bias_type));
  }
  if (c.device_alpha)
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, static_cast<int32_t>(CUBLASLT_POINTER_MODE_DEVICE));
  // Stored shapes (column-major): A is k×m when transposed, B is k×n when not.
  const bool ta = c.transa == CUBLAS_OP_T, tb = c.transb == CUBLAS_OP_T;
  TE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, c.a_type, ta ? c.k : c.m, ta ? c.m : c.k, c.lda));
  TE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, c.b_type, tb ? c.n : c.k, tb ? c.k : c.n, c.ldb));
  TE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, c.d_type, c.m, c.n, c.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  TE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = static_cast<uint64_t>(ctx.workspace_bytes());
  const uint32_t al_a = c.align_a, al_b = c.align_b, al_d = c.align_d;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulHeuristicResult_t results[4];
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(impl.handle, plan->desc, plan->a, plan->b, plan->d,
                                                           plan->d, pref, 4, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) {
      plan->algo = results[i].algo;
      plan->ok = true;
      break;
    }
  }
  LtPlan* p = plan.get();
  impl.plans.emplace(c.key(), std::move(plan));
  return p;
}

std::string config_str(const LtConfig& c) {
  return TE_STR_("m=" << c.m << " n=" << c.n << " k=" << c.k << " A=" << int(c.a_type) << " B=" << int(c.b_type)
                      << " D=" << int(c.d_type) << " scale modes " << c.a_scale_mode << "/" << c.b_scale_mode
                      << (c.bias_epilogue ? " +bias" : ""));
}

// A row-major [R, C] view as a cuBLASLt matrix: `row_major` means the C dim is contiguous (stored C×R col-major).
struct LtView {
  Tensor t;
  bool row_major = true;
  int64_t ld = 1;
};
LtView lt_view(const Tensor& x, const Stream& stream) {
  const int64_t R = x.size(0), C = x.size(1), s0 = x.stride(0), s1 = x.stride(1);
  if ((s1 == 1 || C == 1) && (R == 1 || s0 >= std::max<int64_t>(C, 1))) return {x, true, std::max<int64_t>(R == 1 ? C : s0, 1)};
  if ((s0 == 1 || R == 1) && (C == 1 || s1 >= std::max<int64_t>(R, 1))) return {x, false, std::max<int64_t>(C == 1 ? R : s1, 1)};
  return {x.contiguous(stream), true, std::max<int64_t>(C, 1)};
}

}  // namespace

// Runs the call into `out` (any strides) with bias/accumulate/alpha from opts.
void execute(GemmContext& ctx, LtCall& call, Tensor& out, const GemmOptions& opts, const Stream& stream) {
  const int esize = dtype_bits(out.dtype()) / 8;
  // The output as a row-major [P, Q] view with unit last stride, or a temporary.
  Tensor out2d;
  if (out.is_contiguous()) out2d = out.reshape({call.P, call.Q});
  else if (out.dim() == 2 && (out.stride(1) == 1 || call.Q == 1) && out.stride(0) >= call.Q) out2d = out;
  bool direct = out2d.defined() && call.Pp == call.P && call.Qp == call.Q;
  const int64_t out_ld = direct ? (call.P == 1 ? call.Q : out2d.stride(0)) : call.Qp;
  if (direct && call.out_align16)
    direct = (out_ld * esize) % 16 == 0 && ptr_alignment(out2d.data_ptr()) >= 16;
  // out as a contiguous-or-viewed [P, Q] tensor for reading (accumulate) and writing back.
  const auto out_pq = [&]() { return out2d.defined() ? out2d : out.contiguous(stream).reshape({call.P, call.Q}); };
  Tensor d;  // [Pp, Qp] (ld out_ld) the call writes
  if (direct) {
    d = out2d;
  } else {
    d = Tensor::zeros({call.Pp, call.Qp}, out.dtype(), out.device(), stream);
    if (opts.accumulate) d.narrow(0, 0, call.P).narrow(1, 0, call.Q).copy_from(out_pq(), stream);
  }
  const int64_t ldd = direct ? out_ld : call.Qp;

  LtConfig& c = call.cfg;
  c.d_type = cuda_type(out.dtype());
  c.ldd = ldd;
  c.align_a = ptr_alignment(call.a);
  c.align_b = ptr_alignment(call.b);
  c.align_d = ptr_alignment(d.data_ptr());
  Tensor bias;  // [Qp] when the epilogue adds it
  bool bias_kernel = false;
  if (opts.bias.defined()) {
    c.bias_epilogue = opts.bias.is_contiguous() && opts.bias.dtype() == out.dtype();
    c.bias_type = cuda_type(opts.bias.dtype());
    if (c.bias_epilogue) {
      bias = opts.bias.reshape({call.Q});
      if (call.Qp != call.Q || ptr_alignment(bias.data_ptr()) < 16) {
        bias = Tensor::zeros({call.Qp}, opts.bias.dtype(), out.device(), stream);
        bias.narrow(0, 0, call.Q).copy_from(opts.bias.reshape({call.Q}), stream);
      }
    }
  }
  LtPlan* plan = get_plan(ctx, c, call.a_scale, call.b_scale);
  if (!plan->ok && c.bias_epilogue) {
    c.bias_epilogue = false;  // cuBLASLt has no bias epilogue here: add it with a kernel after the GEMM
    plan = get_plan(ctx, c, call.a_scale, call.b_scale);
  }
  TE_CHECK_HINT(plan->ok, "GEMM " << gemm_role_name(c.role) << ": cuBLASLt has no algorithm for " << config_str(c),
                "check the dtype combination (fp8: E5M2×E5M2 and 2D×2D block scales are unsupported on Hopper)");
  if (opts.bias.defined() && !c.bias_epilogue) bias_kernel = true;

  if (c.a_scale_mode >= 0) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, call.a_scale);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, call.b_scale);
  }
  if (c.bias_epilogue) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data_ptr()));
  const float alpha_beta[2] = {opts.alpha, opts.accumulate ? 1.f : 0.f};
  const void* alpha = c.device_alpha ? static_cast<const void*>(call.alpha_beta_dev) : &alpha_beta[0];
  const void* beta = c.device_alpha ? static_cast<const void*>(call.alpha_beta_dev + 1) : &alpha_beta[1];
  GemmContext::Impl& impl = ctx.impl();
  TE_CUBLAS_CHECK(cublasLtMatmul(impl.handle, plan->desc, alpha, call.a, plan->a, call.b, plan->b, beta,
                                 d.data_ptr(), plan->d, d.data_ptr(), plan->d, &plan->algo,
                                 impl.workspace.data_ptr(), static_cast<size_t>(ctx.workspace_bytes()),
                                 as_cuda(stream)));
  if (bias_kernel) {
    ctx.mutable_stats().bias_kernel_calls++;
    const Tensor b = opts.bias.contiguous(stream);
    cuda::gemm_add_bias(d.data_ptr(), out.dtype(), call.P, call.Q, ldd, b.data_ptr(), b.dtype(), stream);
  }
  if (!direct) {
    const Tensor view = d.narrow(0, 0, call.P).narrow(1, 0, call.Q);  // [P, Q] of the padded result
    if (out2d.defined()) out2d.copy_from(view, stream);
    else out.copy_from(view.contiguous(stream).reshape(out.shape()), stream);
  }
}

// lhs [P, D], rhs [Q, D] in output orientation, any strides.
void run_hp(GemmContext& ctx, GemmRole role, const Tensor& lhs_in, const Tensor& rhs_in, Tensor& out,
            const GemmOptions& opts, const float* alpha_beta_dev, const Stream& stream) {
  const DType t = lhs_in.dtype();
  TE_CHECK_HINT(rhs_in.dtype() == t, "GEMM " << gemm_role_name(role) << ": operand dtypes differ (" << lhs_in.str()
                                             << " vs " << rhs_in.str() << ")",
                "cast both operands to one dtype");
  TE_CHECK_HINT(out.dtype() == t || (out.dtype() == DType::f32 && t != DType::f32),
                "GEMM " << gemm_role_name(role) << ": " << dtype_name(t) << " inputs cannot write "
                        << dtype_name(out.dtype()) << " output",
                "use an output of the input dtype or f32");
  const LtView lhs = lt_view(lhs_in, stream), rhs = lt_view(rhs_in, stream);
  LtCall call;
  call.P = call.Pp = lhs_in.size(0);
  call.Q = call.Qp = rhs_in.size(0);
  LtConfig& c = call.cfg;
  c.role = role;
  c.m = call.Q, c.n = call.P, c.k = lhs_in.size(1);
  c.a_type = c.b_type = cuda_type(t);
  // A = rhs must act as m×k: row-major rhs is stored k×m (transpose it); B = lhsᵀ must act as k×n.
  c.transa = rhs.row_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.transb = lhs.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  c.lda = rhs.ld, c.ldb = lhs.ld;
  c.compute = t == DType::f32 ? (opts.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F)
                              : CUBLAS_COMPUTE_32F;
  c.device_alpha = alpha_beta_dev != nullptr;
  call.a = rhs.t.data_ptr();
  call.b = lhs.t.data_ptr();
  call.alpha_beta_dev = alpha_beta_dev;
  execute(ctx, call, out, opts, stream);
}

// Role → output-orientation views of two [rows, cols] tensors (a = x/dy, b = W/x).
void role_views(GemmRole role, const Tensor& a2, const Tensor& b2, Tensor& lhs, Tensor& rhs) {
  switch (role) {
    case GemmRole::fprop: lhs = a2, rhs = b2; break;                              // x [M,K], W [N,K]
    case GemmRole::dgrad: lhs = a2, rhs = b2.transpose(0, 1); break;              // dy [M,N], Wᵀ [K,N]
    case GemmRole::wgrad: lhs = a2.transpose(0, 1), rhs = b2.transpose(0, 1); break;  // dyᵀ [N,M], xᵀ [K,M]
  }
}

}  // namespace detail
}  // namespace te
