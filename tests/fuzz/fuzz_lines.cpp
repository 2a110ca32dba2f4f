#include "tests/fuzz/fuzz_lines.h"

#include <unistd.h>

namespace te::fuzz {

std::vector<std::string> lines_of(const uint8_t* data, size_t size) {
  std::vector<std::string> lines;
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (size_t start = 0; start < text.size() && lines.size() < 16;) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::filesystem::path scratch_dir(const std::string& name) {
  struct Root {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("te_fuzz_" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Root root;
  const std::filesystem::path dir = root.path / name;
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace te::fuzz
