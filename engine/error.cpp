#include "engine/error.h"

#include "engine/device.h"

namespace te {
namespace {
std::string format(const std::string& msg, const std::string& call, const char* file, int line,
                   const std::string& device, const std::string& hint) {
  std::string s = msg;
  if (!hint.empty()) s += "\n  hint: " + hint;
  if (!call.empty()) s += "\n  call: " + call;
  s += "\n  at: " + std::string(file) + ":" + std::to_string(line);
  if (!device.empty()) s += " on " + device;
  return s;
}
}  // namespace

Error::Error(std::string message, std::string call, const char* file, int line, std::string device, std::string hint)
    : std::runtime_error(format(message, call, file, line, device, hint)),
      message_(std::move(message)),
      call_(std::move(call)),
      file_(file),
      device_(std::move(device)),
      hint_(std::move(hint)),
      line_(line) {}

namespace detail {
void throw_error(const std::string& msg, const char* call, const char* file, int line, const std::string& hint) {
  throw Error(msg, call, file, line, current_device_name(), hint);
}
void throw_input_error(const std::string& msg, const char* file, int line, const std::string& hint) {
  throw InputError(msg, "", file, line, "", hint);
}
}  // namespace detail
}  // namespace te
