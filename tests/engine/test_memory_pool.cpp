// CudaMemoryPool: blocks allocated inside a PoolScope return to the pool and are handed out only inside a scope of
// the same pool — the property CUDA-graph replay relies on.
#include <gtest/gtest.h>

#include "engine/allocator.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "tests/common/gpu.h"

namespace te {
namespace {

TEST(MemoryPool, KeepsItsBlocksToItself) {
  TE_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  const Stream st = Stream::create(dev);
  CudaMemoryPool pool(dev);
  void* pooled = nullptr;
  {
    PoolScope scope(pool);
    Tensor t = Tensor::empty({1 << 20}, DType::f32, dev, st);
    pooled = t.data_ptr();
  }  // t freed (back to the pool) and the scope closed
  EXPECT_GE(pool.reserved_bytes(), int64_t(4) << 20);
  {
    Tensor outside = Tensor::empty({1 << 20}, DType::f32, dev, st);  // same size, same stream, no scope
    EXPECT_NE(outside.data_ptr(), pooled);
  }
  {
    PoolScope scope(pool);
    Tensor again = Tensor::empty({1 << 20}, DType::f32, dev, st);
    EXPECT_EQ(again.data_ptr(), pooled);
    EXPECT_THROW(PoolScope second(pool), Error);  // one scope per device at a time
  }
}

TEST(MemoryPool, TensorOutlivingItsPoolIsFreedSafely) {
  TE_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  const Stream st = Stream::create(dev);
  Tensor survivor;
  {
    CudaMemoryPool pool(dev);
    PoolScope scope(pool);
    survivor = Tensor::empty({4096}, DType::f32, dev, st);
  }
  survivor.fill(2.0, st);
  EXPECT_EQ(survivor.to_f32_vector(st)[4095], 2.0f);
  survivor = Tensor();  // returns to the shared cache
  const Tensor next = Tensor::empty({4096}, DType::f32, dev, st);
  EXPECT_EQ(next.numel(), 4096);
}

TEST(MemoryPool, CpuIsRefused) { EXPECT_THROW(CudaMemoryPool(Device::cpu()), Error); }

}  // namespace
}  // namespace te
