// What the CLI echoes from files and arguments cannot drive the terminal: tensor names, metadata and spec strings
// come out with their control characters escaped in `inspect`, the `run` summary and error messages, and an echoed
// value is cut at about 100 characters.
#include <nlohmann/json.hpp>

#include "cli_test.h"
#include "models/safetensors.h"

namespace te {
namespace {

class EchoCli : public CliTest {
 protected:
  std::string fast() const { return " --set run.tokens=64 --set run.device=cpu "; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static bool has_raw_controls(const std::string& s) {
    for (unsigned char c : s)
      if ((c < 0x20 && c != '\n') || c == 0x7F) return true;
    return false;
  }
};

TEST_F(EchoCli, InspectEscapesNamesAndMetadata) {
  write_safetensors(path("esc.safetensors"), {{"evil\x1b]0;title\x07name", Tensor::zeros({2}, DType::f32)}},
                    {{"note\x1b[2J", "v\x1b[31m\xc2\x9b"}});
  Result r = run("inspect " + path("esc.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(has_raw_controls(r.out)) << r.out;
  EXPECT_NE(r.out.find("evil\\x1B]0;title\\x07name"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metadata note\\x1B[2J = v\\x1B[31m\\u009B"), std::string::npos) << r.out;
  r = run("inspect --json " + path("esc.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (unsigned char c : r.out) ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7F)) << "not printable ASCII: " << r.out;
  const auto j = nlohmann::json::parse(r.out);  // the JSON escapes keep the values exact
  EXPECT_EQ(j["tensors"][0]["name"], "evil\x1b]0;title\x07name");
  EXPECT_EQ(j["metadata"]["note\x1b[2J"], "v\x1b[31m\xc2\x9b");
}

TEST_F(EchoCli, ErrorsEscapeTensorNamesFromTheFile) {
  // `input` is missing and the closest name holds a BEL: the suggestion quotes it escaped.
  write_safetensors(path("in.safetensors"), {{"inpu\x07", Tensor::zeros({2, 2}, DType::f32)}});
  Result r = run("run " + model() + fast() + "--input " + path("in.safetensors"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(has_raw_controls(r.err)) << r.err;
  EXPECT_NE(r.err.find("did you mean 'inpu\\x07'?"), std::string::npos) << r.err;
  const std::string name(300, 'n');
  write_safetensors(path("bad.safetensors"), {{"\x1b[2J" + name, Tensor::zeros({1}, DType::f32)}});
  std::string bytes = slurp(path("bad.safetensors"));
  bytes.replace(bytes.find("\"F32\""), 5, "\"F99\"");  // same length: the header stays valid JSON
  std::ofstream(path("bad.safetensors"), std::ios::binary) << bytes;
  r = run("inspect " + path("bad.safetensors"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(has_raw_controls(r.err)) << r.err;
  EXPECT_NE(r.err.find("tensor '\\x1B[2Jnnn"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("... (304 bytes)': dtype 'F99' is not supported"), std::string::npos) << r.err;
}

TEST_F(EchoCli, TheRunSummaryAndSpecErrorsEscapeSpecStrings) {
  std::string spec = slurp(model());
  spec.replace(spec.find("name: tiny"), 10, "name: \"evil\\x1b]0;title\\x07\"");
  std::ofstream(path("m.yaml")) << spec;
  Result r = run("run " + path("m.yaml") + fast());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(has_raw_controls(r.out)) << r.out;
  EXPECT_NE(r.out.find("evil\\x1B]0;title\\x07: 64 tokens"), std::string::npos) << r.out;
  // A layer name and a --set value with control characters: echoed escaped.
  r = run("run " + model() + fast() + "--set 'model.block[0][0].layernorm_linear.name=\"q\\x1b[2J\"'");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(has_raw_controls(r.err)) << r.err;
  EXPECT_NE(r.err.find("'q\\x1B[2J' is not a valid layer name"), std::string::npos) << r.err;
  r = run("run " + model() + fast() + "--set 'run.mode=\x1b[31mtrain'");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(has_raw_controls(r.err)) << r.err;
}

TEST_F(EchoCli, EchoedValuesAreCut) {
  // 5,000 digits in --set: the message quotes 100 of them and says how long the value was.
  Result r = run("run " + model() + " --set model.hidden=" + std::string(5000, '7'));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_LT(r.err.size(), 800u) << r.err;
  EXPECT_NE(r.err.find(std::string(100, '7') + "... (5000 bytes)"), std::string::npos) << r.err;
  r = run("run " + model() + " --set " + std::string(5000, 'k') + "=1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_LT(r.err.size(), 800u) << r.err;
  r = run("info", "TEENGINE_LOG=" + std::string(500, 'x'));
  EXPECT_EQ(r.code, 2);
  EXPECT_LT(r.err.size(), 300u) << r.err;
}

}  // namespace
}  // namespace te
