// The micro benchmarks' timing (dev tools built by a single nvcc line): `reps` samples of fn() on the default stream,
// each between two CUDA events, after `warmup` untimed calls; the times in ms, sorted (median: [size / 2]).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "micro_check.h"

template <typename Fn>
std::vector<float> sorted_event_ms(Fn fn, int reps, int warmup) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int w = 0; w < warmup; ++w) fn();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(e0));
    fn();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms;
}
