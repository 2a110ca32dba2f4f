// Training and eval data: (input, target) batches of [tokens, hidden] from safetensors files, read one batch at a
// time (the order training visits them in: models/batch_order.h).
//
// Files. Each file holds `input` and `target` of one shape: [batches, tokens, hidden] (a leading batch dimension)
// or [tokens, hidden] (one batch); any float dtype (converted to f32 when read). A path may name a directory: its
// `*.safetensors` files, sorted by name. The dataset is the files' batches in order (file 0's, then file 1's, …).
// Opening reads and checks every header (shapes, dtypes, tokens = run.tokens, hidden = model.hidden); a batch's
// bytes are read when it is asked for (by byte offset), so a dataset larger than memory never is in memory.
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
    Shape shape;  // of `input` (and `target`)
    int64_t first = 0, count = 1;
    bool batched = false, has_target = true;
  };
  // One file's header, checked against the spec (te::InputError naming the field, the file and the fix).
  static Shard open_shard(const std::string& file, int64_t tokens, int64_t hidden, const std::string& field,
                          bool target_optional);
  std::vector<Shard> shards_;
  std::string field_;  // the spec key the files came from, for messages
  Batch memory_;       // from_tensors
  int64_t batches_ = 0;
};

}  // namespace te
