// Attention in float64, written independently of the kernels (full score matrices, an explicit mask, a softmax per
// row) for the ops and model tests: rotary embedding from the f32 angles the numeric contract fixes (position ·
// inv_freq, both f32), then softmax(scale · q kᵀ) v per query head over TransformerEngine's interleaved QKV layout.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace te::attention_reference {

struct Problem {
  int64_t batch = 1, seq = 1, heads = 1, kv_heads = 1, head_dim = 1;
  bool causal = true;
  double rope_base = 0;  // 0: no rotary embedding
  double scale = 0;      // 0: 1 / sqrt(head_dim)
  int64_t group() const { return heads / kv_heads; }
  int64_t qkv_cols() const { return kv_heads * (group() + 2) * head_dim; }
  int64_t out_cols() const { return heads * head_dim; }
  // Index of element e of slot `slot` (0..group-1 queries, group the key, group+1 the value) of group g, token t.
  size_t at(int64_t t, int64_t g, int64_t slot, int64_t e) const {
    return static_cast<size_t>(t * qkv_cols() + (g * (group() + 2) + slot) * head_dim + e);
  }
};

inline std::vector<double> rope(const Problem& p, const std::vector<double>& x) {
  if (p.rope_base <= 0) return x;
  std::vector<double> y = x;
  const int64_t half = p.head_dim / 2;
  for (int64_t t = 0; t < p.batch * p.seq; ++t)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t slot = 0; slot <= p.group(); ++slot)  // the queries and the key; not the value
        for (int64_t i = 0; i < half; ++i) {
          const float inv = 1.0f / std::pow(static_cast<float>(p.rope_base),
                                            static_cast<float>(2 * i) / static_cast<float>(p.head_dim));
          const double angle = static_cast<float>(t % p.seq) * inv;
          const double a = x[p.at(t, g, slot, i)], b = x[p.at(t, g, slot, i + half)];
          y[p.at(t, g, slot, i)] = a * std::cos(angle) - b * std::sin(angle);
          y[p.at(t, g, slot, i + half)] = b * std::cos(angle) + a * std::sin(angle);
        }
  return y;
}

// out [batch·seq, heads·head_dim] of rope (when set) then attention.
inline std::vector<double> forward(const Problem& p, const std::vector<double>& qkv) {
  const std::vector<double> x = rope(p, qkv);
  const int64_t S = p.seq, D = p.head_dim, r = p.group();
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(static_cast<size_t>(p.batch * S * p.out_cols()));
  std::vector<double> score(static_cast<size_t>(S * S));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / r;
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += x[p.at(b * S + i, g, h % r, e)] * x[p.at(b * S + j, g, r, e)];
          score[static_cast<size_t>(i * S + j)] =
              p.causal && j > i ? -std::numeric_limits<double>::infinity() : s * scale;
        }
      for (int64_t i = 0; i < S; ++i) {
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (int64_t j = 0; j < S; ++j) m = std::max(m, score[static_cast<size_t>(i * S + j)]);
        for (int64_t j = 0; j < S; ++j) z += std::exp(score[static_cast<size_t>(i * S + j)] - m);
        for (int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (int64_t j = 0; j < S; ++j)
            o += std::exp(score[static_cast<size_t>(i * S + j)] - m) / z * x[p.at(b * S + j, g, r + 1, e)];
          out[static_cast<size_t>((b * S + i) * p.out_cols() + h * D + e)] = o;
        }
      }
    }
  return out;
}

}  // namespace te::attention_reference
