// One line for any exception a user may see: verlpp's own errors as they are, LibTorch's without
// the C++ backtrace it appends (c10::Error::what_without_backtrace), and nlohmann-json's without
// its internal exception id.
#pragma once

#include <exception>
#include <string>

namespace verlpp {

// The user-facing text of `e` (no backtrace, no library-internal prefixes).
std::string error_text(const std::exception& e);

}  // namespace verlpp
