// A plugin's kernel table as a C++ object. The host's copy is full size: entries the plugin's
// (possibly older, smaller) table lacks read as NULL, i.e. "use the host's reference path".
#pragma once

#include <verlpp/hw/plugin.hpp>

#include <string>
#include <vector>

namespace verlpp::hw {

class Kernels {
 public:
  explicit Kernels(const Plugin& plugin);
  const Plugin& plugin() const { return *plugin_; }
  // The full-size table (all entries NULL when the plugin has none).
  const verlpp_kernel_table& table() const { return table_; }
  // Names of the kernels the plugin offers, e.g. {"logprob_entropy", "rms_norm"}.
  std::vector<std::string> available() const;

  // Each call throws PluginCallError(UNSUPPORTED) when the entry is NULL; see plugin_abi.h.
  void logprob_entropy(const DLTensor& logits, const DLTensor& labels, float temperature,
                       DLTensor& out_logprob, DLTensor* out_entropy, verlpp_stream stream = nullptr) const;
  void rms_norm(const DLTensor& x, const DLTensor& weight, float eps, DLTensor& out,
                verlpp_stream stream = nullptr) const;

 private:
  const Plugin* plugin_;
  verlpp_kernel_table table_;
};

}  // namespace verlpp::hw
