// JSON from files a user hands us (safetensors headers), parsed with two guards nlohmann's DOM parser lacks:
//  - a nesting bound: a 120 KB header nested 60,000 arrays deep would otherwise build a tree whose destruction and
//    dump() recurse once per level (a stack overflow);
//  - duplicate keys found in linear time: nlohmann keeps the last of two equal keys silently, and its callback
//    parser, the usual way to see them, rescans the parent object at every object end (quadratic in the tensors).
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace te {

// Thrown for the two guards; nlohmann's own exceptions (syntax, UTF-8, number range) pass through unchanged.
struct JsonGuardError : std::runtime_error {
  enum class Kind { too_deep, duplicate_key } kind;
  std::string key;   // duplicate_key: the key
  size_t depth = 0;  // the object's depth (1: the top-level object)
  JsonGuardError(Kind k, std::string what, std::string key_in, size_t depth_in)
      : std::runtime_error(std::move(what)), kind(k), key(std::move(key_in)), depth(depth_in) {}
};

nlohmann::json parse_checked_json(std::string_view text, size_t max_depth);

}  // namespace te
