// Memory: a 64-byte-aligned host allocator (freed blocks of 4 MiB and more are kept for a request of the same size
// while the cache holds no more than the bytes in use) and a per-device CUDA caching allocator (stream-ordered reuse: a
// freed block is reused by later allocations on the same stream without synchronisation). Both report current and peak
// bytes. Out of memory is a te::Error naming the requested and free bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/device.h"
#include "engine/memory_trace.h"
#include "engine/stream.h"

namespace te {

struct MemoryStats {
  int64_t current_bytes = 0;  // handed out to tensors now
  int64_t peak_bytes = 0;     // max of current_bytes since the last reset
  int64_t cached_bytes = 0;   // held by the cache, free for reuse
  int64_t alloc_calls = 0;    // requests served
  int64_t device_allocs = 0;  // requests that reached cudaMalloc / the system allocator
};

// Allocate `bytes` on `device`; for CUDA the block belongs to `stream` for reuse.
void* device_allocate(Device device, size_t bytes, const Stream& stream);
void device_free(Device device, void* ptr, size_t bytes, const Stream& stream);
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);
// The live bytes at the last peak (or reset) by MemoryScope label, most first; empty unless memory_trace_enabled()
// was on while the peak's blocks were allocated (engine/memory_trace.h).
std::vector<LabelledBytes> memory_at_peak(Device device);
// Returns cached blocks to the driver (CUDA) or the system (host).
void empty_cache(Device device);

// A private set of CUDA blocks for CUDA-graph capture. While a PoolScope is active on the pool's device, every
// allocation there comes from the pool (cudaMalloc on a miss) and every block so allocated returns to the pool when
// freed, whatever the stream: the addresses a captured graph reads and writes are never handed to other work while
// the pool lives. Fill the pool with uncaptured runs of the same work inside a scope until it stops growing (twice
// when the work replaces tensors it keeps), then capture: the capture then allocates nothing from the driver. One scope per device at a time. Destroy the pool after the graphs that
// use it (its free blocks go back to the driver; blocks still held by tensors return to the shared cache).
class CudaMemoryPool {
 public:
  explicit CudaMemoryPool(Device device);
  ~CudaMemoryPool();
  CudaMemoryPool(const CudaMemoryPool&) = delete;
  CudaMemoryPool& operator=(const CudaMemoryPool&) = delete;
  Device device() const { return device_; }
  int64_t reserved_bytes() const;  // blocks the pool owns (held by tensors or free in the pool)

 private:
  Device device_;
};

class PoolScope {
 public:
  explicit PoolScope(CudaMemoryPool& pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  [[maybe_unused]] CudaMemoryPool& pool_;  // read only where CUDA is built in
};

}  // namespace te
