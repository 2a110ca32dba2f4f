// CPU reference of the activations (formulas in act_math.h, shared with CUDA).
#include <vector>

#include "engine/element.h"
#include "ops/act/act_impl.h"
#include "ops/act/act_math.h"

namespace te::cpu {
using namespace act_math;

void act_forward(ActKind k, const void* x, DType tx, void* out, DType tout, int64_t rows, int64_t cols) {
  const int64_t in_cols = k == ActKind::swiglu ? 2 * cols : cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float a = load_f32(x, tx, r * in_cols + c);
      float y = 0.f;
      switch (k) {
        case ActKind::gelu: y = gelu(a); break;
        case ActKind::relu: y = relu(a); break;
        case ActKind::swiglu: y = silu(a) * load_f32(x, tx, r * in_cols + cols + c); break;
      }
      store_f32(out, tout, r * cols + c, y);
    }
}

void act_backward(ActKind k, const void* dy, const void* x, DType tx, void* dx, DType tdx, int64_t rows,
                  int64_t cols) {
  const int64_t in_cols = k == ActKind::swiglu ? 2 * cols : cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float d = load_f32(dy, tx, r * cols + c);
      const float a = load_f32(x, tx, r * in_cols + c);
      switch (k) {
        case ActKind::gelu: store_f32(dx, tdx, r * cols + c, d * dgelu(a)); break;
        case ActKind::relu: store_f32(dx, tdx, r * cols + c, d * drelu(a)); break;
        case ActKind::swiglu: {
          const float b = load_f32(x, tx, r * in_cols + cols + c);
          store_f32(dx, tdx, r * in_cols + c, d * b * dsilu(a));  // d/da
          store_f32(dx, tdx, r * in_cols + cols + c, d * silu(a));  // d/db
          break;
        }
      }
    }
}

void bias_grad(const void* dy, DType tdy, void* dbias, DType tdb, int64_t rows, int64_t cols) {
  std::vector<double> s(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[static_cast<size_t>(c)] += load_f32(dy, tdy, r * cols + c);
  for (int64_t c = 0; c < cols; ++c) store_f32(dbias, tdb, c, static_cast<float>(s[static_cast<size_t>(c)]));
}

}  // namespace te::cpu
