// Tensor views, contiguous(), host/device copies, seeded init and allocator accounting.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "common/gpu.h"
#include "engine/allocator.h"
#include "engine/error.h"
#include "engine/float_convert.h"
#include "engine/tensor.h"

namespace te {
namespace {

std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

TEST(Tensor, ViewsShareStorageAndIndexCorrectly) {
  Tensor t = Tensor::from_f32(iota(5 * 7), {5, 7}, DType::f32);
  Tensor tr = t.transpose(0, 1);
  EXPECT_EQ(tr.shape(), (Shape{7, 5}));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.storage(), t.storage());
  auto v = tr.contiguous().to_f32_vector();
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j) ASSERT_EQ(v[i * 5 + j], j * 7 + i);
  Tensor s = t.slice(1, 1, 7, 2);  // columns 1, 3, 5
  EXPECT_EQ(s.shape(), (Shape{5, 3}));
  auto sv = s.to_f32_vector();
  EXPECT_EQ(sv[0], 1.f);
  EXPECT_EQ(sv[4], 7 + 3.f);
  Tensor n = t.narrow(0, 2, 2);
  EXPECT_TRUE(n.is_contiguous());
  EXPECT_EQ(n.to_f32_vector()[0], 14.f);
  EXPECT_EQ(t.reshape({7, -1}).shape(), (Shape{7, 5}));
  EXPECT_THROW(tr.reshape({35}), Error);
  EXPECT_THROW(t.slice(0, 3, 9), Error);
  EXPECT_THROW(t.size(2), Error);
}

TEST(Tensor, OddShapesAndStridesContiguous) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3}) {
    Tensor t = Tensor::empty({3, 5, 7}, dt);
    t.fill_uniform(11, -4.f, 4.f);
    Tensor v = t.transpose(0, 2).slice(1, 1, 5, 3);  // [7, 2, 3]
    Tensor c = v.contiguous();
    ASSERT_TRUE(c.is_contiguous());
    auto full = t.to_f32_vector(), got = c.to_f32_vector();
    int k = 0;
    for (int i = 0; i < 7; ++i)
      for (int j = 1; j < 5; j += 3)
        for (int l = 0; l < 3; ++l) ASSERT_EQ(got[k++], full[l * 35 + j * 7 + i]) << dtype_name(dt);
  }
}

// Counting elements is where a hostile shape is first seen: negative dimensions (wherever they sit) and products
// past kMaxNumel are input errors, never a wrapped count. Zero dimensions count as one against the bound, so an
// empty tensor's strides cannot overflow either.
TEST(Tensor, ShapeNumelIsChecked) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 4}), 12);
  EXPECT_EQ(shape_numel({0, int64_t{1} << 20, int64_t{1} << 20}), 0);
  EXPECT_EQ(Tensor::empty({0, int64_t{1} << 20, int64_t{1} << 20}, DType::f32).strides(),
            (Shape{int64_t{1} << 40, int64_t{1} << 20, 1}));
  EXPECT_THROW(shape_numel({0, int64_t{1} << 62, int64_t{1} << 62}), InputError);
  EXPECT_THROW(Tensor::empty({0, int64_t{1} << 62, int64_t{1} << 62}, DType::f32), InputError);
  EXPECT_THROW(shape_numel({int64_t{1} << 62, 256}), InputError);
  EXPECT_THROW(shape_numel({int64_t{1} << 32, int64_t{1} << 32}), InputError);
  EXPECT_THROW(shape_numel({-5, 0}), InputError);
  EXPECT_THROW(shape_numel({0, -5}), InputError);
}

TEST(Tensor, FillConvertsAndRandomIsSeeded) {
  Tensor a = Tensor::empty({100}, DType::bf16), b = Tensor::empty({100}, DType::bf16);
  a.fill_normal(42);
  b.fill_normal(42);
  EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector());
  b.fill_normal(43);
  EXPECT_NE(a.to_f32_vector(), b.to_f32_vector());
  Tensor big = Tensor::empty({20000}, DType::f32);
  big.fill_normal(1);
  auto v = big.to_f32_vector();
  double mean = 0, var = 0;
  for (float x : v) mean += x;
  mean /= v.size();
  for (float x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
  Tensor f = Tensor::empty({4}, DType::fp8_e4m3);
  f.fill(1000.0);  // saturates
  EXPECT_EQ(f.to_f32_vector()[3], 448.f);
}

// An fp4 random fill writes whole bytes: it never reads what the memory held before, and the high nibble of an odd
// count's last byte is zero, so the bytes (what a file or a checksum sees) are the same on every device.
std::vector<uint8_t> fp4_fill_bytes(Device dev) {
  Tensor t = Tensor::empty({5}, DType::fp4_e2m1, dev);
  if (dev.is_cpu())
    std::memset(t.data_ptr(), 0xFF, 3);  // what the fill must not keep
  else
    t.fill(-6.0);  // on a GPU a memset of whole bytes: every nibble 0xF
  t.fill_normal(7, 0.f, 2.f);
  const Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.data_ptr());
  return {p, p + 3};
}

TEST(Tensor, Fp4RandomFillWritesWholeBytes) {
  Tensor f = Tensor::empty({5}, DType::f32);
  f.fill_normal(7, 0.f, 2.f);
  const std::vector<float> v = f.to_f32_vector();
  const std::vector<uint8_t> want = {
      static_cast<uint8_t>(e2m1_from_f32(v[0]) | (e2m1_from_f32(v[1]) << 4)),
      static_cast<uint8_t>(e2m1_from_f32(v[2]) | (e2m1_from_f32(v[3]) << 4)), e2m1_from_f32(v[4])};
  EXPECT_EQ(fp4_fill_bytes(Device::cpu()), want);
}

TEST(TensorGpu, Fp4RandomFillWritesWholeBytes) {
  TE_REQUIRE_GPU();
  EXPECT_EQ(fp4_fill_bytes(Device::cuda(0)), fp4_fill_bytes(Device::cpu()));
}

TEST(Tensor, HostAllocatorAlignedAndCounted) {
  MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor t = Tensor::empty({1000}, DType::f32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
    MemoryStats during = memory_stats(Device::cpu());
    EXPECT_EQ(during.current_bytes - before.current_bytes, 4000);
    EXPECT_GE(during.peak_bytes, during.current_bytes);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before.current_bytes);
}

// A freed big host block serves the next request of its size without reaching the system, is counted as cached
// meanwhile, is never kept beyond the bytes in use, and goes back to the system with empty_cache.
TEST(Tensor, HostAllocatorKeepsBigBlocksForReuse) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer the host allocator keeps nothing";
#endif
  empty_cache(Device::cpu());
  const int64_t big = int64_t{6} << 20;
  Tensor keep = Tensor::empty({big}, DType::u8);  // in use: room in the cache for one block of this size
  const MemoryStats s0 = memory_stats(Device::cpu());
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({big}, DType::u8);
    first = t.data_ptr();
  }
  EXPECT_EQ(memory_stats(Device::cpu()).cached_bytes - s0.cached_bytes, big);
  {
    Tensor t = Tensor::empty({big}, DType::u8);
    EXPECT_EQ(t.data_ptr(), first);
    const MemoryStats s1 = memory_stats(Device::cpu());
    EXPECT_EQ(s1.device_allocs - s0.device_allocs, 1) << "the second request came from the cache";
    EXPECT_EQ(s1.cached_bytes, s0.cached_bytes);
    std::memset(t.data_ptr(), 1, static_cast<size_t>(big));
  }
  keep = Tensor();  // nothing big in use now: of the two blocks freed, the cache keeps what the bytes in use allow
  const MemoryStats s2 = memory_stats(Device::cpu());
  EXPECT_LE(s2.cached_bytes, std::max<int64_t>(s2.current_bytes, 0) + big);
  empty_cache(Device::cpu());
  EXPECT_EQ(memory_stats(Device::cpu()).cached_bytes, 0);
}

TEST(TensorGpu, CopiesRoundTripAndMatchHostInit) {
  TE_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2, DType::fp4_e2m1}) {
    Tensor h = Tensor::empty({37, 64}, dt);
    h.fill_normal(5, 0.f, 2.f);
    Tensor d = Tensor::empty({37, 64}, dt, Device::cuda(0));
    d.fill_normal(5, 0.f, 2.f);
    EXPECT_EQ(d.to_f32_vector(), h.to_f32_vector()) << "seeded init differs on CUDA for " << dtype_name(dt);
    EXPECT_EQ(h.to(Device::cuda(0)).to(Device::cpu()).to_f32_vector(), h.to_f32_vector());
  }
  Tensor h = Tensor::from_f32(iota(6 * 10), {6, 10}, DType::bf16);
  Tensor d = h.to(Device::cuda(0));
  EXPECT_EQ(d.transpose(0, 1).contiguous().to_f32_vector(), h.transpose(0, 1).contiguous().to_f32_vector());
  Tensor u = Tensor::empty({1000}, DType::f32, Device::cuda(0));
  u.fill_uniform(9, -1.f, 1.f);
  Tensor uh = Tensor::empty({1000}, DType::f32);
  uh.fill_uniform(9, -1.f, 1.f);
  EXPECT_EQ(u.to_f32_vector(), uh.to_f32_vector());
}

TEST(TensorGpu, CachingAllocatorReusesAndCountsPeak) {
  TE_REQUIRE_GPU();
  Device dev = Device::cuda(0);
  reset_peak_memory(dev);
  MemoryStats s0 = memory_stats(dev);
  void* first;
  {
    Tensor a = Tensor::empty({1 << 20}, DType::f32, dev);
    first = a.data_ptr();
  }
  Tensor b = Tensor::empty({1 << 20}, DType::f32, dev);
  EXPECT_EQ(b.data_ptr(), first) << "a freed block of the same size on the same stream is reused";
  MemoryStats s1 = memory_stats(dev);
  EXPECT_EQ(s1.device_allocs - s0.device_allocs, 1);
  EXPECT_GE(s1.peak_bytes, 4 << 20);
  try {
    Tensor huge = Tensor::empty({int64_t(1) << 40}, DType::f32, dev);
    FAIL() << "4 TiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("requested 4398046511104 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos);
  }
}

}  // namespace
}  // namespace te
