// Who holds a device's memory at its peak. With tracing on (TEENGINE_MEMORY_TRACE=1 in the environment, or
// set_memory_trace(true)), every allocation carries the label of the innermost MemoryScope of the thread that made
// it (the graph executor labels each node's launch with the node's name), and each new peak of a device's allocator
// records the live bytes by label; memory_at_peak (engine/allocator.h) returns that record. Off, the allocator
// checks one flag per allocation and a scope costs two pointer writes.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace te {

bool memory_trace_enabled();
void set_memory_trace(bool on);  // applies to allocations made from now on

// Labels the allocations this thread makes while it lives; `label` must outlive it.
class MemoryScope {
 public:
  explicit MemoryScope(const std::string& label);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  const std::string* outer_;
};

struct LabelledBytes {
  std::string label;
  int64_t bytes = 0;
  int64_t blocks = 0;
};

// One device's record, kept by the allocator under its lock.
class MemoryTrace {
 public:
  void on_alloc(void* p, int64_t bytes, bool new_peak);
  void on_free(void* p);
  void on_peak_reset() { snapshot(); }
  const std::vector<LabelledBytes>& at_peak() const { return at_peak_; }  // most bytes first

 private:
  void snapshot();
  struct Block {
    int64_t bytes;
    std::string label;
  };
  std::unordered_map<void*, Block> live_;
  std::vector<LabelledBytes> at_peak_;
};

}  // namespace te
