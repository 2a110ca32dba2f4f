#include "ops/gemm/row_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "ops/gemm/cpu_workers.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace te::detail {
namespace {
constexpr int kRows = 6;       // rows per micro-kernel call (shorter tails repeat their last row)
constexpr int64_t kKBlock = 256;  // l per pass over a block of rows, so that slice of a panel stays in cache

// A micro-kernel adds rows a[0..5] · panel (l0 … l1) into tile [6][W] (W = panel width), one fma per l, in order.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void kernel_avx512(const float* const* a, const float* panel, int64_t l0,
                                                     int64_t l1, float* tile) {
  constexpr int W = 32;
  __m512 c[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    c[r][0] = _mm512_loadu_ps(tile + r * W);
    c[r][1] = _mm512_loadu_ps(tile + r * W + 16);
  }
  // Named registers, fully unrolled: GCC keeps an array of vectors in memory inside the loop otherwise.
  __m512 c00 = c[0][0], c01 = c[0][1], c10 = c[1][0], c11 = c[1][1], c20 = c[2][0], c21 = c[2][1], c30 = c[3][0],
         c31 = c[3][1], c40 = c[4][0], c41 = c[4][1], c50 = c[5][0], c51 = c[5][1];
  for (int64_t l = l0; l < l1; ++l) {
    const __m512 b0 = _mm512_load_ps(panel + l * W), b1 = _mm512_load_ps(panel + l * W + 16);
    __m512 x = _mm512_set1_ps(a[0][l]);
    c00 = _mm512_fmadd_ps(x, b0, c00), c01 = _mm512_fmadd_ps(x, b1, c01);
    x = _mm512_set1_ps(a[1][l]);
    c10 = _mm512_fmadd_ps(x, b0, c10), c11 = _mm512_fmadd_ps(x, b1, c11);
    x = _mm512_set1_ps(a[2][l]);
    c20 = _mm512_fmadd_ps(x, b0, c20), c21 = _mm512_fmadd_ps(x, b1, c21);
    x = _mm512_set1_ps(a[3][l]);
    c30 = _mm512_fmadd_ps(x, b0, c30), c31 = _mm512_fmadd_ps(x, b1, c31);
    x = _mm512_set1_ps(a[4][l]);
    c40 = _mm512_fmadd_ps(x, b0, c40), c41 = _mm512_fmadd_ps(x, b1, c41);
    x = _mm512_set1_ps(a[5][l]);
    c50 = _mm512_fmadd_ps(x, b0, c50), c51 = _mm512_fmadd_ps(x, b1, c51);
  }
  const __m512 out[kRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(tile + r * W, out[r][0]);
    _mm512_storeu_ps(tile + r * W + 16, out[r][1]);
  }
}

__attribute__((target("avx2,fma"))) void kernel_avx2(const float* const* a, const float* panel, int64_t l0,
                                                    int64_t l1, float* tile) {
  constexpr int W = 16;
  __m256 c00 = _mm256_loadu_ps(tile + 0), c01 = _mm256_loadu_ps(tile + 8), c10 = _mm256_loadu_ps(tile + 16),
         c11 = _mm256_loadu_ps(tile + 24), c20 = _mm256_loadu_ps(tile + 32), c21 = _mm256_loadu_ps(tile + 40),
         c30 = _mm256_loadu_ps(tile + 48), c31 = _mm256_loadu_ps(tile + 56), c40 = _mm256_loadu_ps(tile + 64),
         c41 = _mm256_loadu_ps(tile + 72), c50 = _mm256_loadu_ps(tile + 80), c51 = _mm256_loadu_ps(tile + 88);
  for (int64_t l = l0; l < l1; ++l) {
    const __m256 b0 = _mm256_load_ps(panel + l * W), b1 = _mm256_load_ps(panel + l * W + 8);
    __m256 x = _mm256_broadcast_ss(a[0] + l);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a[1] + l);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a[2] + l);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a[3] + l);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a[4] + l);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a[5] + l);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  _mm256_storeu_ps(tile + 0, c00), _mm256_storeu_ps(tile + 8, c01), _mm256_storeu_ps(tile + 16, c10);
  _mm256_storeu_ps(tile + 24, c11), _mm256_storeu_ps(tile + 32, c20), _mm256_storeu_ps(tile + 40, c21);
  _mm256_storeu_ps(tile + 48, c30), _mm256_storeu_ps(tile + 56, c31), _mm256_storeu_ps(tile + 64, c40);
  _mm256_storeu_ps(tile + 72, c41), _mm256_storeu_ps(tile + 80, c50), _mm256_storeu_ps(tile + 88, c51);
}
#endif

// The reference every kernel must equal bit for bit: std::fma rounds once, as the vector fma instructions do.
void kernel_portable(const float* const* a, const float* panel, int64_t l0, int64_t l1, float* tile) {
  constexpr int W = 16;
  for (int64_t l = l0; l < l1; ++l)
    for (int r = 0; r < kRows; ++r)
      for (int j = 0; j < W; ++j) tile[r * W + j] = std::fma(a[r][l], panel[l * W + j], tile[r * W + j]);
}

using Kernel = void (*)(const float* const*, const float*, int64_t, int64_t, float*);
struct Isa {
  Kernel kernel;
  int width;  // panel width (columns of C per micro-kernel call)
};

Isa pick(RowGemmIsa want) {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if ((want == RowGemmIsa::automatic || want == RowGemmIsa::avx512) && avx512) return {kernel_avx512, 32};
  if ((want == RowGemmIsa::automatic || want == RowGemmIsa::avx2) && avx2) return {kernel_avx2, 16};
#else
  (void)want;
#endif
  return {kernel_portable, 16};
}

// Packing buffers, kept between calls and only grown: fresh pages cost a fault each, which took longer than the
// product itself. A free list rather than thread_local, since the ranks' threads are new for every step.
class PackBuffer {
 public:
  explicit PackBuffer(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu());
      if (!free_list().empty()) {
        *this = std::move(free_list().back());
        free_list().pop_back();
      }
    }
    if (bytes > bytes_) {
      std::free(data_);
      bytes_ = (bytes + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes_));
      if (!data_) throw std::bad_alloc();
    }
  }
  ~PackBuffer() {
    if (!data_) return;
    std::lock_guard<std::mutex> lock(mu());
    free_list().push_back(std::move(*this));
  }
  PackBuffer(PackBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PackBuffer& operator=(PackBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  float* data() const { return data_; }

 private:
  PackBuffer() = default;
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<PackBuffer>& free_list() {  // never destroyed: buffers may be returned during exit
    static auto* list = new std::vector<PackBuffer>();
    return *list;
  }
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

// B as panels of `w` columns: panel q holds columns q·w … q·w + w - 1 as [L][w] (zero past P).
void pack(const float* b, bool transposed, int64_t p, int64_t l, int w, float* out) {
  const int64_t panels = (p + w - 1) / w;
  for (int64_t q = 0; q < panels; ++q) {
    float* dst = out + q * l * w;
    const int64_t c0 = q * w, n = std::min<int64_t>(w, p - c0);
    for (int64_t k = 0; k < l; ++k) {
      float* row = dst + k * w;
      if (transposed)
        for (int64_t j = 0; j < n; ++j) row[j] = b[(c0 + j) * l + k];
      else
        std::memcpy(row, b + k * p + c0, static_cast<size_t>(n) * sizeof(float));
      std::fill(row + n, row + w, 0.f);
    }
  }
}
}  // namespace

void row_gemm(const float* a, const float* b, bool b_transposed, int64_t m, int64_t p, int64_t l, float* c,
              RowGemmIsa isa) {
  if (m <= 0 || p <= 0) return;
  const Isa k = pick(isa);
  const int w = k.width;
  const int64_t n_panels = (p + w - 1) / w;
  PackBuffer buffer(static_cast<size_t>(n_panels * l * w) * sizeof(float));
  pack(b, b_transposed, p, l, w, buffer.data());
  const float* panels = buffer.data();
  // Tasks: blocks of rows × groups of panels, enough of them to spread; each element is computed by one task, so
  // the split (and the thread count) changes nothing in the result.
  constexpr int64_t row_block = 48, panel_group = 4;
  const int64_t row_blocks = (m + row_block - 1) / row_block, panel_groups = (n_panels + panel_group - 1) / panel_group;
  auto task = [&](int64_t t) {
    const int64_t r0 = (t / panel_groups) * row_block, r1 = std::min(m, r0 + row_block);
    const int64_t q0 = (t % panel_groups) * panel_group, q1 = std::min(n_panels, q0 + panel_group);
    // The block's running sums, [rows][w]: l outermost, so a slice of the panel serves every row of the block.
    // kRows spare rows take the repeated rows of a short tail.
    alignas(64) float sums[(row_block + kRows) * 32];
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t c0 = q * w, cols = std::min<int64_t>(w, p - c0);
      std::fill(sums, sums + (row_block + kRows) * w, 0.f);
      for (int64_t l0 = 0; l0 < l; l0 += kKBlock)
        for (int64_t r = r0; r < r1; r += kRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
          const float* rp[kRows];
          for (int i = 0; i < kRows; ++i) rp[i] = a + (r + std::min(i, rows - 1)) * l;  // a short tail repeats a row
          k.kernel(rp, panels + q * l * w, l0, std::min(l, l0 + kKBlock), sums + (r - r0) * w);
        }
      for (int64_t r = r0; r < r1; ++r)
        std::memcpy(c + r * p + c0, sums + (r - r0) * w, static_cast<size_t>(cols) * sizeof(float));
    }
  };
  const int64_t tasks = row_blocks * panel_groups;
  // Small products run on the calling thread: waking the pool costs more than they take.
  if (m * p * l < (int64_t{1} << 23)) {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    run_cpu_tasks(tasks, task);
  }
}

}  // namespace te::detail
