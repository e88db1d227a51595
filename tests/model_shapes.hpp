// Large decoder shapes for tests that plan memory without weights: the shape-defining
// config.json fields, applied over the tiny model's config (examples/tiny/config.json).
#pragma once

#include <nlohmann/json.hpp>

namespace verlpp::test {

// Qwen/Qwen2.5-7B's shape.
inline nlohmann::json qwen2_5_7b_fields() {
  return {{"vocab_size", 152064},
          {"hidden_size", 3584},
          {"intermediate_size", 18944},
          {"num_hidden_layers", 28},
          {"num_attention_heads", 28},
          {"num_key_value_heads", 4},
          {"max_position_embeddings", 32768},
          {"tie_word_embeddings", false}};
}

// A 72B-class shape (Qwen2.5-72B's widths and depth): its fp32 masters alone exceed any one
// device or host the tests run on.
inline nlohmann::json qwen_72b_like_fields() {
  return {{"vocab_size", 152064},        {"hidden_size", 8192},       {"intermediate_size", 29568},
          {"num_hidden_layers", 80},     {"num_attention_heads", 64}, {"num_key_value_heads", 8},
          {"tie_word_embeddings", false}};
}

}  // namespace verlpp::test
