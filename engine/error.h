// One exception type for the whole library: what failed, the failing call, where, on which device, and what to do.
// The library never calls exit/abort; tools/ maps te::Error to exit codes.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace te {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string call, const char* file, int line, std::string device, std::string hint);

  const std::string& message() const { return message_; }  // what failed
  const std::string& call() const { return call_; }        // the failing expression or API call
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& device() const { return device_; }
  const std::string& hint() const { return hint_; }        // what to do about it (may be empty)

 private:
  std::string message_, call_, file_, device_, hint_;
  int line_;
};

// Thrown for bad user input (files, fields, shapes): tools/ maps it to exit code 2.
class InputError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// TE_CHECK takes only bool: a string literal or pointer would always be "true" (a check that cannot fire).
inline bool require_bool(bool b) { return b; }
template <class T>
bool require_bool(T) = delete;
[[noreturn]] void throw_error(const std::string& msg, const char* call, const char* file, int line,
                              const std::string& hint);
[[noreturn]] void throw_input_error(const std::string& msg, const char* file, int line, const std::string& hint);
}  // namespace detail
}  // namespace te

#define TE_STR_(x) (static_cast<std::ostringstream&&>(std::ostringstream() << x).str())

// TE_CHECK(cond, "message " << value) / TE_CHECK_HINT(cond, msg, hint): throw te::Error when cond is false.
#define TE_CHECK_HINT(cond, msg, hint)                                                          \
  do {                                                                                          \
    if (!::te::detail::require_bool(cond))                                                      \
      ::te::detail::throw_error(TE_STR_(msg), #cond, __FILE__, __LINE__, TE_STR_(hint));        \
  } while (0)
#define TE_CHECK(cond, msg) TE_CHECK_HINT(cond, msg, "")
#define TE_THROW(msg, hint) ::te::detail::throw_error(TE_STR_(msg), "", __FILE__, __LINE__, TE_STR_(hint))
// Bad user input: exit code 2 in the CLI.
#define TE_INPUT_ERROR(msg, hint) ::te::detail::throw_input_error(TE_STR_(msg), __FILE__, __LINE__, TE_STR_(hint))
