// The fp8 path of gemm() on CUDA builds: per-tensor or 1x128 / 128x128 block-scaled operands, each role's TN copies
// (Hopper's fp8 GEMMs read both operands K-contiguous), run by the weight-streaming kernel for few rows, by the
// warpgroup kernel when asked for, else by cuBLASLt with the padding its fp8 rules need.
#include <cublasLt.h>

#include <algorithm>

#include "engine/error.h"
#include "ops/gemm/cublaslt_call.h"
#include "ops/gemm/gemm_streaming.h"
#include "ops/gemm/gemm_wgmma.h"

namespace te::detail {
namespace {

struct TnOperand {
  Tensor data;           // [rows, depth] fp8, depth contiguous
  Tensor scale;          // fp32 scale_inv in the NUMERICS.md §3 layout of that copy
  int64_t scale_ld = 1;  // its row length (the last dim of that layout)
  QuantFormat format;
};

TnOperand tn_operand(const GemmOperand& op, Usage u, GemmRole role, const char* name, const Stream& stream) {
  const QuantizedTensor& q = op.quantized();
  TE_CHECK_HINT(q.has(u),
                "GEMM " << gemm_role_name(role) << ": operand " << name << " " << op.str() << " lacks the "
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
    case QuantFormat::fp8_per_tensor:
      want = {1};
      break;
    case QuantFormat::fp8_block_1d:
      want = {ceil_div(depth, 128), round_up(rows, 4)};
      break;
    case QuantFormat::fp8_block_2d:
      want = {ceil_div(rows, 128), round_up(ceil_div(depth, 128), 4)};
      break;
    default:
      break;
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
  const bool aligned =
      ptr_alignment(t.data.data_ptr()) >= 16 && t.data.stride(1) == 1 && (rows <= 1 || t.data.stride(0) == depth);
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
    case QuantFormat::fp8_per_tensor:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case QuantFormat::fp8_block_1d:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case QuantFormat::fp8_block_2d:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    default:
      break;
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

}  // namespace

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

}  // namespace te::detail
