// PEFT's adapter folder, read and written: `adapter_config.json` (peft_type LORA, r,
// lora_alpha, lora_dropout, target_modules, exclude_modules, ...) and
// `adapter_model.safetensors` with tensors named "base_model.model.<module>.lora_A.weight" /
// "lora_B.weight" (PEFT drops the adapter's name "default" when it saves). PEFT features that
// change the math and that verlpp does not implement (DoRA, bias training, per-module rank or
// alpha patterns, modules_to_save, fan_in_fan_out) are refused by name, not ignored.
#pragma once

#include <verlpp/model/lora.hpp>

#include <optional>
#include <string>

namespace verlpp::model {

// The file names PEFT uses.
inline constexpr const char* kLoraConfigFile = "adapter_config.json";
inline constexpr const char* kLoraWeightsFile = "adapter_model.safetensors";

struct LoraSaveOptions {
  std::optional<at::ScalarType> dtype;  // the dtype written; default: the adapters'
  std::string base_model;               // base_model_name_or_path in the config ("" = null)
};

// Writes `adapters` as a PEFT folder `dir` (created if missing).
void save_lora_adapter(const LoraAdapters& adapters, const std::string& dir, const LoraSaveOptions& options = {});

// The LoraConfig of a PEFT folder (or its adapter_config.json); an Error naming the file and
// the field for what is missing, malformed or not supported.
LoraConfig read_lora_config(const std::string& path);

// Fills `adapters` from the PEFT folder `dir` (values cast to the adapters' dtype and device).
// Its config must give the same targets and rank; every tensor must be there with its shape,
// and no other: an Error names the file and the tensor otherwise, and leaves `adapters` as it was.
void load_lora_adapter(LoraAdapters& adapters, const std::string& dir);

// New adapters for `model` read from the PEFT folder `dir` (its config and its tensors).
LoraAdapters read_lora_adapter(const ModelConfig& model, const std::string& dir, at::ScalarType dtype = at::kFloat,
                               c10::Device device = c10::Device(c10::kCPU));

}  // namespace verlpp::model
