// The logger behind verlpp::log: a mutex-protected sink and a threshold read once from the env.
#include <verlpp/core/log.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace verlpp {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("VERLPP_LOG_LEVEL");
  if (v == nullptr) return LogLevel::warning;
  if (std::strcmp(v, "debug") == 0) return LogLevel::debug;
  if (std::strcmp(v, "info") == 0) return LogLevel::info;
  if (std::strcmp(v, "error") == 0) return LogLevel::error;
  return LogLevel::warning;
}

struct LogState {
  std::mutex mutex;
  LogSink sink;
  std::atomic<int> threshold{static_cast<int>(level_from_env())};
};

LogState& state() {
  static LogState s;
  return s;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warning:
      return "warning";
    default:
      return "error";
  }
}

}  // namespace

void set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().sink = std::move(sink);
}

LogLevel log_threshold() { return static_cast<LogLevel>(state().threshold.load()); }
void set_log_threshold(LogLevel level) { state().threshold = static_cast<int>(level); }

void log(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < state().threshold.load()) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  if (state().sink) {
    state().sink(level, message);
  } else {
    std::fprintf(stderr, "[verlpp %s] %s\n", level_name(level), message.c_str());
  }
}

}  // namespace verlpp
