#include "models/dataset.h"

#include <algorithm>
#include <filesystem>

#include "engine/error.h"

namespace te {
namespace fs = std::filesystem;

namespace {
std::vector<std::string> expand(const std::vector<std::string>& paths, const std::string& field) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> in_dir;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") in_dir.push_back(e.path().string());
      if (in_dir.empty())
        TE_INPUT_ERROR(field << ": directory " << p << " holds no .safetensors file",
                       "put the batches there as *.safetensors files with `input` and `target`, or fix the path");
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::exists(p, ec)) {
      files.push_back(p);
    } else {
      TE_INPUT_ERROR(field << ": " << p << " does not exist",
                     "give a safetensors file or a directory of them (relative paths are taken from the YAML file's "
                     "directory)");
    }
  }
  return files;
}
}  // namespace

Dataset Dataset::open(const std::vector<std::string>& paths, int64_t tokens, int64_t hidden, const std::string& field,
                      bool target_optional) {
  Dataset d;
  for (const std::string& file : expand(paths, field)) {
    Shard s;
    s.reader.emplace(SafetensorsReader::open(file));
    const SafetensorsEntry& in = s.reader->entry("input");
    s.shape = in.shape;
    const bool ok = (in.shape.size() == 2 && in.shape[0] == tokens && in.shape[1] == hidden) ||
                    (in.shape.size() == 3 && in.shape[0] >= 1 && in.shape[1] == tokens && in.shape[2] == hidden);
    if (!ok)
      TE_INPUT_ERROR(field << ": " << file << ": `input` has shape " << shape_str(in.shape) << " but the spec takes ["
                           << tokens << ", " << hidden << "] or [batches, " << tokens << ", " << hidden
                           << "] (run.tokens, model.hidden)",
                     "write the batches as [batches, run.tokens, model.hidden], or set run.tokens to the file's tokens");
    if (!is_high_precision(in.dtype))
      TE_INPUT_ERROR(field << ": " << file << ": `input` has dtype " << dtype_name(in.dtype),
                     "store input and target as F32, BF16 or F16");
    s.batched = in.shape.size() == 3;
    s.count = s.batched ? in.shape[0] : 1;
    s.has_target = s.reader->contains("target");
    if (!s.has_target && !target_optional) s.reader->entry("target");  // throws: names the file, the fix
    if (s.has_target) {
      const SafetensorsEntry& t = s.reader->entry("target");
      if (t.shape != in.shape || !is_high_precision(t.dtype))
        TE_INPUT_ERROR(field << ": " << file << ": `target` is " << dtype_name(t.dtype) << " " << shape_str(t.shape)
                             << " but `input` is " << shape_str(in.shape),
                       "give target the input's shape, as F32, BF16 or F16");
    }
    if (!d.shards_.empty() && d.shards_.back().has_target != s.has_target)
      TE_INPUT_ERROR(field << ": " << file << (s.has_target ? " has" : " lacks") << " `target` but "
                           << d.shards_.back().reader->label() << (s.has_target ? " lacks" : " has") << " it",
                     "give every file a target, or none");
    s.first = d.batches_;
    d.batches_ += s.count;
    d.shards_.push_back(std::move(s));
  }
  return d;
}

Dataset Dataset::from_tensors(Tensor input, Tensor target) {
  Dataset d;
  d.memory_ = {std::move(input), std::move(target)};
  d.batches_ = 1;
  return d;
}

Dataset::Batch Dataset::read(int64_t index) const {
  TE_CHECK(index >= 0 && index < batches_, "Dataset::read: batch " << index << " of " << batches_);
  if (shards_.empty()) return memory_;
  auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                             [](int64_t i, const Shard& s) { return i < s.first; });
  const Shard& s = *(it - 1);
  const int64_t k = index - s.first;
  auto one = [&](const char* name) {
    if (!s.batched) return s.reader->read_converted(name, s.shape, DType::f32);
    return s.reader->read_slice_converted(name, s.shape, 0, k, 1, DType::f32).reshape({s.shape[1], s.shape[2]});
  };
  Batch b;
  b.input = one("input");
  if (s.has_target) b.target = one("target");
  return b;
}

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
