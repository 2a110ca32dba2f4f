// The safetensors JSON header → metadata and validated tensor entries in one linear pass: nlohmann's SAX parser
// feeds a handler that fills the entries directly, with no JSON tree in between (the tree's allocations were most
// of the time for a header of 300,000 tensors). Nesting is bounded and duplicate names are found in linear time by
// models/checked_json.h's guard, so a 60,000-deep header is an input error, not a stack overflow.
//
// Errors follow the reader's contract (models/safetensors.h): a te::InputError prefixed with the label (the path),
// naming the tensor and the field. Syntax errors, nesting and duplicate keys win over the schema errors of the same
// header (those are kept until the parse ends and reported first in file order).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "models/safetensors.h"

namespace te {

// A tensor entry is header object → entry object → shape array: 3 levels; 16 leaves room without a deep stack.
inline constexpr size_t kSafetensorsMaxDepth = 16;

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;  // sorted by name; each within `data_bytes`, its size matching its shape
};

// Parses and validates `header` for a data section of `data_bytes`. Whether the entries cover the data section
// exactly is the caller's check.
SafetensorsHeader parse_safetensors_header(std::string_view header, uint64_t data_bytes, const std::string& label);

}  // namespace te
