// Kernels: the size-tolerant copy of a plugin's kernel table, gated by the kernel list's minors,
// and the cache of wrappers of LibTorch's streams (ABI 1.1). A wrapper refers to its native stream by
// handle alone (the ABI's rule), so a cached one stays right even if LibTorch reuses a handle.
#include <verlpp/hw/kernels.hpp>

#include <verlpp/hw/device.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <verlpp/core/log.hpp>

#include <c10/core/Device.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace verlpp::hw {

Kernels::Kernels(const Plugin& plugin, KernelsOptions options) : plugin_(&plugin), table_{}, options_(options) {
  const verlpp_kernel_table* given = plugin.api().kernels;
  if (given != nullptr && given->struct_size >= sizeof(size_t))
    std::memcpy(&table_, given, std::min(given->struct_size, sizeof(table_)));
  // A table shorter than the plugin's own minor defines (e.g. 1.0's 48 bytes from a 1.5 plugin)
  // is read as the ABI says, up to its struct_size; the entries past it are lost, so say so.
  const size_t expected = sdk::kernel_table_size(std::min<uint32_t>(plugin.abi_minor(), VERLPP_PLUGIN_ABI_MINOR));
  if (given != nullptr && given->struct_size < expected)
    log(LogLevel::warning,
        fmt::format("plugin {}: kernel table struct_size is {} bytes, but ABI 1.{} (the plugin's minor) defines {}; "
                    "the kernels past byte {} are ignored (set struct_size = sizeof(verlpp_kernel_table))",
                    plugin.name(), given->struct_size, plugin.abi_minor(), expected, given->struct_size));
  table_.struct_size = sizeof(table_);
  // An entry added in minor N is the plugin's only if it was built for N or later (the ABI's rule).
  for (const sdk::KernelInfo& k : sdk::kKernels)
    if (k.minor > plugin.abi_minor()) sdk::clear_kernel_entry(table_, k.id);
}

Kernels::~Kernels() {
  for (const auto& [key, stream] : streams_) {
    if (stream == nullptr) continue;
    verlpp_error* e = plugin_->api().stream_destroy(stream);
    if (e != nullptr) plugin_->api().error_free(e);  // a destructor must not throw
  }
}

bool run_uses_kernels(const Plugin& plugin) {
  if (plugin.api().kernels == nullptr || device_count(plugin) < 1) return false;
  return (Device(plugin, 0).properties().capabilities & VERLPP_DEVICE_CAP_REFERENCE_KERNELS) == 0;
}

std::vector<std::string> Kernels::available() const {
  std::vector<std::string> names;
  for (const sdk::KernelInfo& k : sdk::kKernels)
    if (offers(k.id)) names.push_back(k.name);
  return names;
}

bool Kernels::wraps_native_streams() const {
  const verlpp_plugin_api& api = plugin_->api();
  return options_.native_streams && plugin_->abi_minor() >= 1 && api.stream_from_native != nullptr &&
         api.stream_destroy != nullptr;
}

verlpp_stream Kernels::current_stream(const c10::Device& device) const {
  if (device.is_cpu() || !wraps_native_streams()) return nullptr;
  void* native = nullptr;
  if (!torch_current_stream_handle(device, &native)) return nullptr;
  return native_stream(device.index(), native);
}

verlpp_stream Kernels::native_stream(int32_t device, void* native_handle) const {
  if (!wraps_native_streams()) return nullptr;
  std::lock_guard<std::mutex> lock(streams_mutex_);
  const auto key = std::make_pair(device, native_handle);
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second;
  verlpp_stream wrapper = nullptr;
  verlpp_error* e = plugin_->api().stream_from_native(device, native_handle, &wrapper);
  if (e != nullptr) {
    // The NULL stream is always correct, only slower: warn once for this stream and go on.
    log(LogLevel::warning, fmt::format("plugin {}: stream_from_native(device {}, {}): {}; its kernels wait for the "
                                       "device on the NULL stream instead",
                                       plugin_->display_name(), device, native_handle,
                                       e->message != nullptr ? e->message : "(no message)"));
    plugin_->api().error_free(e);
    wrapper = nullptr;
  } else {
    log(LogLevel::debug, fmt::format("plugin {}: kernels on device {} run on the native stream {} (wrapped)",
                                     plugin_->display_name(), device, native_handle));
  }
  streams_.emplace(key, wrapper);
  return wrapper;
}

}  // namespace verlpp::hw
