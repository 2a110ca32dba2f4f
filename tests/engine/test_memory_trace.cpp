// The memory trace: each allocation belongs to the innermost MemoryScope of its thread, and the record at a peak is
// the live bytes by label at that moment; later, smaller allocations leave it alone, a higher peak replaces it.
#include <gtest/gtest.h>

#include <string>

#include "engine/allocator.h"
#include "engine/tensor.h"

namespace te {
namespace {

int64_t bytes_of(const std::vector<LabelledBytes>& at_peak, const std::string& label) {
  for (const LabelledBytes& l : at_peak)
    if (l.label == label) return l.bytes;
  return 0;
}

class TraceSetting {  // tracing on or off for one test, whatever the environment said
 public:
  explicit TraceSetting(bool on) : was_(memory_trace_enabled()) { set_memory_trace(on); }
  ~TraceSetting() { set_memory_trace(was_); }

 private:
  bool was_;
};

TEST(MemoryTrace, ThePeakIsAttributedToTheScopesThatAllocated) {
  TraceSetting on(true);
  const Device cpu = Device::cpu();
  const std::string weights = "weights", act = "activations", inner = "activations/inner";
  Tensor w, a;
  {
    MemoryScope s(weights);
    w = Tensor::empty({1 << 20}, DType::u8, cpu);
  }
  reset_peak_memory(cpu);  // the record restarts from what is live now
  EXPECT_EQ(bytes_of(memory_at_peak(cpu), weights), 1 << 20);
  {
    MemoryScope s(act);
    a = Tensor::empty({3 << 20}, DType::u8, cpu);
    {
      MemoryScope s2(inner);
      Tensor t = Tensor::empty({2 << 20}, DType::u8, cpu);  // the peak: 6 MiB live
    }
  }
  std::vector<LabelledBytes> p = memory_at_peak(cpu);
  EXPECT_EQ(bytes_of(p, weights), 1 << 20);
  EXPECT_EQ(bytes_of(p, act), 3 << 20);
  EXPECT_EQ(bytes_of(p, inner), 2 << 20);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front().label, act) << "most bytes first";
  {
    MemoryScope s(inner);
    Tensor t = Tensor::empty({1 << 20}, DType::u8, cpu);  // below the peak: the record stays
  }
  EXPECT_EQ(bytes_of(memory_at_peak(cpu), inner), 2 << 20);
  a = Tensor();
  Tensor big = Tensor::empty({8 << 20}, DType::u8, cpu);  // a higher peak, outside any scope
  p = memory_at_peak(cpu);
  EXPECT_EQ(bytes_of(p, act), 0) << "freed before the new peak";
  EXPECT_EQ(bytes_of(p, "(outside any graph node)"), 8 << 20);
  EXPECT_EQ(bytes_of(p, weights), 1 << 20);
}

TEST(MemoryTrace, OffRecordsNothing) {
  TraceSetting off(false);
  reset_peak_memory(Device::cpu());
  const std::string label = "untraced";
  {
    MemoryScope s(label);
    Tensor t = Tensor::empty({4 << 20}, DType::u8, Device::cpu());
  }
  EXPECT_EQ(bytes_of(memory_at_peak(Device::cpu()), label), 0);
}

}  // namespace
}  // namespace te
