// swap_first_dims: argument checks and the CPU reference (row memcpys).
#include "ops/elementwise/swap_first_dims.h"

#include <cstring>

#include "engine/error.h"
#include "te_config.h"

namespace te {
namespace detail {
void swap_first_dims_cpu(const SwapFirstDimsArgs& g) {
  for (int64_t a = 0; a < g.A; ++a)
    for (int64_t b = 0; b < g.B; ++b)
      std::memcpy(g.out + b * g.out_pitch_b + a * g.out_pitch_a, g.in + a * g.in_pitch_a + b * g.in_pitch_b,
                  static_cast<size_t>(g.row_bytes));
}
}  // namespace detail

namespace {
// Elements in one trailing row; checks that dims 2.. are contiguous.
int64_t trailing_row(const Tensor& t, const char* what) {
  int64_t n = 1;
  for (int d = t.dim() - 1; d >= 2; --d) {
    TE_CHECK_HINT(t.size(d) <= 1 || t.stride(d) == n,
                  "swap_first_dims: " << what << " " << t.str() << " has non-contiguous trailing dims",
                  "make the trailing dims contiguous (only dims 0 and 1 may be strided)");
    n *= t.size(d);
  }
  return n;
}
int64_t byte_pitch(const Tensor& t, int d, const char* what) {
  const int64_t bits = t.stride(d) * dtype_bits(t.dtype());
  TE_CHECK(bits % 8 == 0, "swap_first_dims: " << what << " " << t.str() << " stride of dim " << d
                                               << " is not a whole number of bytes");
  return bits / 8;
}
}  // namespace

void swap_first_dims(const Tensor& in, const Tensor& out, const Stream& stream) {
  TE_CHECK(in.defined() && out.defined(), "swap_first_dims: undefined tensor");
  TE_CHECK_HINT(in.dim() >= 2 && out.dim() == in.dim() && in.dtype() == out.dtype() && in.size(0) == out.size(1) &&
                    in.size(1) == out.size(0),
                "swap_first_dims: in " << in.str() << " and out " << out.str()
                                       << " must be [A, B, ...] and [B, A, ...] of one dtype",
                "allocate out with dims 0 and 1 swapped");
  for (int d = 2; d < in.dim(); ++d)
    TE_CHECK(in.size(d) == out.size(d), "swap_first_dims: trailing dims differ: " << in.str() << " vs " << out.str());
  TE_CHECK(in.device() == out.device(), "swap_first_dims: in on " << in.device().str() << ", out on "
                                                                   << out.device().str());
  const int64_t row = trailing_row(in, "in");
  TE_CHECK(trailing_row(out, "out") == row, "swap_first_dims: trailing rows differ");
  const int64_t row_bits = row * dtype_bits(in.dtype());
  TE_CHECK_HINT(row_bits % 8 == 0, "swap_first_dims: a trailing row of " << in.str() << " is not whole bytes",
                "fp4 rows must hold an even number of elements");
  detail::SwapFirstDimsArgs g{};
  g.A = in.size(0);
  g.B = in.size(1);
  g.row_bytes = row_bits / 8;
  if (g.A == 0 || g.B == 0 || g.row_bytes == 0) return;
  g.in = static_cast<const uint8_t*>(in.data_ptr());
  g.out = static_cast<uint8_t*>(out.data_ptr());
  g.in_pitch_a = byte_pitch(in, 0, "in");
  g.in_pitch_b = byte_pitch(in, 1, "in");
  g.out_pitch_b = byte_pitch(out, 0, "out");
  g.out_pitch_a = byte_pitch(out, 1, "out");
  swap_first_dims_bytes(g, in.device(), stream);
}

void swap_first_dims_bytes(const detail::SwapFirstDimsArgs& g, Device device, const Stream& stream) {
  if (g.A == 0 || g.B == 0 || g.row_bytes == 0) return;
  if (device.is_cpu()) {
    detail::swap_first_dims_cpu(g);
    return;
  }
#if TE_WITH_CUDA
  detail::swap_first_dims_cuda(g, stream);
#else
  (void)stream;
  TE_THROW("swap_first_dims on " << device.str() << " in a build without CUDA", "use device: cpu");
#endif
}

}  // namespace te
