// Text from files and arguments (tensor names, metadata, spec values, paths) echoed to a terminal: control
// characters are escaped so that a hostile name cannot move the cursor, clear the screen or retitle the terminal,
// and long values are cut so that one bad field does not flood the screen.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace te {

// Echoed values (a name, a --set argument) are cut here; paths keep their full length.
inline constexpr size_t kEchoMaxChars = 100;
inline constexpr size_t kPathMaxChars = 4096;

// `s` with C0 controls, DEL and bytes that are not UTF-8 as \xHH and the C1 controls (U+0080..U+009F, which some
// terminals obey like ESC sequences) as \u00HH; other UTF-8 passes unchanged. Longer than `max` bytes: cut at a
// character boundary with "... (N bytes)" appended.
std::string printable(std::string_view s, size_t max = kEchoMaxChars);
// printable(s, max) in single quotes.
std::string quoted_value(std::string_view s, size_t max = kEchoMaxChars);
// A path as it appears in a message: escaped, not cut short.
inline std::string printable_path(std::string_view path) { return printable(path, kPathMaxChars); }
// A multi-line message with every line made printable and its newlines kept, nothing cut: the last guard before a
// message reaches the terminal, for echo sites that escaped nothing themselves.
std::string printable_lines(std::string_view text);

}  // namespace te
