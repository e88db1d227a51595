// A hardware plugin the host has loaded: its identity, its function table and error handling.
// The table is the host's own full-size copy: fields an older (smaller) plugin table lacks are
// zero/NULL, so callers test a slot before use and never read past the plugin's struct.
#pragma once

#include <verlpp/core/error.hpp>
#include <verlpp/plugin_abi.h>

#include <cstdint>
#include <string>

namespace verlpp::hw {

// Error raised when a plugin call returns an error value; names the plugin and the call.
class PluginCallError : public Error {
 public:
  PluginCallError(const std::string& plugin, const std::string& call, int32_t code, const std::string& message);
  // The verlpp_status the plugin returned.
  int32_t code() const noexcept { return code_; }

 private:
  int32_t code_;
};

// Name of a verlpp_status ("INVALID_ARGUMENT", ...).
const char* status_name(int32_t code);

// One loaded and initialised plugin. Cheap to copy; the shared object stays loaded forever.
class Plugin {
 public:
  Plugin(std::string path, int32_t score, const verlpp_plugin_api& table, size_t plugin_table_size);

  const std::string& name() const { return name_; }
  const std::string& variant() const { return variant_; }
  const std::string& version() const { return version_; }
  const std::string& torch_device_type() const { return torch_device_type_; }
  const std::string& path() const { return path_; }
  // The LibTorch extension that registers this plugin's PrivateUse1 backend (ABI 1.6), as a path:
  // a bare file name is resolved in the plugin file's folder. "" when the plugin names none, is
  // older than 1.6 or its devices are not privateuseone.
  const std::string& torch_backend_library() const { return torch_backend_library_; }
  int32_t score() const { return score_; }
  uint32_t abi_minor() const { return api_.abi_minor; }
  // Size of the table the plugin itself returned (may be smaller than sizeof(verlpp_plugin_api)).
  size_t plugin_table_size() const { return plugin_table_size_; }
  // The host's full-size copy of the table.
  const verlpp_plugin_api& api() const { return api_; }
  // "cpu_ref" or "cuda-sm90".
  std::string display_name() const;

  // Frees `error` through the plugin and throws PluginCallError if it is non-NULL.
  void check(verlpp_error* error, const char* call) const;
  // Throws PluginCallError(UNSUPPORTED) naming `call` if `slot` is NULL.
  void require_slot(const void* slot, const char* call) const;

 private:
  std::string path_;
  std::string name_, variant_, version_, torch_device_type_, torch_backend_library_;
  int32_t score_;
  verlpp_plugin_api api_;
  size_t plugin_table_size_;
};

}  // namespace verlpp::hw
