#include "models/dataset.h"

#include <algorithm>
#include <filesystem>

#include "engine/error.h"
#include "engine/printable.h"

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
        TE_INPUT_ERROR(field << ": directory " << printable_path(p) << " holds no .safetensors file",
                       "put the batches there as *.safetensors files with `input` and `target`, or fix the path");
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::exists(p, ec)) {
      files.push_back(p);
    } else {
      TE_INPUT_ERROR(field << ": " << printable_path(p) << " does not exist",
                     "give a safetensors file or a directory of them (relative paths are taken from the YAML file's "
                     "directory)");
    }
  }
  return files;
}
}  // namespace

Dataset::Shard Dataset::open_shard(const std::string& file, int64_t tokens, int64_t hidden, const std::string& field,
                                   bool target_optional) {
  Shard s;
  try {
    s.reader.emplace(SafetensorsReader::open(file));
    s.reader->entry("input");
  } catch (const InputError& e) {  // a malformed file or no `input`: the reader's message, the field in front
    throw InputError(field + ": " + e.message(), e.call(), e.file().c_str(), e.line(), e.device(), e.hint());
  }
  const SafetensorsEntry& in = s.reader->entry("input");
  s.shape = in.shape;
  const bool ok = (in.shape.size() == 2 && in.shape[0] == tokens && in.shape[1] == hidden) ||
                  (in.shape.size() == 3 && in.shape[0] >= 1 && in.shape[1] == tokens && in.shape[2] == hidden);
  if (!ok)
    TE_INPUT_ERROR(field << ": " << printable_path(file) << ": `input` has shape " << shape_str(in.shape)
                         << " but the spec takes [" << tokens << ", " << hidden << "] or [batches, " << tokens << ", "
                         << hidden << "] (run.tokens, model.hidden)",
                   "write the batches as [batches, run.tokens, model.hidden], or set run.tokens to the file's tokens");
  if (!is_high_precision(in.dtype))
    TE_INPUT_ERROR(field << ": " << printable_path(file) << ": `input` has dtype " << dtype_name(in.dtype),
                   "store input and target as F32, BF16 or F16");
  s.batched = in.shape.size() == 3;
  s.count = s.batched ? in.shape[0] : 1;
  s.has_target = s.reader->contains("target");
  if (!s.has_target && !target_optional)
    TE_INPUT_ERROR(field << ": " << printable_path(file) << ": has no `target` (each batch's training target)",
                   "store `target` beside `input`, with its shape, as F32, BF16 or F16");
  if (s.has_target) {
    const SafetensorsEntry& t = s.reader->entry("target");
    if (t.shape != in.shape || !is_high_precision(t.dtype))
      TE_INPUT_ERROR(field << ": " << printable_path(file) << ": `target` is " << dtype_name(t.dtype) << " "
                           << shape_str(t.shape) << " but `input` is " << shape_str(in.shape),
                     "give target the input's shape, as F32, BF16 or F16");
  }
  return s;
}

Dataset Dataset::open(const std::vector<std::string>& paths, int64_t tokens, int64_t hidden, const std::string& field,
                      bool target_optional) {
  Dataset d;
  d.field_ = field;
  for (const std::string& file : expand(paths, field)) {
    Shard s = open_shard(file, tokens, hidden, field, target_optional);
    if (!d.shards_.empty() && d.shards_.back().has_target != s.has_target)
      TE_INPUT_ERROR(field << ": " << printable_path(file) << (s.has_target ? " has" : " lacks") << " `target` but "
                           << printable_path(d.shards_.back().reader->label()) << (s.has_target ? " lacks" : " has")
                           << " it",
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
  auto it =
      std::upper_bound(shards_.begin(), shards_.end(), index, [](int64_t i, const Shard& s) { return i < s.first; });
  const Shard& s = *(it - 1);
  const int64_t k = index - s.first;
  auto one = [&](const char* name) {
    if (!s.batched) return s.reader->read_converted(name, s.shape, DType::f32);
    return s.reader->read_slice_converted(name, s.shape, 0, k, 1, DType::f32).reshape({s.shape[1], s.shape[2]});
  };
  Batch b;
  try {
    b.input = one("input");
    if (s.has_target) b.target = one("target");
  } catch (const InputError& e) {  // the file changed or broke since it was opened
    throw InputError(field_ + ": " + e.message(), e.call(), e.file().c_str(), e.line(), e.device(), e.hint());
  }
  return b;
}

}  // namespace te
