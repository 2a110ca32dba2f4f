// safetensors: the weights/input/output file format (https://github.com/huggingface/safetensors, format section).
//
// Layout: [u64 little-endian N][N bytes of UTF-8 JSON header][data section]. The header is an object mapping each
// tensor name to {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]} (byte offsets relative to
// the start of the data section, C-order elements), plus an optional "__metadata__" object of string → string.
// The data section must be covered exactly by the tensors: no holes, no overlaps, no trailing bytes.
//
// Every defect of a file is a te::InputError (exit code 2 in the CLI) naming the file, the tensor and what to do.
// Tensors come back as contiguous CPU te::Tensor copies; the header is read once and data is read per lookup, so a
// large file is never held in memory as a whole.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dtype.h"
#include "engine/tensor.h"

namespace te {

// Header lengths above this are rejected before any allocation (a corrupt or hostile length field).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;
// The hint of every message about a malformed file.
inline constexpr const char* kSafetensorsReexportHint =
    "the file is truncated or corrupt: re-export it (e.g. safetensors.torch.save_file)";

// "F32" | "BF16" | "F16" | "F8_E4M3" | "F8_E5M2" | "U8" | "I32" | "I64" ↔ DType. fp4/e8m0 have no safetensors name.
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::optional<std::string_view> safetensors_dtype_name(DType dtype);
// "F32, BF16, ..." for messages.
std::string safetensors_dtype_names();

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsReader {
 public:
  // Opens `path` and validates the header against the file size. Throws te::InputError on any defect.
  static SafetensorsReader open(const std::string& path);
  // Validates an in-memory file (tests, fuzzing); `label` names it in messages.
  static SafetensorsReader from_bytes(std::string bytes, const std::string& label);

  const std::string& label() const { return label_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // Throws te::InputError naming the file, the missing tensor and (when close) a similar name.
  const SafetensorsEntry& entry(const std::string& name) const;

  // A contiguous CPU copy of the tensor, in the file's dtype.
  Tensor read(const std::string& name) const;
  // As read(), but the file must hold exactly this shape and dtype (else te::InputError saying what was found).
  Tensor read(const std::string& name, const Shape& shape, DType dtype) const;
  // The tensor must have this shape and a float dtype; it is converted to `dtype` (round to nearest even).
  Tensor read_converted(const std::string& name, const Shape& shape, DType dtype) const;
  // As read_converted, but only elements [begin, begin + length) of dimension `dim` are read from the file (a
  // rank's shard of a global tensor): shape[dim] becomes `length`, and only those bytes are read.
  Tensor read_slice_converted(const std::string& name, const Shape& shape, int dim, int64_t begin, int64_t length,
                              DType dtype) const;

 private:
  SafetensorsReader() = default;
  void parse_header(std::string_view header, uint64_t data_bytes);
  const SafetensorsEntry* find(const std::string& name) const;
  void read_bytes(uint64_t offset, uint64_t n, void* dst) const;
  // Reads `count` runs of `n` bytes, run i from offset + i·stride into dst + i·n, opening the file once.
  void read_runs(uint64_t offset, uint64_t n, uint64_t stride, uint64_t count, void* dst) const;

  std::string label_;                          // path or label, used in every message
  std::shared_ptr<const std::string> memory_;  // whole file when built from bytes; null when reading a path
  uint64_t data_start_ = 0;                    // 8 + header length
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsEntry> entries_;
};

// Writes `tensors` (any device, any strides; fp4/e8m0 refused) to `path`. Keys are written in sorted order and data
// in the same order, so equal inputs give byte-identical files. The file is written to a temporary file in the same
// directory and renamed over `path`: a failure never leaves a partial file behind.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The bytes write_safetensors would write (tests, in-memory round trips).
std::string encode_safetensors(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace te
