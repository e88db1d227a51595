// A minimal logger: leveled lines to a replaceable sink (stderr by default).
// The level comes from VERLPP_LOG_LEVEL (debug|info|warning|error; default warning).
#pragma once

#include <functional>
#include <string>

namespace verlpp {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3 };

// Where log lines go; replace it to route verlpp's lines into your own logger.
using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink(LogSink sink);

// The lowest level that is emitted.
LogLevel log_threshold();
void set_log_threshold(LogLevel level);

// Emits `message` at `level` if it passes the threshold.
void log(LogLevel level, const std::string& message);

}  // namespace verlpp
