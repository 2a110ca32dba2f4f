// teengine::set_log_sink / set_log_level: the public face of engine/log.h. The public sink is wrapped in an
// internal one, so the internal logger stays the single place lines are filtered and serialised.
#include <teengine/teengine.h>

#include <mutex>

#include "engine/log.h"

namespace teengine {
namespace {
std::mutex public_sink_mu;
LogSink& public_sink() {
  static LogSink sink;
  return sink;
}
}  // namespace

LogSink set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(public_sink_mu);
  LogSink old = std::move(public_sink());
  public_sink() = std::move(sink);
  if (!public_sink()) {
    te::set_log_sink(nullptr);
    return old;
  }
  // The internal logger calls this under its own lock, one line at a time.
  te::set_log_sink([s = public_sink()](te::LogLevel level, const std::string& message) {
    s(static_cast<LogLevel>(static_cast<int>(level)), te::rank_prefix() + message);
  });
  return old;
}

void set_log_level(LogLevel level) { te::set_log_level(static_cast<te::LogLevel>(static_cast<int>(level))); }

}  // namespace teengine
