// A model's trainable parameters as the optimizer sees them: tensors and HF names, in the same
// (HF) order, so optimizer state saved under names maps back to the right tensors.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <string>
#include <vector>

namespace verlpp::train {

// Every parameter tensor of `model`, in named_parameters() order.
inline std::vector<at::Tensor> parameter_tensors(const model::DecoderLM& model) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : model.named_parameters()) out.push_back(p);
  return out;
}

// Their HF names, in the same order.
inline std::vector<std::string> parameter_names(const model::DecoderLM& model) {
  std::vector<std::string> out;
  for (const auto& [name, p] : model.named_parameters()) out.push_back(name);
  return out;
}

}  // namespace verlpp::train
