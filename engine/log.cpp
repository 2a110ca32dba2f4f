#include "engine/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/printable.h"

namespace te {
namespace {
LogLevel level_from_env() {
  const char* v = std::getenv("TEENGINE_LOG");
  return v ? log_level_from_name(v).value_or(LogLevel::warn) : LogLevel::warn;
}
std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}
std::mutex sink_mutex;
LogSink& sink_ref() {
  static LogSink sink;
  return sink;
}
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}
}  // namespace

std::optional<LogLevel> log_level_from_name(std::string_view name) {
  for (LogLevel l : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug})
    if (name == level_name(l)) return l;
  return std::nullopt;
}

std::string log_env_problem() {
  const char* v = std::getenv("TEENGINE_LOG");
  if (!v || log_level_from_name(v)) return "";
  return "TEENGINE_LOG=" + quoted_value(v, 40) + " is not a log level (error | warn | info | debug)";
}

LogLevel log_level() { return static_cast<LogLevel>(level_ref().load()); }
void set_log_level(LogLevel level) { level_ref() = static_cast<int>(level); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= level_ref().load(); }

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(sink_mutex);
  if (sink_ref()) {
    sink_ref()(level, message);
    return;
  }
  // Messages may carry names from files: escaped like errors (engine/printable.h).
  std::fprintf(stderr, "[teengine %s] %s%s\n", level_name(level), rank_prefix().c_str(),
               printable_lines(message).c_str());
}

const std::string& rank_prefix() {
  static const std::string prefix = [] {
    const char* rank = std::getenv("RANK");
    const char* world = std::getenv("WORLD_SIZE");
    if (!rank || !world || std::atoi(world) <= 1) return std::string();
    return "rank " + std::string(rank) + ": ";
  }();
  return prefix;
}

LogSink set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(sink_mutex);
  LogSink old = std::move(sink_ref());
  sink_ref() = std::move(sink);
  return old;
}
}  // namespace te
