// ModelConfig: what verlpp reads from a Hugging Face `config.json` to build a decoder LM.
// Both config layouts HF has written are accepted: the 4.x one (`rope_theta` + `rope_scaling`,
// `torch_dtype`) and the 5.x one (`rope_parameters`, `dtype`). The file's JSON is kept whole in
// `raw`, so saving a loaded model writes back every field verlpp does not interpret.
#pragma once

#include <verlpp/core/token_id.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::model {

// The decoder family; it decides biases and q/k-norm.
enum class ModelFamily { kQwen2, kQwen3, kLlama };

// What sits on top of the decoder: an LM head (`lm_head`) or a scalar/label head (`score`).
enum class ModelHead {
  kCausalLM,                // ...ForCausalLM: lm_head [V, C]
  kTokenClassification,     // ...ForTokenClassification: score [num_labels, C] (+ bias), per token
  kSequenceClassification,  // ...ForSequenceClassification: score [num_labels, C], no bias
};

// Rotary embedding frequency scaling (HF `rope_type`).
enum class RopeType { kDefault, kLinear, kLlama3 };

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                              // linear and llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// The interpreted config. Field names follow HF's.
struct ModelConfig {
  std::string architecture;  // e.g. "Qwen2ForCausalLM"
  std::string model_type;    // "qwen2", "qwen3", "llama"
  ModelFamily family = ModelFamily::kQwen2;
  ModelHead head = ModelHead::kCausalLM;

  int64_t vocab_size = 0;           // V
  int64_t hidden_size = 0;          // C
  int64_t intermediate_size = 0;    // F (MLP width)
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // H
  int64_t num_key_value_heads = 0;  // KV (GQA: H % KV == 0)
  int64_t head_dim = 0;             // D (explicit in Qwen3; C / H otherwise)
  int64_t max_position_embeddings = 0;

  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double initializer_range = 0.02;

  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // bias on q/k/v projections (always on in Qwen2)
  bool o_bias = false;    // bias on o_proj (Llama/Qwen3 `attention_bias`; never in Qwen2)
  bool mlp_bias = false;  // Llama `mlp_bias`
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (Qwen3)

  int64_t num_labels = 1;   // score rows, for the classification heads
  bool score_bias = false;  // token classification: true unless `token_classification_bias` false

  std::string torch_dtype = "float32";  // the checkpoint's dtype name as HF writes it
  std::optional<TokenId> bos_token_id;
  std::optional<TokenId> pad_token_id;
  TokenIds eos_token_ids;  // `eos_token_id` may be one id or a list

  nlohmann::json raw;  // the JSON as read (an object); what save writes back, updated
  std::string source;  // the file it came from ("" when built in code)
};

// Reads and interprets `path` (a config.json, or a folder holding one). Errors name the file
// and the field: an unknown architecture, a missing required field, a value of the wrong type,
// an unsupported rope type or activation.
ModelConfig load_model_config(const std::string& path);

// Interprets an already-parsed config; `source` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);

// The config as HF writes it: `raw` with verlpp's fields written over it, in the 4.x layout
// (`rope_theta`, `rope_scaling`, `torch_dtype`), which transformers 4.x and 5.x both read.
nlohmann::json to_hf_json(const ModelConfig& config);

// "qwen2" / "qwen3" / "llama".
const char* family_name(ModelFamily family);
// "default" / "linear" / "llama3".
const char* rope_type_name(RopeType type);

}  // namespace verlpp::model
