// CPU reference attention: one task per (sequence, query head) forward and per (sequence, key/value group)
// backward, so tasks write disjoint columns and the result does not depend on how many threads run them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/element.h"
#include "ops/attention/attention_impl.h"
#include "ops/gemm/cpu_workers.h"

namespace te::cpu {
namespace {

std::vector<float> widen(const void* p, DType t, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = load_f32(p, t, i);
  return v;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse) {
  const int64_t S = l.seq, D = l.head_dim, W = l.qkv_cols(), O = l.out_cols(), batch = tokens / S;
  const std::vector<float> x = widen(qkv, t, tokens * W);
  detail::run_cpu_tasks(batch * l.heads, [&](int64_t task) {
    const int64_t b = task / l.heads, h = task % l.heads, g = h / l.group();
    std::vector<float> p(static_cast<size_t>(S)), acc(static_cast<size_t>(D));
    for (int64_t i = 0; i < S; ++i) {
      const float* q = &x[static_cast<size_t>((b * S + i) * W + l.q_col(h))];
      const int64_t n = causal ? i + 1 : S;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        p[static_cast<size_t>(j)] = scale * dot(q, &x[static_cast<size_t>((b * S + j) * W + l.k_col(g))], D);
        m = std::max(m, p[static_cast<size_t>(j)]);
      }
      float sum = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < n; ++j) {
        const float e = std::exp(p[static_cast<size_t>(j)] - m);
        sum += e;
        const float* v = &x[static_cast<size_t>((b * S + j) * W + l.v_col(g))];
        for (int64_t c = 0; c < D; ++c) acc[static_cast<size_t>(c)] += e * v[c];
      }
      for (int64_t c = 0; c < D; ++c) store_f32(out, t, (b * S + i) * O + h * D + c, acc[static_cast<size_t>(c)] / sum);
      lse[(b * l.heads + h) * S + i] = m + std::log(sum);
    }
  });
}

void attention_backward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                        const void* qkv, const void* out, const float* lse, DType t, void* dqkv) {
  const int64_t S = l.seq, D = l.head_dim, W = l.qkv_cols(), O = l.out_cols(), batch = tokens / S;
  const std::vector<float> x = widen(qkv, t, tokens * W), dy = widen(dout, t, tokens * O), y = widen(out, t, tokens * O);
  std::vector<float> dx(static_cast<size_t>(tokens * W), 0.f);
  detail::run_cpu_tasks(batch * l.kv_heads, [&](int64_t task) {
    const int64_t b = task / l.kv_heads, g = task % l.kv_heads;
    std::vector<float> delta(static_cast<size_t>(S));
    for (int64_t h = g * l.group(); h < (g + 1) * l.group(); ++h) {
      auto row = [&](const std::vector<float>& v, int64_t i, int64_t width, int64_t col) {
        return &v[static_cast<size_t>((b * S + i) * width + col)];
      };
      for (int64_t i = 0; i < S; ++i) delta[static_cast<size_t>(i)] = dot(row(dy, i, O, h * D), row(y, i, O, h * D), D);
      for (int64_t i = 0; i < S; ++i) {
        const float* q = row(x, i, W, l.q_col(h));
        const float* dyi = row(dy, i, O, h * D);
        float* dq = &dx[static_cast<size_t>((b * S + i) * W + l.q_col(h))];
        const float li = lse[(b * l.heads + h) * S + i];
        const int64_t n = causal ? i + 1 : S;
        for (int64_t j = 0; j < n; ++j) {
          const float* k = row(x, j, W, l.k_col(g));
          const float* v = row(x, j, W, l.v_col(g));
          float* dk = &dx[static_cast<size_t>((b * S + j) * W + l.k_col(g))];
          float* dv = &dx[static_cast<size_t>((b * S + j) * W + l.v_col(g))];
          const float p = std::exp(scale * dot(q, k, D) - li);
          const float ds = p * (dot(dyi, v, D) - delta[static_cast<size_t>(i)]) * scale;
          for (int64_t c = 0; c < D; ++c) {
            dv[c] += p * dyi[c];
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
          }
        }
      }
    }
  });
  for (int64_t i = 0; i < tokens * W; ++i) store_f32(dqkv, t, i, dx[static_cast<size_t>(i)]);
}

void rope_apply(const AttentionLayout& l, float base, bool inverse, int64_t tokens, const void* qkv, DType t,
                void* out) {
  const int64_t D = l.head_dim, half = D / 2, W = l.qkv_cols();
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(D));
  const float sign = inverse ? -1.f : 1.f;
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const float pos = static_cast<float>(tok % l.seq);
    const int64_t r = tok * W;
    for (int64_t g = 0; g < l.kv_heads; ++g) {
      for (int64_t c = 0; c < D; ++c) store_f32(out, t, r + l.v_col(g) + c, load_f32(qkv, t, r + l.v_col(g) + c));
      // The group's query heads and its key are the (r + 1) heads before its value.
      for (int64_t col = l.q_col(g * l.group()); col < l.v_col(g); col += D)
        for (int64_t i = 0; i < half; ++i) {
          const float angle = pos * inv_freq[static_cast<size_t>(i)];
          const float c = std::cos(angle), s = sign * std::sin(angle);
          const float a = load_f32(qkv, t, r + col + i), b = load_f32(qkv, t, r + col + i + half);
          store_f32(out, t, r + col + i, a * c - b * s);
          store_f32(out, t, r + col + i + half, b * c + a * s);
        }
    }
  }
}

}  // namespace te::cpu
