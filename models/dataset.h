// Training and eval data: (input, target) batches of [tokens, hidden] from safetensors files, read one batch at a
// time, and the order in which training steps visit them.
//
// Files. Each file holds `input` and `target` of one shape: [batches, tokens, hidden] (a leading batch dimension)
// or [tokens, hidden] (one batch); any float dtype (converted to f32 when read). A path may name a directory: its
// `*.safetensors` files, sorted by name. The dataset is the files' batches in order (file 0's, then file 1's, …).
// Opening reads and checks every header (shapes, dtypes, tokens = run.tokens, hidden = model.hidden); a batch's
// bytes are read when it is asked for (by byte offset), so a dataset larger than memory never is in memory.
//
// Order. Step s (counting from 1) trains on batch order_e[p], with e = (s − 1) / N the epoch and p = (s − 1) mod N
// the position in it (N batches). Without shuffling order_e is 0, 1, …, N − 1. With shuffling it is a Fisher–Yates
// shuffle of 0 … N − 1 driven by splitmix64 seeded with seed ^ (e · 0xD1B54A32D192ED03): for i = N − 1 down to 1,
// j = a uniform draw in [0, i] (a 64-bit draw r, rejected while r < 2⁶⁴ mod (i + 1), then r mod (i + 1)), swap
// order[i] and order[j]. The batch of a step is a pure function of (seed, N, s): a resumed run needs no more than
// the step number to continue the same sequence.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "models/safetensors.h"

namespace te {

class Dataset {
 public:
  // `paths`: files or directories. `field` (e.g. "run.data") names the spec key in messages. With
  // `target_optional` a file may lack `target` (read() then gives an undefined target). Throws te::InputError
  // naming the file and the fix for a missing file, an empty directory, a missing tensor or a shape mismatch.
  static Dataset open(const std::vector<std::string>& paths, int64_t tokens, int64_t hidden, const std::string& field,
                      bool target_optional = false);
  // One batch in memory (the seeded input of a run without data).
  static Dataset from_tensors(Tensor input, Tensor target);

  int64_t batches() const { return batches_; }
  int64_t files() const { return static_cast<int64_t>(shards_.size()); }
  struct Batch {
    Tensor input, target;  // f32 [tokens, hidden], host
  };
  Batch read(int64_t index) const;  // index in [0, batches())

 private:
  struct Shard {
    std::optional<SafetensorsReader> reader;
    Shape shape;                            // of `input` (and `target`)
    int64_t first = 0, count = 1;
    bool batched = false, has_target = true;
  };
  std::vector<Shard> shards_;
  Batch memory_;  // from_tensors
  int64_t batches_ = 0;
};

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
