#include "engine/memory_trace.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>

namespace te {
namespace {

std::atomic<bool>& trace_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("TEENGINE_MEMORY_TRACE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }()};
  return on;
}

thread_local const std::string* t_label = nullptr;
const std::string kNoScope = "(outside any graph node)";

}  // namespace

bool memory_trace_enabled() { return trace_flag().load(std::memory_order_relaxed); }
void set_memory_trace(bool on) { trace_flag().store(on, std::memory_order_relaxed); }

MemoryScope::MemoryScope(const std::string& label) : outer_(t_label) { t_label = &label; }
MemoryScope::~MemoryScope() { t_label = outer_; }

void MemoryTrace::on_alloc(void* p, int64_t bytes, bool new_peak) {
  live_[p] = Block{bytes, t_label ? *t_label : kNoScope};
  if (new_peak) snapshot();
}

void MemoryTrace::on_free(void* p) { live_.erase(p); }

void MemoryTrace::snapshot() {
  std::map<std::string, LabelledBytes> by_label;
  for (const auto& [p, b] : live_) {
    LabelledBytes& l = by_label[b.label];
    if (l.blocks++ == 0) l.label = b.label;  // the label copied once per label, not once per block
    l.bytes += b.bytes;
  }
  at_peak_.clear();
  for (auto& [label, l] : by_label) at_peak_.push_back(std::move(l));
  std::stable_sort(at_peak_.begin(), at_peak_.end(),
                   [](const LabelledBytes& a, const LabelledBytes& b) { return a.bytes > b.bytes; });
}

}  // namespace te
