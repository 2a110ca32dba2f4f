// Helpers of the fuzz entry points: an input's first lines, and a scratch directory of this process's own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace te::fuzz {
// Up to 16 lines of the input ('\n'-separated; a line may hold any other byte).
std::vector<std::string> lines_of(const uint8_t* data, size_t size);
// <tmp>/te_fuzz_<pid>/<name>, created on first use and removed when the process exits.
std::filesystem::path scratch_dir(const std::string& name);
}  // namespace te::fuzz
