// Echoed text cannot drive a terminal: every control character and non-UTF-8 byte comes out escaped, valid UTF-8
// passes, long values are cut on a character boundary with their length.
#include <gtest/gtest.h>

#include <string>

#include "engine/printable.h"

namespace te {
namespace {

TEST(Printable, EscapesControlsAndPassesUtf8) {
  EXPECT_EQ(printable("layers.0.mlp.fc1_weight"), "layers.0.mlp.fc1_weight");
  EXPECT_EQ(printable("evil\x1b]0;title\x07name"), "evil\\x1B]0;title\\x07name");
  EXPECT_EQ(printable(std::string("a\0b\n\t\x7f", 6)), "a\\x00b\\x0A\\x09\\x7F");
  EXPECT_EQ(printable("× ≥ 日本 \xF0\x9F\x98\x80"), "× ≥ 日本 \xF0\x9F\x98\x80");
  EXPECT_EQ(printable("csi\xC2\x9B" "2J"), "csi\\u009B2J");  // U+009B: CSI on some terminals
  EXPECT_EQ(printable("nbsp\xC2\xA0"), "nbsp\xC2\xA0");
  // Bytes that are not UTF-8 (a lone 0x9B is CSI on an 8-bit terminal), overlong forms, surrogates, truncations.
  EXPECT_EQ(printable("\x9B" "2J"), "\\x9B2J");
  EXPECT_EQ(printable("\xC0\xAF"), "\\xC0\\xAF");
  EXPECT_EQ(printable("\xED\xA0\x80"), "\\xED\\xA0\\x80");
  EXPECT_EQ(printable("end\xE6\x97"), "end\\xE6\\x97");
  EXPECT_EQ(quoted_value("a\x1b"), "'a\\x1B'");
}

TEST(Printable, CutsLongValuesOnACharacterBoundary) {
  const std::string digits(5000, '7');
  EXPECT_EQ(printable(digits), std::string(100, '7') + "... (5000 bytes)");
  EXPECT_EQ(printable(std::string(100, 'x')), std::string(100, 'x'));  // at the limit: whole
  const std::string wide = std::string(99, 'a') + "日本";               // 日 would straddle byte 100
  EXPECT_EQ(printable(wide), std::string(99, 'a') + "... (105 bytes)");
  EXPECT_EQ(printable(digits, 10), std::string(10, '7') + "... (5000 bytes)");
  const std::string path = "/tmp/" + std::string(300, 'd') + "/w.safetensors";
  EXPECT_EQ(printable_path(path), path);  // paths are escaped, not cut
}

TEST(Printable, LinesKeepTheirNewlines) {
  EXPECT_EQ(printable_lines("error: x\x1b[2J\n  hint: y"), "error: x\\x1B[2J\n  hint: y");
  EXPECT_EQ(printable_lines(""), "");
  EXPECT_EQ(printable_lines("a\n"), "a\n");
  const std::string long_line(1000, 'z');
  EXPECT_EQ(printable_lines(long_line), long_line);  // nothing is cut
}

}  // namespace
}  // namespace te
