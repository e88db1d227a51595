// A plugin's kernel table as a C++ object. The host's copy is full size: entries the plugin's
// (possibly older, smaller) table lacks read as NULL, i.e. "use the host's reference path".
// It also picks the stream kernel calls run on: LibTorch's current stream, wrapped through ABI
// 1.1's stream_from_native (cached, destroyed with this object), so that plugin kernels queue
// in order with LibTorch's own work instead of waiting for the device on the NULL stream.
#pragma once

#include <verlpp/hw/plugin.hpp>

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

class Kernels {
 public:
  explicit Kernels(const Plugin& plugin);
  // Destroys the stream wrappers this object made (never the native streams behind them).
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  // The full-size table (all entries NULL when the plugin has none).
  const verlpp_kernel_table& table() const { return table_; }
  // Names of the kernels the plugin offers, e.g. {"logprob_entropy", "rms_norm"}.
  std::vector<std::string> available() const;

  // Whether the plugin can wrap native streams: ABI minor >= 1 and stream_from_native and
  // stream_destroy offered, and VERLPP_KERNEL_STREAMS is not "0" (read at construction: the
  // switch for side-by-side timing, or to rule the streams out). Otherwise every stream below is NULL.
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

  // Each call throws PluginCallError(UNSUPPORTED) when the entry is NULL; see plugin_abi.h.
  void logprob_entropy(const DLTensor& logits, const DLTensor& labels, float temperature,
                       DLTensor& out_logprob, DLTensor* out_entropy, verlpp_stream stream = nullptr) const;
  void rms_norm(const DLTensor& x, const DLTensor& weight, float eps, DLTensor& out,
                verlpp_stream stream = nullptr) const;
  // ABI 1.2: the gradient with respect to the logits of a loss over logprob_entropy's outputs;
  // out_grad may be logits itself. NULL entry (or a plugin older than 1.2): UNSUPPORTED.
  void logprob_backward(const DLTensor& logits, const DLTensor& labels, const DLTensor& lse,
                        const DLTensor* grad_logprob, const DLTensor* mean_z, const DLTensor* grad_entropy,
                        float temperature, DLTensor& out_grad, verlpp_stream stream = nullptr) const;

 private:
  const Plugin* plugin_;
  verlpp_kernel_table table_;
  bool streams_allowed_ = true;  // VERLPP_KERNEL_STREAMS != "0"
  mutable std::mutex streams_mutex_;
  mutable std::map<std::pair<int32_t, void*>, verlpp_stream> streams_;  // (device, native) -> wrapper or NULL
};

}  // namespace verlpp::hw
