// Leveled logging to stderr. Level from TEENGINE_LOG=error|warn|info|debug (default warn).
// TE_LOG_ONCE logs a message at most once per call site (for warnings that could repeat every step).
#pragma once
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "engine/error.h"

namespace te {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);
// Tests capture log lines; nullptr restores stderr. Returns the previous sink.
using LogSink = std::function<void(LogLevel, const std::string&)>;
LogSink set_log_sink(LogSink sink);
std::optional<LogLevel> log_level_from_name(std::string_view name);  // "error" | "warn" | "info" | "debug"
// Why TEENGINE_LOG cannot be used ("" when unset or valid; the level then stays warn): the CLI refuses to start.
std::string log_env_problem();
// "rank R: " in a process started by a launcher with WORLD_SIZE > 1 (RANK, WORLD_SIZE), else "": stderr lines of
// several ranks stay attributable.
const std::string& rank_prefix();

}  // namespace te

#define TE_LOG(level, msg)                                                    \
  do {                                                                        \
    if (::te::log_enabled(::te::LogLevel::level))                             \
      ::te::log_message(::te::LogLevel::level, TE_STR_(msg));                 \
  } while (0)

#define TE_LOG_ONCE(level, msg)                                               \
  do {                                                                        \
    static std::once_flag te_log_once_flag_;                                  \
    std::call_once(te_log_once_flag_, [&] { TE_LOG(level, msg); });           \
  } while (0)
