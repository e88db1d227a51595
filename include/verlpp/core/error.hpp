// verlpp's one exception type and the check macro that raises it.
// Every error says what failed, where (a file:line or a named object) and which value was
// offending, so a user can act on it without a debugger. Library code never exits or prints.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace verlpp {

// The exception thrown by verlpp. what() = "<where>: <message>".
class Error : public std::runtime_error {
 public:
  Error(std::string where, std::string message)
      : std::runtime_error(where.empty() ? message : where + ": " + message),
        where_(std::move(where)),
        message_(std::move(message)) {}
  // The place or object the error concerns (a file:line, a plugin path, a config key).
  const std::string& where() const noexcept { return where_; }
  // The message without the location.
  const std::string& message() const noexcept { return message_; }

 private:
  std::string where_;
  std::string message_;
};

}  // namespace verlpp

// Throws verlpp::Error with the formatted message unless `cond` holds. The message names its own
// context (the object, key or file checked): it is what a user reads, so no source location.
#define VERLPP_CHECK(cond, ...)                                                    \
  do {                                                                             \
    if (!(cond)) throw ::verlpp::Error(std::string(), ::fmt::format(__VA_ARGS__)); \
  } while (0)

// Throws verlpp::Error(where, fmt::format(...)) unconditionally.
#define VERLPP_FAIL_AT(where, ...) throw ::verlpp::Error((where), ::fmt::format(__VA_ARGS__))
