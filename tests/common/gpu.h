// GPU cases live beside CPU cases and skip cleanly where no GPU is present.
#pragma once
#include <gtest/gtest.h>

#include "engine/device.h"

#define TE_REQUIRE_GPU()                                                        \
  do {                                                                          \
    if (::te::cuda_device_count() == 0) GTEST_SKIP() << ::te::no_gpu_reason();  \
  } while (0)
