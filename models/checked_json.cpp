#include "models/checked_json.h"

#include <unordered_set>
#include <vector>

namespace te {
namespace {

using json = nlohmann::json;

// nlohmann's DOM builder behind a SAX front that counts depth and remembers each open object's keys.
class CheckedSax {
 public:
  CheckedSax(json& out, size_t max_depth) : dom_(out, true), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    enter();
    keys_.emplace_back();
    objects_.push_back(true);
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second)
      throw JsonGuardError(JsonGuardError::Kind::duplicate_key, "duplicate key", k, keys_.size());
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    leave();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    objects_.push_back(false);
    return dom_.start_array(n);
  }
  bool end_array() {
    leave();
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
  void enter() {
    if (objects_.size() + 1 > max_depth_)
      throw JsonGuardError(JsonGuardError::Kind::too_deep,
                           "nested deeper than " + std::to_string(max_depth_) + " levels", "", objects_.size() + 1);
  }
  void leave() { objects_.pop_back(); }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  size_t max_depth_;
  std::vector<std::unordered_set<std::string>> keys_;  // one per open object
  std::vector<bool> objects_;                          // open containers: object (true) or array
};

}  // namespace

json parse_checked_json(std::string_view text, size_t max_depth) {
  json out;
  CheckedSax sax(out, max_depth);
  json::sax_parse(text.begin(), text.end(), &sax);
  return out;
}

}  // namespace te
