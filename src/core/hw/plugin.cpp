// Plugin: the host's view of one loaded plugin and the conversion of its error values.
#include <verlpp/hw/plugin.hpp>

namespace verlpp::hw {

const char* status_name(int32_t code) {
  switch (code) {
    case VERLPP_STATUS_OK:
      return "OK";
    case VERLPP_STATUS_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case VERLPP_STATUS_OUT_OF_MEMORY:
      return "OUT_OF_MEMORY";
    case VERLPP_STATUS_UNSUPPORTED:
      return "UNSUPPORTED";
    case VERLPP_STATUS_DEVICE_ERROR:
      return "DEVICE_ERROR";
    case VERLPP_STATUS_COMM_ERROR:
      return "COMM_ERROR";
    case VERLPP_STATUS_TIMEOUT:
      return "TIMEOUT";
    case VERLPP_STATUS_NOT_INITIALIZED:
      return "NOT_INITIALIZED";
    default:
      return "INTERNAL";
  }
}

PluginCallError::PluginCallError(const std::string& plugin, const std::string& call, int32_t code,
                                 const std::string& message)
    : Error(fmt::format("plugin {}: {}", plugin, call), fmt::format("{} ({})", message, status_name(code))),
      code_(code) {}

namespace {
std::string safe(const char* s) { return s == nullptr ? std::string() : std::string(s); }
}  // namespace

Plugin::Plugin(std::string path, int32_t score, const verlpp_plugin_api& table, size_t plugin_table_size)
    : path_(std::move(path)),
      name_(safe(table.name)),
      variant_(safe(table.variant)),
      version_(safe(table.version)),
      torch_device_type_(safe(table.torch_device_type)),
      score_(score),
      api_(table),
      plugin_table_size_(plugin_table_size) {
  if (torch_device_type_.empty()) torch_device_type_ = "cpu";
  // Read only by the ABI's rules: a pre-1.6 plugin's table has no such field (the host's copy is
  // zero there, but a plugin may have said minor 5 with a larger struct).
  const std::string library = table.abi_minor >= 6 ? safe(table.torch_backend_library) : std::string();
  if (torch_device_type_ == "privateuseone" && !library.empty()) {
    const bool bare = library.find('/') == std::string::npos;
    const size_t slash = path_.rfind('/');
    torch_backend_library_ = bare && slash != std::string::npos ? path_.substr(0, slash + 1) + library : library;
  }
}

std::string Plugin::display_name() const { return variant_.empty() ? name_ : name_ + "-" + variant_; }

void Plugin::check(verlpp_error* error, const char* call) const {
  if (error == nullptr) return;
  int32_t code = error->struct_size >= sizeof(verlpp_error) ? error->code : VERLPP_STATUS_INTERNAL;
  std::string message = error->message != nullptr ? error->message : "(no message)";
  if (api_.error_free != nullptr) api_.error_free(error);
  throw PluginCallError(display_name(), call, code, message);
}

void Plugin::require_slot(const void* slot, const char* call) const {
  if (slot == nullptr)
    throw PluginCallError(display_name(), call, VERLPP_STATUS_UNSUPPORTED,
                          "not offered by this plugin (its table slot is NULL)");
}

}  // namespace verlpp::hw
