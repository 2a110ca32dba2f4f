#include "engine/printable.h"

#include <cstdint>
#include <cstdio>

namespace te {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (overlong forms, surrogates and code points past U+10FFFF are
// not), 0 when there is none.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  return n;
}

void append_escape(std::string& out, const char* format, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  out.reserve(s.size() < max ? s.size() + 8 : max + 24);
  size_t i = 0;
  while (i < s.size() && i < max) {
    const auto c = static_cast<uint8_t>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n > 1 && i + n > max) break;  // no half character before the cut
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7F))) {
      append_escape(out, "\\x%02X", c);
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<uint8_t>(s[i + 1]) <= 0x9F) {
      append_escape(out, "\\u%04X", static_cast<uint8_t>(s[i + 1]));  // a C1 control
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string quoted_value(std::string_view s, size_t max) {
  std::string out = "'";
  out += printable(s, max);
  out += '\'';
  return out;
}

std::string printable_lines(std::string_view text) {
  std::string out;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (start > 0) out += '\n';
    out += printable(text.substr(start, end - start), text.size());
    start = end + 1;
  }
  return out;
}

}  // namespace te
