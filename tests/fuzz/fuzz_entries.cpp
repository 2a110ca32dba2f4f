#include "tests/fuzz/fuzz_entries.h"

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/safetensors.h"
#include "models/spec.h"

namespace te::fuzz {

void spec_one(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> sets;
  if (text.rfind("#set ", 0) == 0) {
    const size_t nl = text.find('\n');
    std::istringstream line(text.substr(5, nl == std::string::npos ? std::string::npos : nl - 5));
    for (std::string s; line >> s;) sets.push_back(s);
  }
  try {
    ModelSpec spec = parse_spec(text, "fuzz.yaml", sets);
    // A valid spec must list consistent parameters.
    for (const ParamSpec& p : parameter_specs(spec))
      if (p.shape.empty() || p.name.empty()) throw std::logic_error("parameter without shape or name");
    (void)describe_spec(spec);
  } catch (const InputError&) {
  }
}

void safetensors_one(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    SafetensorsReader r = SafetensorsReader::from_bytes(bytes, "fuzz.safetensors");
    std::map<std::string, Tensor> all;
    for (const auto& e : r.entries()) all[e.name] = r.read(e.name);
    // Round trip: re-encoding and re-reading gives the same tensors.
    SafetensorsReader again = SafetensorsReader::from_bytes(encode_safetensors(all, r.metadata()), "re-encoded");
    if (again.entries().size() != r.entries().size()) throw std::logic_error("round trip lost tensors");
    for (const auto& e : again.entries()) {
      Tensor a = again.read(e.name), b = all.at(e.name);
      if (a.shape() != b.shape() || a.dtype() != b.dtype() ||
          std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.nbytes())) != 0)
        throw std::logic_error("round trip changed tensor " + e.name);
    }
  } catch (const InputError&) {
  }
}

}  // namespace te::fuzz
