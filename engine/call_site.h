// Where a function was called from, as a defaulted argument (`CallSite site = CallSite::here()`): the file and line
// std::source_location gives, from the compiler builtins GCC and Clang share, because <source_location> is empty
// under clang 14 with libstdc++ 12 (the libFuzzer build: tools/fuzz.sh).
#pragma once

namespace te {

struct CallSite {
  const char* file = "";
  unsigned line = 0;
  // In a default argument, the builtins give the line of the outermost call, as std::source_location::current().
  static constexpr CallSite here(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return {file, line};
  }
};

}  // namespace te
