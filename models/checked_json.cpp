#include "models/checked_json.h"

#include <algorithm>

namespace te {

namespace {
constexpr size_t kScannedKeys = 16;  // more keys than this in one object: hashed
}  // namespace

void JsonGuard::start(bool object) {
  if (open_.size() + 1 > max_depth_)
    throw JsonGuardError(JsonGuardError::Kind::too_deep, "nested deeper than " + std::to_string(max_depth_) + " levels",
                         "", open_.size() + 1);
  open_.push_back(object);
  if (!object) return;
  if (objects_.size() == open_objects_) objects_.emplace_back();
  ++open_objects_;
}

void JsonGuard::key(const std::string& k) {
  ObjectKeys& o = objects_[open_objects_ - 1];
  bool added = false;
  if (o.few.size() < kScannedKeys) {
    added = std::find(o.few.begin(), o.few.end(), k) == o.few.end();
    if (added) o.few.push_back(k);
  } else {
    if (o.many.empty()) o.many.insert(o.few.begin(), o.few.end());  // from here on every key is hashed
    added = o.many.insert(k).second;
  }
  if (!added) throw JsonGuardError(JsonGuardError::Kind::duplicate_key, "duplicate key", k, open_objects_);
}

void JsonGuard::end() {
  if (open_.back()) {
    ObjectKeys& o = objects_[--open_objects_];
    o.few.clear();
    if (!o.many.empty()) std::unordered_set<std::string>().swap(o.many);  // clear() would keep its buckets
  }
  open_.pop_back();
}

namespace {

using json = nlohmann::json;

// nlohmann's DOM builder behind the guard.
class CheckedSax {
 public:
  CheckedSax(json& out, size_t max_depth) : dom_(out, true), guard_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    guard_.start(true);
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    guard_.key(k);
    return dom_.key(k);
  }
  bool end_object() {
    guard_.end();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    guard_.start(false);
    return dom_.start_array(n);
  }
  bool end_array() {
    guard_.end();
    return dom_.end_array();
  }
  // Rethrown as its own type (parse_error, out_of_range, ...): the caller tells syntax from range errors by type.
  [[noreturn]] bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) throw *p;
    if (const auto* r = dynamic_cast<const json::out_of_range*>(&e)) throw *r;
    if (const auto* t = dynamic_cast<const json::type_error*>(&e)) throw *t;
    throw json::other_error::create(0, e.what(), nullptr);
  }

 private:
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  JsonGuard guard_;
};

}  // namespace

json parse_checked_json(std::string_view text, size_t max_depth) {
  json out;
  CheckedSax sax(out, max_depth);
  json::sax_parse(text.begin(), text.end(), &sax);
  return out;
}

}  // namespace te
