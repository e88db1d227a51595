// Loading HF weights into a DecoderLM and saving a complete HF folder. Names are checked
// against parameter_specs(), which is the single list of what a config implies; a tied
// lm_head and RoPE buffers (`rotary_emb.inv_freq`, written by old checkpoints) are tolerated.
#include <verlpp/model/checkpoint.hpp>

#include <verlpp/model/safetensors.hpp>

#include "../util/files.hpp"
#include "shape_string.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <set>

namespace verlpp::model {

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> kNames = {
      "tokenizer.json",    "tokenizer_config.json", "special_tokens_map.json", "vocab.json",     "merges.txt",
      "added_tokens.json", "chat_template.jinja",   "chat_template.json",      "tokenizer.model"};
  return kNames;
}

LoadReport load_weights(DecoderLM& model, const std::string& path, const LoadOptions& options) {
  SafetensorsStore store(path);
  const ModelConfig& config = model.config();
  const std::string who =
      config.source.empty() ? config.architecture : config.architecture + " (config " + config.source + ")";
  LoadReport report;
  std::set<std::string> used;
  at::NoGradGuard no_grad;
  for (const auto& [name, param] : model.named_parameters()) {
    if (!store.contains(name)) {
      bool allowed = false;
      for (const std::string& prefix : options.allow_missing_prefixes) allowed |= name.rfind(prefix, 0) == 0;
      if (!allowed)
        throw Error(path, fmt::format("tensor '{}' is missing from the checkpoint; {} needs it with shape {}", name,
                                      who, shape_string(param.sizes())));
      report.missing.push_back(name);
      continue;
    }
    const SafetensorsEntry& entry = store.entry(name);
    if (at::IntArrayRef(entry.shape) != param.sizes())
      throw Error(store.file_of(name), fmt::format("tensor '{}' has shape {}; {} expects {}", name,
                                                   shape_string(entry.shape), who, shape_string(param.sizes())));
    at::Tensor source = store.tensor(name);
    if (!at::isFloatingType(source.scalar_type()))
      throw Error(store.file_of(name), fmt::format("tensor '{}' has dtype {}, not a floating type", name,
                                                   c10::toString(source.scalar_type())));
    param.copy_(source);
    used.insert(name);
    report.loaded.push_back(name);
  }
  for (const std::string& name : store.names()) {
    if (used.count(name)) continue;
    bool tied_head = name == "lm_head.weight" && config.tie_word_embeddings;
    if (tied_head || ends_with(name, "rotary_emb.inv_freq")) continue;
    report.unexpected.push_back(name);
  }
  model.note_weights_changed();
  return report;
}

DecoderLM load_pretrained(const std::string& dir, ModelOptions options, const LoadOptions& load) {
  DecoderLM model(load_model_config(dir), options);
  load_weights(model, dir, load);
  return model;
}

std::vector<std::string> save_pretrained(const DecoderLM& model, const std::string& dir, const SaveOptions& options) {
  files::make_dirs(dir);
  const at::ScalarType dtype = options.dtype.value_or(model.options().dtype);
  std::vector<NamedTensor> tensors;
  for (const auto& [name, param] : model.named_parameters())
    tensors.emplace_back(name, param.detach().to(at::TensorOptions().dtype(dtype).device(at::kCPU)));
  std::vector<std::string> written = write_safetensors_sharded(dir, tensors, options.max_shard_bytes);

  ModelConfig config = model.config();
  config.torch_dtype = dtype_name(dtype);
  files::write_text(files::join(dir, "config.json"), to_hf_json(config).dump(2) + "\n");
  written.push_back("config.json");

  const std::string& src = options.source_dir;
  const bool same = !src.empty() && src == dir;
  std::string generation = src.empty() ? "" : files::join(src, "generation_config.json");
  if (!generation.empty() && files::is_file(generation)) {
    if (!same) files::copy_file(generation, files::join(dir, "generation_config.json"));
  } else {
    nlohmann::json g = {{"_from_model_config", true}};
    if (config.bos_token_id) g["bos_token_id"] = *config.bos_token_id;
    if (config.eos_token_ids.size() == 1)
      g["eos_token_id"] = config.eos_token_ids[0];
    else if (!config.eos_token_ids.empty())
      g["eos_token_id"] = config.eos_token_ids;
    if (config.pad_token_id) g["pad_token_id"] = *config.pad_token_id;
    files::write_text(files::join(dir, "generation_config.json"), g.dump(2) + "\n");
  }
  written.push_back("generation_config.json");
  if (!src.empty()) {
    VERLPP_CHECK(files::is_dir(src), "save_pretrained: source folder '{}' does not exist", src);
    for (const std::string& name : tokenizer_file_names()) {
      std::string from = files::join(src, name);
      if (!files::is_file(from)) continue;
      if (!same) files::copy_file(from, files::join(dir, name));
      written.push_back(name);
    }
  }
  return written;
}

}  // namespace verlpp::model
