// CPU reference of the optimizers: the element update of optimizer_math.h in a loop.
#include "engine/element.h"
#include "graph/optimizer_math.h"

namespace te::detail {

void sgd_momentum_cpu(float* p, const void* g, DType gt, float* buf, int64_t n, const SgdScalars& s) {
  for (int64_t i = 0; i < n; ++i) sgd_update(p[i], load_f32(g, gt, i), buf[i], s);
}

void adamw_cpu(float* p, const void* g, DType gt, float* m, float* v, int64_t n, const AdamWScalars& s) {
  for (int64_t i = 0; i < n; ++i) adamw_update(p[i], load_f32(g, gt, i), m[i], v[i], s);
}

}  // namespace te::detail
