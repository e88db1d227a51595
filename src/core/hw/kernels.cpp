// Kernels: the size-tolerant copy of a plugin's kernel table, checked calls into it, and the
// cache of wrappers of LibTorch's streams (ABI 1.1). A wrapper refers to its native stream by
// handle alone (the ABI's rule), so a cached one stays right even if LibTorch reuses a handle.
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <verlpp/core/env.hpp>
#include <verlpp/core/log.hpp>

#include <c10/core/Device.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace verlpp::hw {

Kernels::Kernels(const Plugin& plugin) : plugin_(&plugin), table_{} {
  const verlpp_kernel_table* given = plugin.api().kernels;
  if (given != nullptr && given->struct_size >= sizeof(size_t))
    std::memcpy(&table_, given, std::min(given->struct_size, sizeof(table_)));
  table_.struct_size = sizeof(table_);
  // Entries added in 1.2 are the plugin's only if it was built for 1.2 (the ABI's rule).
  if (plugin.abi_minor() < 2) {
    table_.logprob_backward = nullptr;
    table_.silu_mul = nullptr;
    table_.silu_mul_backward = nullptr;
  }
  // And the entries added in 1.3 only if it was built for 1.3.
  if (plugin.abi_minor() < 3) {
    table_.add_rms_norm = nullptr;
    table_.rotary_kv_store = nullptr;
  }
  // And 1.4's only if it was built for 1.4.
  if (plugin.abi_minor() < 4) table_.adamw_update = nullptr;
  // And 1.5's only if it was built for 1.5.
  if (plugin.abi_minor() < 5) table_.rotary_paged_attention_decode = nullptr;
  streams_allowed_ = !env_equals("VERLPP_KERNEL_STREAMS", "0");
}

Kernels::~Kernels() {
  for (const auto& [key, stream] : streams_) {
    if (stream == nullptr) continue;
    verlpp_error* e = plugin_->api().stream_destroy(stream);
    if (e != nullptr) plugin_->api().error_free(e);  // a destructor must not throw
  }
}

std::vector<std::string> Kernels::available() const {
  std::vector<std::string> names;
  if (table_.logprob_entropy) names.push_back("logprob_entropy");
  if (table_.rms_norm) names.push_back("rms_norm");
  if (table_.rotary_embedding) names.push_back("rotary_embedding");
  if (table_.paged_attention_decode) names.push_back("paged_attention_decode");
  if (table_.sample) names.push_back("sample");
  if (table_.logprob_backward) names.push_back("logprob_backward");
  if (table_.silu_mul) names.push_back("silu_mul");
  if (table_.silu_mul_backward) names.push_back("silu_mul_backward");
  if (table_.add_rms_norm) names.push_back("add_rms_norm");
  if (table_.rotary_kv_store) names.push_back("rotary_kv_store");
  if (table_.adamw_update) names.push_back("adamw_update");
  if (table_.rotary_paged_attention_decode) names.push_back("rotary_paged_attention_decode");
  return names;
}

bool Kernels::wraps_native_streams() const {
  const verlpp_plugin_api& api = plugin_->api();
  return streams_allowed_ && plugin_->abi_minor() >= 1 && api.stream_from_native != nullptr &&
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
  }
  else {
    log(LogLevel::debug, fmt::format("plugin {}: kernels on device {} run on the native stream {} (wrapped)",
                                     plugin_->display_name(), device, native_handle));
  }
  streams_.emplace(key, wrapper);
  return wrapper;
}

void Kernels::logprob_entropy(const DLTensor& logits, const DLTensor& labels, float temperature,
                              DLTensor& out_logprob, DLTensor* out_entropy, verlpp_stream stream) const {
  plugin_->require_slot(reinterpret_cast<const void*>(table_.logprob_entropy), "kernels.logprob_entropy");
  plugin_->check(table_.logprob_entropy(&logits, &labels, temperature, &out_logprob, out_entropy, stream),
                 "kernels.logprob_entropy");
}

void Kernels::rms_norm(const DLTensor& x, const DLTensor& weight, float eps, DLTensor& out,
                       verlpp_stream stream) const {
  plugin_->require_slot(reinterpret_cast<const void*>(table_.rms_norm), "kernels.rms_norm");
  plugin_->check(table_.rms_norm(&x, &weight, eps, &out, stream), "kernels.rms_norm");
}

void Kernels::logprob_backward(const DLTensor& logits, const DLTensor& labels, const DLTensor& lse,
                               const DLTensor* grad_logprob, const DLTensor* mean_z, const DLTensor* grad_entropy,
                               float temperature, DLTensor& out_grad, verlpp_stream stream) const {
  plugin_->require_slot(reinterpret_cast<const void*>(table_.logprob_backward), "kernels.logprob_backward");
  plugin_->check(table_.logprob_backward(&logits, &labels, &lse, grad_logprob, mean_z, grad_entropy, temperature,
                                         &out_grad, stream),
                 "kernels.logprob_backward");
}

}  // namespace verlpp::hw
