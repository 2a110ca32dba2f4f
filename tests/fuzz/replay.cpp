// Replays the committed fuzz corpus (tests/fuzz/corpus/<target>/*) through the fuzz entry points in every
// plain build, so a crash once found stays fixed. The corpus directory comes from TE_FUZZ_CORPUS.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_entries.h"

namespace {
namespace fs = std::filesystem;

std::vector<fs::path> corpus(const std::string& sub) {
  const char* root = std::getenv("TE_FUZZ_CORPUS");
  std::vector<fs::path> files;
  if (!root) return files;
  for (const auto& e : fs::directory_iterator(fs::path(root) / sub))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void replay(const std::string& sub, void (*entry)(const uint8_t*, size_t)) {
  const auto files = corpus(sub);
  ASSERT_FALSE(files.empty()) << "no corpus under $TE_FUZZ_CORPUS/" << sub;
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    const std::string bytes = slurp(p);
    EXPECT_NO_THROW(entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
}

TEST(FuzzCorpus, SpecReplaysWithoutEscapes) { replay("spec", te::fuzz::spec_one); }
TEST(FuzzCorpus, SafetensorsReplaysWithoutEscapes) { replay("safetensors", te::fuzz::safetensors_one); }
TEST(FuzzCorpus, SafetensorsFileReplaysWithoutEscapes) {
  replay("safetensors", te::fuzz::safetensors_file_one);
  replay("safetensors_file", te::fuzz::safetensors_file_one);
}
TEST(FuzzCorpus, SetReplaysWithoutEscapes) { replay("set", te::fuzz::set_one); }
TEST(FuzzCorpus, OutputSetReplaysWithoutEscapes) { replay("output_set", te::fuzz::output_set_one); }
TEST(FuzzCorpus, ForwardReplaysWithoutEscapes) { replay("forward", te::fuzz::forward_one); }
}  // namespace
