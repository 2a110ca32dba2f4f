// CPU reference attention in blocks of query rows, each product a row-independent GEMM (ops/gemm/row_gemm.h: every
// element one chain of fused multiply-adds in a fixed order). One task per (sequence, query head) forward and per
// (sequence, key/value group) backward, so tasks write disjoint columns and nothing depends on how many threads run
// them, nor on the other heads or sequences (a rank's heads give the bytes they give at tp 1).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/element.h"
#include "ops/attention/attention_impl.h"
#include "ops/gemm/cpu_workers.h"
#include "ops/gemm/row_gemm.h"

namespace te::cpu {
namespace {

constexpr int64_t kRows = 64;  // query rows per block: bounds the score block at kRows × seq floats

std::vector<float> widen(const void* p, DType t, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = load_f32(p, t, i);
  return v;
}

// Columns [col, col + D) of `seq` rows of width W starting at row r0: a contiguous [seq, D] copy.
std::vector<float> slice(const std::vector<float>& x, int64_t r0, int64_t seq, int64_t width, int64_t col,
                         int64_t D) {
  std::vector<float> out(static_cast<size_t>(seq * D));
  for (int64_t r = 0; r < seq; ++r)
    std::copy_n(&x[static_cast<size_t>((r0 + r) * width + col)], D, &out[static_cast<size_t>(r * D)]);
  return out;
}

// [rows, cols] → [cols, rows].
std::vector<float> transposed(const float* a, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = a[r * cols + c];
  return t;
}

// Keys a query row i sees: 0 … i when causal, else all.
int64_t keys_of(bool causal, int64_t i, int64_t S) { return causal ? i + 1 : S; }

}  // namespace

void attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse) {
  const int64_t S = l.seq, D = l.head_dim, W = l.qkv_cols(), O = l.out_cols(), batch = tokens / S;
  const std::vector<float> x = widen(qkv, t, tokens * W);
  detail::run_cpu_tasks(batch * l.heads, [&](int64_t task) {
    const int64_t b = task / l.heads, h = task % l.heads, g = h / l.group();
    const std::vector<float> q = slice(x, b * S, S, W, l.q_col(h), D), k = slice(x, b * S, S, W, l.k_col(g), D),
                             v = slice(x, b * S, S, W, l.v_col(g), D);
    std::vector<float> s(static_cast<size_t>(kRows * S)), o(static_cast<size_t>(kRows * D));
    for (int64_t i0 = 0; i0 < S; i0 += kRows) {
      const int64_t rows = std::min(kRows, S - i0), n = keys_of(causal, i0 + rows - 1, S);
      detail::row_gemm(&q[static_cast<size_t>(i0 * D)], k.data(), true, rows, n, D, s.data());  // scores [rows, n]
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = &s[static_cast<size_t>(r * n)];
        const int64_t seen = keys_of(causal, i0 + r, S);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < seen; ++j) m = std::max(m, sr[j] *= scale);
        float sum = 0.f;
        for (int64_t j = 0; j < seen; ++j) sum += sr[j] = std::exp(sr[j] - m);
        std::fill(sr + seen, sr + n, 0.f);  // masked keys weigh nothing
        lse[(b * l.heads + h) * S + i0 + r] = m + std::log(sum);
        for (int64_t j = 0; j < seen; ++j) sr[j] /= sum;
      }
      detail::row_gemm(s.data(), v.data(), false, rows, D, n, o.data());  // probabilities · V [rows, D]
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < D; ++c)
          store_f32(out, t, (b * S + i0 + r) * O + h * D + c, o[static_cast<size_t>(r * D + c)]);
    }
  });
}

void attention_backward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                        const void* qkv, const void* out, const float* lse, DType t, void* dqkv) {
  const int64_t S = l.seq, D = l.head_dim, W = l.qkv_cols(), O = l.out_cols(), batch = tokens / S;
  const std::vector<float> x = widen(qkv, t, tokens * W), dy = widen(dout, t, tokens * O),
                           y = widen(out, t, tokens * O);
  std::vector<float> dx(static_cast<size_t>(tokens * W), 0.f);
  detail::run_cpu_tasks(batch * l.kv_heads, [&](int64_t task) {
    const int64_t b = task / l.kv_heads, g = task % l.kv_heads;
    const std::vector<float> k = slice(x, b * S, S, W, l.k_col(g), D), v = slice(x, b * S, S, W, l.v_col(g), D);
    std::vector<float> dk(static_cast<size_t>(S * D), 0.f), dv(static_cast<size_t>(S * D), 0.f);
    std::vector<float> p(static_cast<size_t>(kRows * S)), ds(static_cast<size_t>(kRows * S)),
        part(static_cast<size_t>(S * D)), dq(static_cast<size_t>(kRows * D));
    for (int64_t h = g * l.group(); h < (g + 1) * l.group(); ++h) {
      const std::vector<float> q = slice(x, b * S, S, W, l.q_col(h), D), dyh = slice(dy, b * S, S, O, h * D, D),
                               yh = slice(y, b * S, S, O, h * D, D);
      for (int64_t i0 = 0; i0 < S; i0 += kRows) {
        const int64_t rows = std::min(kRows, S - i0), n = keys_of(causal, i0 + rows - 1, S);
        const float* qb = &q[static_cast<size_t>(i0 * D)];
        const float* dyb = &dyh[static_cast<size_t>(i0 * D)];
        detail::row_gemm(qb, k.data(), true, rows, n, D, p.data());    // scores
        detail::row_gemm(dyb, v.data(), true, rows, n, D, ds.data());  // dO · Vᵀ
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r, seen = keys_of(causal, i, S);
          const float li = lse[(b * l.heads + h) * S + i];
          float delta = 0.f;  // dO_i · O_i
          for (int64_t c = 0; c < D; ++c) delta += dyb[r * D + c] * yh[static_cast<size_t>(i * D + c)];
          float* pr = &p[static_cast<size_t>(r * n)];
          float* dr = &ds[static_cast<size_t>(r * n)];
          for (int64_t j = 0; j < seen; ++j) {
            pr[j] = std::exp(scale * pr[j] - li);
            dr[j] = pr[j] * (dr[j] - delta) * scale;
          }
          std::fill(pr + seen, pr + n, 0.f);
          std::fill(dr + seen, dr + n, 0.f);
        }
        detail::row_gemm(ds.data(), k.data(), false, rows, D, n, dq.data());  // dQ = dS · K
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(&dq[static_cast<size_t>(r * D)], D, &dx[static_cast<size_t>((b * S + i0 + r) * W + l.q_col(h))]);
        const std::vector<float> dst = transposed(ds.data(), rows, n), pt = transposed(p.data(), rows, n);
        detail::row_gemm(dst.data(), qb, false, n, D, rows, part.data());  // dK += dSᵀ · Q
        for (int64_t e = 0; e < n * D; ++e) dk[static_cast<size_t>(e)] += part[static_cast<size_t>(e)];
        detail::row_gemm(pt.data(), dyb, false, n, D, rows, part.data());  // dV += Pᵀ · dO
        for (int64_t e = 0; e < n * D; ++e) dv[static_cast<size_t>(e)] += part[static_cast<size_t>(e)];
      }
    }
    for (int64_t j = 0; j < S; ++j) {
      std::copy_n(&dk[static_cast<size_t>(j * D)], D, &dx[static_cast<size_t>((b * S + j) * W + l.k_col(g))]);
      std::copy_n(&dv[static_cast<size_t>(j * D)], D, &dx[static_cast<size_t>((b * S + j) * W + l.v_col(g))]);
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
    const auto rotate = [&](int64_t col) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[static_cast<size_t>(i)];
        const float c = std::cos(angle), s = sign * std::sin(angle);
        const float a = load_f32(qkv, t, r + col + i), b = load_f32(qkv, t, r + col + i + half);
        store_f32(out, t, r + col + i, a * c - b * s);
        store_f32(out, t, r + col + i + half, b * c + a * s);
      }
    };
    for (int64_t h = 0; h < l.heads; ++h) rotate(l.q_col(h));
    for (int64_t g = 0; g < l.kv_heads; ++g) {
      rotate(l.k_col(g));
      for (int64_t c = 0; c < D; ++c) store_f32(out, t, r + l.v_col(g) + c, load_f32(qkv, t, r + l.v_col(g) + c));
    }
  }
}

}  // namespace te::cpu
