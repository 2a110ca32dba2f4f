// docs/MODEL-YAML.md documents the spec the parser accepts. The key lists come from the parser's own table
// (models/spec_tables.h kSpecMaps, which its unknown-key check reads), so a key added to the parser without a row
// in the document, or a row left behind for a key that is gone, fails here. A key is documented by a table row of
// its own that starts with its full path in backticks, in a table whose header starts "| key |":
// "| `run.optimizer.betas` | ...".
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "engine/error.h"
#include "models/spec.h"
#include "models/spec_tables.h"

namespace te {
namespace {
using namespace spec_tables;

std::string doc_path() {
  const char* p = std::getenv("TE_MODEL_YAML_DOC");
  return p ? p : "docs/MODEL-YAML.md";
}

std::string doc_text() {
  std::ifstream f(doc_path());
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The paths of the rows "| `PATH` | ..." in tables whose header starts "| key |" (other tables list values).
std::set<std::string> documented_keys(const std::string& doc) {
  std::set<std::string> keys;
  std::istringstream in(doc);
  bool in_table = false, key_table = false;
  for (std::string line; std::getline(in, line);) {
    const bool row = line.rfind("|", 0) == 0;
    if (row && !in_table) key_table = line.rfind("| key |", 0) == 0;  // the header row
    in_table = row;
    if (!key_table || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    if (end == std::string::npos) continue;
    const std::string path = line.substr(3, end - 3);
    if (!path.empty() && path.find(' ') == std::string::npos) keys.insert(path);
  }
  return keys;
}

// "a, b, c": how the parser's hint lists the allowed keys.
template <class Keys>
std::string comma_list(const Keys& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

std::string join(std::string_view map, std::string_view key) {
  return map.empty() ? std::string(key) : std::string(map) + "." + std::string(key);
}

// Every key path the parser accepts, the layer kinds included ("model.block[b][i].linear").
std::set<std::string> accepted_keys() {
  std::set<std::string> keys;
  for (const SpecMap& m : kSpecMaps)
    for (std::string_view k : m.keys) keys.insert(join(m.path, k));
  for (const auto& [kind, value] : kKinds) keys.insert("model.block[b][i]." + kind);
  return keys;
}

TEST(SpecDocs, TheDocumentExists) {
  EXPECT_FALSE(doc_text().empty()) << "cannot read " << doc_path() << " (TE_MODEL_YAML_DOC)";
}

TEST(SpecDocs, EveryAcceptedKeyHasARow) {
  const std::set<std::string> documented = documented_keys(doc_text());
  for (const std::string& k : accepted_keys())
    EXPECT_TRUE(documented.count(k)) << "the parser accepts `" << k << "` but " << doc_path()
                                     << " has no row \"| `" << k << "` | ...\" for it";
}

TEST(SpecDocs, EveryRowIsAnAcceptedKey) {
  const std::set<std::string> accepted = accepted_keys();
  for (const std::string& k : documented_keys(doc_text()))
    EXPECT_TRUE(accepted.count(k)) << doc_path() << " documents `" << k << "`, which the parser does not accept";
}

TEST(SpecDocs, EveryEnumValueIsNamed) {
  const std::string doc = doc_text();
  auto check = [&](const char* what, const auto& table) {
    for (const auto& [name, value] : table)
      EXPECT_NE(doc.find("`" + name + "`"), std::string::npos)
          << what << " value `" << name << "` is not in " << doc_path();
  };
  check("model.norm.type", kNorms);
  check("layer kind", kKinds);
  check("activation", kActs);
  check("parallel.comm", kComms);
  check("precision.recipe", recipes());
  check("precision.fp8_format", kFormats);
  check("precision.amax_algo", kAlgos);
  check("run.mode", kRunModes);
  check("run.executor", kExecutors);
  check("run.optimizer.type", kOptims);
  check("model.dtype", kModelDTypes);
}

// The parser's unknown-key check reads the same table: its hint lists exactly the table's keys, in order.
TEST(SpecDocs, TheParserRejectsKeysOutsideTheTable) {
  const std::string base = "model: {hidden: 8, block: [[{layernorm_mlp: {name: mlp, ffn: 8}}]]}\n";
  for (const SpecMap& m : kSpecMaps) {
    if (m.path.rfind("model.block", 0) == 0) continue;  // layers: below
    std::string set = m.path.empty() ? "no_such_key=1" : std::string(m.path) + ".no_such_key=1";
    try {
      parse_spec(base, "t.yaml", {set});
      ADD_FAILURE() << set << " was accepted";
    } catch (const InputError& e) {
      EXPECT_TRUE(e.hint().ends_with(": " + comma_list(m.keys))) << e.hint();
    }
  }
  for (const auto& [kind, value] : kKinds) {
    const std::string set = "model.block[0][0]={" + kind + ": {name: a, no_such_key: 1}}";
    try {
      parse_spec(base, "t.yaml", {set});
      ADD_FAILURE() << set << " was accepted";
    } catch (const InputError& e) {
      const std::vector<std::string> keys = map_keys("model.block[b][i]." + kind);
      EXPECT_FALSE(keys.empty()) << kind;
      EXPECT_TRUE(e.hint().ends_with(": " + comma_list(keys))) << e.hint();
    }
  }
}

}  // namespace
}  // namespace te
