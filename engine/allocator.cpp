#include "engine/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "engine/error.h"
#include "engine/memory_trace.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#endif

namespace te {
namespace {

constexpr size_t kHostAlign = 64;
// Freed host blocks from kHostCacheFrom bytes on are kept for the next request of the same size (in 64 KiB classes)
// instead of going back to the system: the C library unmaps blocks this large on free, and the kernel zeroes every
// page again when a later step touches the same-size temporary (a quarter of a CPU training step of a 4096 × 16384
// MLP went to that). A block is kept only if the cache then holds no more than the bytes still in use, so it at most
// doubles the footprint, and a request the system cannot serve empties it first.
// Under AddressSanitizer every block goes back at once, so a use after free stays visible to it.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kHostCacheFrom = SIZE_MAX;
#else
constexpr size_t kHostCacheFrom = size_t{4} << 20;
#endif
constexpr size_t kHostCacheClass = size_t{64} << 10;

struct Accounting {
  std::mutex mu;
  MemoryStats stats;
  MemoryTrace trace;  // filled only while memory_trace_enabled()
  void on_alloc(void* p, size_t bytes) {
    stats.current_bytes += static_cast<int64_t>(bytes);
    const bool new_peak = stats.current_bytes > stats.peak_bytes;
    if (new_peak) stats.peak_bytes = stats.current_bytes;
    ++stats.alloc_calls;
    if (memory_trace_enabled()) trace.on_alloc(p, static_cast<int64_t>(bytes), new_peak);
  }
  void on_free(void* p, size_t bytes) {
    stats.current_bytes -= static_cast<int64_t>(bytes);
    trace.on_free(p);
  }
};

Accounting& host_accounting() {
  static Accounting a;
  return a;
}

struct HostCache {                                   // guarded by host_accounting().mu
  std::map<size_t, std::vector<void*>> free_blocks;  // class size → blocks
  size_t cached = 0;
  void release_all() {
    for (auto& [size, blocks] : free_blocks)
      for (void* p : blocks) std::free(p);
    free_blocks.clear();
    cached = 0;
  }
};

HostCache& host_cache() {
  static HostCache c;
  return c;
}

size_t host_block(size_t bytes) {
  const size_t b = bytes == 0 ? kHostAlign : (bytes + kHostAlign - 1) / kHostAlign * kHostAlign;
  return b < kHostCacheFrom ? b : (b + kHostCacheClass - 1) / kHostCacheClass * kHostCacheClass;
}

// The cache and the accounting are under the accounting's mutex; the system's allocator is called outside it, so
// rank threads allocating at once do not wait on each other's malloc.
void* host_allocate(size_t bytes) {
  const size_t block = host_block(bytes);
  auto& a = host_accounting();
  HostCache& c = host_cache();
  void* p = nullptr;
  if (block >= kHostCacheFrom) {
    std::lock_guard<std::mutex> lock(a.mu);
    auto it = c.free_blocks.find(block);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      c.cached -= block;
    }
  }
  const bool from_system = p == nullptr;
  if (from_system) {
    p = std::aligned_alloc(kHostAlign, block);
    if (!p) {  // the cache's blocks back to the system, then once more
      {
        std::lock_guard<std::mutex> lock(a.mu);
        c.release_all();
      }
      p = std::aligned_alloc(kHostAlign, block);
    }
    if (!p) TE_THROW("host out of memory: requested " << bytes << " bytes", "reduce tokens or model size");
  }
  std::lock_guard<std::mutex> lock(a.mu);
  a.on_alloc(p, bytes);
  if (from_system) ++a.stats.device_allocs;
  a.stats.cached_bytes = static_cast<int64_t>(c.cached);
  return p;
}

void host_free(void* ptr, size_t bytes) {
  const size_t block = host_block(bytes);
  auto& a = host_accounting();
  HostCache& c = host_cache();
  {
    std::lock_guard<std::mutex> lock(a.mu);
    a.on_free(ptr, bytes);
    const bool keep =
        block >= kHostCacheFrom && c.cached + block <= static_cast<size_t>(std::max<int64_t>(a.stats.current_bytes, 0));
    if (keep) {
      c.free_blocks[block].push_back(ptr);
      c.cached += block;
    }
    a.stats.cached_bytes = static_cast<int64_t>(c.cached);
    if (keep) return;
  }
  std::free(ptr);
}

#if TE_WITH_CUDA
// Blocks are rounded to 512 bytes (small) or 2 MiB (large) and cached per (stream, size).
size_t round_block(size_t bytes) {
  if (bytes <= (1u << 20)) return (bytes + 511) / 512 * 512;
  return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

struct CudaCache {
  Accounting acct;
  // (stream, size) → blocks; pool blocks are keyed (pool, size) instead.
  std::map<std::pair<const void*, size_t>, std::vector<void*>> free_blocks;
  const void* active_pool = nullptr;             // set by a PoolScope
  std::map<void*, const void*> pool_owner;       // block → its pool, for blocks a pool owns
  std::map<const void*, int64_t> pool_reserved;  // pool → bytes it owns

  // Where an allocation on `stream` looks for a free block: the active pool's list, else the stream's.
  std::pair<const void*, size_t> alloc_key(const void* stream, size_t block) const {
    return {active_pool ? active_pool : stream, block};
  }
  // Where a freed block goes: back to its pool if one owns it, else to the stream's list.
  std::pair<const void*, size_t> free_key(void* ptr, const void* stream, size_t block) const {
    auto it = pool_owner.find(ptr);
    return {it != pool_owner.end() ? it->second : stream, block};
  }

  // Free blocks back to the driver, except a pool's: its captured graphs still use them.
  void release_all() {
    for (auto it = free_blocks.begin(); it != free_blocks.end();) {
      if (pool_reserved.count(it->first.first)) {
        ++it;
        continue;
      }
      for (void* p : it->second) cudaFree(p);
      acct.stats.cached_bytes -= static_cast<int64_t>(it->first.second * it->second.size());
      it = free_blocks.erase(it);
    }
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
  if (device.is_cpu()) return host_allocate(bytes);
#if TE_WITH_CUDA
  auto& c = cuda_cache(device.index);
  size_t block = round_block(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  auto it = c.free_blocks.find(c.alloc_key(stream.handle(), block));
  if (it != c.free_blocks.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    c.acct.stats.cached_bytes -= static_cast<int64_t>(block);
    c.acct.on_alloc(p, block);
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
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (stream.handle() && cudaStreamIsCapturing(static_cast<cudaStream_t>(stream.handle()), &capture) == cudaSuccess &&
        capture != cudaStreamCaptureStatusNone)
      TE_THROW("allocation of " << bytes << " bytes from the driver during CUDA graph capture on " << device.str()
                                << " (" << cudaGetErrorString(err) << ")",
               "fill the capture's CudaMemoryPool with uncaptured runs of the same work first");
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    TE_THROW("CUDA out of memory on " << device.str() << ": requested " << bytes << " bytes, " << free_b
                                      << " bytes free of " << total_b << " (" << c.acct.stats.current_bytes
                                      << " held by teengine)",
             "reduce run.tokens or the model size, or free the GPU");
  }
  c.acct.on_alloc(p, block);
  ++c.acct.stats.device_allocs;
  if (c.active_pool) {
    c.pool_owner[p] = c.active_pool;
    c.pool_reserved[c.active_pool] += static_cast<int64_t>(block);
  }
  return p;
#else
  (void)stream;
  TE_THROW("device " << device.str() << " requested but teengine was built without CUDA",
           "rebuild with -Dcuda=enabled or use device: cpu");
#endif
}

void device_free(Device device, void* ptr, size_t bytes, const Stream& stream) {
  if (!ptr) return;
  if (device.is_cpu()) return host_free(ptr, bytes);
#if TE_WITH_CUDA
  auto& c = cuda_cache(device.index);
  size_t block = round_block(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  c.free_blocks[c.free_key(ptr, stream.handle(), block)].push_back(ptr);
  c.acct.on_free(ptr, block);
  c.acct.stats.cached_bytes += static_cast<int64_t>(block);
#else
  (void)stream;
#endif
}

namespace {
// The accounting of `device` (none for a CUDA device in a build without CUDA).
Accounting* accounting(Device device) {
  if (device.is_cpu()) return &host_accounting();
#if TE_WITH_CUDA
  return &cuda_cache(device.index).acct;
#else
  return nullptr;
#endif
}
}  // namespace

MemoryStats memory_stats(Device device) {
  Accounting* a = accounting(device);
  if (!a) return {};
  std::lock_guard<std::mutex> lock(a->mu);
  return a->stats;
}

void reset_peak_memory(Device device) {
  Accounting* a = accounting(device);
  if (!a) return;
  std::lock_guard<std::mutex> lock(a->mu);
  a->stats.peak_bytes = a->stats.current_bytes;
  a->trace.on_peak_reset();
}

std::vector<LabelledBytes> memory_at_peak(Device device) {
  Accounting* a = accounting(device);
  if (!a) return {};
  std::lock_guard<std::mutex> lock(a->mu);
  return a->trace.at_peak();
}

void empty_cache(Device device) {
  if (device.is_cpu()) {
    std::lock_guard<std::mutex> lock(host_accounting().mu);
    host_cache().release_all();
    host_accounting().stats.cached_bytes = 0;
    return;
  }
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

#if TE_WITH_CUDA
CudaMemoryPool::CudaMemoryPool(Device device) : device_(device) {
  TE_CHECK(device.is_cuda(), "CudaMemoryPool on " << device.str() << ": only CUDA devices have pools");
}

CudaMemoryPool::~CudaMemoryPool() {
  auto& c = cuda_cache(device_.index);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  if (c.active_pool == this) c.active_pool = nullptr;
  for (auto it = c.free_blocks.begin(); it != c.free_blocks.end();) {
    if (it->first.first != this) {
      ++it;
      continue;
    }
    for (void* p : it->second) {
      cudaFree(p);  // waits for the device: the graphs that used the block are done
      c.pool_owner.erase(p);
      c.acct.stats.cached_bytes -= static_cast<int64_t>(it->first.second);
    }
    it = c.free_blocks.erase(it);
  }
  for (auto it = c.pool_owner.begin(); it != c.pool_owner.end();)  // still held: back to the shared cache
    it = it->second == this ? c.pool_owner.erase(it) : std::next(it);
  c.pool_reserved.erase(this);
}

int64_t CudaMemoryPool::reserved_bytes() const {
  auto& c = cuda_cache(device_.index);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  auto it = c.pool_reserved.find(this);
  return it == c.pool_reserved.end() ? 0 : it->second;
}

PoolScope::PoolScope(CudaMemoryPool& pool) : pool_(pool) {
  auto& c = cuda_cache(pool.device().index);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  TE_CHECK(c.active_pool == nullptr, "a memory pool scope is already active on " << pool.device().str());
  c.active_pool = &pool;
  c.pool_reserved.emplace(&pool, 0);
}

PoolScope::~PoolScope() {
  auto& c = cuda_cache(pool_.device().index);
  std::lock_guard<std::mutex> lock(c.acct.mu);
  c.active_pool = nullptr;
}
#else
CudaMemoryPool::CudaMemoryPool(Device device) : device_(device) {
  TE_THROW("CudaMemoryPool on " << device.str() << " in a build without CUDA", "rebuild with -Dcuda=enabled");
}
CudaMemoryPool::~CudaMemoryPool() = default;
int64_t CudaMemoryPool::reserved_bytes() const { return 0; }
PoolScope::PoolScope(CudaMemoryPool& pool) : pool_(pool) {}
PoolScope::~PoolScope() = default;
#endif

}  // namespace te
