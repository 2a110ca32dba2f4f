#include <gtest/gtest.h>

#include "engine/device.h"
#include "engine/error.h"

namespace te {
namespace {

TEST(Device, AutoFallsBackToCpuWithoutGpu) {
  Device d = parse_device("auto");
  if (cuda_device_count() == 0) {
    EXPECT_TRUE(d.is_cpu());
    EXPECT_NE(no_gpu_reason().find("no GPU"), std::string::npos);
    EXPECT_THROW(parse_device("cuda:0"), InputError);
  } else {
    EXPECT_EQ(d, Device::cuda(0));
    EXPECT_TRUE(no_gpu_reason().empty());
  }
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_THROW(parse_device("tpu"), InputError);
  EXPECT_THROW(parse_device("cuda:x"), InputError);
  EXPECT_THROW(parse_device("cuda:99"), InputError);
}

TEST(Device, GpuInfoOnHopper) {
  if (cuda_device_count() == 0) GTEST_SKIP() << no_gpu_reason();
  auto gpus = gpu_infos();
  ASSERT_FALSE(gpus.empty());
  EXPECT_GE(gpus[0].cc_major, 7);
  EXPECT_GT(gpus[0].total_bytes, 0);
}

// Grids are sized by the current device's multiprocessors: the same number gpu_infos reports, 0 without a GPU;
// a grid-stride grid has enough blocks for its items, at most per_sm per multiprocessor, and at least one.
TEST(Device, CurrentSmCountSizesGrids) {
  if (cuda_device_count() == 0) {
    EXPECT_EQ(current_sm_count(), 0);
    EXPECT_EQ(grid_stride_blocks(1 << 20, 256, 8), 1);
    return;
  }
  set_current_device(Device::cuda(0));
  const int sms = current_sm_count();
  EXPECT_EQ(sms, gpu_infos()[0].sm_count);
  EXPECT_GT(sms, 0);
  EXPECT_EQ(grid_stride_blocks(0, 256, 8), 1);
  EXPECT_EQ(grid_stride_blocks(1000, 256, 8), 4);
  EXPECT_EQ(grid_stride_blocks(int64_t(1) << 40, 256, 8), int64_t(sms) * 8);
}

}  // namespace
}  // namespace te
