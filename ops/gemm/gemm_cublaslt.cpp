// cuBLASLt path of gemm() (CUDA builds only). Every role is reduced to one column-major call
//   D[m = Q, n = P] = op(A) · op(B),  A = "rhs" [Q, D], B = "lhs" [P, D]  (row-major out [P, Q] = lhs · rhsᵀ)
// where lhs/rhs are the role's operands in output orientation (see role_views / tn_operand below).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/log.h"
#include "ops/gemm/gemm_internal.h"
#include "ops/gemm/gemm_kernels.h"
#include "ops/gemm/gemm_streaming.h"
#include "ops/gemm/gemm_wgmma.h"

namespace te {

namespace {

cudaStream_t as_cuda(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

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
    return {m, n, k, a_type, b_type, d_type, transa, transb, lda, ldb, ldd, compute, a_scale_mode, b_scale_mode,
            fast_accum, bias_epilogue, bias_type, device_alpha, align_a, align_b, align_d, int64_t(role)};
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;  // false: cuBLASLt has no algorithm for this configuration
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& v) {
  TE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
}

}  // namespace

struct GemmContext::Impl {
  Device device;
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;  // [workspace_bytes] u8, persistent (also the streaming kernel's split-K partials)
  Tensor streaming_counters;  // [4096] i32, zero between launches (gemm_streaming.h)
  int sm_count = 0;
  int sm_major = 0;  // compute capability (the warpgroup kernel is built for sm_90a only)
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;
  ~Impl() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
  }
};

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

Plan* get_plan(GemmContext& ctx, const LtConfig& c, const void* a_scale, const void* b_scale) {
  GemmContext::Impl& impl = ctx.impl();
  auto it = impl.plans.find(c.key());
  if (it != impl.plans.end()) {
    ctx.mutable_stats().plan_cache_hits++;
    return it->second.get();
  }
  ctx.mutable_stats().plans_built++;
  auto plan = std::make_unique<Plan>();
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
  Plan* p = plan.get();
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
  Plan* plan = get_plan(ctx, c, call.a_scale, call.b_scale);
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

// ---- high precision -----------------------------------------------------------------------------------------
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

// ---- fp8: per-tensor and block scaling ----------------------------------------------------------------------
struct TnOperand {
  Tensor data;   // [rows, depth] fp8, depth contiguous
  Tensor scale;  // fp32 scale_inv in the NUMERICS.md §3 layout of that copy
  int64_t scale_ld = 1;  // its row length (the last dim of that layout)
  QuantFormat format;
};

TnOperand tn_operand(const GemmOperand& op, Usage u, GemmRole role, const char* name, const Stream& stream) {
  const QuantizedTensor& q = op.quantized();
  TE_CHECK_HINT(q.has(u), "GEMM " << gemm_role_name(role) << ": operand " << name << " " << op.str() << " lacks the "
                                  << usage_name(u) << " copy this role reads",
                "quantize it with that usage (fp8 GEMMs on Hopper are TN only)");
  TnOperand t;
  t.format = q.format;
  if (u == Usage::rowwise) {
    t.data = as_2d(q.rowwise_data, stream);  // [M, K]
    t.scale = q.rowwise_scale_inv;
  } else {
    t.data = as_2d(q.columnwise_data, stream);  // [K, M]
    t.scale = q.columnwise_scale_inv;
  }
  const int64_t rows = t.data.size(0), depth = t.data.size(1);
  // Expected scale_inv shape (NUMERICS.md §3, written for this copy's [rows, depth]).
  Shape want;
  switch (q.format) {
    case QuantFormat::fp8_per_tensor: want = {1}; break;
    case QuantFormat::fp8_block_1d: want = {ceil_div(depth, 128), round_up(rows, 4)}; break;
    case QuantFormat::fp8_block_2d: want = {ceil_div(rows, 128), round_up(ceil_div(depth, 128), 4)}; break;
    default: break;
  }
  TE_CHECK_HINT(t.scale.defined() && t.scale.dtype() == DType::f32 && t.scale.numel() == shape_numel(want) &&
                    t.scale.is_contiguous(),
                "GEMM " << gemm_role_name(role) << ": operand " << name << " " << op.str() << " " << usage_name(u)
                        << " scale_inv is " << t.scale.str() << ", expected contiguous f32 " << shape_str(want),
                "scale layouts are fixed by docs/NUMERICS.md §3");
  t.scale_ld = want.empty() ? 1 : want.back();
  return t;
}

// Copies the operand into zero-padded [rows_p, depth_p] storage when cuBLASLt's rules need it (zeros add nothing;
// a 1D scale row grows to rows_p with zero scales; padding never crosses a 128-block so 2D scales are unchanged).
bool pad_operand(TnOperand& t, int64_t rows_p, int64_t depth_p, const Stream& stream) {
  const int64_t rows = t.data.size(0), depth = t.data.size(1);
  const bool aligned = ptr_alignment(t.data.data_ptr()) >= 16 && t.data.stride(1) == 1 &&
                       (rows <= 1 || t.data.stride(0) == depth);
  if (rows == rows_p && depth == depth_p && aligned) return false;
  Tensor p = Tensor::zeros({rows_p, depth_p}, t.data.dtype(), t.data.device(), stream);
  p.narrow(0, 0, rows).narrow(1, 0, depth).copy_from(t.data, stream);
  t.data = p;
  if (t.format == QuantFormat::fp8_block_1d && t.scale_ld != rows_p) {
    const int64_t kb = ceil_div(depth, 128);
    Tensor s = Tensor::zeros({kb, rows_p}, DType::f32, t.data.device(), stream);
    s.narrow(1, 0, rows).copy_from(t.scale.reshape({kb, t.scale_ld}).narrow(1, 0, rows), stream);
    t.scale = s;
    t.scale_ld = rows_p;
  }
  return true;
}

int32_t scale_mode(QuantFormat f) {
  switch (f) {
    case QuantFormat::fp8_per_tensor: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case QuantFormat::fp8_block_1d: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case QuantFormat::fp8_block_2d: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    default: break;
  }
  TE_THROW("GEMM: " << quant_format_name(f) << " has no cuBLASLt scale mode on Hopper", "");
}

cuda::Fp8ScaleLayout scale_layout(QuantFormat f) {
  return f == QuantFormat::fp8_block_1d   ? cuda::Fp8ScaleLayout::vec128
         : f == QuantFormat::fp8_block_2d ? cuda::Fp8ScaleLayout::blk128
                                          : cuda::Fp8ScaleLayout::per_tensor;
}

// The shapes, operands and scales of an fp8 call as the CUDA kernels read them; and why the call's tensors keep them
// from running it (empty when they do not).
const char* fp8_args(cuda::Fp8GemmArgs& g, const TnOperand& lhs, const TnOperand& rhs, const Tensor& out,
                     GemmContext& ctx) {
  const int64_t D = lhs.data.size(1);
  g.lhs = lhs.data.data_ptr(), g.rhs = rhs.data.data_ptr();
  g.lhs_dtype = lhs.data.dtype(), g.rhs_dtype = rhs.data.dtype();
  g.lhs_scale = lhs.scale.data<float>(), g.rhs_scale = rhs.scale.data<float>();
  g.lhs_kind = scale_layout(lhs.format), g.rhs_kind = scale_layout(rhs.format);
  g.lhs_scale_ld = lhs.scale_ld, g.rhs_scale_ld = rhs.scale_ld;
  g.P = lhs.data.size(0), g.Q = rhs.data.size(0), g.D = D;
  g.out_dtype = out.dtype();
  g.sm_count = ctx.impl().sm_count;
  const auto dense = [&](const Tensor& t) { return t.stride(1) == 1 && (t.size(0) <= 1 || t.stride(0) == D); };
  return !dense(lhs.data) || !dense(rhs.data) ? "operands are not dense row-major"
         : !out.is_contiguous()               ? "the output is not contiguous"
                                              : "";
}

// The epilogue of the call (alpha, bias, accumulate) and its output; `bias` holds a contiguous copy of the bias
// while the kernel is enqueued.
void fp8_epilogue(cuda::Fp8GemmArgs& g, Tensor& out, const GemmOptions& opts, Tensor& bias, const Stream& stream) {
  if (opts.bias.defined()) {
    bias = opts.bias.contiguous(stream);
    g.bias = bias.data_ptr(), g.bias_dtype = bias.dtype();
  }
  g.out = out.data_ptr();
  g.alpha = opts.alpha;
  g.accumulate = opts.accumulate;
}

// The weight-streaming kernel for few output rows (gemm_streaming.h): when forced, or automatically where it can
// run the problem; false: cuBLASLt runs it.
bool run_streaming(GemmContext& ctx, const TnOperand& lhs, const TnOperand& rhs, GemmRole role, Tensor& out,
                   const GemmOptions& opts, const Stream& stream) {
  const bool forced = opts.kernel == GemmKernel::streaming;
  if (!forced && (opts.kernel != GemmKernel::automatic || lhs.data.size(0) > kStreamingRows)) return false;
  cuda::StreamingGemm g;
  const char* why = fp8_args(g, lhs, rhs, out, ctx);
  if (!*why) why = cuda::streaming_gemm_unsupported(g);
  if (*why && !forced) return false;
  TE_CHECK_HINT(!*why,
                "GEMM " << gemm_role_name(role) << " [" << g.P << ", " << g.D << "] x [" << g.Q << ", " << g.D
                        << "]: the weight-streaming kernel cannot run it: " << why,
                "leave GemmOptions::kernel automatic (cuBLASLt runs it)");
  GemmContext::Impl& impl = ctx.impl();
  Tensor bias, residual;
  fp8_epilogue(g, out, opts, bias, stream);
  if (opts.residual.defined()) {
    residual = opts.residual.contiguous(stream);
    g.residual = residual.data_ptr(), g.residual_dtype = residual.dtype();
  }
  g.partials = static_cast<float*>(impl.workspace.data_ptr());
  g.partials_floats = ctx.workspace_bytes() / 4;
  g.counters = impl.streaming_counters.data<int>();
  g.counters_len = impl.streaming_counters.numel();
  cuda::streaming_gemm(g, stream);
  ctx.mutable_stats().streaming_calls++;
  return true;
}

// The block-scaled warpgroup kernel (gemm_wgmma.h) when asked for; false: cuBLASLt runs it.
bool run_wgmma(GemmContext& ctx, const TnOperand& lhs, const TnOperand& rhs, GemmRole role, Tensor& out,
               const GemmOptions& opts, const Stream& stream) {
  if (opts.kernel != GemmKernel::wgmma) return false;
  cuda::WgmmaGemm g;
  const char* why = fp8_args(g, lhs, rhs, out, ctx);
  if (!*why) why = ctx.impl().sm_major != 9 ? "the GPU is not a Hopper (sm_90)" : cuda::wgmma_gemm_unsupported(g);
  TE_CHECK_HINT(!*why,
                "GEMM " << gemm_role_name(role) << " [" << g.P << ", " << g.D << "] x [" << g.Q << ", " << g.D
                        << "]: the warpgroup kernel cannot run it: " << why,
                "leave GemmOptions::kernel automatic (cuBLASLt runs it)");
  Tensor bias;
  fp8_epilogue(g, out, opts, bias, stream);
  cuda::wgmma_gemm(g, stream);
  ctx.mutable_stats().wgmma_calls++;
  return true;
}

// Returns whether the kernel added opts.residual.
bool run_fp8(GemmContext& ctx, const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out,
             const GemmOptions& opts, const Stream& stream) {
  const RoleUsages u = role_usages(role);
  TnOperand lhs = tn_operand(a, u.a, role, "a", stream);  // [P, D]
  TnOperand rhs = tn_operand(b, u.b, role, "b", stream);  // [Q, D]
  const int64_t P = lhs.data.size(0), Q = rhs.data.size(0), D = lhs.data.size(1);
  TE_CHECK(rhs.data.size(1) == D, "GEMM " << gemm_role_name(role) << ": quantized copies disagree on the reduced dim ("
                                          << lhs.data.str() << " vs " << rhs.data.str() << ")");
  const DType ta = rhs.data.dtype(), tb = lhs.data.dtype();
  TE_CHECK_HINT(!(ta == DType::fp8_e5m2 && tb == DType::fp8_e5m2),
                "GEMM " << gemm_role_name(role) << ": E5M2 × E5M2 fp8 GEMM is not supported (" << a.str() << ", "
                        << b.str() << ")",
                "quantize one operand (the weight or activation) as E4M3");
  if (run_streaming(ctx, lhs, rhs, role, out, opts, stream)) return true;
  if (run_wgmma(ctx, lhs, rhs, role, out, opts, stream)) return false;
  // Hopper fp8 rules: K a multiple of 16 bytes, m and n multiples of 8.
  const int64_t Pp = round_up(P, 8), Qp = round_up(Q, 8), Dp = round_up(std::max<int64_t>(D, 16), 16);
  const bool padded_l = pad_operand(lhs, Pp, Dp, stream);
  const bool padded_r = pad_operand(rhs, Qp, Dp, stream);
  if (padded_l || padded_r || Pp != P || Qp != Q) ctx.mutable_stats().padded_calls++;

  LtCall call;
  call.P = P, call.Q = Q, call.Pp = Pp, call.Qp = Qp;
  call.out_align16 = true;
  LtConfig& c = call.cfg;
  c.role = role;
  c.m = Qp, c.n = Pp, c.k = Dp;
  c.a_type = cuda_type(ta), c.b_type = cuda_type(tb);
  c.transa = CUBLAS_OP_T, c.transb = CUBLAS_OP_N;
  c.lda = Dp, c.ldb = Dp;
  c.compute = CUBLAS_COMPUTE_32F;
  c.a_scale_mode = scale_mode(rhs.format);
  c.b_scale_mode = scale_mode(lhs.format);
  const bool per_tensor = lhs.format == QuantFormat::fp8_per_tensor;
  // Fast accumulation is TE's choice for fprop; gradients keep split (promoted) accumulation. Block scaling must
  // use split accumulation.
  c.fast_accum = per_tensor && opts.fast_accum.value_or(role == GemmRole::fprop);
  call.a = rhs.data.data_ptr();
  call.b = lhs.data.data_ptr();
  call.a_scale = rhs.scale.data_ptr();
  call.b_scale = lhs.scale.data_ptr();
  execute(ctx, call, out, opts, stream);
  return false;
}

// ---- emulation: MXFP8 / NVFP4 / mixed formats -----------------------------------------------------------------
bool is_block(QuantFormat f) { return f == QuantFormat::fp8_block_1d || f == QuantFormat::fp8_block_2d; }

// amax = 448·6 on `device`, made once per device: a copy from the host on every call would be a synchronising copy
// inside a CUDA-graph capture, and the graph would read a freed buffer at replay. Kept until the process ends (never
// destroyed: static teardown may come after the CUDA context).
const Tensor& nvfp4_unit_amax(Device device) {
  static std::mutex mu;
  static auto* per_device = new std::map<int, Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = per_device->find(device.index);
  if (it == per_device->end())
    it = per_device->emplace(device.index, Tensor::from_f32({448.0f * 6.0f}, {1}, DType::f32, device)).first;
  return it->second;
}

// q's copy `u` in [rows, cols] orientation as `dtype`: exact for MXFP8, and for NVFP4 without its global factor
// (amax = 448·6 makes S_enc = S_dec = 1: the values are q · S_dec_b, exact in bf16).
Tensor exact_image(QuantizedTensor q, Usage u, DType dtype, const Stream& stream) {
  if (nvfp4_format(q.format)) {
    const Tensor& unit = nvfp4_unit_amax(q.device());
    q.rowwise_amax = unit;
    q.columnwise_amax = unit;
  }
  return as_2d(q.dequantize_usage(u, dtype, stream), stream);
}

// The operand as the emulated GEMM multiplies it: its carried image when it has one in `dtype`, else q's copy made
// exact now; an NVFP4 global amax comes back through *amax, for alpha.
Tensor emulated_operand(const GemmOperand& op, Usage u, DType dtype, GemmRole role, const char* name,
                        bool keep_rht, Tensor* amax, GemmContext& ctx, const Stream& stream) {
  if (!op.is_quantized()) return as_2d(op.tensor(), stream);
  QuantizedTensor q = op.quantized();
  if (keep_rht) q.columnwise_rht = false;  // read the transformed values as stored (rht_cancels)
  TE_CHECK_HINT(q.has(u), "GEMM " << gemm_role_name(role) << ": operand " << name << " " << op.str() << " lacks the "
                                  << usage_name(u) << " copy this role reads",
                "quantize it with that usage");
  if (nvfp4_format(q.format)) *amax = u == Usage::rowwise ? q.rowwise_amax : q.columnwise_amax;
  if (const Tensor* image = usable_image(op, u, keep_rht, dtype)) {
    ctx.mutable_stats().images_read++;
    return *image;
  }
  ctx.mutable_stats().operands_dequantized++;
  return exact_image(std::move(q), u, dtype, stream);
}

void run_emulated(GemmContext& ctx, const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out,
                  const GemmOptions& opts, const Stream& stream) {
  ctx.mutable_stats().emulated_calls++;
  TE_LOG_ONCE(info, "GEMM: " << a.str() << " × " << b.str()
                             << " has no Hopper tensor-core path: dequantizing exactly and running a "
                                "high-precision GEMM (emulation)");
  const DType dt = !a.is_quantized() ? a.tensor().dtype() : !b.is_quantized() ? b.tensor().dtype() : DType::bf16;
  const RoleUsages u = role_usages(role);
  Tensor amax_a, amax_b;
  const bool keep_rht = rht_cancels(a, b, role);
  const Tensor a2 = emulated_operand(a, u.a, dt, role, "a", keep_rht, &amax_a, ctx, stream);  // [a.rows, a.cols]
  const Tensor b2 = emulated_operand(b, u.b, dt, role, "b", keep_rht, &amax_b, ctx, stream);  // [b.rows, b.cols]
  Tensor alpha_beta;  // device [alpha, beta] when an NVFP4 global factor is folded into alpha
  if (amax_a.defined() || amax_b.defined()) {
    alpha_beta = Tensor::empty({2}, DType::f32, out.device(), stream);
    cuda::gemm_nvfp4_alpha(amax_a.defined() ? amax_a.data<float>() : nullptr,
                           amax_b.defined() ? amax_b.data<float>() : nullptr, opts.alpha, opts.accumulate ? 1.f : 0.f,
                           alpha_beta.data<float>(), stream);
  }
  Tensor lhs, rhs;
  role_views(role, a2, b2, lhs, rhs);
  run_hp(ctx, role, lhs, rhs, out, opts, alpha_beta.defined() ? alpha_beta.data<float>() : nullptr, stream);
}

}  // namespace

bool gemm_cuda(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
               GemmContext& ctx, const Stream& stream) {
  set_current_device(out.device());
  const GemmShape s = gemm_shape(a, b, role);
  if ((role == GemmRole::wgrad ? s.M : role == GemmRole::dgrad ? s.N : s.K) == 0) {
    // Empty reduction: out = [out when accumulating] + bias.
    if (!opts.accumulate) out.fill(0.0, stream);
    if (opts.bias.defined()) {
      Tensor tmp = out.contiguous(stream);
      Tensor bias = opts.bias.contiguous(stream);
      cuda::gemm_add_bias(tmp.data_ptr(), out.dtype(), s.P, s.Q, s.Q, bias.data_ptr(), bias.dtype(), stream);
      if (tmp.storage() != out.storage()) out.copy_from(tmp, stream);
    }
    return false;
  }
  const bool fp8 = [&] {
    if (!a.is_quantized() || !b.is_quantized()) return false;
    const QuantFormat fa = a.quantized().format, fb = b.quantized().format;
    return (fa == QuantFormat::fp8_per_tensor && fb == QuantFormat::fp8_per_tensor) || (is_block(fa) && is_block(fb));
  }();
  TE_CHECK_HINT(
      fp8 || (opts.kernel != GemmKernel::streaming && opts.kernel != GemmKernel::wgmma),
      "GEMM " << gemm_role_name(role) << ": the "
              << (opts.kernel == GemmKernel::wgmma ? "warpgroup kernel runs fp8 block-scaled"
                                                   : "weight-streaming kernel runs fp8 per-tensor or block-scaled")
              << " operands only, not " << a.str() << " × " << b.str(),
      "leave GemmOptions::kernel automatic");
  if (fp8) return run_fp8(ctx, a, b, role, out, opts, stream);
  if (!a.is_quantized() && !b.is_quantized()) {
    Tensor lhs, rhs;
    role_views(role, as_2d(a.tensor(), stream), as_2d(b.tensor(), stream), lhs, rhs);
    run_hp(ctx, role, lhs, rhs, out, opts, nullptr, stream);
  } else {
    run_emulated(ctx, a, b, role, out, opts, stream);
  }
  return false;
}

}  // namespace detail
}  // namespace te
