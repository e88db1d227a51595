// The message a verlpp::Error carries, for tests that check what a user would read: the text of
// the error `f` throws, or "(no error)" when it returns (so a CHECK on the text fails readably).
#pragma once

#include <verlpp/core/error.hpp>

#include <functional>
#include <string>

namespace verlpp::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const verlpp::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace verlpp::test
