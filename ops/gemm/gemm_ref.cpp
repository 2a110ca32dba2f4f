// CPU GEMM: dequantize each operand (from the copy its role uses) to f32, multiply, bias, cast. Every role goes
// through row_gemm (row_gemm.h), whose rows do not depend on each other or on the row count, so a forward gives each
// token the same bytes whatever else shares the call, and wgrad (dyᵀ · x, each weight-gradient row one chain over the
// tokens) the same bytes on any number of threads. It runs on the engine's one CPU pool: a BLAS with threads of its
// own oversubscribed the cores beside the tensor-parallel rank threads. This is the reference the cuBLASLt path is
// tested against.
#include <algorithm>
#include <vector>

#include "engine/element.h"
#include "engine/error.h"
#include "ops/elementwise/elementwise_impl.h"
#include "ops/gemm/gemm_internal.h"
#include "ops/gemm/row_gemm.h"

namespace te::detail {

// The operand as f32 in its logical [rows, cols] orientation, taken from `usage` when quantized: its carried image
// when it has one (read in place), else dequantized now.
struct F32Operand {
  std::vector<float> owned;
  Tensor held;  // a dequantized copy, read in place
  const float* data = nullptr;
};
static F32Operand operand_f32(const GemmOperand& op, Usage usage, GemmRole role, const char* name, bool keep_rht,
                              GemmContext& ctx) {
  F32Operand out;
  if (!op.is_quantized()) {
    const Tensor& t = op.tensor();
    if (t.dtype() == DType::f32 && t.is_contiguous() && t.device().is_cpu()) {  // read in place
      out.data = t.data<float>();
      return out;
    }
    out.owned = t.to_f32_vector();
  } else {
    QuantizedTensor q = op.quantized();
    if (keep_rht) q.columnwise_rht = false;  // read the transformed values as stored (rht_cancels)
    TE_CHECK_HINT(q.has(usage), "GEMM " << gemm_role_name(role) << ": operand " << name << " " << op.str()
                                        << " lacks the " << usage_name(usage) << " copy this role reads",
                  "quantize it with that usage");
    if (const Tensor* image = usable_image(op, usage, keep_rht, DType::f32)) {
      ctx.mutable_stats().images_read++;
      out.data = image->data<float>();
      return out;
    }
    ctx.mutable_stats().operands_dequantized++;
    out.held = q.dequantize_usage(usage, DType::f32).contiguous();
    out.data = out.held.data<float>();
    return out;
  }
  out.data = out.owned.data();
  return out;
}

// c (f32, [P, Q]) into out in out's dtype: the cast's rounding.
static void store_result(const std::vector<float>& c, Tensor& out) {
  if (!out.is_contiguous()) return out.copy_from(Tensor::from_f32(c, out.shape(), out.dtype()));
  cpu::cast(c.data(), DType::f32, out.data_ptr(), out.dtype(), static_cast<int64_t>(c.size()));
}

void gemm_cpu(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
              GemmContext& ctx) {
  const GemmShape s = gemm_shape(a, b, role);
  const RoleUsages u = role_usages(role);
  const bool keep_rht = rht_cancels(a, b, role);
  const F32Operand af = operand_f32(a, u.a, role, "a", keep_rht, ctx);  // [a.rows, a.cols]
  const F32Operand bf = operand_f32(b, u.b, role, "b", keep_rht, ctx);  // [b.rows, b.cols]
  std::vector<float> c(size_t(s.P * s.Q));
  switch (role) {
    case GemmRole::fprop:  // y[M, N] = x[M, K] · W[N, K]ᵀ
      row_gemm(af.data, bf.data, /*b_transposed=*/true, s.M, s.N, s.K, c.data());
      break;
    case GemmRole::dgrad:  // dx[M, K] = dy[M, N] · W[N, K]
      row_gemm(af.data, bf.data, /*b_transposed=*/false, s.M, s.K, s.N, c.data());
      break;
    case GemmRole::wgrad: {  // dW[N, K] = dy[M, N]ᵀ · x[M, K]: dyᵀ [N, M] · x, each row a chain over the tokens
      std::vector<float> dyt(size_t(s.N * s.M));
      cpu::transpose_2d(af.data, dyt.data(), 4, s.M, s.N);
      row_gemm(dyt.data(), bf.data, /*b_transposed=*/false, s.N, s.K, s.M, c.data());
      break;
    }
  }
  // alpha and accumulate elementwise after the product: the same operations for every row.
  const std::vector<float> prev = opts.accumulate ? out.to_f32_vector() : std::vector<float>();
  if (opts.alpha != 1.f || opts.accumulate)
    for (size_t i = 0; i < c.size(); ++i) c[i] = opts.alpha * c[i] + (opts.accumulate ? prev[i] : 0.f);
  if (opts.bias.defined()) {
    const std::vector<float> bias = opts.bias.to_f32_vector();  // [Q]
    for (int64_t p = 0; p < s.P; ++p)
      for (int64_t q = 0; q < s.Q; ++q) c[size_t(p * s.Q + q)] += bias[size_t(q)];
  }
  store_result(c, out);
}

}  // namespace te::detail
