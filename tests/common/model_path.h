// The path of a model spec shipped in models/: meson sets TE_MODELS_DIR for the test; run by hand from the
// repository root, "models" is found relative to it.
#pragma once
#include <cstdlib>
#include <string>

namespace te::test {
inline std::string model_path(const std::string& file) {
  const char* dir = std::getenv("TE_MODELS_DIR");
  return std::string(dir ? dir : "models") + "/" + file;
}
}  // namespace te::test
