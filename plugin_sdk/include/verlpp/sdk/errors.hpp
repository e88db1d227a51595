// Plugin SDK: turning C++ failures into ABI error values.
// A plugin throws sdk::PluginError (or anything else); sdk::guard catches everything at the ABI
// boundary and returns a heap-allocated verlpp_error that the host frees with sdk::free_error.
#pragma once

#include <verlpp/plugin_abi.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace verlpp::sdk {

// An error with an ABI status code; what() is the message the host will show.
class PluginError : public std::runtime_error {
 public:
  PluginError(verlpp_status code, const std::string& message) : std::runtime_error(message), code_(code) {}
  verlpp_status code() const noexcept { return code_; }

 private:
  verlpp_status code_;
};

// Throws PluginError(code, message).
[[noreturn]] inline void fail(verlpp_status code, const std::string& message) { throw PluginError(code, message); }

// Throws INVALID_ARGUMENT with `message` unless `condition` holds.
inline void require(bool condition, const std::string& message) {
  if (!condition) fail(VERLPP_STATUS_INVALID_ARGUMENT, message);
}

// The error returned when even an error value cannot be allocated; never freed.
inline verlpp_error* static_oom_error() noexcept {
  static verlpp_error oom_error = {sizeof(verlpp_error), VERLPP_STATUS_OUT_OF_MEMORY,
                                   "out of memory while reporting an error"};
  return &oom_error;
}

// Allocates an error value; never throws (falls back to static_oom_error()).
inline verlpp_error* make_error(int32_t code, const char* message) noexcept {
  if (message == nullptr) message = "(no message)";
  size_t length = std::strlen(message);
  // One allocation holds the struct and the message, so error_free is a single delete.
  char* block = new (std::nothrow) char[sizeof(verlpp_error) + length + 1];
  if (block == nullptr) return static_oom_error();
  auto* error = reinterpret_cast<verlpp_error*>(block);
  char* text = block + sizeof(verlpp_error);
  std::memcpy(text, message, length + 1);
  error->struct_size = sizeof(verlpp_error);
  error->code = code;
  error->message = text;
  return error;
}

// Releases an error made by make_error (the static out-of-memory error is left alone).
inline void free_error(verlpp_error* error) noexcept {
  if (error == nullptr || error == static_oom_error()) return;
  delete[] reinterpret_cast<char*>(error);
}

// Runs `body` and converts whatever it throws into an error value; NULL on success.
template <class Body>
verlpp_error* guard(const char* where, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const PluginError& e) {
    return make_error(e.code(), (std::string(where) + ": " + e.what()).c_str());
  } catch (const std::bad_alloc&) {
    return make_error(VERLPP_STATUS_OUT_OF_MEMORY, (std::string(where) + ": out of memory").c_str());
  } catch (const std::exception& e) {
    return make_error(VERLPP_STATUS_INTERNAL, (std::string(where) + ": unexpected exception: " + e.what()).c_str());
  } catch (...) {
    return make_error(VERLPP_STATUS_INTERNAL, (std::string(where) + ": unknown exception").c_str());
  }
}

}  // namespace verlpp::sdk
