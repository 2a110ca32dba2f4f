// Engine::from_yaml*: the YAML front end of the public API. It lives in the static teengine_yaml library because
// yaml-cpp is linked statically and Debian's libyaml-cpp.a cannot be linked into a shared object.
#include "models/engine_impl.h"

namespace teengine {

Engine Engine::from_yaml(const std::string& path, const std::vector<std::string>& overrides) {
  return detail::translate([&] { return detail::make_engine(te::load_spec_file(path, overrides)); });
}

Engine Engine::from_yaml_string(const std::string& yaml, const std::vector<std::string>& overrides) {
  return detail::translate([&] { return detail::make_engine(te::parse_spec(yaml, "<string>", overrides)); });
}

}  // namespace teengine
