// HF config.json -> ModelConfig and back. Defaults for absent optional fields are HF's own for
// each family; the shape-defining fields are required, and every error names the file and the
// field. Only what verlpp computes exactly like transformers is accepted (silu MLP, full-rotary
// RoPE of type default/linear/llama3, no sliding window); anything else is refused by name.
#include <verlpp/core/json_limits.hpp>
#include <verlpp/model/model_config.hpp>

#include <verlpp/core/error.hpp>
#include "../util/files.hpp"

#include <tuple>

namespace verlpp::model {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw Error(source.empty() ? std::string("config") : source, message);
}

bool has(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

int64_t get_int(const json& j, const char* key, const std::string& source) {
  if (!has(j, key)) fail(source, fmt::format("required field '{}' is missing", key));
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>()))) return int64_t(v.get<double>());
  fail(source, fmt::format("field '{}' must be an integer, got {}", key, v.dump()));
}

int64_t get_int(const json& j, const char* key, int64_t fallback, const std::string& source) {
  return has(j, key) ? get_int(j, key, source) : fallback;
}

double get_double(const json& j, const char* key, double fallback, const std::string& source) {
  if (!has(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) fail(source, fmt::format("field '{}' must be a number, got {}", key, v.dump()));
  return v.get<double>();
}

bool get_bool(const json& j, const char* key, bool fallback, const std::string& source) {
  if (!has(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) fail(source, fmt::format("field '{}' must be true or false, got {}", key, v.dump()));
  return v.get<bool>();
}

std::optional<int64_t> get_optional_id(const json& j, const char* key, const std::string& source) {
  if (!has(j, key)) return std::nullopt;
  return get_int(j, key, source);
}

// Splits "Qwen2ForCausalLM" into family and head.
void parse_architecture(const std::string& arch, ModelConfig& c, const std::string& source) {
  static const std::pair<const char*, ModelFamily> kFamilies[] = {
      {"Qwen2", ModelFamily::kQwen2}, {"Qwen3", ModelFamily::kQwen3}, {"Llama", ModelFamily::kLlama}};
  static const std::pair<const char*, ModelHead> kHeads[] = {
      {"ForCausalLM", ModelHead::kCausalLM},
      {"ForTokenClassification", ModelHead::kTokenClassification},
      {"ForSequenceClassification", ModelHead::kSequenceClassification}};
  for (const auto& [prefix, family] : kFamilies)
    for (const auto& [suffix, head] : kHeads)
      if (arch == std::string(prefix) + suffix) {
        c.family = family;
        c.head = head;
        return;
      }
  fail(source, fmt::format("field 'architectures': unsupported architecture '{}'; supported: "
                           "Qwen2, Qwen3 and Llama, each ForCausalLM, ForTokenClassification or "
                           "ForSequenceClassification",
                           arch));
}

RopeType parse_rope_type(const std::string& name, const std::string& field, const std::string& source) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "llama3") return RopeType::kLlama3;
  fail(source, fmt::format("field '{}': rope type '{}' is not supported (default, linear, llama3)", field, name));
}

// Reads the rope description: 5.x `rope_parameters` or 4.x `rope_theta` + `rope_scaling`.
void parse_rope(const json& j, ModelConfig& c, const std::string& source) {
  c.rope_theta = get_double(j, "rope_theta", 10000.0, source);
  const char* field = nullptr;
  if (has(j, "rope_parameters"))
    field = "rope_parameters";
  else if (has(j, "rope_scaling"))
    field = "rope_scaling";
  if (!field) return;
  const json& r = j.at(field);
  if (!r.is_object()) fail(source, fmt::format("field '{}' must be an object, got {}", field, r.dump()));
  for (const auto& item : r.items())
    if (item.value().is_object())
      fail(source,
           fmt::format("field '{}': per-layer-type rope parameters ('{}') are not supported", field, item.key()));
  std::string sub = std::string(field) + ".";
  c.rope_theta = get_double(r, "rope_theta", c.rope_theta, source);
  std::string type = "default";
  if (has(r, "rope_type"))
    type = r.at("rope_type").get<std::string>();
  else if (has(r, "type"))
    type = r.at("type").get<std::string>();
  c.rope_scaling.type = parse_rope_type(type, sub + "rope_type", source);
  auto need = [&](const char* key) {
    if (!has(r, key)) fail(source, fmt::format("field '{}{}' is missing (rope type '{}')", sub, key, type));
    return get_double(r, key, 0.0, source);
  };
  if (c.rope_scaling.type == RopeType::kLinear) c.rope_scaling.factor = need("factor");
  if (c.rope_scaling.type == RopeType::kLlama3) {
    c.rope_scaling.factor = need("factor");
    c.rope_scaling.low_freq_factor = need("low_freq_factor");
    c.rope_scaling.high_freq_factor = need("high_freq_factor");
    c.rope_scaling.original_max_position_embeddings = int64_t(need("original_max_position_embeddings"));
    if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
      fail(source, fmt::format("field '{}high_freq_factor' ({}) must exceed low_freq_factor ({})", sub,
                               c.rope_scaling.high_freq_factor, c.rope_scaling.low_freq_factor));
  }
  if (c.rope_scaling.type != RopeType::kDefault && c.rope_scaling.factor <= 0)
    fail(source, fmt::format("field '{}factor' must be positive, got {}", sub, c.rope_scaling.factor));
  double partial = get_double(r, "partial_rotary_factor", get_double(j, "partial_rotary_factor", 1.0, source), source);
  if (partial != 1.0)
    fail(source, fmt::format("field 'partial_rotary_factor' = {} is not supported (only 1)", partial));
}

}  // namespace

const char* family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen2:
      return "qwen2";
    case ModelFamily::kQwen3:
      return "qwen3";
    case ModelFamily::kLlama:
      return "llama";
  }
  return "?";
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

ModelConfig parse_model_config(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "a config must be a JSON object");
  ModelConfig c;
  c.raw = j;
  c.source = source;
  if (!has(j, "architectures") || !j.at("architectures").is_array() || j.at("architectures").empty() ||
      !j.at("architectures")[0].is_string())
    fail(source, "required field 'architectures' is missing (a list such as [\"Qwen2ForCausalLM\"])");
  c.architecture = j.at("architectures")[0].get<std::string>();
  parse_architecture(c.architecture, c, source);
  c.model_type = has(j, "model_type") && j.at("model_type").is_string() ? j.at("model_type").get<std::string>()
                                                                        : family_name(c.family);

  c.vocab_size = get_int(j, "vocab_size", source);
  c.hidden_size = get_int(j, "hidden_size", source);
  c.intermediate_size = get_int(j, "intermediate_size", source);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", source);
  c.num_attention_heads = get_int(j, "num_attention_heads", source);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", c.num_attention_heads, source);
  for (auto [name, value] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                             {"hidden_size", c.hidden_size},
                             {"intermediate_size", c.intermediate_size},
                             {"num_hidden_layers", c.num_hidden_layers},
                             {"num_attention_heads", c.num_attention_heads},
                             {"num_key_value_heads", c.num_key_value_heads}})
    if (value <= 0) fail(source, fmt::format("field '{}' must be positive, got {}", name, value));
  // Bounds far above any published decoder (the largest have ~130 layers, hidden 16k-32k, vocab
  // ~260k), so that a corrupt or hostile config is refused here instead of allocating gigabytes
  // of per-layer bookkeeping or overflowing a tensor size.
  for (auto [name, value, limit] : {std::tuple<const char*, int64_t, int64_t>{"vocab_size", c.vocab_size, 1 << 24},
                                    {"hidden_size", c.hidden_size, 1 << 20},
                                    {"intermediate_size", c.intermediate_size, 1 << 22},
                                    {"num_hidden_layers", c.num_hidden_layers, 4096},
                                    {"num_attention_heads", c.num_attention_heads, 4096},
                                    {"num_key_value_heads", c.num_key_value_heads, 4096}})
    if (value > limit)
      fail(source, fmt::format("field '{}' = {} is beyond what verlpp supports (at most {})", name, value, limit));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(source, fmt::format("field 'num_attention_heads' ({}) must be a multiple of 'num_key_value_heads' ({})",
                             c.num_attention_heads, c.num_key_value_heads));
  bool explicit_head_dim = has(j, "head_dim");
  if (!explicit_head_dim && c.hidden_size % c.num_attention_heads != 0)
    fail(source, fmt::format("field 'head_dim' is missing and hidden_size {} is not a multiple of "
                             "num_attention_heads {}",
                             c.hidden_size, c.num_attention_heads));
  c.head_dim = get_int(j, "head_dim", c.hidden_size / c.num_attention_heads, source);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    fail(source, fmt::format("field 'head_dim' must be positive and even (RoPE pairs), got {}", c.head_dim));
  c.max_position_embeddings =
      get_int(j, "max_position_embeddings", c.family == ModelFamily::kLlama ? 2048 : 32768, source);
  if (c.head_dim > (1 << 16))
    fail(source, fmt::format("field 'head_dim' = {} is beyond what verlpp supports (at most {})", c.head_dim, 1 << 16));
  if (c.max_position_embeddings <= 0 || c.max_position_embeddings > (int64_t(1) << 26))
    fail(source, fmt::format("field 'max_position_embeddings' = {} must be in 1..{}", c.max_position_embeddings,
                             int64_t(1) << 26));

  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6, source);
  c.initializer_range = get_double(j, "initializer_range", 0.02, source);
  parse_rope(j, c, source);

  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, source);
  bool attention_bias = get_bool(j, "attention_bias", false, source);
  c.qkv_bias = c.family == ModelFamily::kQwen2 ? true : attention_bias;
  c.o_bias = c.family == ModelFamily::kQwen2 ? false : attention_bias;
  c.mlp_bias = c.family == ModelFamily::kLlama ? get_bool(j, "mlp_bias", false, source) : false;
  c.qk_norm = c.family == ModelFamily::kQwen3;

  std::string act = has(j, "hidden_act") ? j.at("hidden_act").get<std::string>() : "silu";
  if (act != "silu") fail(source, fmt::format("field 'hidden_act': activation '{}' is not supported (silu)", act));
  if (get_bool(j, "use_sliding_window", false, source))
    fail(source, "field 'use_sliding_window' is true: sliding-window attention is not supported");

  if (has(j, "num_labels"))
    c.num_labels = get_int(j, "num_labels", source);
  else if (has(j, "id2label") && j.at("id2label").is_object())
    c.num_labels = int64_t(j.at("id2label").size());
  else
    c.num_labels = 2;  // HF's default
  c.score_bias = c.head == ModelHead::kTokenClassification && get_bool(j, "token_classification_bias", true, source);

  if (has(j, "dtype") && j.at("dtype").is_string())
    c.torch_dtype = j.at("dtype").get<std::string>();
  else if (has(j, "torch_dtype") && j.at("torch_dtype").is_string())
    c.torch_dtype = j.at("torch_dtype").get<std::string>();

  c.bos_token_id = get_optional_id(j, "bos_token_id", source);
  c.pad_token_id = get_optional_id(j, "pad_token_id", source);
  if (has(j, "eos_token_id")) {
    const json& e = j.at("eos_token_id");
    if (e.is_array()) {
      for (const json& id : e) {
        if (!id.is_number_integer())
          fail(source, fmt::format("field 'eos_token_id' must hold integers, got {}", e.dump()));
        c.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(get_int(j, "eos_token_id", source));
    }
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::string file = files::is_dir(path) ? files::join(path, "config.json") : path;
  if (!files::is_file(file)) throw Error(file, "cannot open the model config (config.json)");
  json j;
  const std::string text = files::read_text(file);
  check_json_depth(text, file);
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(file, fmt::format("not valid JSON: {}", e.what()));
  }
  try {
    return parse_model_config(j, file);
  } catch (const json::exception& e) {  // a field of an unexpected JSON type
    throw Error(file, fmt::format("malformed field: {}", e.what()));
  }
}

json to_hf_json(const ModelConfig& c) {
  json j = c.raw.is_object() ? c.raw : json::object();
  j["architectures"] = json::array({c.architecture});
  j["model_type"] = c.model_type.empty() ? family_name(c.family) : c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (j.contains("head_dim") || c.family == ModelFamily::kQwen3 || c.head_dim * c.num_attention_heads != c.hidden_size)
    j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["initializer_range"] = c.initializer_range;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.family != ModelFamily::kQwen2) j["attention_bias"] = c.o_bias;
  if (c.family == ModelFamily::kLlama) j["mlp_bias"] = c.mlp_bias;

  json scaling = nullptr;
  if (c.rope_scaling.type != RopeType::kDefault) {
    scaling = {{"rope_type", rope_type_name(c.rope_scaling.type)}, {"factor", c.rope_scaling.factor}};
    if (c.rope_scaling.type == RopeType::kLlama3) {
      scaling["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      scaling["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      scaling["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
    }
  }
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {  // keep the 5.x layout
    json params = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
    params["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = params;
  } else {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = scaling;
  }
  if (j.contains("dtype"))
    j["dtype"] = c.torch_dtype;
  else
    j["torch_dtype"] = c.torch_dtype;

  if (c.head != ModelHead::kCausalLM && !j.contains("id2label")) {
    json id2label = json::object(), label2id = json::object();
    for (int64_t i = 0; i < c.num_labels; ++i) {
      id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
      label2id["LABEL_" + std::to_string(i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty())
    j["eos_token_id"] = c.eos_token_ids;
  return j;
}

}  // namespace verlpp::model
