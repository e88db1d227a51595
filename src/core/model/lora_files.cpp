// PEFT adapter folders: the config's fields as PEFT names them, the tensors by PEFT's names.
#include <verlpp/model/lora_files.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/json_limits.hpp>
#include <verlpp/model/safetensors.hpp>

#include "../util/files.hpp"

#include <nlohmann/json.hpp>

#include <set>

namespace verlpp::model {
namespace {

using nlohmann::json;

std::string config_file_of(const std::string& path) {
  return files::is_dir(path) ? files::join(path, kLoraConfigFile) : path;
}

// A field that is absent, null, false, empty or (for a string) the given neutral value.
bool neutral(const json& j, const char* key, const char* neutral_string = nullptr) {
  if (!j.contains(key)) return true;
  const json& v = j.at(key);
  if (v.is_null() || (v.is_boolean() && !v.get<bool>())) return true;
  if ((v.is_object() || v.is_array()) && v.empty()) return true;
  return neutral_string != nullptr && v.is_string() && v.get<std::string>() == neutral_string;
}

// target_modules / exclude_modules: a list of names, or one string (a regular expression).
void read_modules(const json& j, const char* key, std::vector<std::string>& names, std::optional<std::string>& regex,
                  const std::string& file) {
  names.clear();
  regex.reset();
  if (!j.contains(key) || j.at(key).is_null()) return;
  const json& v = j.at(key);
  if (v.is_string()) {
    if (v.get<std::string>() == "all-linear") {
      names = {"all-linear"};
    } else {
      regex = v.get<std::string>();
    }
    return;
  }
  if (!v.is_array()) throw Error(file, fmt::format("{} must be a list of module names or a string", key));
  for (const json& n : v) {
    if (!n.is_string()) throw Error(file, fmt::format("{} holds {}, not a module name", key, n.dump()));
    names.push_back(n.get<std::string>());
  }
}

// The short names ("q_proj") of the projections that got adapters, sorted as PEFT writes them.
std::vector<std::string> targeted_names(const LoraAdapters& adapters) {
  std::set<std::string> names;
  for (int64_t l = 0; l < adapters.model_config().num_hidden_layers; ++l)
    for (int p = 0; p < kLoraProjections; ++p)
      if (adapters.find(l, LoraProjection(p)) != nullptr) {
        const std::string module = lora_projection_module(LoraProjection(p));
        names.insert(module.substr(module.find('.') + 1));
      }
  return {names.begin(), names.end()};
}

}  // namespace

void save_lora_adapter(const LoraAdapters& adapters, const std::string& dir, const LoraSaveOptions& options) {
  const LoraConfig& c = adapters.config();
  json j = {{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"r", c.rank},
            {"lora_alpha", c.alpha},
            {"lora_dropout", c.dropout},
            {"use_rslora", c.use_rslora},
            {"use_dora", false},
            {"bias", "none"},
            {"fan_in_fan_out", false},
            {"init_lora_weights", true},
            {"inference_mode", true},
            {"modules_to_save", nullptr},
            {"layers_to_transform", nullptr},
            {"layers_pattern", nullptr},
            {"rank_pattern", json::object()},
            {"alpha_pattern", json::object()},
            {"revision", nullptr}};
  j["base_model_name_or_path"] = options.base_model.empty() ? json(nullptr) : json(options.base_model);
  // "all-linear" is written as what it selected (PEFT does the same); a regex stays a string.
  if (c.target_regex) {
    j["target_modules"] = *c.target_regex;
  } else {
    j["target_modules"] = targeted_names(adapters);
  }
  if (c.exclude_regex) {
    j["exclude_modules"] = *c.exclude_regex;
  } else if (!c.exclude_modules.empty()) {
    j["exclude_modules"] = c.exclude_modules;
  } else {
    j["exclude_modules"] = nullptr;
  }
  files::make_dirs(dir);
  std::vector<NamedTensor> tensors;
  for (const auto& [name, t] : adapters.named_parameters())
    tensors.emplace_back(name, options.dtype ? t.detach().to(*options.dtype) : t.detach());
  write_safetensors(files::join(dir, kLoraWeightsFile), tensors);
  files::write_text(files::join(dir, kLoraConfigFile), j.dump(2) + "\n");
}

LoraConfig read_lora_config(const std::string& path) {
  const std::string file = config_file_of(path);
  if (!files::is_file(file)) throw Error(file, "cannot open the LoRA adapter config (adapter_config.json)");
  const std::string text = files::read_text(file);
  check_json_depth(text, file);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(file, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw Error(file, "an adapter config must be a JSON object");
  try {
    const std::string type = j.value("peft_type", std::string());
    if (type != "LORA") throw Error(file, fmt::format("peft_type is '{}': only LORA adapters are supported", type));
    if (!j.contains("r") || !j.at("r").is_number_integer()) throw Error(file, "r (the adapter rank) is missing");
    LoraConfig c;
    c.rank = j.at("r").get<int64_t>();
    c.alpha = j.contains("lora_alpha") ? j.at("lora_alpha").get<double>() : 8.0;  // PEFT's default
    c.dropout = j.contains("lora_dropout") && !j.at("lora_dropout").is_null() ? j.at("lora_dropout").get<double>() : 0;
    c.use_rslora = j.contains("use_rslora") && j.at("use_rslora").is_boolean() && j.at("use_rslora").get<bool>();
    read_modules(j, "target_modules", c.target_modules, c.target_regex, file);
    if (c.target_modules.empty() && !c.target_regex) throw Error(file, "target_modules is missing");
    read_modules(j, "exclude_modules", c.exclude_modules, c.exclude_regex, file);
    // What would change the math if ignored.
    if (!neutral(j, "use_dora")) throw Error(file, "use_dora: DoRA adapters are not supported");
    if (!neutral(j, "bias", "none"))
      throw Error(file, fmt::format("bias {}: only \"none\" is supported", j.at("bias").dump()));
    if (!neutral(j, "fan_in_fan_out")) throw Error(file, "fan_in_fan_out: only false is supported");
    for (const char* key : {"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform",
                            "layer_replication", "trainable_token_indices"})
      if (!neutral(j, key))
        throw Error(file, fmt::format("{} {}: not supported (adapters with one rank and alpha on every targeted "
                                      "projection only)",
                                      key, j.at(key).dump()));
    return c;
  } catch (const json::exception& e) {  // a field of an unexpected JSON type
    throw Error(file, fmt::format("malformed field: {}", e.what()));
  }
}

void load_lora_adapter(LoraAdapters& adapters, const std::string& dir) {
  const std::string config_file = files::join(dir, kLoraConfigFile);
  const LoraConfig c = read_lora_config(config_file);
  VERLPP_CHECK(c.rank == adapters.config().rank, "{}: r {} differs from these adapters' rank {}", config_file, c.rank,
               adapters.config().rank);
  VERLPP_CHECK(c.scale() == adapters.config().scale(),
               "{}: lora_alpha {} (use_rslora {}) gives another scale than these adapters' (alpha {}, use_rslora {})",
               config_file, c.alpha, c.use_rslora, adapters.config().alpha, adapters.config().use_rslora);
  const std::string weights = files::join(dir, kLoraWeightsFile);
  if (!files::is_file(weights)) throw Error(weights, "cannot open the adapter weights (adapter_model.safetensors)");
  SafetensorsFile file(weights);
  std::set<std::string> expected;
  std::vector<at::Tensor> values;
  for (const auto& [name, t] : adapters.named_parameters()) {
    expected.insert(name);
    if (!file.contains(name)) throw Error(weights, fmt::format("tensor {} is missing (the config targets it)", name));
    at::Tensor v = file.tensor(name);
    if (v.sizes() != t.sizes())
      throw Error(weights, fmt::format("tensor {} has shape {}, the model needs {}", name, fmt::join(v.sizes(), "x"),
                                       fmt::join(t.sizes(), "x")));
    values.push_back(v);
  }
  for (const SafetensorsEntry& e : file.entries())
    if (expected.count(e.name) == 0)
      throw Error(weights, fmt::format("tensor {} is not an adapter of this model's targeted projections", e.name));
  at::NoGradGuard no_grad;
  const auto& named = adapters.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) named[i].second.detach().copy_(values[i]);
}

LoraAdapters read_lora_adapter(const ModelConfig& model, const std::string& dir, at::ScalarType dtype,
                               c10::Device device) {
  LoraConfig c = read_lora_config(files::join(dir, kLoraConfigFile));
  c.validate(files::join(dir, kLoraConfigFile), model.num_hidden_layers);
  LoraAdapters adapters(model, std::move(c), dtype, device);
  load_lora_adapter(adapters, dir);
  return adapters;
}

}  // namespace verlpp::model
