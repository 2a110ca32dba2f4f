// Micro benchmark (dev tool, not built by meson): how fast TMA streams an fp8 weight from HBM into shared memory,
// by the shape of what one load fetches. No arithmetic: a single thread per CTA keeps a ring of stages in flight and
// re-issues each stage as soon as it lands, so the figure is the memory system's, for each way of cutting a weight
// of R rows × K bytes into per-CTA tiles and per-stage loads:
//   rows128_k4   2-D boxes of 128 rows × 128 bytes, four consecutive ones per stage (512 contiguous bytes a row);
//                tiles of 128 rows × all K (the weight-streaming GEMM's cut)
//   rowsN_kM     one 3-D box of N rows × M consecutive 128-byte blocks (M·128 contiguous bytes a row) per stage;
//                tiles of N rows × all K
//   bulk64k      1-D bulk copies of 64 KiB of consecutive bytes (tiles of whole rows)
// and, for the first cut, what the GEMM adds around the same loads: +x also loads the matching 128-byte K blocks of
// 16 token rows (re-read from L2 by every CTA) into each stage; +release has a second warp wait for each stage and
// hand it back through an "empty" barrier before the stage is loaded again, as the GEMM's consumers do.
// Beside them, ordinary loads of the same bytes (ldg: no TMA, no shared memory). Each cut is timed both as one launch
// per event pair (the launch gap included, as a GEMM timed alone sees it) and in batches of 20 back-to-back launches
// (as a replayed forward runs it).
// Build and run (sm_90):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a tools/bench/micro/stream_boxes.cu -o stream_boxes
//   ./stream_boxes
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "micro_check.h"
#include "micro_timing.h"

namespace {

constexpr int kStageBytes = 64 * 1024;
constexpr int kXBytes = 4 * 16 * 128;  // four K blocks of 16 token rows
constexpr int kStages = 3;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(uint64_t* b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(b)));
}
__device__ __forceinline__ void expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void wait(uint64_t* b, uint32_t parity) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
                   smem_addr(b)),
               "r"(parity)
               : "memory");
}
__device__ __forceinline__ uint64_t evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void load2d(void* dst, const CUtensorMap* m, int x, int y, uint64_t* b, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%2, %3}], [%4], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(x), "r"(y), "r"(smem_addr(b)), "l"(pol)
      : "memory");
}
__device__ __forceinline__ void load3d(void* dst, const CUtensorMap* m, int x, int y, int z, uint64_t* b,
                                       uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%2, %3, %4}], [%5], %6;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(b)), "l"(pol)
      : "memory");
}
__device__ __forceinline__ void load1d(void* dst, const void* src, uint32_t bytes, uint64_t* b, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(b)), "l"(pol)
      : "memory");
}

enum Mode : int { kRows128K4 = 0, kBox3d = 1, kBulk = 2 };

// One stage = 64 KiB. Stage i of tile t: mode kRows128K4: 4 boxes (128 rows, 128 B) at K block 4i..4i+3;
// kBox3d: one box of box_rows rows × (64 KiB / box_rows / 128) blocks; kBulk: bytes [64 KiB·i, +64 KiB) of the tile.
__global__ void __launch_bounds__(64)
    stream_kernel(const __grid_constant__ CUtensorMap map2, const __grid_constant__ CUtensorMap map3,
                  const __grid_constant__ CUtensorMap xmap, const uint8_t* w, int mode, int64_t kbytes, int box_rows,
                  int tiles, bool with_x, bool release, int64_t* sink) {
  extern __shared__ uint8_t raw[];
  uint8_t* ring = raw + ((1024 - smem_addr(raw) % 1024) % 1024);
  __shared__ uint64_t full[kStages], empty[kStages];
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) bar_init(&full[s]), bar_init(&empty[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int64_t per_tile = int64_t(box_rows) * kbytes / kStageBytes;
  int64_t total = 0;  // stages this CTA streams
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) total += per_tile;
  if (threadIdx.x == 32 && release) {  // the "consumer": waits for each stage and hands it back
    for (int64_t n = 0; n < total; ++n) {
      wait(&full[n % kStages], (n / kStages) & 1);
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&empty[n % kStages])) : "memory");
    }
  }
  if (threadIdx.x != 0) return;
  const uint64_t pol = evict_first(), keep = evict_last();
  const int64_t tile_bytes = int64_t(box_rows) * kbytes;
  const int stages_per_tile = static_cast<int>(tile_bytes / kStageBytes);
  const int blocks_per_stage = kStageBytes / box_rows / 128;
  int64_t issued = 0, done = 0;
  uint32_t phase[kStages] = {};
  auto issue = [&](int64_t n) {  // the n-th stage of this CTA's work
    const int s = static_cast<int>(n % kStages);
    const int64_t t = blockIdx.x + (n / stages_per_tile) * gridDim.x;
    const int i = static_cast<int>(n % stages_per_tile);
    uint8_t* dst = ring + s * (kStageBytes + kXBytes);
    if (release && n >= kStages) wait(&empty[s], ((n / kStages) - 1) & 1);
    expect(&full[s], kStageBytes + (with_x ? kXBytes : 0));
    if (mode == kRows128K4) {
      for (int u = 0; u < 4; ++u) load2d(dst + u * 16384, &map2, (4 * i + u) * 128, int(t * 128), &full[s], pol);
      if (with_x)
        for (int u = 0; u < 4; ++u) load2d(dst + kStageBytes + u * 2048, &xmap, (4 * i + u) * 128, 0, &full[s], keep);
    } else if (mode == kBox3d) {
      load3d(dst, &map3, 0, i * blocks_per_stage, int(t * box_rows), &full[s], pol);
    } else {
      load1d(dst, w + t * tile_bytes + int64_t(i) * kStageBytes, kStageBytes, &full[s], pol);
    }
  };
  for (; issued < (total < kStages ? total : kStages); ++issued) issue(issued);
  int64_t sum = 0;
  for (; done < total; ++done) {
    const int s = static_cast<int>(done % kStages);
    wait(&full[s], phase[s]);
    phase[s] ^= 1;
    sum += ring[s * (kStageBytes + kXBytes) + (done & 1023)];
    if (issued < total) issue(issued++);
  }
  if (sum == -1) *sink = sum;
}

// The same bytes read by ordinary loads, for the memory system's ceiling without TMA: each thread keeps U 16-byte
// loads in flight (ld.global.nc, no L1 allocation, 256-byte L2 prefetch) over a grid-stride walk of the whole weight.
template <int U>
__global__ void __launch_bounds__(256) ldg_kernel(const uint4* w, int64_t n16, int64_t* sink) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u * stride < n16)
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                     : "l"(w + i + u * stride));
      else
        v[u] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
}

CUtensorMap map_2d(const void* w, uint64_t rows, uint64_t kbytes, uint32_t box_rows = 128) {
  CUtensorMap m{};
  const cuuint64_t dims[2] = {kbytes, rows}, strides[1] = {kbytes};
  const cuuint32_t box[2] = {128, box_rows}, es[2] = {1, 1};
  encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(w), dims, strides, box, es,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return m;
}

// [rows][K blocks][128 bytes]: a box of box_rows rows × blocks K blocks, each row's blocks contiguous in memory.
CUtensorMap map_3d(const void* w, uint64_t rows, uint64_t kbytes, uint32_t box_rows, uint32_t blocks) {
  CUtensorMap m{};
  const cuuint64_t dims[3] = {128, kbytes / 128, rows}, strides[2] = {128, kbytes};
  const cuuint32_t box[3] = {128, blocks, box_rows}, es[3] = {1, 1, 1};
  const CUresult r = encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(w), dims, strides, box, es,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) std::printf("map_3d(%u rows, %u blocks) failed: %d\n", box_rows, blocks, int(r));
  return m;
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int smem = kStages * (kStageBytes + kXBytes) + 1024;
  CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int64_t* sink = nullptr;
  CHECK(cudaMalloc(&sink, 8));
  struct Shape {
    const char* name;
    int rows;
    int64_t kbytes;
  };
  // Median µs per launch over 10 timed samples of n back-to-back launches (n = 1: the launch gap included).
  const auto median_us = [&](const auto& launch, int n) {
    const std::vector<float> ms = sorted_event_ms(
        [&] {
          for (int i = 0; i < n; ++i) launch();
        },
        10, 2);
    CHECK(cudaGetLastError());
    return ms[ms.size() / 2] * 1e3f / n;
  };
  for (const Shape sh : {Shape{"FC1 16384x4096", 16384, 4096}, Shape{"FC2 4096x16384", 4096, 16384}}) {
    const int64_t bytes = int64_t(sh.rows) * sh.kbytes;
    uint8_t *w = nullptr, *x = nullptr;
    CHECK(cudaMalloc(&w, bytes));
    CHECK(cudaMemset(w, 1, bytes));
    for (const int per_sm : {1, 2, 4, 8}) {
      const int g = per_sm * sms;
      const auto* w16 = reinterpret_cast<const uint4*>(w);
      const float u4 = median_us([&] { ldg_kernel<4><<<g, 256>>>(w16, bytes / 16, sink); }, 20);
      const float u8 = median_us([&] { ldg_kernel<8><<<g, 256>>>(w16, bytes / 16, sink); }, 20);
      std::printf(
          "%-15s ldg, %d x 256 threads per SM, batches of 20: 4 loads in flight %7.1f us  %.2f TB/s; 8: %7.1f us"
          "  %.2f TB/s\n",
          sh.name, per_sm, u4, bytes / (u4 * 1e-6) / 1e12, u8, bytes / (u8 * 1e-6) / 1e12);
    }
    CHECK(cudaMalloc(&x, 16 * sh.kbytes));
    CHECK(cudaMemset(x, 1, 16 * sh.kbytes));
    const CUtensorMap xm = map_2d(x, 16, sh.kbytes, 16);
    struct Variant {
      const char* name;
      int mode, box_rows;
      bool with_x, release;
    };
    const std::vector<Variant> variants{{"rows128_k4", kRows128K4, 128, false, false},
                                        {"rows128_k4+x", kRows128K4, 128, true, false},
                                        {"+release", kRows128K4, 128, false, true},
                                        {"+x+release", kRows128K4, 128, true, true},
                                        {"rows128_k4", kBox3d, 128},
                                        {"rows64_k8", kBox3d, 64},
                                        {"rows32_k16", kBox3d, 32},
                                        {"rows16_k32", kBox3d, 16},
                                        {"bulk64k", kBulk, 16}};
    for (const Variant& v : variants) {
      const int blocks = kStageBytes / v.box_rows / 128;
      if (blocks * 128 > sh.kbytes) continue;
      const CUtensorMap m2 = map_2d(w, sh.rows, sh.kbytes), m3 = map_3d(w, sh.rows, sh.kbytes, v.box_rows, blocks);
      const int tiles = sh.rows / v.box_rows;
      for (int grid : {sms}) {
        const int g = std::min(grid, tiles);
        const auto launch = [&] {
          stream_kernel<<<g, 64, smem>>>(m2, m3, xm, w, v.mode, sh.kbytes, v.box_rows, tiles, v.with_x, v.release,
                                         sink);
        };
        const float one = median_us(launch, 1), batch = median_us(launch, 20);
        std::printf("%-15s %-12s%s grid %3d: %7.1f us  %.2f TB/s; in batches of 20: %7.1f us  %.2f TB/s\n", sh.name,
                    v.name, v.mode == kBox3d ? " (3d)" : "     ", g, one, bytes / (one * 1e-6) / 1e12, batch,
                    bytes / (batch * 1e-6) / 1e12);
      }
    }
    CHECK(cudaFree(w));
    CHECK(cudaFree(x));
  }
  return 0;
}
