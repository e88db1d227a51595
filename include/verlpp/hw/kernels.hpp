// A plugin's kernel table as a C++ object. The host's copy is full size: entries the plugin's
// (possibly older, smaller) table lacks, and entries of a minor newer than the plugin's, read as
// NULL, i.e. "use the host's reference path" (the gating follows the ABI's one kernel list,
// VERLPP_KERNEL_LIST). It also picks the stream kernel calls run on: LibTorch's current stream,
// wrapped through ABI 1.1's stream_from_native (cached, destroyed with this object), so that
// plugin kernels queue in order with LibTorch's work instead of waiting on the NULL stream.
// Tensor-level calls with their fallbacks are the ops layer's (src/core/ops).
#pragma once

#include <verlpp/hw/plugin.hpp>
#include <verlpp/sdk/kernel_list.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace c10 {
struct Device;
}

namespace verlpp::hw {

using KernelId = sdk::KernelId;

// How a Kernels object runs its plugin's kernels.
struct KernelsOptions {
  // Run kernels on LibTorch's current stream where the plugin can wrap it (ABI 1.1); false keeps
  // the synchronous NULL stream (for side-by-side timing, or to rule the streams out).
  bool native_streams = true;
};

// Whether runs on `plugin`'s devices call its kernels: true unless its first device reports
// VERLPP_DEVICE_CAP_REFERENCE_KERNELS (cpu_ref: loops that define the math, slower than
// LibTorch's own path). A plugin without devices or kernels is never called.
bool run_uses_kernels(const Plugin& plugin);

class Kernels {
 public:
  explicit Kernels(const Plugin& plugin, KernelsOptions options = {});
  // Destroys the stream wrappers this object made (never the native streams behind them).
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  // The full-size table (all entries NULL when the plugin has none).
  const verlpp_kernel_table& table() const { return table_; }
  // Whether the plugin offers kernel `id` (its entry is non-NULL after the gating).
  bool offers(KernelId id) const { return sdk::kernel_entry(table_, id) != nullptr; }
  // Names of the kernels the plugin offers, in the list's order, e.g. {"logprob_entropy", "rms_norm"}.
  std::vector<std::string> available() const;

  // Calls kernel `id` with `args` (its ABI arguments) and throws PluginCallError naming it
  // ("kernels.<name>") when it fails, or UNSUPPORTED when the plugin does not offer it.
  template <KernelId id, class... Args>
  void call(Args&&... args) const {
    const auto entry = table_.*sdk::KernelSlot<id>::member;
    const char* name = sdk::kernel_info(id).call;
    plugin_->require_slot(reinterpret_cast<const void*>(entry), name);
    plugin_->check(entry(std::forward<Args>(args)...), name);
  }

  // Whether the plugin can wrap native streams: ABI minor >= 1 and stream_from_native and
  // stream_destroy offered, and KernelsOptions::native_streams. Otherwise every stream below is NULL.
  bool wraps_native_streams() const;
  // The stream for kernels over tensors on torch `device`: LibTorch's current stream there,
  // wrapped (asynchronous, ordered with LibTorch's work on that stream). NULL, the plugin's
  // synchronous default stream, for CPU devices, when this LibTorch cannot name its stream
  // (LibTorch < 2.4, see torch_device.hpp), or when the plugin cannot wrap native streams.
  // The plugin's device index is the torch device index, as in the host's DLPack views.
  verlpp_stream current_stream(const c10::Device& device) const;
  // The wrapper of `native_handle` (cudaStream_t, ...; NULL = the native default stream) on
  // plugin device `device`, made once per (device, handle) and kept until this object goes.
  // NULL when the plugin cannot wrap native streams, or when wrapping failed (logged once).
  verlpp_stream native_stream(int32_t device, void* native_handle) const;

 private:
  const Plugin* plugin_;
  verlpp_kernel_table table_;
  KernelsOptions options_;
  mutable std::mutex streams_mutex_;
  mutable std::map<std::pair<int32_t, void*>, verlpp_stream> streams_;  // (device, native) -> wrapper or NULL
};

}  // namespace verlpp::hw
