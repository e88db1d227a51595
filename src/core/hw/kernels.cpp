// Kernels: the size-tolerant copy of a plugin's kernel table and checked calls into it.
#include <verlpp/hw/kernels.hpp>

#include <algorithm>
#include <cstring>

namespace verlpp::hw {

Kernels::Kernels(const Plugin& plugin) : plugin_(&plugin), table_{} {
  const verlpp_kernel_table* given = plugin.api().kernels;
  if (given != nullptr && given->struct_size >= sizeof(size_t))
    std::memcpy(&table_, given, std::min(given->struct_size, sizeof(table_)));
  table_.struct_size = sizeof(table_);
}

std::vector<std::string> Kernels::available() const {
  std::vector<std::string> names;
  if (table_.logprob_entropy) names.push_back("logprob_entropy");
  if (table_.rms_norm) names.push_back("rms_norm");
  if (table_.rotary_embedding) names.push_back("rotary_embedding");
  if (table_.paged_attention_decode) names.push_back("paged_attention_decode");
  if (table_.sample) names.push_back("sample");
  return names;
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

}  // namespace verlpp::hw
