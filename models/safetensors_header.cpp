#include "models/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "engine/error.h"
#include "engine/printable.h"
#include "models/checked_json.h"

namespace te {
namespace {
using json = nlohmann::json;
constexpr uint64_t kMaxDim = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// What an open container is to the header.
enum class Place : uint8_t { top, metadata, entry, shape, offsets, other };

// A scalar event's value (or a container where a scalar belongs); text() only for messages.
struct HeaderScalar {
  enum class Kind : uint8_t { null, boolean, integer, floating, string, binary, object, array } kind;
  int64_t i = 0;                   // integer, boolean
  uint64_t u = 0;                  // integer when unsigned
  bool is_unsigned = false;
  const std::string* s = nullptr;  // string, or a float's text

  std::optional<uint64_t> u64() const {  // a non-negative integer
    if (kind != Kind::integer) return std::nullopt;
    if (is_unsigned) return u;
    return i >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(i)) : std::nullopt;
  }
  std::string text() const {
    switch (kind) {
      case Kind::null: return "null";
      case Kind::boolean: return i ? "true" : "false";
      case Kind::integer: return is_unsigned ? std::to_string(u) : std::to_string(i);
      case Kind::floating: return printable(*s);
      case Kind::string: return quoted_value(*s);
      case Kind::binary: return "binary data";
      case Kind::object: return "an object";
      case Kind::array: return "an array";
    }
    return "?";
  }
};
using K = HeaderScalar::Kind;

// One tensor entry while its object is open; validated when it closes.
struct OpenEntry {
  std::string name;
  std::optional<std::string> dtype;
  bool dtype_bad = false;             // present but not a string
  int shape_state = 0;                // 0: missing, 1: an array, 2: not an array
  int offsets_state = 0;              // likewise for data_offsets
  std::vector<uint64_t> dims;         // the shape's good dimensions, in order
  size_t bad_dim_at = SIZE_MAX;       // index of the first dimension that is not a non-negative integer
  std::string bad_dim;                // that dimension as text
  std::vector<uint64_t> offsets;      // the good offsets
  size_t offsets_count = 0;           // elements, good or not
  std::string bad_offset;             // the first offset that is not a non-negative integer, as text

  // For the next entry, keeping the allocations (one entry per tensor: hundreds of thousands).
  void reset(const std::string& n) {
    name = n;
    dtype.reset();
    dtype_bad = false;
    shape_state = offsets_state = 0;
    dims.clear();
    bad_dim_at = SIZE_MAX;
    bad_dim.clear();
    offsets.clear();
    offsets_count = 0;
    bad_offset.clear();
  }
};

class HeaderSax {
 public:
  HeaderSax(const std::string& label, uint64_t data_bytes)
      : label_(label), data_bytes_(data_bytes), guard_(kSafetensorsMaxDepth) {}

  bool null() { return scalar({K::null}); }
  bool boolean(bool b) { return scalar({K::boolean, b}); }
  bool number_integer(json::number_integer_t v) { return scalar({K::integer, v}); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar({K::integer, 0, v, true}); }
  bool number_float(json::number_float_t, const json::string_t& s) { return scalar({K::floating, 0, 0, false, &s}); }
  bool string(json::string_t& s) { return scalar({K::string, 0, 0, false, &s}); }
  bool binary(json::binary_t&) { return scalar({K::binary}); }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k);
  [[noreturn]] bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e);

  // The first schema error, once the whole header has parsed.
  void throw_deferred() const {
    if (error_) TE_INPUT_ERROR(printable_path(label_) << ": " << error_->first, error_->second);
  }
  SafetensorsHeader take() { return std::move(out_); }

 private:
  void defer(std::string what, std::string hint = kSafetensorsReexportHint) {
    if (!error_) error_.emplace(std::move(what), std::move(hint));
  }
  std::string tensor() const { return "tensor " + quoted_value(entry_.name); }
  // What a top-level value that is not an object means.
  void bad_top_value() {
    if (key_ == "__metadata__") defer("__metadata__ must be an object of strings");
    else if (key_.empty()) defer("a tensor has an empty name", "give every tensor a name");
    else defer("tensor " + quoted_value(key_) + ": entry is not an object {dtype, shape, data_offsets}");
  }
  bool scalar(const HeaderScalar& v);
  bool open(bool object);
  bool close();
  void finish_entry();

  const std::string& label_;
  const uint64_t data_bytes_;
  JsonGuard guard_;
  std::vector<Place> places_;  // open containers, innermost last
  std::string key_;            // the last key of the top level, an entry or the metadata
  OpenEntry entry_;
  std::optional<std::pair<std::string, std::string>> error_;  // what, hint
  SafetensorsHeader out_;
};

bool HeaderSax::key(json::string_t& k) {
  guard_.key(k);  // throws on a duplicate
  key_ = k;
  if (places_.back() == Place::entry && k != "dtype" && k != "shape" && k != "data_offsets")
    defer(tensor() + ": unknown field " + quoted_value(k), "a tensor entry has only dtype, shape and data_offsets");
  return true;
}

bool HeaderSax::scalar(const HeaderScalar& v) {
  switch (places_.back()) {
    case Place::top: bad_top_value(); break;
    case Place::metadata:
      if (v.kind == K::string) out_.metadata.emplace(key_, *v.s);
      else defer("__metadata__ value of " + quoted_value(key_) + " is not a string", "metadata values must be strings");
      break;
    case Place::entry:
      if (key_ == "dtype" && v.kind == K::string) entry_.dtype = *v.s;
      else if (key_ == "dtype") entry_.dtype_bad = true;
      else if (key_ == "shape") entry_.shape_state = 2;
      else if (key_ == "data_offsets") entry_.offsets_state = 2;
      break;
    case Place::shape:
      if (entry_.bad_dim_at != SIZE_MAX) break;  // the message names the first bad dimension
      if (const auto u = v.u64()) {
        entry_.dims.push_back(*u);
      } else {
        entry_.bad_dim_at = entry_.dims.size();
        entry_.bad_dim = v.text();
      }
      break;
    case Place::offsets:
      ++entry_.offsets_count;
      if (const auto u = v.u64()) entry_.offsets.push_back(*u);
      else if (entry_.bad_offset.empty()) entry_.bad_offset = v.text();
      break;
    case Place::other: break;
  }
  return true;
}

bool HeaderSax::open(bool object) {
  guard_.start(object);  // throws past the depth bound
  Place p = Place::other;
  if (places_.empty()) {
    p = Place::top;  // an object: the caller checked the first byte
  } else {
    switch (places_.back()) {
      case Place::top:
        if (!object || key_.empty()) {
          bad_top_value();
        } else if (key_ == "__metadata__") {
          p = Place::metadata;
        } else {
          entry_.reset(key_);
          p = Place::entry;
        }
        break;
      case Place::metadata:
        defer("__metadata__ value of " + quoted_value(key_) + " is not a string", "metadata values must be strings");
        break;
      case Place::entry:
        if (key_ == "dtype") {
          entry_.dtype_bad = true;
        } else if (key_ == "shape") {
          entry_.shape_state = object ? 2 : 1;
          if (!object) p = Place::shape;
        } else if (key_ == "data_offsets") {
          entry_.offsets_state = object ? 2 : 1;
          if (!object) p = Place::offsets;
        }
        break;
      case Place::shape:
      case Place::offsets:  // a container where a number belongs
        scalar({object ? K::object : K::array});
        break;
      case Place::other: break;
    }
  }
  places_.push_back(p);
  return true;
}

bool HeaderSax::close() {
  guard_.end();
  if (places_.back() == Place::entry) finish_entry();
  places_.pop_back();
  return true;
}

// One entry's checks, in this order: fields, dtype, shape, offsets, size. After the first error nothing more is
// built: the rest of the header only parses.
void HeaderSax::finish_entry() {
  if (error_) return;
  const OpenEntry& o = entry_;
  const auto T = [&] { return tensor(); };  // built only for a message
  if (!o.dtype || o.dtype_bad) return defer(T() + ": missing or non-string 'dtype'");
  if (o.shape_state != 1) return defer(T() + ": missing or non-array 'shape'");
  if (o.offsets_state != 1 || o.offsets_count != 2) return defer(T() + ": 'data_offsets' must be [begin, end]");
  SafetensorsEntry e;
  e.name = o.name;
  const auto d = dtype_from_safetensors(*o.dtype);
  if (!d)
    return defer(T() + ": dtype " + quoted_value(*o.dtype) + " is not supported",
                 "supported dtypes: " + safetensors_dtype_names() + "; convert the tensor before saving");
  e.dtype = *d;
  // The element count within what a tensor can hold (engine/tensor.h: zero dimensions counted as one, so that an
  // empty tensor's strides fit too); anything larger than the data section fails below anyway.
  uint64_t span = 1;
  bool too_big = false, empty = false;
  for (size_t i = 0; i <= o.dims.size(); ++i) {
    if (i == o.bad_dim_at)
      return defer(T() + ": shape dimension " + o.bad_dim + " is not a non-negative integer");
    if (i == o.dims.size()) break;
    const uint64_t x = o.dims[i];
    if (x > kMaxDim) return defer(T() + ": shape dimension " + std::to_string(x) + " is too large");
    e.shape.push_back(static_cast<int64_t>(x));
    empty = empty || x == 0;
    too_big = too_big || __builtin_mul_overflow(span, std::max<uint64_t>(x, 1), &span) ||
              span > static_cast<uint64_t>(kMaxNumel);
  }
  if (too_big) return defer(T() + ": shape " + shape_str(e.shape) + " is too large for any file");
  const uint64_t bytes = empty ? 0 : span * static_cast<uint64_t>(dtype_bits(e.dtype) / 8);
  if (o.offsets.size() != 2)
    return defer(T() + ": data_offsets are not non-negative integers (" + o.bad_offset + ")");
  e.begin = o.offsets[0];
  e.end = o.offsets[1];
  const auto range = [&] {  // appended in steps: GCC 12 warns (-Wrestrict) on "[" + std::string&&
    std::string r = "[";
    r += std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    return r;
  };
  if (e.begin > e.end) return defer(T() + ": data_offsets " + range() + " end before they begin");
  if (e.end > data_bytes_)
    return defer(T() + ": data_offsets " + range() + " run past the data section (" + std::to_string(data_bytes_) +
                 " bytes)");
  if (e.nbytes() != bytes)
    return defer(T() + ": shape " + shape_str(e.shape) + " × " + *o.dtype + " is " + std::to_string(bytes) +
                 " bytes but data_offsets span " + std::to_string(e.nbytes()) + " bytes");
  out_.entries.push_back(std::move(e));
}

bool HeaderSax::parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
  const std::string L = printable_path(label_);
  if (const auto* p = dynamic_cast<const json::parse_error*>(&ex)) {
    const std::string why = p->what();
    if (why.find("UTF-8") != std::string::npos || why.find("surrogate") != std::string::npos)
      TE_INPUT_ERROR(L << ": header byte " << p->byte << ": a tensor name or string is not valid UTF-8",
                     "safetensors names must be UTF-8: re-export the file with valid names");
    TE_INPUT_ERROR(
        L << ": the header is not valid JSON (byte " << p->byte << " of the header): " << printable(why, 300),
        kSafetensorsReexportHint);
  }
  // Syntactically JSON but unrepresentable, e.g. a number past the double range (found by fuzz_safetensors:
  // out_of_range.406 on '444444444e4444444444').
  TE_INPUT_ERROR(L << ": the JSON header cannot be read: " << printable(ex.what(), 300), kSafetensorsReexportHint);
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view header, uint64_t data_bytes, const std::string& label) {
  const std::string L = printable_path(label);
  if (header.empty() || header.front() != '{')
    TE_INPUT_ERROR(L << ": the JSON header does not start with '{'", kSafetensorsReexportHint);
  HeaderSax sax(label, data_bytes);
  try {
    json::sax_parse(header.begin(), header.end(), &sax);  // strict: only whitespace may follow the object
  } catch (const JsonGuardError& e) {
    if (e.kind == JsonGuardError::Kind::too_deep)
      TE_INPUT_ERROR(L << ": the JSON header nests deeper than " << kSafetensorsMaxDepth
                       << " levels (a tensor entry is {dtype, shape, data_offsets})",
                     kSafetensorsReexportHint);
    // Duplicate keys are legal JSON but ambiguous: parsers keep either one silently.
    TE_INPUT_ERROR(
        L << ": " << (e.depth == 1 ? "tensor " : "key ") << quoted_value(e.key) << " appears twice in the header",
        "tensor names must be unique: re-export the file");
  }
  sax.throw_deferred();
  SafetensorsHeader h = sax.take();
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  return h;
}

}  // namespace te
