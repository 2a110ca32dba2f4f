// CPU reference of LayerNorm/RMSNorm. Row statistics accumulate in double (more accurate than the fp32 contract
// asks) and are stored as f32; per-element math is fp32 in the same order as the CUDA kernels.
#include <cmath>
#include <vector>

#include "engine/element.h"
#include "ops/norm/norm_impl.h"

namespace te::cpu {

void norm_forward(const NormFwdArgs& a) {
  const int64_t H = a.cols;
  const bool ln = a.kind == NormKind::layernorm;
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * H;
    double s = 0, q = 0;
    if (ln) {
      for (int64_t j = 0; j < H; ++j) s += load_f32(a.x, a.tx, base + j);
    }
    const float mu = ln ? static_cast<float>(s / static_cast<double>(H)) : 0.f;
    for (int64_t j = 0; j < H; ++j) {
      const double d = static_cast<double>(load_f32(a.x, a.tx, base + j)) - (ln ? s / static_cast<double>(H) : 0.0);
      q += d * d;
    }
    const float var = static_cast<float>(q / static_cast<double>(H));
    const float rstd = 1.0f / std::sqrt(var + a.eps);
    if (a.mean) a.mean[r] = mu;
    a.rstd[r] = rstd;
    for (int64_t j = 0; j < H; ++j) {
      const float xhat = (load_f32(a.x, a.tx, base + j) - mu) * rstd;
      float y = xhat * load_f32(a.gamma, a.tp, j);
      if (a.beta) y += load_f32(a.beta, a.tp, j);
      store_f32(a.out, a.tout, base + j, y);
    }
  }
}

void norm_backward(const NormBwdArgs& a) {
  const int64_t H = a.cols;
  const bool ln = a.kind == NormKind::layernorm;
  std::vector<double> dg(static_cast<size_t>(H), 0.0), db(static_cast<size_t>(H), 0.0);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * H;
    const float mu = ln ? a.mean[r] : 0.f, rstd = a.rstd[r];
    double s1 = 0, s2 = 0;  // sum(g), sum(g * xhat) with g = dy * gamma
    for (int64_t j = 0; j < H; ++j) {
      const float dy = load_f32(a.dy, a.tx, base + j);
      const float xhat = (load_f32(a.x, a.tx, base + j) - mu) * rstd;
      const float g = dy * load_f32(a.gamma, a.tp, j);
      s1 += g;
      s2 += static_cast<double>(g) * xhat;
      dg[static_cast<size_t>(j)] += static_cast<double>(dy) * xhat;
      db[static_cast<size_t>(j)] += dy;
    }
    const float m1 = ln ? static_cast<float>(s1 / static_cast<double>(H)) : 0.f;
    const float m2 = static_cast<float>(s2 / static_cast<double>(H));
    for (int64_t j = 0; j < H; ++j) {
      const float dy = load_f32(a.dy, a.tx, base + j);
      const float xhat = (load_f32(a.x, a.tx, base + j) - mu) * rstd;
      const float g = dy * load_f32(a.gamma, a.tp, j);
      store_f32(a.dx, a.tdx, base + j, rstd * (g - m1 - xhat * m2));
    }
  }
  for (int64_t j = 0; j < H; ++j) {
    if (a.dgamma) store_f32(a.dgamma, a.tdg, j, static_cast<float>(dg[static_cast<size_t>(j)]));
    if (a.dbeta) store_f32(a.dbeta, a.tdg, j, static_cast<float>(db[static_cast<size_t>(j)]));
  }
}

}  // namespace te::cpu
