// JSON from files a user hands us (safetensors headers), parsed with two guards nlohmann's DOM parser lacks:
//  - a nesting bound: a 120 KB header nested 60,000 arrays deep would otherwise build a tree whose destruction and
//    dump() recurse once per level (a stack overflow);
//  - duplicate keys found in linear time: nlohmann keeps the last of two equal keys silently, and its callback
//    parser, the usual way to see them, rescans the parent object at every object end (quadratic in the tensors).
// JsonGuard holds both for any SAX handler (the safetensors header builds its entries from SAX events without a
// tree: models/safetensors_header.h); parse_checked_json builds a tree behind it.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace te {

// Thrown for the two guards; nlohmann's own exceptions (syntax, UTF-8, number range) pass through unchanged.
struct JsonGuardError : std::runtime_error {
  enum class Kind { too_deep, duplicate_key } kind;
  std::string key;   // duplicate_key: the key
  size_t depth = 0;  // the object's depth (1: the top-level object)
  JsonGuardError(Kind k, std::string what, std::string key_in, size_t depth_in)
      : std::runtime_error(std::move(what)), kind(k), key(std::move(key_in)), depth(depth_in) {}
};

// Fed a SAX handler's container and key events; throws JsonGuardError. Amortised constant time per event: an
// object's keys are scanned while it has a few, hashed once it has more.
class JsonGuard {
 public:
  explicit JsonGuard(size_t max_depth) : max_depth_(max_depth) {}
  void start(bool object);
  void key(const std::string& k);
  void end();
  size_t depth() const { return open_.size(); }  // open containers

 private:
  struct ObjectKeys {
    std::vector<std::string> few;
    std::unordered_set<std::string> many;
  };
  size_t max_depth_;
  std::vector<bool> open_;           // open containers: object (true) or array
  std::vector<ObjectKeys> objects_;  // per open object, kept allocated for the next object at that depth
  size_t open_objects_ = 0;
};

nlohmann::json parse_checked_json(std::string_view text, size_t max_depth);

}  // namespace te
