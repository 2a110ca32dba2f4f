// Micro benchmark (dev tool, not built by meson): the multi-tensor AdamW pass over the layernorm_mlp block's
// parameters (two 16384 × 4096 weights, their biases, LayerNorm's gamma and beta: 134 M f32 masters with f32
// gradients, two f32 moments and a bf16 copy written: 30 bytes an element) against the memory system's ceiling for
// the same bytes. Each variant runs the element update of graph/optimizer_math.h, so their outputs are compared
// bit for bit with the first:
//   table      the engine's kernel: every thread takes 4-element units in a grid-stride loop and looks its slot up
//   chunked    each CTA takes whole chunks of one slot (the slot found once per chunk), each thread U × 4 elements
//              with all its loads issued before the arithmetic, and the bf16 copy stored 8 bytes at a time
//   ceiling    the same loads and stores with one add in place of the update (what the bytes cost)
// Build and run (sm_90), from the repository root:
//   nvcc -O3 -std=c++20 -I. -gencode=arch=compute_90a,code=sm_90a tools/bench/micro/adamw_variants.cu -o adamw_variants
//   ./adamw_variants
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "graph/optimizer_math.h"
#include "micro_check.h"
#include "micro_timing.h"

namespace {
using te::detail::SlotPtrs;

constexpr int kSlots = 8;
constexpr int kVec = 4;

struct Table {
  SlotPtrs slot[kSlots];
  int64_t first[kSlots + 1];  // in units (table) or chunks (chunked)
  int count;
};

__device__ int slot_of(const Table& t, int64_t unit) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first[mid] <= unit)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The engine's kernel as it stands (aligned f32 AdamW path only; the sizes here are multiples of 4).
__global__ void table_kernel(const __grid_constant__ Table table, const te::AdamWScalars* scalars) {
  const int64_t units = table.first[table.count];
  const te::AdamWScalars s = *scalars;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < units; u += int64_t{gridDim.x} * blockDim.x) {
    const int k = slot_of(table, u);
    const SlotPtrs& t = table.slot[k];
    const int64_t i0 = (u - table.first[k]) * kVec;
    float4 p = *reinterpret_cast<const float4*>(t.p + i0);
    const float4 g = *reinterpret_cast<const float4*>(static_cast<const float*>(t.g) + i0);
    float4 m = *reinterpret_cast<const float4*>(t.s1 + i0);
    float4 v = *reinterpret_cast<const float4*>(t.s2 + i0);
    te::detail::adamw_update(p.x, g.x, m.x, v.x, s);
    te::detail::adamw_update(p.y, g.y, m.y, v.y, s);
    te::detail::adamw_update(p.z, g.z, m.z, v.z, s);
    te::detail::adamw_update(p.w, g.w, m.w, v.w, s);
    *reinterpret_cast<float4*>(t.p + i0) = p;
    *reinterpret_cast<float4*>(t.s1 + i0) = m;
    *reinterpret_cast<float4*>(t.s2 + i0) = v;
    const float out[kVec] = {p.x, p.y, p.z, p.w};
    for (int j = 0; j < kVec; ++j) te::store_f32(t.value, t.vt, i0 + j, out[j]);
  }
}

__device__ uint2 pack_bf16(const float4& p) {
  const uint32_t lo = te::bf16_from_f32(p.x) | (uint32_t{te::bf16_from_f32(p.y)} << 16);
  const uint32_t hi = te::bf16_from_f32(p.z) | (uint32_t{te::bf16_from_f32(p.w)} << 16);
  return make_uint2(lo, hi);
}

// Chunks of kThreads × U × 4 elements; a chunk never crosses a slot (the last one of a slot is partial).
template <int U, bool kCeiling, int kThreads>
__global__ void __launch_bounds__(kThreads)
    chunked_kernel(const __grid_constant__ Table table, const te::AdamWScalars* scalars) {
  constexpr int64_t kChunk = int64_t{kThreads} * U * kVec;
  const int64_t chunks = table.first[table.count];
  const te::AdamWScalars s = *scalars;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int k = slot_of(table, c);
    const SlotPtrs& t = table.slot[k];
    const int64_t base = (c - table.first[k]) * kChunk;
    float4 p[U], g[U], m[U], v[U];
    bool live[U];
    TE_UNROLL for (int j = 0; j < U; ++j) {
      const int64_t i0 = base + (int64_t{j} * kThreads + threadIdx.x) * kVec;
      live[j] = i0 < t.n;  // sizes are multiples of 4
      if (live[j]) {
        p[j] = *reinterpret_cast<const float4*>(t.p + i0);
        g[j] = *reinterpret_cast<const float4*>(static_cast<const float*>(t.g) + i0);
        m[j] = *reinterpret_cast<const float4*>(t.s1 + i0);
        v[j] = *reinterpret_cast<const float4*>(t.s2 + i0);
      }
    }
    TE_UNROLL for (int j = 0; j < U; ++j) {
      const int64_t i0 = base + (int64_t{j} * kThreads + threadIdx.x) * kVec;
      if (!live[j]) continue;
      if constexpr (kCeiling) {
        p[j].x += g[j].x;
        m[j].y += g[j].y;
        v[j].z += g[j].z;
      } else {
        te::detail::adamw_update(p[j].x, g[j].x, m[j].x, v[j].x, s);
        te::detail::adamw_update(p[j].y, g[j].y, m[j].y, v[j].y, s);
        te::detail::adamw_update(p[j].z, g[j].z, m[j].z, v[j].z, s);
        te::detail::adamw_update(p[j].w, g[j].w, m[j].w, v[j].w, s);
      }
      *reinterpret_cast<float4*>(t.p + i0) = p[j];
      *reinterpret_cast<float4*>(t.s1 + i0) = m[j];
      *reinterpret_cast<float4*>(t.s2 + i0) = v[j];
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(t.value) + i0) = pack_bf16(p[j]);
    }
  }
}

struct Buffers {
  std::vector<int64_t> sizes;
  std::vector<float*> p, g, m, v;
  std::vector<uint16_t*> w;
};

std::vector<float> host_init(int64_t n, uint32_t seed, float scale) {
  std::vector<float> h(static_cast<size_t>(n));
  uint32_t x = seed;
  for (auto& e : h) {
    x = x * 1664525u + 1013904223u;
    e = scale * (static_cast<float>(x >> 8) / 16777216.0f - 0.5f);
  }
  return h;
}

void reset(const Buffers& b) {  // same starting state for every variant
  for (size_t i = 0; i < b.sizes.size(); ++i) {
    const int64_t n = b.sizes[i];
    const auto hp = host_init(n, 1 + static_cast<uint32_t>(i), 0.1f);
    const auto hg = host_init(n, 101 + static_cast<uint32_t>(i), 0.01f);
    CHECK(cudaMemcpy(b.p[i], hp.data(), n * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.g[i], hg.data(), n * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(b.m[i], 0, n * 4));
    CHECK(cudaMemset(b.v[i], 0, n * 4));
  }
}

Table make_table(const Buffers& b, int64_t unit) {
  Table t{};
  t.count = static_cast<int>(b.sizes.size());
  int64_t first = 0;
  for (int i = 0; i < t.count; ++i) {
    t.slot[i] = SlotPtrs{b.p[i], b.g[i], b.m[i], b.v[i], b.w[i], b.sizes[i], te::DType::f32, te::DType::bf16};
    t.first[i] = first;
    first += (b.sizes[i] + unit - 1) / unit;
  }
  t.first[t.count] = first;
  return t;
}

template <typename Launch>
void time_variant(const char* name, const Buffers& b, int64_t total, Launch launch, std::vector<uint16_t>* reference) {
  reset(b);
  launch();  // one step from the common state: the output compared below
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out;
  for (size_t i = 0; i < b.sizes.size(); ++i) {
    std::vector<uint16_t> h(static_cast<size_t>(b.sizes[i]));
    CHECK(cudaMemcpy(h.data(), b.w[i], b.sizes[i] * 2, cudaMemcpyDeviceToHost));
    out.insert(out.end(), h.begin(), h.end());
  }
  const char* verdict = "reference";
  if (reference->empty())
    *reference = out;
  else
    verdict = std::memcmp(reference->data(), out.data(), out.size() * 2) == 0 ? "equal" : "DIFFERENT";
  const std::vector<float> ms = sorted_event_ms(launch, 30, 0);
  const double med = ms[ms.size() / 2];
  std::printf("%-28s median %.4f ms  min %.4f ms  %.2f TB/s  bf16 copy %s\n", name, med, ms.front(),
              30.0 * static_cast<double>(total) / (med * 1e-3) / 1e12, verdict);
}

}  // namespace

int main() {
  Buffers b;
  b.sizes = {4096, 4096, int64_t{16384} * 4096, 16384, int64_t{4096} * 16384, 4096};
  int64_t total = 0;
  for (int64_t n : b.sizes) {
    total += n;
    float *p, *g, *m, *v;
    uint16_t* w;
    CHECK(cudaMalloc(&p, n * 4));
    CHECK(cudaMalloc(&g, n * 4));
    CHECK(cudaMalloc(&m, n * 4));
    CHECK(cudaMalloc(&v, n * 4));
    CHECK(cudaMalloc(&w, n * 2));
    b.p.push_back(p), b.g.push_back(g), b.m.push_back(m), b.v.push_back(v), b.w.push_back(w);
  }
  te::AdamWScalars hs{};
  {
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    hs = te::AdamWScalars{float(lr),  float(b1),          float(1 - b1), float(b2),    float(1 - b2),
                          float(eps), float(1 - lr * wd), float(1 - b1), float(1 - b2)};
  }
  te::AdamWScalars* ds;
  CHECK(cudaMalloc(&ds, sizeof hs));
  CHECK(cudaMemcpy(ds, &hs, sizeof hs, cudaMemcpyHostToDevice));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("%lld parameters, %d SMs\n", static_cast<long long>(total), sms);
  std::vector<uint16_t> reference;

  const Table units = make_table(b, kVec);
  {
    const int64_t wanted = (units.first[units.count] + 255) / 256;
    const int blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{sms} * 8));
    time_variant(
        "table (engine)", b, total, [&] { table_kernel<<<blocks, 256>>>(units, ds); }, &reference);
  }
  auto chunked = [&]<int U, bool kCeil, int kThreads>(const char* name, int per_sm) {
    const Table t = make_table(b, int64_t{kThreads} * U * kVec);
    const int blocks = static_cast<int>(std::min<int64_t>(t.first[t.count], int64_t{sms} * per_sm));
    time_variant(
        name, b, total, [&] { chunked_kernel<U, kCeil, kThreads><<<blocks, kThreads>>>(t, ds); },
        kCeil ? new std::vector<uint16_t>() : &reference);
  };
  chunked.operator()<1, false, 256>("chunked U=1 256x8/SM", 8);
  chunked.operator()<2, false, 256>("chunked U=2 256x8/SM", 8);
  chunked.operator()<2, false, 256>("chunked U=2 256x4/SM", 4);
  chunked.operator()<4, false, 256>("chunked U=4 256x4/SM", 4);
  chunked.operator()<4, false, 256>("chunked U=4 256x2/SM", 2);
  chunked.operator()<2, false, 512>("chunked U=2 512x4/SM", 4);
  chunked.operator()<1, true, 256>("ceiling U=1 256x8/SM", 8);
  chunked.operator()<2, true, 256>("ceiling U=2 256x8/SM", 8);
  chunked.operator()<4, true, 256>("ceiling U=4 256x4/SM", 4);
  // Again in reverse order of the first two, so a clock or thermal drift shows.
  chunked.operator()<2, false, 256>("chunked U=2 256x8/SM (again)", 8);
  {
    const int64_t wanted = (units.first[units.count] + 255) / 256;
    const int blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{sms} * 8));
    time_variant(
        "table (engine, again)", b, total, [&] { table_kernel<<<blocks, 256>>>(units, ds); }, &reference);
  }
  return 0;
}
