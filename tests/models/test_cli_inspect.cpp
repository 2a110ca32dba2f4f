// Runs the built `teengine inspect` (path in $TE_TEENGINE) on good and bad files: exit 0 with the table / JSON,
// exit 2 with one message naming the file for every malformed file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/safetensors.h"
#include "cli_test.h"

namespace te {
namespace {
namespace fs = std::filesystem;

class InspectCli : public CliTest {};

TEST_F(InspectCli, GoodFileTableAndJson) {
  const fs::path p = dir_ / "good.safetensors";
  const float nan = std::nanf("");
  write_safetensors(p.string(),
                    {{"layers.0.mlp.fc1_weight", Tensor::from_f32({1, -3, 2, 4}, {2, 2}, DType::bf16)},
                     {"odd", Tensor::from_f32({nan, INFINITY, 5}, {3}, DType::f32)}},
                    {{"format", "pt"}});
  Result r = run("inspect '" + p.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("layers.0.mlp.fc1_weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2, 2]"), std::string::npos) << r.out;

  r = run("inspect --json '" + p.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 2u);
  const auto& w = j["tensors"][0];
  EXPECT_EQ(w["name"], "layers.0.mlp.fc1_weight");
  EXPECT_EQ(w["dtype"], "bf16");
  EXPECT_EQ(w["bytes"], 8);
  EXPECT_DOUBLE_EQ(w["min"].get<double>(), -3.0);
  EXPECT_DOUBLE_EQ(w["max"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(w["mean"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(w["std"].get<double>(), std::sqrt(6.5));  // population std of {1,-3,2,4}
  const auto& o = j["tensors"][1];
  EXPECT_EQ(o["nan"], 1);
  EXPECT_EQ(o["inf"], 1);
  EXPECT_DOUBLE_EQ(o["mean"].get<double>(), 5.0);
  EXPECT_EQ(j["metadata"]["format"], "pt");
}

// An error tells the user what and where, with the hint; the failing call and the source location are for
// TEENGINE_LOG=debug. An unknown TEENGINE_LOG is refused before anything runs.
TEST_F(InspectCli, SourceLocationsOnlyAtDebugAndABadLogLevelIsRefused) {
  const fs::path p = dir_ / "deep.safetensors";
  const std::string header = "{\"a\":{\"dtype\":\"F32\",\"shape\":" + std::string(60000, '[') +
                             std::string(60000, ']') + ",\"data_offsets\":[0,4]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  std::ofstream(p, std::ios::binary) << bytes << header << std::string(4, '\0');
  Result r = run("inspect '" + p.string() + "'");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("error: " + p.string() + ": the JSON header nests deeper than 16 levels", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("  hint: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("  at: "), std::string::npos) << r.err;
  r = run("inspect '" + p.string() + "'", "TEENGINE_LOG=debug");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("  at: "), std::string::npos) << r.err;
  r = run("info", "TEENGINE_LOG=bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("TEENGINE_LOG='bogus' is not a log level"), std::string::npos) << r.err;
}

TEST_F(InspectCli, BadFilesExitTwoWithOneMessage) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"truncated", std::string("\x05\x00", 2)},
      {"huge_header", std::string("\x00\x00\x00\x40\x00\x00\x00\x00{}", 10)},
      {"bad_json", std::string("\x03\x00\x00\x00\x00\x00\x00\x00{x}", 11)},
  };
  for (const auto& [name, bytes] : bad) {
    SCOPED_TRACE(name);
    const fs::path p = dir_ / (name + ".safetensors");
    std::ofstream(p, std::ios::binary) << bytes;
    Result r = run("inspect '" + p.string() + "'");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("error: " + p.string() + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
  }
  Result r = run("inspect '" + (dir_ / "missing.safetensors").string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  r = run("inspect");  // usage error
  EXPECT_EQ(r.code, 2);
}

}  // namespace
}  // namespace te
