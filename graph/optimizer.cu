// CUDA optimizers, multi-tensor: one launch updates up to kSlotsPerLaunch parameters. The parameters are laid end
// to end in units of four elements; each thread takes units in a grid-stride loop, finds its slot in the argument
// table, and updates four elements with 16-byte loads and stores of the f32 arrays where they are aligned. The
// element update is optimizer_math.h's, so the result equals the CPU reference bit for bit.
#include <algorithm>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "graph/optimizer_math.h"

namespace te::detail {

namespace {
constexpr int kThreads = 256;
constexpr int kSlotsPerLaunch = 48;  // the table stays well inside the 4 KiB of kernel arguments
constexpr int kVec = 4;

struct SlotTable {
  SlotPtrs slot[kSlotsPerLaunch];
  int64_t first_unit[kSlotsPerLaunch + 1];  // slot i owns units [first_unit[i], first_unit[i + 1])
  bool aligned[kSlotsPerLaunch];            // f32 arrays 16-byte aligned: vector loads
  int count;
};

__device__ int slot_of(const SlotTable& t, int64_t unit) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {  // the last slot whose first unit is <= unit
    const int mid = (lo + hi + 1) / 2;
    if (t.first_unit[mid] <= unit)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The scalars and the skip flag are read from memory (OptimizerStep), once per thread.
__global__ void optimizer_kernel(const __grid_constant__ SlotTable table, OptimizerKind kind,
                                 const OptimizerScalars* scalars, const int32_t* skip, bool update) {
  const bool skipped = skip != nullptr && *skip != 0;
  if (!skipped && !update) return;
  const int64_t units = table.first_unit[table.count];
  const OptimizerScalars s = skipped ? OptimizerScalars{} : *scalars;  // a skipped step reads none
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < units; u += int64_t{gridDim.x} * blockDim.x) {
    const int k = slot_of(table, u);
    const SlotPtrs& t = table.slot[k];
    const int64_t i0 = (u - table.first_unit[k]) * kVec;
    if (skipped) {
      for (int64_t i = i0; i < std::min<int64_t>(i0 + kVec, t.n); ++i) skip_element(t, i);
      continue;
    }
    if (table.aligned[k] && i0 + kVec <= t.n && t.gt == DType::f32 && kind == OptimizerKind::adamw) {
      float4 p = *reinterpret_cast<const float4*>(t.p + i0);
      const float4 g = *reinterpret_cast<const float4*>(static_cast<const float*>(t.g) + i0);
      float4 m = *reinterpret_cast<const float4*>(t.s1 + i0);
      float4 v = *reinterpret_cast<const float4*>(t.s2 + i0);
      adamw_update(p.x, g.x, m.x, v.x, s.adamw);
      adamw_update(p.y, g.y, m.y, v.y, s.adamw);
      adamw_update(p.z, g.z, m.z, v.z, s.adamw);
      adamw_update(p.w, g.w, m.w, v.w, s.adamw);
      *reinterpret_cast<float4*>(t.p + i0) = p;
      *reinterpret_cast<float4*>(t.s1 + i0) = m;
      *reinterpret_cast<float4*>(t.s2 + i0) = v;
      if (t.value) {
        const float out[kVec] = {p.x, p.y, p.z, p.w};
        for (int j = 0; j < kVec; ++j) store_f32(t.value, t.vt, i0 + j, out[j]);
      }
      continue;
    }
    for (int64_t i = i0; i < std::min<int64_t>(i0 + kVec, t.n); ++i) update_element(t, i, kind, s);
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

void optimizer_cuda(std::span<const SlotPtrs> slots, const OptimizerStep& step, const Stream& stream) {
  for (size_t begin = 0; begin < slots.size(); begin += kSlotsPerLaunch) {
    SlotTable table{};
    table.count = static_cast<int>(std::min<size_t>(kSlotsPerLaunch, slots.size() - begin));
    int64_t units = 0;
    for (int k = 0; k < table.count; ++k) {
      const SlotPtrs& t = slots[begin + static_cast<size_t>(k)];
      table.slot[k] = t;
      table.first_unit[k] = units;
      table.aligned[k] = aligned16(t.p) && aligned16(t.g) && aligned16(t.s1) && aligned16(t.s2);
      units += (t.n + kVec - 1) / kVec;
    }
    table.first_unit[table.count] = units;
    if (units == 0) continue;
    const int64_t wanted = (units + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{current_sm_count()} * 8));
    optimizer_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
        table, step.kind, step.scalars, step.skip, step.update);
    TE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace te::detail
