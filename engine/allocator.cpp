#include "engine/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "engine/error.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#endif

namespace te {
namespace {

constexpr size_t kHostAlign = 64;

struct Accounting {
  std::mutex mu;
  MemoryStats stats;
  void on_alloc(size_t bytes) {
    stats.current_bytes += static_cast<int64_t>(bytes);
    if (stats.current_bytes > stats.peak_bytes) stats.peak_bytes = stats.current_bytes;
    ++stats.alloc_calls;
  }
};

Accounting& host_accounting() {
  static Accounting a;
  return a;
}

#if TE_WITH_CUDA
// Blocks are rounded to 512 bytes (small) or 2 MiB (large) and cached per (stream, size).
size_t round_block(size_t bytes) {
  if (bytes <= (1u << 20)) return (bytes + 511) / 512 * 512;
  return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

struct CudaCache {
  Accounting acct;
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_blocks;  // (stream, size) → blocks

  void release_all() {
    for (auto& [key, blocks] : free_blocks)
      for (void* p : blocks) cudaFree(p);
    free_blocks.clear();
    acct.stats.cached_bytes = 0;
  }
};

CudaCache& cuda_cache(int index) {
  static std::mutex mu;
  static std::map<int, CudaCache*> caches;  // leaked on purpose: blocks may be freed during static destruction
  std::lock_guard<std::mutex> lock(mu);
  auto& c = caches[index];
  if (!c) c = new CudaCache();
  return *c;
}
#endif
}  // namespace

void* device_allocate(Device device, size_t bytes, const Stream& stream) {
  if (device.is_cpu()) {
    size_t rounded = (bytes + kHostAlign - 1) / kHostAlign * kHostAlign;
    void* p = std::aligned_alloc(kHostAlign, rounded == 0 ? kHostAlign : rounded);
    if (!p) TE_THROW("host out of memory: requested " << bytes << " bytes", "reduce tokens or model size");
    auto& a = host_accounting();
    std::lock_guard<std::mutex> lock(a.mu);
    a.on_alloc(bytes);
    ++a.stats.device_allocs;
    return p;
  }
#if TE_WITH_CUDA
  auto& c = cuda_cache(device.index);
  size_t block = round_block(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  auto it = c.free_blocks.find({stream.handle(), block});
  if (it != c.free_blocks.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    c.acct.stats.cached_bytes -= static_cast<int64_t>(block);
    c.acct.on_alloc(block);
    return p;
  }
  set_current_device(device);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, block);
  if (err == cudaErrorMemoryAllocation) {  // give the cache back and try once more
    (void)cudaGetLastError();
    cudaDeviceSynchronize();
    c.release_all();
    err = cudaMalloc(&p, block);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    TE_THROW("CUDA out of memory on " << device.str() << ": requested " << bytes << " bytes, " << free_b
                                      << " bytes free of " << total_b << " (" << c.acct.stats.current_bytes
                                      << " held by teengine)",
             "reduce run.tokens or the model size, or free the GPU");
  }
  c.acct.on_alloc(block);
  ++c.acct.stats.device_allocs;
  return p;
#else
  (void)stream;
  TE_THROW("device " << device.str() << " requested but teengine was built without CUDA",
           "rebuild with -Dcuda=enabled or use device: cpu");
#endif
}

void device_free(Device device, void* ptr, size_t bytes, const Stream& stream) {
  if (!ptr) return;
  if (device.is_cpu()) {
    std::free(ptr);
    auto& a = host_accounting();
    std::lock_guard<std::mutex> lock(a.mu);
    a.stats.current_bytes -= static_cast<int64_t>(bytes);
    return;
  }
#if TE_WITH_CUDA
  auto& c = cuda_cache(device.index);
  size_t block = round_block(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  c.free_blocks[{stream.handle(), block}].push_back(ptr);
  c.acct.stats.current_bytes -= static_cast<int64_t>(block);
  c.acct.stats.cached_bytes += static_cast<int64_t>(block);
#else
  (void)stream;
#endif
}

MemoryStats memory_stats(Device device) {
  if (device.is_cpu()) {
    auto& a = host_accounting();
    std::lock_guard<std::mutex> lock(a.mu);
    return a.stats;
  }
#if TE_WITH_CUDA
  auto& c = cuda_cache(device.index);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  return c.acct.stats;
#else
  return {};
#endif
}

void reset_peak_memory(Device device) {
  if (device.is_cpu()) {
    auto& a = host_accounting();
    std::lock_guard<std::mutex> lock(a.mu);
    a.stats.peak_bytes = a.stats.current_bytes;
    return;
  }
#if TE_WITH_CUDA
  auto& c = cuda_cache(device.index);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  c.acct.stats.peak_bytes = c.acct.stats.current_bytes;
#endif
}

void empty_cache(Device device) {
#if TE_WITH_CUDA
  if (device.is_cuda()) {
    auto& c = cuda_cache(device.index);
    std::lock_guard<std::mutex> lock(c.acct.mu);
    cudaDeviceSynchronize();
    c.release_all();
  }
#else
  (void)device;
#endif
}
}  // namespace te
