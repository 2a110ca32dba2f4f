// The order in which training steps visit a dataset's N batches.
//
// Step s (counting from 1) trains on batch order_e[p], with e = (s − 1) / N the epoch and p = (s − 1) mod N
// the position in it (N batches). Without shuffling order_e is 0, 1, …, N − 1. With shuffling it is a Fisher–Yates
// shuffle of 0 … N − 1 driven by splitmix64 seeded with seed ^ (e · 0xD1B54A32D192ED03): for i = N − 1 down to 1,
// j = a uniform draw in [0, i] (a 64-bit draw r, rejected while r < 2⁶⁴ mod (i + 1), then r mod (i + 1)), swap
// order[i] and order[j]. The batch of a step is a pure function of (seed, N, s): a resumed run needs no more than
// the step number to continue the same sequence.
#pragma once
#include <cstdint>
#include <vector>

namespace te {

// splitmix64: the PRNG of the shuffle (state advances by 0x9E3779B97F4A7C15 per draw).
uint64_t splitmix64(uint64_t& state);
// Epoch e's batch order (see the header comment).
std::vector<int64_t> epoch_order(int64_t batches, bool shuffle, uint64_t seed, int64_t epoch);

// Where step s falls: its epoch, position within the epoch, and the batch it trains on.
struct DataPosition {
  int64_t epoch = 0, position = 0, batch = 0;
};
class BatchOrder {
 public:
  BatchOrder(int64_t batches, bool shuffle, uint64_t seed) : n_(batches), shuffle_(shuffle), seed_(seed) {}
  DataPosition at(int64_t step);  // step ≥ 1; keeps the current epoch's order

 private:
  int64_t n_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace te
