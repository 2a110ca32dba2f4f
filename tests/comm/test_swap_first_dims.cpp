// swap_first_dims: every dtype width (fp4 included), strided windows on both sides, CPU vs a naive loop and
// CUDA vs CPU bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "common/gpu.h"
#include "engine/error.h"
#include "engine/philox.h"
#include "ops/elementwise/swap_first_dims.h"

namespace te {
namespace {

Tensor random_bytes(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(uniform_at(seed, i) * 256.f);
  return t;
}

std::vector<uint8_t> host_bytes(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.data_ptr());
  return {p, p + h.nbytes()};
}

struct SwapCase {
  int64_t A, B, C;
  DType dtype;
};

class SwapFirstDims : public ::testing::TestWithParam<SwapCase> {};

TEST_P(SwapFirstDims, MatchesNaiveLoop) {
  const auto [A, B, C, dt] = GetParam();
  Tensor in = random_bytes({A, B, C}, dt, 7);
  Tensor out = Tensor::zeros({B, A, C}, dt);
  swap_first_dims(in, out);
  const int64_t row = dtype_storage_bytes(dt, C);
  auto ib = host_bytes(in), ob = host_bytes(out);
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      ASSERT_EQ(0, std::memcmp(&ob[(b * A + a) * row], &ib[(a * B + b) * row], row)) << "a=" << a << " b=" << b;
}

TEST_P(SwapFirstDims, CudaEqualsCpu) {
  TE_REQUIRE_GPU();
  const auto [A, B, C, dt] = GetParam();
  Tensor in = random_bytes({A, B, C}, dt, 9);
  Tensor ref = Tensor::zeros({B, A, C}, dt);
  swap_first_dims(in, ref);
  const Device g = Device::cuda(0);
  Tensor din = in.to(g);
  Tensor dout = Tensor::zeros({B, A, C}, dt, g);
  swap_first_dims(din, dout);
  EXPECT_EQ(host_bytes(dout), host_bytes(ref));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwapFirstDims,
                         ::testing::Values(SwapCase{4, 128, 250, DType::u8}, SwapCase{3, 7, 1, DType::u8},
                                           SwapCase{8, 33, 5, DType::f32}, SwapCase{2, 5, 3, DType::bf16},
                                           SwapCase{4, 16, 8, DType::fp4_e2m1}, SwapCase{1, 9, 16, DType::fp8_e4m3},
                                           SwapCase{5, 1, 64, DType::f32}, SwapCase{3, 0, 4, DType::u8}));

// A narrowed source (per-rank padding dropped) into a transposed-window destination: the scale fix of the gather.
TEST(SwapFirstDimsStrided, NarrowedSourceIntoWindow) {
  for (bool gpu : {false, true}) {
    if (gpu && cuda_device_count() == 0) continue;
    const Device dev = gpu ? Device::cuda(0) : Device::cpu();
    const int64_t W = 3, R = 5, ld_l = 8, units = 6;
    Tensor full = random_bytes({W, R, ld_l}, DType::f32, 3).to(dev);
    Tensor in = full.narrow(2, 0, units);  // [W, R, units], rows padded to ld_l
    Tensor buf = Tensor::zeros({R, W, units}, DType::f32, dev);
    swap_first_dims(in, buf);
    auto f = full.to_f32_vector();
    auto o = buf.to_f32_vector();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t u = 0; u < units; ++u) {
          const float a = f[(w * R + r) * ld_l + u], b = o[(r * W + w) * units + u];
          ASSERT_EQ(0, std::memcmp(&a, &b, 4));
        }
  }
}

TEST(SwapFirstDimsErrors, RejectsMismatchedShapes) {
  Tensor in = Tensor::zeros({2, 3, 4}, DType::f32);
  Tensor bad = Tensor::zeros({2, 3, 4}, DType::f32);
  EXPECT_THROW(swap_first_dims(in, bad), Error);
  Tensor bad_dtype = Tensor::zeros({3, 2, 4}, DType::bf16);
  EXPECT_THROW(swap_first_dims(in, bad_dtype), Error);
  Tensor odd_fp4 = Tensor::zeros({2, 3, 3}, DType::fp4_e2m1);
  Tensor odd_fp4_out = Tensor::zeros({3, 2, 3}, DType::fp4_e2m1);
  EXPECT_THROW(swap_first_dims(odd_fp4, odd_fp4_out), Error);
}

}  // namespace
}  // namespace te
