#include "models/batch_order.h"

#include <utility>

#include "engine/error.h"

namespace te {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (!shuffle) return order;
  uint64_t state = seed ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull);
  for (int64_t i = n - 1; i >= 1; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t threshold = (0 - bound) % bound;  // 2⁶⁴ mod bound: draws below it would bias the result
    uint64_t r = splitmix64(state);
    while (r < threshold) r = splitmix64(state);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r % bound)]);
  }
  return order;
}

DataPosition BatchOrder::at(int64_t step) {
  TE_CHECK(step >= 1 && n_ >= 1, "BatchOrder::at: step " << step << " of " << n_ << " batches");
  const int64_t e = (step - 1) / n_, p = (step - 1) % n_;
  if (e != epoch_) {
    order_ = epoch_order(n_, shuffle_, seed_, e);
    epoch_ = e;
  }
  return {e, p, order_[static_cast<size_t>(p)]};
}

}  // namespace te
